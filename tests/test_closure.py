"""The detection model P_det(ψ), the populations C is reweighted to, and the closure table, on
synthetic injections whose detection follows a known law of ψ: the model recovers the law and is
calibrated on held-out hosts, refuses ψ outside its support by name, the importance-weighted C of a
population equals that population's mean P_det, and both closure methods see a 15 % bias."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.constants import psfdepth_from_depth_mag
from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.closure import closure_table, population_cells
from darkhaloscope.evaluation.detection import (
    PARAMETERS,
    cross_validated,
    feature_values,
    fit_detection_model,
    reliability_table,
)
from darkhaloscope.evaluation.populations import (
    MOCK_SOURCES,
    importance_weights,
    named_population,
    population_from_samples,
    selection_for_population,
)
from darkhaloscope.lensing.priors import PROPOSALS

PROPOSAL = PROPOSALS["broad"]
THETA_E = [0.75, 1.25, 1.75, 2.25]
Z_L = [0.2, 0.4]
EDGES = [0.5, 2.5]


def _law(c: dict) -> np.ndarray:
    """The synthetic finder: finds bright, extended arcs of large θ_E; a compact source at the centre
    of a faint lens is a point, a source beyond the cut a faint single image."""
    z = (
        -1.2 * (c["src_mag_r"] - 23.5)
        + 1.0 * (c["theta_e_arcsec"] - 1.5)
        + 1.2 * np.log10(c["src_r_sersic_arcsec"] / 0.2)
        - 2.0 * np.clip(c["src_beta_frac"] - 0.9, 0, None)
    )
    return 1 / (1 + np.exp(-z))


def _psi(n: int, rng, sources=None) -> dict:
    c = {k: PROPOSAL[k].transform(rng.random(n)) for k in PROPOSAL.priors if k.startswith("src_")}
    if sources is not None:
        c.update(sources)
    c["theta_e_arcsec"] = rng.choice(THETA_E, n)
    c["z_l"] = rng.choice(Z_L, n)
    c["z_l_bin"] = c["z_l"]
    c["z_s"] = rng.uniform(1.0, 3.0, n)
    c["lens_mag_z"] = rng.uniform(17.0, 19.5, n)
    c["lens_q"] = rng.uniform(0.5, 1.0, n)
    c["shear_g1"], c["shear_g2"] = rng.normal(0, 0.03, n), rng.normal(0, 0.03, n)
    c["psf_fwhm_r"] = rng.uniform(1.0, 1.6, n)
    c["psfdepth_r"] = psfdepth_from_depth_mag(rng.uniform(23.3, 24.0, n))
    return c


def _injections(n=3000, seed=1) -> pa.Table:
    rng = np.random.default_rng(seed)
    c = _psi(n, rng)
    det = rng.random(n) < _law(c)
    return pa.table(
        {
            **c,
            "injection_id": np.arange(n, dtype=np.int64),
            "success": np.ones(n, bool),
            "valid": np.ones(n, bool),
            "score": np.where(det, 0.9, 0.1) + rng.uniform(-0.05, 0.05, n),
            "host_object_id": np.arange(n) // 3,
        }
    )


THRESHOLDS = pa.table({"name": ["t0.5"], "threshold": [0.5], "threshold_ci68_lo": [0.5], "threshold_ci68_hi": [0.5]})


@pytest.fixture(scope="module")
def bank():
    return _injections()


@pytest.fixture(scope="module")
def model(bank):
    return fit_detection_model(bank, "t0.5", 0.5, PROPOSAL, [0.5, 2.5], n_bootstrap=3)


def test_the_model_recovers_the_law_and_is_calibrated_on_held_out_hosts(bank, model):
    rng = np.random.default_rng(7)
    c = _psi(3000, rng)
    inside = ~model.outside_support(feature_values(c))
    c = {k: v[inside] for k, v in c.items()}
    p = model.probability(c)
    assert inside.mean() > 0.98 and np.mean(np.abs(p - _law(c))) < 0.07
    cv = cross_validated(bank, 0.5)
    assert cv["brier"] < cv["brier_base"] and cv["brier"] <= cv["brier_logistic"] + 0.01
    rel = reliability_table("t0.5", cv).to_pylist()
    for r in rel:
        if r["n"] >= 100:
            assert abs(r["observed"] - r["mean_predicted"]) < 0.08, r
    assert len(model.estimators) >= 3 and model.probabilities(c).shape == (len(model.estimators), p.size)


def test_the_model_refuses_parameters_outside_its_support_by_name(model):
    c = _psi(5, np.random.default_rng(3))
    c["src_r_sersic_arcsec"] = np.array([0.2, 0.2, 1.5, 0.2, 0.2])
    with pytest.raises(InputError, match=r"log10_src_r_sersic .*src_r_sersic_arcsec.* outside its validity range"):
        model.probability(c)
    c = _psi(5, np.random.default_rng(3))
    c["theta_e_arcsec"] = np.full(5, 3.5)
    with pytest.raises(InputError, match="theta_e_arcsec"):
        model.probability(c)
    del c["psfdepth_r"]
    with pytest.raises(InputError, match="psfdepth_r"):
        model.probability(c)
    assert set(PARAMETERS) >= {"src_beta_frac", "src_n_sersic", "lens_mag_z", "psf_fwhm_r"}


def test_importance_weights_average_to_one_and_reweight_c_to_the_population(bank):
    """E_q[p/q] = 1, and C reweighted to the mock population equals the mean of the law over that
    population's own draws (an independent Monte Carlo, not through the weights)."""
    mock = named_population("mock", PROPOSAL)
    rng = np.random.default_rng(4)
    c = _psi(40000, rng)
    assert importance_weights(mock, c, PROPOSAL).mean() == pytest.approx(1.0, abs=0.05)
    sel = selection_for_population(mock, "t0.5", bank, THRESHOLDS, PROPOSAL, THETA_E, Z_L)
    cells = sel.filter(pa.compute.equal(sel.column("kind"), "cell")).to_pylist()
    assert [r["population"] for r in cells] == ["mock"] * len(THETA_E) * len(Z_L)
    for r in cells:
        draws = MOCK_SOURCES.draw(rng.random((20000, 9)))
        truth = _law({**draws, "theta_e_arcsec": np.full(20000, r["theta_e_centre"])}).mean()
        assert r["n_eff"] < r["n_injections"]
        assert abs(r["completeness"] - truth) < 2.5 * max(r["ci68_hi"] - r["ci68_lo"], 0.02) / 2, r
    proposal = selection_for_population(
        named_population("proposal", PROPOSAL), "t0.5", bank, THRESHOLDS, PROPOSAL, THETA_E, Z_L
    )
    overall = proposal.filter(pa.compute.equal(proposal.column("kind"), "all")).to_pylist()[0]
    assert overall["n_eff"] == pytest.approx(bank.num_rows, rel=0.01) and overall["sufficient"]


