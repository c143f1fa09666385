"""Classifier and counting statistics shared by every stage, on scikit-learn and scipy.

ROC AUC, ROC curve and average precision are scikit-learn's (``sklearn.metrics``); TPR at a
target FPR is read off that ROC curve; Jeffreys binomial intervals are ``scipy.stats.beta``
quantiles; percentile bootstrap intervals resample with ``scipy.stats.bootstrap``. Scores are any
finite real numbers; labels are 0/1; a metric needing both classes is NaN when one is absent.

Two functions here are the project's own. :func:`weighted_auc_rows`, the Mann–Whitney AUC under
many weightings at once (a bootstrap resample's counts of the rows or clusters it drew), which the
AUC bootstrap uses because scikit-learn's per-call input checks dominate at the bootstrap's sizes
(BENCHMARKS.md, summary table, row *AUC bootstrap*); ``tests/test_stats.py`` holds it equal to
``sklearn.metrics.roc_auc_score`` with ``sample_weight`` on random and tied scores.
:func:`design_effect`, the variance inflation of a proportion whose trials share clusters (none of
the kept libraries computes it); the tests hold it to its closed forms and the intervals built on
it to their nominal coverage in a Monte Carlo of clustered trials (``tests/test_selection_function.py``).

scikit-learn loads when a statistic first needs it, so that the modules of training and scoring
that import this one load on a GPU host without it (``benchmarks/gpu_check.py``).
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
from scipy import stats as _st

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
    from sklearn import metrics as _skm

    s, y = _check(scores, labels)
    return float(_skm.roc_auc_score(y, s)) if _both_classes(y) else float("nan")


def roc_curve(scores, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) from ``sklearn.metrics.roc_curve``, starting at (0, 0) with threshold
    +inf; tied scores are one step (no optimistic order). Needs both classes."""
    from sklearn import metrics as _skm

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
    from sklearn import metrics as _skm

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


def design_effect(hits, cluster, group=None, n_groups: int = 1) -> np.ndarray:
    """Kish design effect of the proportion of ``hits`` in each group when trials share clusters.

    hits: (N,) bool; cluster: (N,) id (int or str) of each trial's cluster, e.g. the host galaxy
    an injection went into; group: (N,) int in [0, n_groups) (None: one group). Per group, the
    ratio of the cluster-robust variance of p = Σk/Σn, ``H/(H-1) Σ_c (k_c - p n_c)² / n²`` over
    its H clusters, to the same estimator with every trial its own cluster, ``p(1-p)/(n-1)``
    (Kish 1965, *Survey Sampling*; a ratio estimator's variance with clusters as the sampling
    units). It is 1 when every cluster holds one trial, near the cluster size when a cluster's
    trials all succeed or all fail together, and set to 1 where it is undefined (p = 0 or 1,
    fewer than 2 clusters). Dividing n by it gives the effective number of independent trials
    (Korn & Graubard 1998, Survey Methodology 24, 193, for binomial intervals of clustered
    samples).
    """
    h = np.asarray(hits, dtype=bool).ravel()
    c = np.asarray(cluster).ravel()
    g = np.zeros(h.size, np.int64) if group is None else np.asarray(group, dtype=np.int64).ravel()
    if not (c.shape == h.shape == g.shape):
        raise InputError(f"design effect: hits ({h.shape}), cluster ({c.shape}) and group ({g.shape}) differ in length")
    if h.size and (g.min() < 0 or g.max() >= n_groups):
        raise InputError(f"design effect: group ids must lie in [0, {n_groups})")
    _, ci = np.unique(c, return_inverse=True)
    pair, pi = np.unique(g * (int(ci.max(initial=0)) + 1) + ci, return_inverse=True)
    pair_group = pair // (int(ci.max(initial=0)) + 1)
    n_c = np.bincount(pi, minlength=pair.size).astype(np.float64)
    k_c = np.bincount(pi, weights=h.astype(np.float64), minlength=pair.size)
    n = np.bincount(pair_group, weights=n_c, minlength=n_groups)
    k = np.bincount(pair_group, weights=k_c, minlength=n_groups)
    n_clusters = np.bincount(pair_group, minlength=n_groups)
    largest = np.zeros(n_groups)
    np.maximum.at(largest, pair_group, n_c)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        resid2 = np.bincount(pair_group, weights=(k_c - p[pair_group] * n_c) ** 2, minlength=n_groups)
        v_cluster = n_clusters / (n_clusters - 1.0) * resid2 / n**2
        v_independent = p * (1.0 - p) / (n - 1.0)
        deff = v_cluster / v_independent
    # clusters of one trial each: exactly 1, not 1 up to round-off
    defined = (n_clusters >= 2) & (largest > 1) & (k > 0) & (k < n)
    return np.where(defined, deff, 1.0)


