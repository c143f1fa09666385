"""Cutout FITS cube and PNG writers (``dhs cutout``)."""

from __future__ import annotations

import numpy as np
import pytest
from astropy.io import fits
from astropy.wcs import WCS

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.cutout_io import rgb_image, write_cutout_fits, write_cutout_png


def cube(size=101, seed=0):
    rng = np.random.default_rng(seed)
    img = rng.normal(0, 0.01, (3, size, size)).astype(np.float32)
    img[:, size // 2, size // 2] += np.array([1.0, 2.0, 3.0], np.float32)
    return img


def test_fits_roundtrip(tmp_path):
    img = cube()
    iv = np.full_like(img, 1e4)
    mb = np.zeros(img.shape[1:], np.int32)
    mb[0, 0] = 0x2
    path = tmp_path / "cutout_150.1_2.2.fits"
    write_cutout_fits(str(path), img, iv, ra=150.1, dec=2.2, maskbits=mb)
    with fits.open(path) as h:
        assert h[0].data.shape == (3, 101, 101) and h[0].data.dtype.kind == "f" and h[0].data.dtype.itemsize == 4
        np.testing.assert_array_equal(h[0].data, img)
        hdr = h[0].header
        assert hdr["IMAGETYP"] == "IMAGE" and hdr["BANDS"] == "grz"
        assert [hdr["BAND0"], hdr["BAND1"], hdr["BAND2"]] == ["g", "r", "z"]
        assert h[1].header["IMAGETYP"] == "INVVAR" and h[1].data.shape == (3, 101, 101)
        np.testing.assert_array_equal(h[1].data, iv)
        assert h["MASKBITS"].data[0, 0] == 2 and h["MASKBITS"].data.dtype.kind == "i"
        w = WCS(hdr).celestial
        ra, dec = w.wcs_pix2world([[50.0, 50.0]], 0)[0]
        assert abs(ra - 150.1) < 1e-6 and abs(dec - 2.2) < 1e-6
        # North up, East left, 0.262 arcsec/pixel
        ra1, _ = w.wcs_pix2world([[51.0, 50.0]], 0)[0]
        _, dec1 = w.wcs_pix2world([[50.0, 51.0]], 0)[0]
        assert ra1 < ra and dec1 > dec
        assert abs((dec1 - dec) * 3600 - 0.262) < 1e-6


def test_fits_subpixel_offset(tmp_path):
    path = tmp_path / "c.fits"
    write_cutout_fits(str(path), cube(31), None, ra=10.0, dec=-5.0, offset_pix=(0.3, -0.2))
    with fits.open(path) as h:
        assert len(h) == 1
        ra, dec = WCS(h[0].header).celestial.wcs_pix2world([[15.3, 14.8]], 0)[0]
    assert abs(ra - 10.0) < 1e-9 and abs(dec + 5.0) < 1e-9


def test_png(tmp_path):
    from PIL import Image

    img = cube(64)
    path = tmp_path / "c.png"
    write_cutout_png(str(path), img)
    with Image.open(path) as im:
        assert im.size == (64, 64) and im.mode == "RGB"
        arr = np.asarray(im)
    # the bright centre (redder: z > r > g) is brighter than the background and red-dominant;
    # the PNG is flipped so row 0 is North: FITS row 32 -> PNG row 31
    c = arr[63 - 32, 32].astype(int)
    assert c.sum() > arr[5, 5].astype(int).sum() and c[0] >= c[2]
    rgb = rgb_image(img)
    assert rgb.dtype == np.uint8 and rgb.shape == (64, 64, 3)


def test_bad_shapes(tmp_path):
    with pytest.raises(InputError, match="shape"):
        write_cutout_fits(str(tmp_path / "x.fits"), np.zeros((2, 5, 5)), ra=1, dec=1)
    with pytest.raises(InputError, match="invvar"):
        write_cutout_fits(str(tmp_path / "x.fits"), np.zeros((3, 5, 5)), np.zeros((3, 6, 6)), ra=1, dec=1)
    with pytest.raises(InputError):
        write_cutout_png(str(tmp_path / "x.png"), np.zeros((3, 5, 4)))
