"""Validation metrics: ECE on equal-mass bins, unresolvable low-FPR points are NaN, per-tier recall, curves PNG."""

import numpy as np
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.training.metrics import evaluate_scores, expected_calibration_error, json_safe, plot_training_curves


def test_ece_perfect_and_miscalibrated():
    rng = np.random.default_rng(0)
    p = rng.random(20000)
    y = (rng.random(20000) < p).astype(int)  # calibrated by construction
    assert expected_calibration_error(p, y) < 0.02
    assert expected_calibration_error(np.full(1000, 0.9), np.r_[np.ones(500), np.zeros(500)]) == pytest.approx(0.4)


def test_evaluate_scores_fields_and_resolution():
    rng = np.random.default_rng(1)
    y = np.r_[np.ones(200), np.zeros(500)].astype(int)
    p = np.clip(np.r_[rng.normal(0.8, 0.1, 200), rng.normal(0.2, 0.1, 500)], 0, 1)
    tiers = np.array(["A"] * 100 + ["B"] * 100 + [""] * 500, dtype=object)
    m = evaluate_scores(p, y, tiers=tiers, n_boot=50)
    assert m["n_pos"] == 200 and m["n_neg"] == 500 and m["auroc"] > 0.99
    assert m["auroc_lo68"] <= m["auroc"] <= m["auroc_hi68"] + 1e-12
    assert np.isfinite(m["tpr_at_fpr_1e-2"]) and np.isnan(m["tpr_at_fpr_1e-3"]) and np.isnan(m["tpr_at_fpr_1e-4"])
    assert m["recall_at_0.5"] == pytest.approx((p[y == 1] >= 0.5).mean())
    assert m["recall_at_0.5_tier_A"] == pytest.approx((p[:100] >= 0.5).mean()) and m["n_pos_tier_B"] == 100
    assert json_safe(m)["tpr_at_fpr_1e-4"] is None
    with pytest.raises(InputError):
        evaluate_scores(np.r_[p[:-1], np.nan], y)


def test_training_curve_png(tmp_path):
    hist = [{"epoch": e, "train_loss": 1 / (e + 1), "val_auroc": 0.5 + 0.1 * e, "lr": 1e-3} for e in range(4)]
    path = plot_training_curves(hist, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("c.png")
    with pytest.raises(InputError):
        plot_training_curves([], tmp_path / "d.png")