def intraclass_correlation(hits, cluster, group=None, n_groups: int = 1) -> float:
    """Intraclass correlation ρ of binary outcomes ``hits`` that share ``cluster`` (e.g. the host
    galaxy of each injection), pooled over ``group`` (e.g. the selection function's cells, each
    deviation taken from its own group's mean): the one-way ANOVA estimator
    ρ = (MSB − MSW) / (MSB + (n₀ − 1) MSW) with n₀ the pooled adjusted mean cluster size (Fleiss
    1981, *Statistical Methods for Rates and Proportions*, §13; Donner 1986, Int. Stat. Rev. 54, 67,
    for binary data), clipped to [0, 1]; 0 where no cluster holds two trials. It is the
    beta-binomial's ρ: a cell's variance of k/n is p(1 − p)/n · (1 + (m − 1) ρ) for clusters of m."""
    h = np.asarray(hits, dtype=np.float64).ravel()
    c = np.asarray(cluster).ravel()
    g = np.zeros(h.size, np.int64) if group is None else np.asarray(group, dtype=np.int64).ravel()
    if not (c.shape == h.shape == g.shape):
        raise InputError(f"intraclass correlation: hits ({h.shape}), cluster ({c.shape}), group ({g.shape}) differ")
    if h.size == 0:
        return 0.0
    _, ci = np.unique(c, return_inverse=True)
    pair, pi = np.unique(g * (int(ci.max()) + 1) + ci, return_inverse=True)
    pg = pair // (int(ci.max()) + 1)
    n_c = np.bincount(pi, minlength=pair.size).astype(np.float64)
    k_c = np.bincount(pi, weights=h, minlength=pair.size)
    gid, gi = np.unique(pg, return_inverse=True)
    n_g = np.bincount(gi, weights=n_c)
    k_g = np.bincount(gi, weights=k_c)
    h_g = np.bincount(gi).astype(np.float64)
    df_b = float(np.sum(h_g - 1.0))
    df_w = float(h.size - np.sum(h_g))
    if df_b <= 0 or df_w <= 0:
        return 0.0
    p_g = k_g / n_g
    ssb = float(np.sum(n_c * (k_c / n_c - p_g[gi]) ** 2))
    ssw = float(np.sum(k_c - k_c**2 / n_c))
    n0 = (h.size - float(np.sum(n_c**2 / n_g[gi]))) / df_b
    msb, msw = ssb / df_b, ssw / df_w
    denom = msb + (n0 - 1.0) * msw
    if not denom > 0:
        return 0.0
    return float(np.clip((msb - msw) / denom, 0.0, 1.0))


