"""Calibrated scores: temperature scaling against independent references (scikit-learn's log-loss
minimisation; an analytic case), the expected calibration error against a hand-computed case, the
reliability bins, and scoring applying the checkpoint's temperature."""

import numpy as np
import pytest
import torch
from torch import nn

from darkhaloscope.errors import InputError
from darkhaloscope.training.calibration import calibration_summary, fit_temperature, reliability_bins
from darkhaloscope.training.checkpoint import load_checkpoint, save_checkpoint
from darkhaloscope.training.inference import calibrated_probability, score_stamps, stamp_logits
from darkhaloscope.training.metrics import expected_calibration_error
from darkhaloscope.training.preprocess import PreprocessSpec


def _overconfident(n=4000, scale=3.0, seed=0):
    """Labels drawn from sigmoid(z) and logits reported as scale * z: the right temperature is ``scale``."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2.0, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.int8)
    return scale * z, y


def test_temperature_matches_scikit_learn_log_loss_minimisation():
    from sklearn.linear_model import LogisticRegression

    logits, y = _overconfident()
    lr = LogisticRegression(fit_intercept=False, C=np.inf, tol=1e-10, max_iter=1000).fit(logits[:, None], y)
    assert fit_temperature(logits, y) == pytest.approx(1.0 / lr.coef_[0, 0], rel=1e-4)
    # with weights: sklearn's sample_weight is the same weighted log-loss
    w = np.where(y == 1, 0.5, 1.0)
    lrw = LogisticRegression(fit_intercept=False, C=np.inf, tol=1e-10, max_iter=1000).fit(
        logits[:, None], y, sample_weight=w
    )
    assert fit_temperature(logits, y, w) == pytest.approx(1.0 / lrw.coef_[0, 0], rel=1e-4)


def test_temperature_recovers_the_analytic_overconfidence():
    logits, y = _overconfident(n=200_000, scale=3.0, seed=1)
    assert fit_temperature(logits, y) == pytest.approx(3.0, rel=0.02)
    logits, y = _overconfident(n=200_000, scale=0.5, seed=2)  # under-confident
    assert fit_temperature(logits, y) == pytest.approx(0.5, rel=0.02)


def test_temperature_rejects_bad_input():
    with pytest.raises(InputError, match="both labels"):
        fit_temperature([1.0, 2.0], [1, 1])
    with pytest.raises(InputError, match="finite"):
        fit_temperature([np.nan, 2.0], [0, 1])
    with pytest.raises(InputError, match="differ in length"):
        fit_temperature([1.0, 2.0], [0, 1, 1])


def test_ece_against_a_hand_computed_case():
    # 4 rows, 2 equal-mass bins: {0.1, 0.3} with labels {0, 1} -> |0.2 - 0.5| = 0.3;
    # {0.6, 0.8} with labels {1, 1} -> |0.7 - 1.0| = 0.3; ECE = (2/4) 0.3 + (2/4) 0.3 = 0.3
    assert expected_calibration_error([0.1, 0.3, 0.6, 0.8], [0, 1, 1, 1], n_bins=2) == pytest.approx(0.3)
    # perfectly calibrated bins give 0
    assert expected_calibration_error([0.5, 0.5, 1.0, 1.0], [0, 1, 1, 1], n_bins=2) == pytest.approx(0.0)


def test_calibration_lowers_ece_and_bins_cover_every_row():
    logits, y = _overconfident(n=20_000)
    t = fit_temperature(logits, y)
    s = calibration_summary(logits, y, t)
    assert s["ece_after"] < 0.02 < s["ece_before"] and s["temperature"] == t
    for key in ("reliability_before", "reliability_after"):
        assert sum(b["n"] for b in s[key]) == len(y)
    bins = reliability_bins([0.05, 0.15, 0.95], [0, 1, 1], n_bins=10)
    assert [(b["lo"], b["n"], b["fraction_positive"]) for b in bins] == [(0.0, 1, 0.0), (0.1, 1, 1.0), (0.9, 1, 1.0)]


class _Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(0.05))

    def forward(self, x):
        return self.w * x.mean(dim=(1, 2, 3)) * 100


def test_scoring_applies_the_checkpoint_temperature(tmp_path, monkeypatch):
    import darkhaloscope.training.checkpoint as ckpt

    spec = PreprocessSpec()
    monkeypatch.setitem(ckpt.build_model.__globals__["_ARCHS"], "linear_test", lambda in_channels=3: _Linear())
    save_checkpoint(
        tmp_path, "best", _Linear(), architecture="linear_test", in_channels=3, preprocess=spec, temperature=2.5
    )
    model, cs = load_checkpoint(tmp_path, "best")
    images = np.random.default_rng(0).normal(1.0, 0.2, (6, 3, 33, 33)).astype(np.float32)
    logits, ok, _ = stamp_logits(model, cs, images)
    probs, _, _ = score_stamps(model, cs, images)
    assert cs.temperature == 2.5 and ok.all()
    np.testing.assert_allclose(probs, 1 / (1 + np.exp(-logits / 2.5)), rtol=1e-12)
    # a bare preprocessing spec means temperature 1 (gates, training-time validation)
    np.testing.assert_allclose(score_stamps(model, spec, images)[0], calibrated_probability(logits, 1.0))
