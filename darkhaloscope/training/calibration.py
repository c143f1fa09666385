"""Calibrated scores: temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural
Networks", ICML) fitted on the validation split, never on test.

A network trained with early stopping on AUROC is usually over- or under-confident; one scalar
T > 0 applied to its logits, p = sigmoid(z / T), fixes the scale without moving any ranking (AUROC,
thresholds defined by held-out negatives and every completeness stay the same). T minimises the
validation log-loss. The checkpoint stores T and scoring applies it
(``inference.score_stamps``), so every score asset publishes calibrated probabilities.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .inference import calibrated_probability
from .metrics import expected_calibration_error

#: Search range of the temperature (log-uniform bounds).
TEMPERATURE_RANGE = (1e-2, 1e2)


def _log_loss(logits: np.ndarray, labels: np.ndarray, weights: np.ndarray, temperature: float) -> float:
    z = logits / temperature
    # log(1 + exp(-|z|)) + max(z, 0) - y z: the stable binary cross-entropy of a logit
    per = np.logaddexp(0.0, -np.abs(z)) + np.maximum(z, 0.0) - labels * z
    return float(np.sum(weights * per) / np.sum(weights))


def fit_temperature(logits, labels, weights=None) -> float:
    """The temperature T minimising the (weighted) log-loss of sigmoid(logits / T) against 0/1
    ``labels``: a bounded 1-d search over log T in TEMPERATURE_RANGE."""
    from scipy.optimize import minimize_scalar

    z = np.asarray(logits, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    w = np.ones_like(z) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
    if not (z.shape == y.shape == w.shape):
        raise InputError(f"logits ({z.shape}), labels ({y.shape}) and weights ({w.shape}) differ in length")
    if not (np.all(np.isfinite(z)) and np.all((y == 0) | (y == 1)) and np.all(w >= 0) and w.sum() > 0):
        raise InputError("temperature fit needs finite logits, 0/1 labels and non-negative weights with a positive sum")
    if np.unique(y).size < 2:
        raise InputError("temperature fit needs both labels")
    lo, hi = np.log(TEMPERATURE_RANGE)
    res = minimize_scalar(
        lambda u: _log_loss(z, y, w, float(np.exp(u))), bounds=(lo, hi), method="bounded", options={"xatol": 1e-6}
    )
    return float(np.exp(res.x))


def reliability_bins(probs, labels, n_bins: int = 10) -> list[dict]:
    """Reliability diagram data: equal-width probability bins with their count, mean predicted
    probability and observed fraction of positives (bins without rows are left out)."""
    p = np.asarray(probs, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    b = np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    out = []
    for k in range(n_bins):
        m = b == k
        if m.any():
            out.append(
                {
                    "lo": k / n_bins,
                    "hi": (k + 1) / n_bins,
                    "n": int(m.sum()),
                    "mean_probability": float(p[m].mean()),
                    "fraction_positive": float(y[m].mean()),
                }
            )
    return out


def calibration_summary(logits, labels, temperature: float, n_bins: int = 10) -> dict:
    """Expected calibration error (15 equal-mass bins) and reliability bins before (T = 1) and after
    temperature scaling, on the rows given (the validation split)."""
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels)
    before, after = calibrated_probability(z, 1.0), calibrated_probability(z, temperature)
    return {
        "temperature": float(temperature),
        "n": int(z.size),
        "ece_before": expected_calibration_error(before, y),
        "ece_after": expected_calibration_error(after, y),
        "reliability_before": reliability_bins(before, y, n_bins),
        "reliability_after": reliability_bins(after, y, n_bins),
    }
