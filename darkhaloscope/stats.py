"""Classifier and counting statistics shared by every stage (one implementation each).

ROC AUC with ties (Mann–Whitney), ROC curve, TPR at a target FPR, average precision,
Jeffreys binomial intervals and a percentile bootstrap. Scores are any real numbers;
labels are 0/1.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from scipy import stats as _st

from .errors import InputError


def _check(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).ravel()
    if s.shape != y.shape:
        raise InputError(f"scores ({s.shape}) and labels ({y.shape}) differ in length")
    if not np.all(np.isfinite(s)):
        raise InputError("scores contain non-finite values; record unscored rows separately")
    if not np.all((y == 0) | (y == 1)):
        raise InputError("labels must be 0 or 1")
    return s, y.astype(np.int8)


def roc_auc(scores, labels) -> float:
    """Area under the ROC curve = P(score_pos > score_neg) + 0.5 P(tie) (Mann–Whitney U / n_pos n_neg)."""
    s, y = _check(scores, labels)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = _st.rankdata(s)  # average ranks handle ties
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def roc_curve(scores, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds), starting at (0, 0); ties are stepped together (no optimistic order)."""
    s, y = _check(scores, labels)
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    distinct = np.flatnonzero(np.diff(s)) if s.size else np.array([], dtype=int)
    idx = np.r_[distinct, s.size - 1] if s.size else np.array([], dtype=int)
    tps = np.cumsum(y)[idx]
    fps = (idx + 1) - tps
    n_pos = max(int(y.sum()), 1)
    n_neg = max(int(y.size - y.sum()), 1)
    return np.r_[0.0, fps / n_neg], np.r_[0.0, tps / n_pos], np.r_[np.inf, s[idx]]


def tpr_at_fpr(scores, labels, target_fpr: float) -> float:
    """Largest TPR reachable with FPR <= target_fpr (nan without positives or negatives)."""
    s, y = _check(scores, labels)
    if y.sum() == 0 or y.sum() == y.size:
        return float("nan")
    fpr, tpr, _ = roc_curve(s, y)
    ok = fpr <= target_fpr + 1e-15
    return float(tpr[ok].max())


def average_precision(scores, labels) -> float:
    """Average precision: sum over thresholds of (R_n - R_{n-1}) P_n, ties stepped together."""
    s, y = _check(scores, labels)
    if y.sum() == 0:
        return float("nan")
    fpr, tpr, _ = roc_curve(s, y)
    n_pos = y.sum()
    n_neg = y.size - n_pos
    tp = tpr * n_pos
    fp = fpr * n_neg
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(tp + fp > 0, tp / (tp + fp), 1.0)
    return float(np.sum(np.diff(tpr) * precision[1:]))


def jeffreys_interval(k, n, level: float = 0.68) -> tuple[np.ndarray, np.ndarray]:
    """Jeffreys (Beta(k+1/2, n-k+1/2)) equal-tailed credible interval for a binomial proportion.

    Vectorised over k and n. Conventions: lower = 0 when k = 0, upper = 1 when k = n,
    and (nan, nan) when n = 0.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if np.any(k < 0) or np.any(k > n):
        raise InputError("Jeffreys interval needs 0 <= k <= n")
    alpha = 1.0 - level
    with np.errstate(invalid="ignore"):
        lo = _st.beta.ppf(alpha / 2.0, k + 0.5, n - k + 0.5)
        hi = _st.beta.ppf(1.0 - alpha / 2.0, k + 0.5, n - k + 0.5)
    lo = np.where(k == 0, 0.0, lo)
    hi = np.where(k == n, 1.0, hi)
    empty = n == 0
    return np.where(empty, np.nan, lo), np.where(empty, np.nan, hi)


def bootstrap_interval(
    statistic: Callable[[np.ndarray], float],
    n: int,
    rng: np.random.Generator,
    n_boot: int = 200,
    level: float = 0.68,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(indices)`` over ``n_boot`` resamples of range(n)."""
    if n == 0:
        return float("nan"), float("nan")
    vals = np.array([statistic(rng.integers(0, n, n)) for _ in range(n_boot)], dtype=np.float64)
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return float("nan"), float("nan")
    a = (1.0 - level) / 2.0
    return float(np.quantile(vals, a)), float(np.quantile(vals, 1.0 - a))
