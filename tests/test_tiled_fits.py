"""The tile reader against astropy's own decompression of the same files: every codec and
quantization a coadd mirror may use, edge tiles, blank pixels, tiles stored losslessly, and the
real DR6 coadd (RICE_1, SUBTRACTIVE_DITHER_2) pixel for pixel."""

from __future__ import annotations

import numpy as np
import pytest
from astropy.io import fits

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.tiled_fits import N_RANDOM, dither_offsets, open_tiled_image
from tests.conftest import require_real_file

SHAPE = (250, 330)  # not a multiple of the tiles: edge tiles are smaller


def _sky(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    img = rng.normal(0.0, 0.01, SHAPE).astype(np.float32)
    img[120:130, 200:215] += 5.0  # a bright source
    img[:, :40] = 0.0  # uncovered: exact zeros, which SUBTRACTIVE_DITHER_2 must keep
    img[200:, 300:] = 0.25  # a constant patch: its tile does not quantize and is stored losslessly
    return img


CASES = {
    "rice-dither2": (_sky(), dict(compression_type="RICE_1", quantize_level=16.0, quantize_method=2, dither_seed=-1)),
    "rice-dither1": (_sky(1), dict(compression_type="RICE_1", quantize_level=4.0, quantize_method=1, dither_seed=17)),
    "gzip1-no-dither": (_sky(2), dict(compression_type="GZIP_1", quantize_level=16.0, quantize_method=-1)),
    "gzip2-quantized": (
        _sky(3),
        dict(compression_type="GZIP_2", quantize_level=16.0, quantize_method=2, dither_seed=-1),
    ),
    "gzip2-lossless": (_sky(4), dict(compression_type="GZIP_2", quantize_level=0.0)),
    "rice-int32": (
        np.random.default_rng(5).integers(0, 2**20, SHAPE).astype(np.int32),
        dict(compression_type="RICE_1"),
    ),
    "gzip1-int16": (
        np.random.default_rng(6).integers(-300, 300, SHAPE).astype(np.int16),
        dict(compression_type="GZIP_1"),
    ),
    "plio-fallback": (np.random.default_rng(7).integers(0, 4, SHAPE).astype(np.int32), dict(compression_type="PLIO_1")),
    "hcompress-fallback": (_sky(8), dict(compression_type="HCOMPRESS_1", quantize_level=16.0)),
}


def _write(tmp_path, name, data, tile_shape=(100, 100), **kw):
    path = str(tmp_path / f"{name}.fits.fz")
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(data, tile_shape=tile_shape, **kw)]).writeto(path)
    return path


def _astropy(path):
    with fits.open(path) as h:
        return np.array(h[1].data)


WINDOWS = [
    (0, SHAPE[0], 0, SHAPE[1]),
    (45, 146, 150, 251),
    (149, 250, 229, 330),
    (0, 1, 0, 1),
    (125, 126, 207, 208),
    (99, 101, 99, 101),
]


@pytest.mark.parametrize("name", list(CASES))
def test_windows_equal_astropy(tmp_path, name):
    data, kw = CASES[name]
    path = _write(tmp_path, name, data, **kw)
    want = _astropy(path)
    with open_tiled_image(path) as image:
        assert image.shape == SHAPE
        for y0, y1, x0, x1 in WINDOWS:
            got = image[y0:y1, x0:x1]
            assert got.dtype == want.dtype and got.dtype.isnative
            np.testing.assert_array_equal(got, want[y0:y1, x0:x1], err_msg=f"{name} window {y0}:{y1}, {x0}:{x1}")


def test_dither2_keeps_zeros_and_blanks_are_nan(tmp_path):
    data = _sky()
    data[60:62, 70:90] = np.nan
    path = _write(
        tmp_path, "nan", data, compression_type="RICE_1", quantize_level=16.0, quantize_method=2, dither_seed=-1
    )
    with open_tiled_image(path) as image:
        got = image[0 : SHAPE[0], 0 : SHAPE[1]]
    assert np.all(got[:, :40] == 0.0)
    assert np.isnan(got[60:62, 70:90]).all() and np.isfinite(got[:60]).all()
    np.testing.assert_array_equal(got, _astropy(path))


def test_row_tiles_and_a_tile_decoded_once(tmp_path):
    data, kw = CASES["rice-dither2"]
    path = _write(tmp_path, "rows", data, tile_shape=(1, SHAPE[1]), **kw)  # fpack's default: one row per tile
    want = _astropy(path)
    with open_tiled_image(path) as image:
        np.testing.assert_array_equal(image[10:40, 5:60], want[10:40, 5:60])
        assert len(image._tiles) == 30
        np.testing.assert_array_equal(image[20:45, 100:200], want[20:45, 100:200])
        assert len(image._tiles) == 35  # rows 20..39 were kept, only 40..44 decoded


@pytest.mark.parametrize("name", ["legacysurvey-0959p805-image-g.fits.fz", "legacysurvey-0959p805-invvar-g.fits.fz"])
def test_real_dr6_coadd_equals_astropy(name):
    path = str(require_real_file(name))
    want = _astropy(path)
    with open_tiled_image(path) as image:
        assert image.algorithm in ("RICE_1", "RICE_ONE") and image.dither == 2 and image.tile == (100, 100)
        for y0, x0 in [(0, 0), (1750, 1750), (3499, 3499), (1234, 2999)]:
            np.testing.assert_array_equal(image[y0 : y0 + 101, x0 : x0 + 101], want[y0 : y0 + 101, x0 : x0 + 101])


def test_dither_offsets_are_the_standards():
    r = dither_offsets()
    assert r.shape == (N_RANDOM,) and r.dtype == np.float32
    assert r[0] == np.float32(16807 / 2147483647) and 0 < r.min() and r.max() < 1


def test_bad_files_name_the_file(tmp_path):
    path = _write(tmp_path, "good", *CASES["rice-dither2"][:1], **CASES["rice-dither2"][1])
    raw = bytearray(open(path, "rb").read())
    with open_tiled_image(path) as image:
        with pytest.raises(InputError, match="outside"):
            image[0:300, 0:10]
    cut = tmp_path / "truncated.fits.fz"
    cut.write_bytes(bytes(raw[:4000]))
    with pytest.raises(InputError, match="truncated.fits.fz"):
        with open_tiled_image(str(cut)) as image:
            image[0:10, 0:10]
    scaled = fits.CompImageHDU(
        np.arange(400, dtype=np.uint16).reshape(20, 20), compression_type="RICE_1"
    )  # stored with BZERO 32768
    fits.HDUList([fits.PrimaryHDU(), scaled]).writeto(tmp_path / "uint16.fits.fz")
    with pytest.raises(InputError, match="uint16.fits.fz: scaled pixels"):
        with open_tiled_image(str(tmp_path / "uint16.fits.fz")):
            pass
    one = tmp_path / "primary_only.fits"
    fits.PrimaryHDU(np.zeros((4, 4), np.float32)).writeto(one)
    with pytest.raises(InputError, match="primary_only.fits: expected the image in HDU 1"):
        with open_tiled_image(str(one)):
            pass
