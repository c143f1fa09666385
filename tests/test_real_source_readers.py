"""Readers of the real-data formats the truth world uses: DECam PSFEx models and GalSim's COSMOS
real-galaxy files, on the real (shipped) files and on broken copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from astropy.io import fits

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.psfex import PACKAGED_PSFEX_DIR, packaged_psfex, read_psfex
from darkhaloscope.lensing.cosmos_sources import (
    PACKAGED_CATALOG,
    PACKAGED_COSMOS_DIR,
    PACKAGED_FITS_CATALOG,
    PACKAGED_IMAGES,
    packaged_real_galaxies,
    read_real_galaxies,
)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "real"


def test_packaged_psfex_models_are_the_shared_real_files():
    for band in "grz":
        m = packaged_psfex(band)
        assert m.band == band and m.basis.shape == (6, 63, 63) and m.degree == 2 and m.samp == 1.0
        shared = SHARED / "psfex" / Path(m.source).name
        if shared.exists():
            assert shared.read_bytes() == Path(m.source).read_bytes()


def test_psfex_polynomial_matches_the_psfex_definition():
    m = packaged_psfex("r")
    # at the polynomial's zero point only the constant basis image counts
    np.testing.assert_allclose(m.native(*m.zero), m.basis[0], rtol=0, atol=0)
    x, y = 1500.0, 300.0
    dx, dy = (x - m.zero[0]) / m.scale[0], (y - m.zero[1]) / m.scale[1]
    expect = sum(c * b for c, b in zip([1, dx, dx * dx, dy, dx * dy, dy * dy], m.basis, strict=True))
    np.testing.assert_allclose(m.native(x, y), expect, rtol=1e-12, atol=1e-15)
    psf = m.image_psf(x, y, 33)
    assert psf.shape == (33, 33) and abs(psf.sum() - 1.0) < 1e-12
    assert np.unravel_index(np.argmax(psf), psf.shape) == (16, 16)
    # DR9 DECam seeing: FWHM about 1″–1.5″ (4–6 pixels of 0.262″)
    assert 3.5 < m.fwhm_pix < 6.0


def _psfex_file(path, samp=0.5, sigma_img=1.5, n=41, header=True, nan=False, polname="X_IMAGE"):
    """A one-term PSFEx file (PSFEx's own layout: keys in the header) of a Gaussian of ``sigma_img``
    image pixels sampled every ``samp`` image pixels."""
    r = (np.arange(n) - (n - 1) / 2) * samp
    g = np.exp(-0.5 * (r[:, None] ** 2 + r[None, :] ** 2) / sigma_img**2).astype(np.float32)
    if nan:
        g[3, 3] = np.nan
    col = fits.Column(name="PSF_MASK", format=f"{n * n}E", dim=f"({n},{n},1)", array=g[None, None])
    hdu = fits.BinTableHDU.from_columns([col])
    keys = {"POLNAME1": polname, "POLNAME2": "Y_IMAGE", "POLZERO1": 1000.0, "POLZERO2": 2000.0}
    keys.update({"POLSCAL1": 2000.0, "POLSCAL2": 4000.0, "PSF_SAMP": samp, "POLDEG1": 0, "FILTER": "r"})
    if header:
        hdu.header.update(keys)
    fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(path)
    return path


def test_psfex_resampled_from_psf_samp_to_image_pixels(tmp_path):
    m = read_psfex(_psfex_file(tmp_path / "psf.fits", samp=0.5, sigma_img=1.5), band="r")
    psf = m.image_psf(1000.0, 2000.0, 21)
    r = np.arange(21) - 10.0
    ref = np.exp(-0.5 * (r[:, None] ** 2 + r[None, :] ** 2) / 1.5**2)
    np.testing.assert_allclose(psf, ref / ref.sum(), atol=2e-4 * psf.max())
    wide = m.image_psf(1000.0, 2000.0, 21, stretch=1.2)
    ref = np.exp(-0.5 * (r[:, None] ** 2 + r[None, :] ** 2) / 1.8**2)
    np.testing.assert_allclose(wide, ref / ref.sum(), atol=2e-3 * wide.max())


def test_bad_psfex_files(tmp_path):
    with pytest.raises(InputError, match="PSF_MASK has .* non-finite"):
        read_psfex(_psfex_file(tmp_path / "nan.fits", nan=True))
    with pytest.raises(InputError, match="no PSFEx key POLNAME1"):
        read_psfex(_psfex_file(tmp_path / "nokeys.fits", header=False))
    with pytest.raises(InputError, match="POLNAME1 is 'XWIN'"):
        read_psfex(_psfex_file(tmp_path / "pol.fits", polname="XWIN"))
    with pytest.raises(InputError, match="band is 'r', not 'z'"):
        read_psfex(_psfex_file(tmp_path / "band.fits"), band="z")
    image = tmp_path / "image.fits"
    fits.PrimaryHDU(np.zeros((4, 4))).writeto(image)
    with pytest.raises(InputError, match=r"image\.fits: HDU 1 is not a binary table"):
        read_psfex(image)
    table = tmp_path / "table.fits"
    fits.BinTableHDU.from_columns([fits.Column(name="A", format="E", array=np.zeros(2))]).writeto(table)
    with pytest.raises(InputError, match="no PSF_MASK column"):
        read_psfex(table)
    with pytest.raises(InputError, match="no packaged PSFEx model for band 'i'"):
        packaged_psfex("i")
    assert (
        sorted(p.name for p in PACKAGED_PSFEX_DIR.glob("*.fits"))
        == sorted(p.name for p in (SHARED / "psfex").glob("*.fits"))
        or not SHARED.exists()
    )


def test_real_galaxies_read_from_the_real_files():
    gals = packaged_real_galaxies()
    assert len(gals) == 10
    assert gals[0].ident == 141190 and gals[0].image.shape == (234, 233) and abs(gals[0].pixel_scale - 0.03) < 1e-6
    assert abs(gals[0].zphot - 0.195) < 1e-6 and abs(gals[0].hlr_arcsec - 0.7026) < 1e-4
    assert all(np.isfinite(g.image).all() and g.image.sum() > 0 and g.noise_variance > 0 for g in gals)
    d = PACKAGED_COSMOS_DIR
    slsim = read_real_galaxies(d / "slsim-real_galaxy_catalog_23.5.fits", d / "slsim-test_galaxy_images_23.5.fits")
    assert [g.ident for g in slsim] == [97475, 169753] and np.isnan(slsim[0].zphot)
    if SHARED.exists():
        for name in (PACKAGED_CATALOG, PACKAGED_IMAGES, PACKAGED_FITS_CATALOG):
            assert (d / name).read_bytes() == (SHARED / "cosmos" / name).read_bytes()


def _broken_catalog(tmp_path, drop=None, **set_col):
    with fits.open(PACKAGED_COSMOS_DIR / PACKAGED_CATALOG) as h:
        cols = [c for c in h[1].columns if c.name != drop]
        t = fits.BinTableHDU.from_columns(cols)
        for name, (row, value) in set_col.items():
            t.data[name][row] = value
        path = tmp_path / "catalog.fits"
        fits.HDUList([fits.PrimaryHDU(), t]).writeto(path, overwrite=True)
    return path


def test_bad_real_galaxy_files(tmp_path):
    images = PACKAGED_COSMOS_DIR / PACKAGED_IMAGES
    with pytest.raises(InputError, match=r"catalog\.fits: HDU 1 lacks columns \['PIXEL_SCALE'\]"):
        read_real_galaxies(_broken_catalog(tmp_path, drop="PIXEL_SCALE"), images)
    with pytest.raises(InputError, match="PIXEL_SCALE of IDENT 143346 is nan"):
        read_real_galaxies(_broken_catalog(tmp_path, PIXEL_SCALE=(1, np.nan)), images)
    with pytest.raises(InputError, match="no HDU 40 \\(GAL_HDU of IDENT 141190\\)"):
        read_real_galaxies(_broken_catalog(tmp_path, GAL_HDU=(0, 40)), images)
    with fits.open(images) as h:
        hdus = [fits.PrimaryHDU(h[0].data)] + [fits.ImageHDU(x.data) for x in h[1:]]
    hdus[2].data[5, 5] = np.nan
    nan_images = tmp_path / "images.fits"
    fits.HDUList(hdus).writeto(nan_images)
    with pytest.raises(InputError, match=r"images\.fits: HDU 2 \(IDENT 93315\) has 1 NaN"):
        read_real_galaxies(PACKAGED_COSMOS_DIR / PACKAGED_CATALOG, nan_images)
