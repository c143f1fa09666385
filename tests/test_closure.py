"""The selection model P(detected | θ_E, arc S/N, lens z mag) and the closure table: a model fitted
on injections whose detection follows a known law predicts lenses drawn from another prior, and a
biased recovery shows as a pull."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.closure import (
    calibration_table,
    closure_table,
    detection_probability,
    fit_selection_model,
    fit_selection_models,
    model_at,
    outside_prior_support,
    threshold_names,
)
from darkhaloscope.lensing.priors import PriorRegistry


def _law(snr, te, mag):
    """The true detection probability of the synthetic finder: rises with S/N and θ_E, falls with a
    bright lens."""
    z = 3.0 * (np.log10(snr) - 0.9) + 1.2 * (te - 1.2) + 0.4 * (mag - 18.5)
    return 1 / (1 + np.exp(-z))


def _injections(n=4000, seed=1):
    rng = np.random.default_rng(seed)
    snr = 10 ** rng.uniform(0, 2.3, n)  # the bank's arcs: another S/N distribution than the hidden lenses'
    te = rng.uniform(0.5, 3.0, n)
    mag = rng.uniform(16.5, 20.0, n)
    det = rng.uniform(size=n) < _law(snr, te, mag)
    score = np.where(det, 0.9, 0.1) + rng.uniform(-0.05, 0.05, n)
    return pa.table(
        {
            "arc_snr": snr,
            "theta_e_arcsec": te,
            "lens_mag_z": mag,
            "score": score,
            "valid": np.ones(n, bool),
            "host_object_id": np.arange(n) // 4,
        }
    )


def _hidden(n=600, seed=2):
    rng = np.random.default_rng(seed)
    snr = np.exp(rng.uniform(np.log(1.5), np.log(200.0), n))
    te = rng.uniform(0.6, 2.4, n)
    mag = rng.uniform(17.0, 19.5, n)
    return pa.table({"arc_snr": snr, "theta_e_arcsec": te, "lens_mag_z": mag}), _law(snr, te, mag), rng


def test_model_recovers_the_law_and_is_calibrated():
    inj = _injections()
    model = fit_selection_model(inj, "t", 0.5, n_bootstrap=8)
    assert model.num_rows == 9 and model.column("replica").to_pylist() == list(range(9))
    snr, te, mag = np.array([3.0, 10.0, 50.0]), np.array([1.0, 1.5, 2.0]), np.array([18.0, 18.5, 19.0])
    np.testing.assert_allclose(detection_probability(model, snr, te, mag), _law(snr, te, mag), atol=0.06)
    cal = calibration_table(model, inj).to_pydict()
    for n, k, p in zip(cal["n"], cal["n_detected"], cal["n_predicted"]):
        assert abs(k - p) <= 3 * np.sqrt(max(p, 1.0)) + 2
    with pytest.raises(InputError, match="all detected or all missed"):
        fit_selection_model(inj.set_column(3, "score", pa.array(np.zeros(inj.num_rows))), "t", 0.5, 2)


def test_closure_pull_small_when_unbiased_large_when_the_finder_loses_15_percent():
    model = fit_selection_model(_injections(), "t", 0.5, n_bootstrap=8)
    hidden, p, rng = _hidden()
    found = rng.uniform(size=len(p)) < p
    inside = np.arange(len(p)) % 3 > 0
    table = closure_table(model, hidden, found, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0], inside).to_pylist()
    overall, support = table[-2], table[-1]
    assert overall["bin"] == "all" and overall["n_hidden"] == 600
    assert support["bin"] == "in_prior_support" and support["n_hidden"] == 400
    assert support["n_recovered"] == int(found[inside].sum())
    assert sum(r["n_hidden"] for r in table[:-2]) == 600
    assert abs(overall["pull"]) < 2.5
    lost = found & (rng.uniform(size=len(p)) > 0.15)  # a finder that misses 15 % of what it should find
    biased = closure_table(model, hidden, lost, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0], inside).to_pylist()[-2]
    assert biased["pull"] < overall["pull"] - 2.0


def test_one_model_per_threshold_the_unfittable_named():
    """Each threshold gets its own fit (a stricter one detects less at the same parameters); a
    threshold no injection passes is named, not fitted; one threshold's functions refuse a mix."""
    inj = _injections()
    scores = inj.column("score").to_numpy()
    missed = np.random.default_rng(3).uniform(0.0, 0.4, scores.size)  # half of them above 0.2
    inj = inj.set_column(3, "score", pa.array(np.where(scores > 0.5, scores, missed)))
    model, skipped = fit_selection_models(inj, [("loose", 0.2), ("t", 0.5), ("never", 2.0)], n_bootstrap=2)
    assert threshold_names(model) == ["t", "loose"] and list(skipped) == ["never"]
    assert "0 of 4000 valid injections" in skipped["never"]
    snr, te, mag = np.array([3.0, 10.0]), np.array([1.0, 2.0]), np.array([18.5, 18.5])
    strict = detection_probability(model_at(model, "t"), snr, te, mag)
    np.testing.assert_allclose(strict, _law(snr, te, mag), atol=0.06)
    assert np.all(detection_probability(model_at(model, "loose"), snr, te, mag) > strict)
    with pytest.raises(InputError, match="2 thresholds"):
        detection_probability(model, snr, te, mag)
    with pytest.raises(InputError, match="no threshold 'x'"):
        model_at(model, "x")
    with pytest.raises(InputError, match="no threshold has a detection model"):
        fit_selection_models(inj, [("never", 2.0)], n_bootstrap=2)


def test_prior_support_names_the_parameter_each_lens_leaves_it_by():
    """A compact source, a source outside 0.4 θ_E and a lens beyond the z_l prior are each outside the
    default injection prior by that parameter only; a lens drawn inside it is inside."""
    priors = {k: [p.kind, p.lo, p.hi, p.mu, p.sigma] for k, p in PriorRegistry().priors.items()}
    inside = {
        "source_r_sersic_arcsec": 0.3,
        "source_n_sersic": 1.0,
        "source_x_arcsec": 0.2,
        "source_y_arcsec": 0.0,
        "theta_e_arcsec": 1.0,
        "source_e1": 0.1,
        "source_e2": 0.0,
        "g_minus_r": 0.3,
        "r_minus_z": 0.3,
        "z_source": 2.0,
        "z_lens": 0.4,
    }
    rows = [
        inside,
        {**inside, "source_r_sersic_arcsec": 0.12},
        {**inside, "source_x_arcsec": 0.6},
        {**inside, "z_lens": 1.1},
    ]
    out = outside_prior_support(pa.Table.from_pylist(rows), priors)
    assert {k: v.tolist() for k, v in out.items() if v.any()} == {
        "src_r_sersic_arcsec": [False, True, False, False],
        "src_beta_frac": [False, False, True, False],
        "z_l": [False, False, False, True],
    }
    del priors["src_beta_frac"]
    with pytest.raises(InputError, match="src_beta_frac"):
        outside_prior_support(pa.Table.from_pylist(rows), priors)
