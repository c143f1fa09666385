"""darkhaloscope.sky against astropy: separations, unit vectors and chords."""

from __future__ import annotations

import numpy as np
from astropy import units as u
from astropy.coordinates import SkyCoord

from darkhaloscope import sky


def _pairs(n=2000, seed=4):
    rng = np.random.default_rng(seed)
    ra1 = rng.uniform(0, 360, n)
    dec1 = np.degrees(np.arcsin(rng.uniform(-1, 1, n)))
    # tiny, arcsec, degree and near-antipodal separations, and pairs across RA = 0 and the poles
    scale = np.concatenate(
        [
            np.full(n // 4, 1e-4),
            np.full(n // 4, 10.0),
            np.full(n // 4, 3600.0 * 30),
            np.full(n - 3 * (n // 4), 3600.0 * 179.99),
        ]
    )
    ang = rng.uniform(0, 2 * np.pi, n)
    c1 = SkyCoord(ra1 * u.deg, dec1 * u.deg)
    c2 = c1.directional_offset_by(ang * u.rad, scale * u.arcsec)
    return c1, c2


def test_separation_matches_skycoord():
    c1, c2 = _pairs()
    got = sky.angular_separation_arcsec(c1.ra.deg, c1.dec.deg, c2.ra.deg, c2.dec.deg)
    want = c1.separation(c2).to_value(u.arcsec)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
    # across RA = 0 and at the pole
    assert np.isclose(sky.angular_separation_arcsec(359.9999, 0.0, 0.0001, 0.0), 0.72, rtol=1e-9)
    assert np.isclose(sky.angular_separation_arcsec(10.0, 90.0, 190.0, 89.0), 3600.0, rtol=1e-12)


def test_unit_vectors_and_chords_match_astropy():
    c1, c2 = _pairs(500)
    v1 = sky.unit_vectors(c1.ra.deg, c1.dec.deg)
    ref = c1.cartesian.xyz.value.T
    np.testing.assert_allclose(v1, ref, atol=1e-15)
    # the chord between two unit vectors is the chord_for_arcsec of their separation
    v2 = sky.unit_vectors(c2.ra.deg, c2.dec.deg)
    chord = np.linalg.norm(v1 - v2, axis=1)
    sep = c1.separation(c2).to_value(u.arcsec)
    np.testing.assert_allclose(chord, [sky.chord_for_arcsec(s) for s in sep], rtol=1e-9, atol=1e-15)
