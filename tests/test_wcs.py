"""The brick/cutout TAN WCS: header forms astropy reads, refusals, and the analytic gnomonic projection."""

from __future__ import annotations

import numpy as np
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.wcs import TanWCS


def _gnomonic_xy(ra, dec, ra0, dec0, scale_deg):
    """0-based pixel of (ra, dec) on a North-up, East-left TAN grid centred at pixel (0, 0):
    the textbook gnomonic projection (Calabretta & Greisen 2002, eq. 54), independent of wcslib."""
    ra, dec, ra0, dec0 = (np.radians(v) for v in (ra, dec, ra0, dec0))
    cos_c = np.sin(dec0) * np.sin(dec) + np.cos(dec0) * np.cos(dec) * np.cos(ra - ra0)
    xi = np.cos(dec) * np.sin(ra - ra0) / cos_c
    eta = (np.cos(dec0) * np.sin(dec) - np.sin(dec0) * np.cos(dec) * np.cos(ra - ra0)) / cos_c
    return -np.degrees(xi) / scale_deg, np.degrees(eta) / scale_deg


@pytest.mark.parametrize("ra0, dec0", [(203.7, -31.25), (0.1, 0.0), (359.95, 88.9), (95.95, 80.5)])
def test_projection_matches_the_gnomonic_formula(ra0, dec0):
    w = TanWCS.for_brick(ra0, dec0)
    rng = np.random.default_rng(1)
    x, y = rng.uniform(-100, 3700, 300), rng.uniform(-100, 3700, 300)
    ra, dec = w.pixel_to_world(x, y)
    assert np.all((ra >= 0) & (ra < 360))
    gx, gy = _gnomonic_xy(ra, dec, ra0, dec0, 0.262 / 3600)
    np.testing.assert_allclose(gx + 1799.5, x, atol=1e-6)
    np.testing.assert_allclose(gy + 1799.5, y, atol=1e-6)
    bx, by = w.world_to_pixel(ra, dec)
    np.testing.assert_allclose(bx, x, atol=1e-7)
    np.testing.assert_allclose(by, y, atol=1e-7)


def test_far_hemisphere_is_nan_and_shapes_are_kept():
    w = TanWCS.for_brick(10.0, 20.0)
    x, y = w.world_to_pixel(np.array([[190.0, 10.0]]), np.array([[-20.0, 20.0]]))
    assert x.shape == (1, 2) and np.isnan(x[0, 0]) and np.isnan(y[0, 0])
    assert np.isclose(x[0, 1], 1799.5) and np.isclose(y[0, 1], 1799.5)
    ra, dec = w.pixel_to_world(1799.5, 1799.5)
    assert np.ndim(ra) == 0 and np.isclose(ra, 10.0) and np.isclose(dec, 20.0)


def test_cd_and_cdelt_pc_headers_agree():
    cd = TanWCS.for_brick(150.0, 2.0)
    h = cd.to_header()
    for k in ("CD1_1", "CD1_2", "CD2_1", "CD2_2"):
        del h[k]
    h["CDELT1"], h["CDELT2"] = -0.262 / 3600, 0.262 / 3600
    h["PC1_1"], h["PC2_2"] = 1.0, 1.0
    h["NAXIS1"], h["NAXIS2"] = 3600, 3600
    back = TanWCS.from_header(h, "pc header")
    np.testing.assert_allclose(back.cd, cd.cd, rtol=1e-12)
    assert back.crval == cd.crval and back.crpix == cd.crpix and back.shape == (3600, 3600)


def test_headers_that_are_not_plain_tan_are_refused():
    h = TanWCS.for_brick(150.0, 2.0).to_header()
    sip = h.copy()
    sip["CTYPE1"], sip["CTYPE2"] = "RA---TAN-SIP", "DEC--TAN-SIP"
    with pytest.raises(InputError, match="x.fits: distorted"):
        TanWCS.from_header(sip, "x.fits")
    tpv = h.copy()
    tpv["PV1_1"] = 1.0
    with pytest.raises(InputError, match="distorted"):
        TanWCS.from_header(tpv, "x.fits")
    sin = h.copy()
    sin["CTYPE1"], sin["CTYPE2"] = "RA---SIN", "DEC--SIN"
    with pytest.raises(InputError, match="RA---SIN"):
        TanWCS.from_header(sin, "x.fits")
    bare = h.copy()
    del bare["CRVAL2"]
    with pytest.raises(InputError, match="CRVAL2"):
        TanWCS.from_header(bare, "x.fits")