def clustered_effective_size(weights, cluster, group, n_groups: int, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """(Kish's n_eff = (Σw)²/Σw², the same with clusters of intraclass correlation ``rho``) per
    group: (Σw)² / ((1 − ρ) Σ w_i² + ρ Σ_c W_c²), W_c the weight of cluster c in the group — the
    variance of a weighted proportion Σ w d / Σ w whose trials in one cluster correlate by ρ (Kish
    1965, *Survey Sampling*, §8.2, with the weights of Kish 1992, J. Off. Stat. 8, 183). Defined
    whatever the outcomes (k = 0 and k = n included): ρ is a property of the design, measured on
    every cell at once (:func:`intraclass_correlation`). 0 for an empty group."""
    w = np.asarray(weights, dtype=np.float64).ravel()
    c = np.asarray(cluster).ravel()
    g = np.asarray(group, dtype=np.int64).ravel()
    if not (w.shape == c.shape == g.shape):
        raise InputError(f"effective size: weights ({w.shape}), cluster ({c.shape}), group ({g.shape}) differ")
    if not 0.0 <= rho <= 1.0:
        raise InputError(f"intraclass correlation must be in [0, 1], got {rho}")
    _, ci = np.unique(c, return_inverse=True) if c.size else (None, np.zeros(0, np.int64))
    m = int(ci.max()) + 1 if c.size else 1
    pair, pi = np.unique(g * m + ci, return_inverse=True)
    wc = np.bincount(pi, weights=w, minlength=pair.size)
    sw = np.bincount(g, weights=w, minlength=n_groups)
    sw2 = np.bincount(g, weights=w**2, minlength=n_groups)
    sc2 = np.bincount(pair // m, weights=wc**2, minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        kish = np.where(sw2 > 0, sw**2 / sw2, 0.0)
        clustered = np.where(sw2 > 0, sw**2 / ((1.0 - rho) * sw2 + rho * sc2), 0.0)
    return kish, clustered


def jeffreys_variance(p, n) -> np.ndarray:
    """Variance of the Jeffreys posterior Beta(p n + ½, (1 − p) n + ½) of a proportion p on n trials."""
    p = np.asarray(p, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    a, b = p * n + 0.5, (1.0 - p) * n + 0.5
    return a * b / ((a + b) ** 2 * (a + b + 1.0))


def inflated_trials(p, n, extra_variance) -> np.ndarray:
    """Effective trials whose Jeffreys posterior variance is that of ``n`` trials plus
    ``extra_variance`` (another source of uncertainty of the same proportion, e.g. its threshold's):
    n / (1 + extra / var_Jeffreys(p, n)). Defined at p = 0 and 1, where the Jeffreys variance is not 0."""
    n = np.asarray(n, dtype=np.float64)
    v = jeffreys_variance(p, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, n / (1.0 + np.asarray(extra_variance, dtype=np.float64) / v), 0.0)


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
        res = _st.bootstrap(
            (np.arange(n),),
            stat,
            n_resamples=n_boot,
            vectorized=True,
            method="percentile",
            batch=max(1, BOOTSTRAP_BATCH_VALUES // n),
            confidence_level=level,
            rng=rng,
        )
    vals = res.bootstrap_distribution[np.isfinite(res.bootstrap_distribution)]
    if vals.size == 0:
        return float("nan"), float("nan")
    a = (1.0 - level) / 2.0
    return float(np.quantile(vals, a)), float(np.quantile(vals, 1.0 - a))


def weighted_auc_rows(scores, labels, weights) -> np.ndarray:
    """Mann–Whitney ROC AUC of fixed (n,) ``scores`` against 0/1 ``labels`` under each row of (B, n)
    nonnegative ``weights`` (a row of bootstrap counts is one resample), ties counted half; nan for
    a row whose positives or whose negatives weigh nothing. Equals ``roc_auc_score`` with that row as
    ``sample_weight`` (tested). O(B n) after one sort, whatever the ties."""
    s, y = _check(scores, labels)
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2 or w.shape[1] != s.size:
        raise InputError(f"weights must have shape (B, {s.size}), got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise InputError("weights must be finite and nonnegative")
    order = np.argsort(s, kind="stable")
    ss = s[order]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])  # one group per distinct score, ascending
    pos = y[order].astype(bool)
    wo = w[:, order]
    wp = np.add.reduceat(np.where(pos, wo, 0.0), starts, axis=1)
    wn = np.add.reduceat(np.where(pos, 0.0, wo), starts, axis=1)
    below = np.cumsum(wn, axis=1) - wn
    num = (wp * (below + 0.5 * wn)).sum(axis=1)
    tp, tn = wp.sum(axis=1), wn.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((tp > 0) & (tn > 0), num / (tp * tn), np.nan)


def auc_bootstrap_interval(
    scores, labels, rng: np.random.Generator, n_boot: int = 200, level: float = 0.68, clusters=None
) -> tuple[float, float]:
    """Percentile bootstrap interval of the ROC AUC, resampling (score, label) pairs, or with
    ``clusters`` ((n,) ids) whole clusters with every row they hold: rows that share a cluster (the
    injections into one host and that host's controls) are not independent draws, and resampling
    them one by one misstates the interval, too narrow where a cluster's rows agree, too wide where
    its positives and negatives rise and fall together as in a paired design (the cluster bootstrap:
    Davison & Hinkley 1997, *Bootstrap Methods and their Application*, §3.8). Each resample is the
    counts of the rows (or clusters) it drew, scored by :func:`weighted_auc_rows`."""
    s, y = _check(scores, labels)
    if clusters is None:
        row_cluster = np.arange(s.size)
    else:
        ids = np.asarray(clusters).ravel()
        if ids.shape != s.shape:
            raise InputError(f"clusters ({ids.shape}) and scores ({s.shape}) differ in length")
        row_cluster = np.unique(ids, return_inverse=True)[1].ravel()
    k = int(row_cluster.max()) + 1 if s.size else 0
    rows_per_call = max(1, BOOTSTRAP_BATCH_VALUES // max(1, s.size))

    def statistic(idx: np.ndarray) -> np.ndarray:
        idx = idx.reshape(-1, k)
        out = np.empty(idx.shape[0])
        for a in range(0, idx.shape[0], rows_per_call):  # (resamples, n) weights stay within the batch bound
            draws = idx[a : a + rows_per_call]
            counts = np.zeros((draws.shape[0], k))
            np.add.at(counts, (np.arange(draws.shape[0])[:, None], draws), 1.0)
            out[a : a + rows_per_call] = weighted_auc_rows(s, y, counts[:, row_cluster])
        return out

    return bootstrap_interval(statistic, k, rng, n_boot, level, vectorized=True)
