"""The headline's aperture S/N of faint arcs against its analytic value."""

import importlib.util
from pathlib import Path

import numpy as np

_spec = importlib.util.spec_from_file_location("demo_headline", Path(__file__).resolve().parents[1] / "benchmarks" / "demo_headline.py")
demo_headline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo_headline)


def test_aperture_snr_counts_an_arc_spread_below_one_sigma_a_pixel():
    """A flat ring of 0.5 sigma a pixel over N pixels has aperture S/N 0.5 sqrt(N) in every band,
    whatever the band's sigma (no pixel reaches the bank's 1 sigma); an empty stamp has 0."""
    r = np.hypot(*(np.mgrid[:41, :41] - 20.0))
    ring = ((r >= 8) & (r < 11)).astype(np.float64)
    sigma = np.array([[1.0, 2.0, 4.0], [1.0, 1.0, 1.0]])
    arc = np.zeros((2, 3, 41, 41))
    arc[0] = 0.5 * ring * sigma[0, :, None, None]
    snr = demo_headline.aperture_snr(arc, sigma, smooth_px=0.5, level=0.25)
    np.testing.assert_allclose(snr[0], 0.5 * np.sqrt(ring.sum()), rtol=0.02)
    assert np.all(snr[1] == 0.0)
