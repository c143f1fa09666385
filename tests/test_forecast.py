"""The forecast (darkhaloscope.evaluation.forecast): the velocity dispersion function against Choi
et al. 2007's published fit, the deflector integral against the closed-form SIS optical depth of
Turner, Ostriker & Gott 1984, the LensPop-like lens density, and the product with C per cell."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from scipy.integrate import quad

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.forecast import (
    CHOI2007,
    HOGG1997,
    analytic_sis_optical_depth,
    forecast_table,
    sis_optical_depth,
    sphere_box_area_deg2,
)
from darkhaloscope.evaluation.populations import grid_edges, lenspop_lens_density

THETA_E = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
Z_L = [0.2, 0.4, 0.6]


def test_vdf_is_choi_2007_and_normalised():
    # Choi, Park & Vogeley 2007 (ApJ 658, 884), early types: phi* = 8.0e-3 h^3 Mpc^-3, sigma* = 161 km/s,
    # alpha = 2.32, beta = 2.67 (also LensPop's PopulationFunctions.py)
    assert (CHOI2007.phi_star_h3, CHOI2007.sigma_star, CHOI2007.alpha, CHOI2007.beta) == (8.0e-3, 161.0, 2.32, 2.67)
    h = 0.7
    total, _ = quad(lambda s: CHOI2007.phi(s, h), 0, 3000, limit=200)
    assert total == pytest.approx(8.0e-3 * h**3, rel=1e-6)
    fourth, _ = quad(lambda s: s**4 * CHOI2007.phi(s, h), 0, 3000, limit=200)
    assert CHOI2007.moment(4, h) == pytest.approx(fourth, rel=1e-6)
    # the peak of sigma phi(sigma) (per ln sigma) lies at sigma* (alpha / beta)^(1 / beta)
    s = np.linspace(50, 300, 25001)
    assert s[np.argmax(s * CHOI2007.phi(s, h))] == pytest.approx(161.0 * (2.32 / 2.67) ** (1 / 2.67), abs=0.02)


@pytest.mark.parametrize("z_s", [0.8, 2.0])
def test_deflector_integral_is_the_sis_optical_depth(z_s):
    assert sis_optical_depth(CHOI2007, z_s) == pytest.approx(analytic_sis_optical_depth(CHOI2007, z_s), rel=2e-3)


def test_source_counts_integrate_to_hogg_1997():
    # Hogg et al. 1997: 6.3e5 galaxies per deg^2 brighter than R = 26
    total, _ = quad(HOGG1997.differential, 0, 26)
    assert total == pytest.approx(6.3e5, rel=1e-6)
    assert HOGG1997.differential(25.0) / HOGG1997.differential(24.0) == pytest.approx(10**0.3)


def test_sphere_box_area():
    assert sphere_box_area_deg2(0, 360, -90, 90) == pytest.approx(4 * math.pi * (180 / math.pi) ** 2)
    assert sphere_box_area_deg2(30, 35, -5, 0) == pytest.approx(
        5 * 5 * np.sinc(2.5 / 180) * math.cos(math.radians(2.5)), rel=1e-3
    )


def test_lenspop_lens_density_adds_up_over_cells_and_falls_with_theta_e():
    te, zl = grid_edges(THETA_E), grid_edges(Z_L)
    d = lenspop_lens_density(te, zl)
    assert d.shape == (len(THETA_E), len(Z_L)) and np.all(d >= 0)
    whole = lenspop_lens_density([te[0], te[-1]], [zl[0], zl[-1]])
    assert d.sum() == pytest.approx(float(whole.sum()), rel=0.03)
    by_theta = d.sum(axis=1)
    assert np.all(np.diff(by_theta) < 0)  # the VDF's exponential tail: big Einstein radii are rare


def _cells(c, sufficient, half=0.05) -> pa.Table:
    c = np.asarray(c, float)
    return pa.table(
        {
            "completeness": c,
            "ci68_lo": c - half,
            "ci68_hi": c + half,
            "sufficient": np.asarray(sufficient, bool),
        }
    )


def test_forecast_is_lenses_times_c_and_never_fills_an_unmeasured_cell():
    density = np.array([[2.0, 1.0], [0.5, 0.25]])  # per deg², (θ_E, z_l)
    cells = _cells([0.5, 0.4, 0.8, 0.9], [True, True, True, False])
    t = {r["bin"]: r for r in forecast_table(cells, density, [0.5, 1.0, 1.5], 10.0, "t", "lenspop").to_pylist()}
    assert t["all"]["n_per_deg2"] == pytest.approx(2 * 0.5 + 1 * 0.4 + 0.5 * 0.8)
    assert t["all"]["n_unmeasured_per_deg2"] == pytest.approx(0.25)
    assert t["all"]["n_lensed_per_deg2"] == pytest.approx(3.75)
    assert t["all"]["n_in_area"] == pytest.approx(10 * t["all"]["n_per_deg2"])
    assert t["all"]["n_per_deg2_sd"] == pytest.approx(0.05 * np.sqrt(4 + 1 + 0.25))
    assert t["[0.5, 1)"]["n_per_deg2"] + t["[1, 1.5)"]["n_per_deg2"] == pytest.approx(t["all"]["n_per_deg2"])
    with pytest.raises(InputError, match="area"):
        forecast_table(cells, density, [0.5, 1.0, 1.5], 0.0, "t", "lenspop")
    with pytest.raises(InputError, match="4 cells of C for a 3 x 2 grid"):
        forecast_table(cells, np.ones((3, 2)), [0.5, 1.0, 1.5, 2.0], 1.0, "t", "lenspop")