def test_a_cell_below_the_n_eff_floor_is_flagged_not_filled(bank):
    few = bank.slice(0, 150)
    sel = selection_for_population(named_population("mock", PROPOSAL), "t0.5", few, THRESHOLDS, PROPOSAL, THETA_E, Z_L)
    cells = [r for r in sel.to_pylist() if r["kind"] == "cell"]
    assert any(not r["sufficient"] for r in cells)
    assert all(r["n_eff"] < 10 for r in cells if not r["sufficient"])
    with pytest.raises(InputError, match=r"usable thresholds: \['t0.5'\]"):
        selection_for_population(
            named_population("mock", PROPOSAL), "fpr=1e-9", few, THRESHOLDS, PROPOSAL, THETA_E, Z_L
        )


def test_a_population_beyond_the_proposal_is_refused():
    with pytest.raises(InputError, match=r"lenspop.*src_mag_r spans \[20, 27.5\], outside the proposal's \[22, 26\]"):
        named_population("lenspop", PROPOSALS["broad"]).check_support(PROPOSALS["training"])


def _user_table(n=600, seed=5, **over) -> pa.Table:
    rng = np.random.default_rng(seed)
    d = MOCK_SOURCES.draw(rng.random((n, 9)))
    cols = {
        "theta_e_arcsec": rng.choice(THETA_E, n),
        "z_l": rng.choice(Z_L, n),
        **{k: d[k] for k in ("src_mag_r", "src_r_sersic_arcsec", "src_n_sersic", "src_beta_frac")},
    }
    cols.update(over)
    return pa.table(cols)


def test_a_user_population_from_samples_reweights_like_the_density_it_was_drawn_from(bank):
    user = population_from_samples(_user_table(3000), "mine", PROPOSAL)
    sel = selection_for_population(user, "t0.5", bank, THRESHOLDS, PROPOSAL, THETA_E, Z_L)
    mock = selection_for_population(
        named_population("mock", PROPOSAL), "t0.5", bank, THRESHOLDS, PROPOSAL, THETA_E, Z_L
    )
    a = [r["completeness"] for r in sel.to_pylist() if r["kind"] == "cell"]
    b = [r["completeness"] for r in mock.to_pylist() if r["kind"] == "cell"]
    assert np.max(np.abs(np.subtract(a, b))) < 0.12
    assert sel.column("population")[0].as_py() == "user:mine"
    overall = [r for r in sel.to_pylist() if r["kind"] == "all"]
    assert len(overall) == 1 and overall[0]["population_share"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "table, message",
    [
        (_user_table().drop_columns(["src_beta_frac"]), r"missing column\(s\) \['src_beta_frac'\]"),
        (
            _user_table(src_mag_r=np.full(600, 28.0)),
            r"column 'src_mag_r' has 600 value\(s\) outside the proposal's range \[20, 27.5\]",
        ),
        (_user_table(weight=np.r_[np.ones(599), 0.0]), r"column 'weight' must be finite and > 0"),
        (_user_table(50), r"50 effective samples .* needs >= 200"),
    ],
)
def test_bad_user_populations_are_refused_naming_the_column_and_range(table, message):
    with pytest.raises(InputError, match=message):
        population_from_samples(table, "bad", PROPOSAL)


def _hidden(n, seed):
    rng = np.random.default_rng(seed)
    c = _psi(n, rng, MOCK_SOURCES.draw(rng.random((n, 9))))
    return pa.table(c), _law(c), rng


def test_both_closure_methods_close_when_unbiased_and_see_a_15_percent_bias(bank, model):
    cells = population_cells(
        selection_for_population(
            named_population("mock", PROPOSAL),
            "t0.5",
            bank,
            THRESHOLDS,
            PROPOSAL,
            THETA_E,
            Z_L,
            threshold_uncertainty=False,
        )
    )
    hidden, p, rng = _hidden(1500, 9)
    inside = ~model.outside_support(feature_values(hidden))
    hidden, p = hidden.filter(pa.array(inside)), p[inside]
    fair = rng.random(p.size) < p
    biased = rng.random(p.size) < 0.85 * p
    for recovered, expect in ((fair, "close"), (biased, "biased")):
        t = closure_table(model, cells, hidden, recovered, THETA_E, Z_L)
        for method in ("per_lens", "population"):
            row = [r for r in t.to_pylist() if r["bin"] == "all" and r["method"] == method][0]
            assert row["n_hidden"] == hidden.num_rows and row["power_15pct"] > 2.5
            if expect == "close":
                assert abs(row["pull"]) < 2.5, (method, row)
            else:
                assert row["pull"] < -1.5, (method, row)
