"""The worked forecast (darkhaloscope.evaluation.forecast): the velocity dispersion function against
Choi et al. 2007's published fit, the deflector integral against the closed-form SIS optical depth of
Turner, Ostriker & Gott 1984, and the fold of the selection model with its populations."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from scipy.integrate import quad

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.closure import FEATURES, SELECTION_MODEL_SCHEMA
from darkhaloscope.evaluation.forecast import (
    CHOI2007,
    HOGG1997,
    analytic_sis_optical_depth,
    fit_lens_magnitude,
    forecast_density,
    lens_magnitude,
    mock_forecast_table,
    sis_optical_depth,
    snr_offsets,
    sphere_box_area_deg2,
    vdf_forecast_table,
)

THETA_E = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
Z_L = [0.2, 0.4, 0.6]


def _model(intercepts, coef=None) -> pa.Table:
    """SELECTION_MODEL_SCHEMA rows: replica k has intercept ``intercepts[k]`` and ``coef`` (by feature)."""
    coef = coef or {}
    cols = {
        "threshold_name": ["fpr=1e-2"] * len(intercepts),
        "threshold": [0.5] * len(intercepts),
        "replica": list(range(len(intercepts))),
        "intercept": list(intercepts),
    }
    for f in FEATURES:
        cols[f"coef_{f}"] = [coef.get(f, 0.0)] * len(intercepts)
    cols["n_injections"] = [100] * len(intercepts)
    cols["n_hosts"] = [20] * len(intercepts)
    return pa.table(cols, schema=SELECTION_MODEL_SCHEMA)


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


def _injections(n=600, seed=1):
    rng = np.random.default_rng(seed)
    te = rng.choice(THETA_E, n)
    mag = rng.uniform(22, 26, n)
    offset = 11.0 + 0.2 * te  # log10 S/N + 0.4 m, exactly, per θ_E
    host = np.arange(n) // 3
    sigma = 150 + 5 * (host % 40)
    z = 0.2 + 0.01 * (host % 50)
    from darkhaloscope.lensing.cosmology import distance_modulus

    mz = 1.5 - 4.0 * np.log10(sigma) + 0.7 * z + distance_modulus(z)
    return pa.table(
        {
            "valid": np.ones(n, bool),
            "theta_e_arcsec": te,
            "src_mag_r": mag,
            "arc_snr": 10 ** (offset - 0.4 * mag),
            "host_object_id": host.astype(np.int64),
            "sigma_v_kms": sigma.astype(np.float64),
            "host_z": z,
            "lens_mag_z": mz,
        }
    )


def test_snr_offsets_and_lens_magnitude_fit_recover_the_injections():
    inj = _injections()
    off = snr_offsets(inj, THETA_E, n_quantiles=5)
    np.testing.assert_allclose(off, np.repeat((11.0 + 0.2 * np.array(THETA_E))[:, None], 5, axis=1), rtol=1e-9)
    coef = fit_lens_magnitude(inj)
    np.testing.assert_allclose(coef, [1.5, -4.0, 0.7], atol=1e-8)
    assert lens_magnitude(coef, 200.0, 0.4) == pytest.approx(lens_magnitude([1.5, -4.0, 0.7], 200.0, 0.4))
    with pytest.raises(InputError, match="no valid injection"):
        snr_offsets(inj, [*THETA_E, 5.0])
    with pytest.raises(InputError, match="lack"):
        snr_offsets(inj.drop_columns(["src_mag_r"]), THETA_E)


def test_forecast_folds_detection_with_the_lensed_population():
    inj = _injections()
    off, coef = snr_offsets(inj, THETA_E), fit_lens_magnitude(inj)
    small = dict(n_z=6, n_sigma=10, n_zs=3, n_mag=4)
    every = forecast_density(_model([50.0, 50.0]), off, coef, THETA_E, Z_L, **small)
    assert every["per_deg2"].shape == (2, len(THETA_E))
    np.testing.assert_allclose(every["per_deg2"][0], every["lensed_per_deg2"], rtol=1e-12)  # P = 1: every lens
    none = forecast_density(_model([-50.0]), off, coef, THETA_E, Z_L, **small)
    assert none["per_deg2"].max() < 1e-12 * every["lensed_per_deg2"].sum()
    # a brighter arc is likelier found: detection rising with S/N finds fewer than all and more than none
    snr_model = _model([-2.0], {"log_snr": 2.0})
    some = forecast_density(snr_model, off, coef, THETA_E, Z_L, **small)["per_deg2"][0]
    assert 0 < some.sum() < every["lensed_per_deg2"].sum()
    # the θ_E grid only splits the lensed population between counted and outside: the sum stays
    narrow = forecast_density(_model([50.0]), off[2:4], coef, THETA_E[2:4], Z_L, **small)
    assert narrow["lensed_per_deg2"].sum() + narrow["outside_per_deg2"] == pytest.approx(
        every["lensed_per_deg2"].sum() + every["outside_per_deg2"], rel=1e-9
    )
    assert narrow["lensed_per_deg2"].sum() < every["lensed_per_deg2"].sum()
    table = vdf_forecast_table(every, 50.0, "fpr=1e-2")
    rows = {r["bin"]: r for r in table.to_pylist()}
    assert rows["all"]["n_per_deg2"] == pytest.approx(every["per_deg2"][0].sum())
    assert rows["all"]["n_in_area"] == pytest.approx(50.0 * rows["all"]["n_per_deg2"])
    assert rows["all"]["n_per_deg2_sd"] == 0.0  # identical replicas
    # a source in front of the lens is not lensed: a lens plane behind every source (z_s <= 3) lenses nothing,
    # one among them only the sources behind it
    behind = forecast_density(_model([50.0]), off, coef, THETA_E, [3.5], n_z=2, n_sigma=10, n_zs=3, n_mag=4)
    assert behind["lensed_per_deg2"].sum() == 0 and behind["outside_per_deg2"] == 0
    among = forecast_density(_model([50.0]), off, coef, THETA_E, [2.0], n_z=2, n_sigma=10, n_zs=3, n_mag=4)
    assert among["lensed_per_deg2"].sum() + among["outside_per_deg2"] > 0


def test_mock_forecast_compares_the_folded_population_with_the_truth():
    te = np.array([0.6, 0.9, 1.6, 2.4, 2.9])
    hidden = pa.table({"theta_e_arcsec": te, "lens_mag_z": np.full(5, 18.5)})
    recovered = [True, False, True, True, False]
    half = _model([0.0, 0.0, 0.0])  # P = 1/2 whatever the arc
    rows = {r["bin"]: r for r in mock_forecast_table(half, hidden, recovered, THETA_E, (1.5, 200.0), 10.0).to_pylist()}
    overall = rows["all"]
    assert overall["n_in_area"] == pytest.approx(2.5) and overall["n_truth"] == 3
    assert overall["n_in_area_sd"] == pytest.approx(math.sqrt(5 * 0.25))  # no model spread: binomial only
    assert overall["pull"] == pytest.approx((3 - 2.5) / math.sqrt(1.25))
    assert overall["n_per_deg2"] == pytest.approx(0.25) and overall["n_lensed_per_deg2"] == pytest.approx(0.5)
    assert sum(r["n_truth"] for b, r in rows.items() if b != "all") == 3
    # P rising with S/N: the average over a log-uniform S/N lies between its ends
    rising = _model([-1.0], {"log_snr": 2.0})
    mid = mock_forecast_table(rising, hidden, recovered, THETA_E, (1.5, 200.0), 10.0).to_pylist()[-1]
    lo = 1 / (1 + math.exp(1.0 - 2.0 * math.log10(1.5)))
    hi = 1 / (1 + math.exp(1.0 - 2.0 * math.log10(200.0)))
    assert 5 * lo < mid["n_in_area"] < 5 * hi
    with pytest.raises(InputError, match="recovery flags"):
        mock_forecast_table(half, hidden, recovered[:2], THETA_E, (1.5, 200.0), 10.0)


def test_report_states_the_forecast_and_its_assumptions():
    from darkhaloscope.evaluation.forecast import forecast_assumptions
    from darkhaloscope.evaluation.report import build_report

    inj = _injections()
    density = forecast_density(
        _model([0.0]),
        snr_offsets(inj, THETA_E),
        fit_lens_magnitude(inj),
        THETA_E,
        Z_L,
        n_z=3,
        n_sigma=4,
        n_zs=2,
        n_mag=2,
    )
    assumptions = forecast_assumptions((0.25, 3.25), (0.2, 0.6)).to_dict()
    page = build_report(forecast=vdf_forecast_table(density, 12.5, "fpr=1e-2"), forecast_assumptions=assumptions)
    assert 'id="table-forecast"' in page and "Choi et al. 2007" in page and "Hogg et al. 1997" in page
    assert "beta_max" in page and "vdf_evolution" in page
    assert "Not provided" in build_report().split("Forecast")[1]
