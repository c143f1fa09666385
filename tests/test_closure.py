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
)


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
    table = closure_table(model, hidden, found, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]).to_pylist()
    overall = table[-1]
    assert overall["bin"] == "all" and overall["n_hidden"] == 600
    assert sum(r["n_hidden"] for r in table[:-1]) == 600
    assert abs(overall["pull"]) < 2.5
    lost = found & (rng.uniform(size=len(p)) > 0.15)  # a finder that misses 15 % of what it should find
    biased = closure_table(model, hidden, lost, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]).to_pylist()[-1]
    assert biased["pull"] < overall["pull"] - 2.0
