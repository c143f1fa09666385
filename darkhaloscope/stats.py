"""Classifier and counting statistics shared by every stage, on scikit-learn and scipy.

ROC AUC, ROC curve and average precision are scikit-learn's (``sklearn.metrics``); TPR at a
target FPR is read off that ROC curve; Jeffreys binomial intervals are ``scipy.stats.beta``
quantiles; percentile bootstrap intervals resample with ``scipy.stats.bootstrap``. Scores are any
finite real numbers; labels are 0/1; a metric needing both classes is NaN when one is absent.

One function here is the project's own: :func:`auc_rows`, the Mann–Whitney AUC of many
resamples at once, which the AUC bootstrap uses because scikit-learn's per-call input checks cost
~2 ms per resample (``benchmarks/bench_stats.py``); ``tests/test_stats.py`` holds it equal to
``sklearn.metrics.roc_auc_score`` on random and tied scores.
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
from scipy import stats as _st
from sklearn import metrics as _skm

from .errors import InputError

#: Most index values scipy.stats.bootstrap holds at once (resamples × rows), bounding its memory.
BOOTSTRAP_BATCH_VALUES = 1 << 22


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


def _both_classes(y: np.ndarray) -> bool:
    n_pos = int(y.sum())
    return 0 < n_pos < y.size


def roc_auc(scores, labels) -> float:
    """Area under the ROC curve (``sklearn.metrics.roc_auc_score``): P(pos > neg) + ½ P(tie)."""
    s, y = _check(scores, labels)
    return float(_skm.roc_auc_score(y, s)) if _both_classes(y) else float("nan")


def roc_curve(scores, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) from ``sklearn.metrics.roc_curve``, starting at (0, 0) with threshold
    +inf; tied scores are one step (no optimistic order). Needs both classes."""
    s, y = _check(scores, labels)
    if not _both_classes(y):
        raise InputError(f"a ROC curve needs positives and negatives, got {int(y.sum())} of {y.size} positive")
    fpr, tpr, thr = _skm.roc_curve(y, s, drop_intermediate=False)
    return fpr, tpr, thr


def tpr_at_fpr(scores, labels, target_fpr: float) -> float:
    """Largest TPR reachable with FPR <= target_fpr (nan without positives or negatives)."""
    s, y = _check(scores, labels)
    if not _both_classes(y):
        return float("nan")
    fpr, tpr, _ = roc_curve(s, y)
    return float(tpr[fpr <= target_fpr + 1e-15].max())


def average_precision(scores, labels) -> float:
    """Average precision Σ (R_n − R_{n−1}) P_n over thresholds (``sklearn.metrics.average_precision_score``);
    nan without positives."""
    s, y = _check(scores, labels)
    return float(_skm.average_precision_score(y, s)) if y.any() else float("nan")


def jeffreys_interval(k, n, level: float = 0.68) -> tuple[np.ndarray, np.ndarray]:
    """Jeffreys (Beta(k+1/2, n-k+1/2)) equal-tailed credible interval for a binomial proportion.

    Vectorised over k and n. Conventions (Brown, Cai & DasGupta 2001): lower = 0 when k = 0,
    upper = 1 when k = n, and (nan, nan) when n = 0.
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
    vectorized: bool = False,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(indices)`` over ``n_boot`` resamples of range(n).

    Resampling is ``scipy.stats.bootstrap`` driven by ``rng`` (same rng state, same interval).
    ``vectorized``: ``statistic`` takes a (B, n) index array and returns (B,) values. Resamples
    whose statistic is not finite (e.g. an AUC of a resample with one class) are left out, so the
    interval is conditional on the statistic being defined; (nan, nan) when none is.
    """
    if n == 0:
        return float("nan"), float("nan")

    def stat(idx, axis=-1):
        idx = np.asarray(idx, dtype=np.int64)
        if vectorized:
            return np.asarray(statistic(idx), dtype=np.float64)
        return np.array([statistic(row) for row in idx.reshape(-1, n)], dtype=np.float64).reshape(idx.shape[:-1])

    with warnings.catch_warnings():
        # scipy warns when its own interval is degenerate or NaN; the interval used is computed
        # below from the finite part of its bootstrap distribution
        warnings.simplefilter("ignore", _st.DegenerateDataWarning)
        res = _st.bootstrap((np.arange(n),), stat, n_resamples=n_boot, vectorized=True, method="percentile",
                            batch=max(1, BOOTSTRAP_BATCH_VALUES // n), confidence_level=level, rng=rng)
    vals = res.bootstrap_distribution[np.isfinite(res.bootstrap_distribution)]
    if vals.size == 0:
        return float("nan"), float("nan")
    a = (1.0 - level) / 2.0
    return float(np.quantile(vals, a)), float(np.quantile(vals, 1.0 - a))


def auc_rows(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mann–Whitney ROC AUC of each row of (B, n) ``scores`` against 0/1 ``labels`` (tie-averaged
    ranks); nan for a row with one class. Equals ``roc_auc_score`` row by row (tested)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels) == 1
    n_pos = y.sum(axis=-1)
    n_neg = y.shape[-1] - n_pos
    ranks = _st.rankdata(s, axis=-1)
    u = np.where(y, ranks, 0.0).sum(axis=-1) - n_pos * (n_pos + 1) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n_pos > 0) & (n_neg > 0), u / (n_pos * n_neg), np.nan)


def auc_bootstrap_interval(scores, labels, rng: np.random.Generator, n_boot: int = 200,
                           level: float = 0.68) -> tuple[float, float]:
    """Percentile bootstrap interval of the ROC AUC (resampling (score, label) pairs)."""
    s, y = _check(scores, labels)
    return bootstrap_interval(lambda idx: auc_rows(s[idx], y[idx]), s.size, rng, n_boot, level, vectorized=True)
