"""Brick grid, brick TAN WCS (against astropy) and the DR10 coadd reader on a real DR6 brick."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from astropy.io import fits
from astropy.wcs import WCS

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.batch import BAND_MISSING_BIT, choose_bricks
from darkhaloscope.imaging.bricks import BrickTable, brick_name, full_sky_bricks
from darkhaloscope.imaging.coadd import BrickImageSource, coadd_path
from darkhaloscope.imaging.wcs import TanWCS
from tests.conftest import require_real_file

BRICK = "0959p805"


def test_brick_names():
    names = brick_name([95.9504132231405, 112.6, 0.125, 359.9], [80.5, 22.25, -0.25, -89.9])
    assert list(names) == ["0959p805", "1126p222", "0001m002", "3599m899"]


def test_full_grid_matches_dr10():
    t = full_sky_bricks()
    assert len(t) == 662174 and t.brickid.min() == 1 and t.brickid.max() == 662174
    i = t.index_of(BRICK)
    assert t.brickid[i] == 657438  # the real brick's header BRICKID
    np.testing.assert_allclose(
        [t.ra1[i], t.ra2[i], t.dec1[i], t.dec2[i], t.ra[i]],
        [95.206611570248, 96.6942148760331, 80.375, 80.625, 95.9504132231405],
        atol=1e-9,
    )
    with pytest.raises(InputError, match="9999p999"):
        t.index_of("9999p999")


def test_bricks_containing_vectorised():
    rng = np.random.default_rng(3)
    ra = rng.uniform(0, 360, 2000)
    dec = np.degrees(np.arcsin(rng.uniform(-1, 1, 2000)))
    t = full_sky_bricks()
    idx = t.bricks_containing(ra, dec)
    assert np.all(idx >= 0)
    assert np.all((t.ra1[idx] <= ra) & (ra < t.ra2[idx]) & (t.dec1[idx] <= dec) & (dec <= t.dec2[idx]))
    sub = BrickTable.generate((150.0, 151.0), (2.0, 3.0))
    inside = sub.bricks_containing([150.5, 10.0], [2.5, 2.5])
    assert inside[0] >= 0 and inside[1] == -1
    with pytest.raises(InputError, match="dec"):
        t.bricks_containing([1.0], [91.0])


def test_brick_table_fits_roundtrip(tmp_path):
    sub = BrickTable.generate((359.5, 0.5), (-0.3, 0.3))  # wraps through RA 0
    assert np.any(sub.ra > 359) and np.any(sub.ra < 1)
    path = tmp_path / "survey-bricks.fits.gz"
    sub.write_fits(str(path))
    back = BrickTable.read_fits(str(path))
    assert list(back.brickname) == list(sub.brickname)
    np.testing.assert_array_equal(back.brickid, sub.brickid)
    np.testing.assert_allclose(back.ra, sub.ra)


def test_tan_wcs_against_astropy():
    w = TanWCS.for_brick(203.7, -31.25)
    ref = WCS(w.to_header())
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-200, 3800, 500), rng.uniform(-200, 3800, 500)
    ra, dec = w.pixel_to_world(x, y)
    ra_ref, dec_ref = ref.wcs_pix2world(x, y, 0)
    np.testing.assert_allclose(ra, ra_ref, atol=1e-10)
    np.testing.assert_allclose(dec, dec_ref, atol=1e-10)
    xb, yb = w.world_to_pixel(ra, dec)
    np.testing.assert_allclose(xb, x, atol=1e-7)
    np.testing.assert_allclose(yb, y, atol=1e-7)
    # North up, East left: RA decreases with x, Dec increases with y
    r0, d0 = w.pixel_to_world(1799.5, 1799.5)
    assert np.isclose(r0, 203.7) and np.isclose(d0, -31.25)
    assert w.pixel_to_world(1800.5, 1799.5)[0] < r0 and w.pixel_to_world(1799.5, 1800.5)[1] > d0


# ---------------------------------------------------------------------------------------------
# the real DR6 brick 0959p805 (g only, mostly uncovered)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_brick_dir():
    return require_real_file(f"legacysurvey-{BRICK}-image-g.fits.fz").parent


@pytest.fixture(scope="module")
def real_mirror(real_brick_dir, tmp_path_factory):
    """A DR10-layout mirror whose g-band files are symlinks to the real files (nothing copied)."""
    root = tmp_path_factory.mktemp("mirror")
    for kind in ("image", "invvar"):
        p = coadd_path(str(root), BRICK, kind, "g")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        os.symlink(real_brick_dir / f"legacysurvey-{BRICK}-{kind}-g.fits.fz", p)
    return root


@pytest.fixture(scope="module")
def real_arrays(real_brick_dir):
    with fits.open(real_brick_dir / f"legacysurvey-{BRICK}-image-g.fits.fz") as h:
        img, hdr = h[1].data.copy(), h[1].header.copy()
    with fits.open(real_brick_dir / f"legacysurvey-{BRICK}-invvar-g.fits.fz") as h:
        iv = h[1].data.copy()
    return img, iv, hdr


def test_real_brick_wcs(real_arrays):
    _, _, hdr = real_arrays
    w = TanWCS.from_header(hdr, "real brick")
    ref = WCS(hdr)
    t = full_sky_bricks()
    assert w == t.wcs(t.index_of(BRICK)) or np.allclose(w.crval, t.wcs(t.index_of(BRICK)).crval, atol=1e-10)
    # 1-based (1800.5, 1800.5) is the brick centre
    ra, dec = w.pixel_to_world(1800.5 - 1, 1800.5 - 1)
    assert np.isclose(ra, hdr["CRVAL1"], atol=1e-10) and np.isclose(dec, hdr["CRVAL2"], atol=1e-10)
    # legacypipe's CORN1..4 are the 1-based pixels (1,1), (W,1), (W,H), (1,H)
    corners = [(1, 1), (3600, 1), (3600, 3600), (1, 3600)]
    for k, (px, py) in enumerate(corners, start=1):
        ra, dec = w.pixel_to_world(px - 1, py - 1)
        ra_ref, dec_ref = ref.wcs_pix2world([[px, py]], 1)[0]
        np.testing.assert_allclose([ra, dec], [hdr[f"CORN{k}RA"], hdr[f"CORN{k}DEC"]], atol=1e-9)
        np.testing.assert_allclose([ra, dec], [ra_ref, dec_ref], atol=1e-10)


def _covered_pixel(iv):
    ys, xs = np.nonzero(iv[300:3300, 300:3300] > 0)
    k = len(ys) // 2
    return int(xs[k]) + 300, int(ys[k]) + 300


def test_real_brick_cutouts(real_mirror, real_arrays):
    img, iv, hdr = real_arrays
    src = BrickImageSource(str(real_mirror))
    w = TanWCS.from_header(hdr)
    cx, cy = _covered_pixel(iv)
    ux, uy = 200, 3400  # uncovered corner of this edge brick
    ra, dec = w.pixel_to_world(np.array([cx + 0.3, ux, 1799.5]), np.array([cy - 0.2, uy, 1799.5]))
    b, _ = src.cutouts(ra, dec, size=101)
    assert b.image.shape == (3, 3, 101, 101) and b.image.dtype == np.float32
    assert b.invvar.dtype == np.float32 and b.maskbits.dtype == np.int32
    assert list(b.brickname) == [BRICK] * 3
    np.testing.assert_array_equal(b.image[0, 0], img[cy - 50 : cy + 51, cx - 50 : cx + 51])
    np.testing.assert_array_equal(b.invvar[0, 0], iv[cy - 50 : cy + 51, cx - 50 : cx + 51])
    np.testing.assert_allclose([b.dx[0], b.dy[0]], [0.3, -0.2], atol=1e-6)
    # r and z are absent: zeros with invvar 0, flagged, no crash
    assert np.all(b.band_missing == BAND_MISSING_BIT["r"] | BAND_MISSING_BIT["z"])
    assert not b.image[:, 1:].any() and not b.invvar[:, 1:].any()
    # the uncovered part: invvar 0
    assert not b.invvar[1, 0].any()
    assert not b.edge_padded.any()
    # the search's read: the same images, the inverse variance of each centre pixel only
    c, _ = BrickImageSource(str(real_mirror), with_maskbits=False, invvar_centre_only=True).cutouts(ra, dec, size=101)
    assert c.invvar_centre_only and c.maskbits is None and not b.invvar_centre_only
    np.testing.assert_array_equal(c.image, b.image)
    np.testing.assert_array_equal(c.invvar[:, :, 50, 50], b.invvar[:, :, 50, 50])
    assert c.invvar[0, 0, 50, 50] > 0 and np.count_nonzero(c.invvar) == np.count_nonzero(b.invvar[:, :, 50, 50])


def test_truncated_brick_file_is_named(real_brick_dir, real_arrays, tmp_path):
    """A coadd file cut short (an interrupted copy of a mirror) fails the cutouts with an
    InputError naming that file; nothing is returned for the brick."""
    img, iv, hdr = real_arrays
    for kind in ("image", "invvar"):
        p = coadd_path(str(tmp_path), BRICK, kind, "g")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        raw = bytearray((real_brick_dir / f"legacysurvey-{BRICK}-{kind}-g.fits.fz").read_bytes())
        if kind == "image":
            raw = raw[: len(raw) // 2]
        open(p, "wb").write(bytes(raw))
    bad = coadd_path(str(tmp_path), BRICK, "image", "g")
    w = TanWCS.from_header(hdr)
    cx, cy = _covered_pixel(iv)
    ra, dec = w.pixel_to_world(np.array([cx, 1800.0, 3450.0]), np.array([cy, 1800.0, 3450.0]))
    with pytest.raises(InputError, match=re.escape(bad)):
        BrickImageSource(str(tmp_path)).cutouts(ra, dec, 101)


def test_edge_targets_use_neighbour_or_pad(real_mirror, real_arrays):
    img, iv, hdr = real_arrays
    w = TanWCS.from_header(hdr)
    ra, dec = w.pixel_to_world(np.array([10.0]), np.array([1800.0]))
    # with the whole grid, the neighbour to the East holds the stamp whole (its files are absent here)
    b, _ = BrickImageSource(str(real_mirror)).cutouts(ra, dec, 101)
    assert b.brickname[0] != BRICK and not b.edge_padded[0]
    assert b.band_missing[0] == 0b111 and not b.invvar.any()
    # with only this brick available, the stamp is padded with invvar 0 and flagged
    only = BrickTable.generate((95.3, 95.4), (80.45, 80.55))
    assert list(only.brickname) == [BRICK]
    b, _ = BrickImageSource(str(real_mirror), bricks=only).cutouts(ra, dec, 101)
    assert b.brickname[0] == BRICK and b.edge_padded[0]
    np.testing.assert_array_equal(b.image[0, 0, :, 40:], img[1750:1851, 0:61])
    assert not b.invvar[0, 0, :, :40].any()
    ch = choose_bricks(only, ra, dec, 101)
    assert ch.ix[0] == 10 and ch.padded[0]


def test_missing_mirror_and_bad_input(tmp_path):
    src = BrickImageSource(str(tmp_path))
    b, _ = src.cutouts([150.1], [2.2], 33)
    assert b.band_missing[0] == 0b111 and not b.image.any() and not b.invvar.any()
    assert b.maskbits is not None and not b.maskbits.any()
    with pytest.raises(InputError):
        src.cutouts([150.0], [np.nan])
    with pytest.raises(InputError):
        src.cutouts([150.0], [2.0], size=0)
