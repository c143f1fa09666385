"""darkhaloscope.stats against the libraries it is built on: scikit-learn, scipy and astropy."""

from __future__ import annotations

import numpy as np
import pytest
from astropy.stats import binom_conf_interval
from scipy import stats as st
from sklearn import metrics as skm

from darkhaloscope.errors import InputError
from darkhaloscope.stats import (
    auc_bootstrap_interval,
    average_precision,
    bootstrap_interval,
    design_effect,
    jeffreys_interval,
    roc_auc,
    roc_curve,
    tpr_at_fpr,
    weighted_auc_rows,
)


def _cases():
    """(scores, labels): continuous scores, heavily tied scores, and scores on a coarse grid."""
    rng = np.random.default_rng(11)
    y = (rng.random(400) < 0.3).astype(np.int8)
    cont = rng.normal(size=400) + 0.8 * y
    tied = np.round(cont * 2) / 2  # ~10 distinct values
    grid = rng.integers(0, 3, 400).astype(float) + y  # 4 values, many ties across classes
    return [(cont, y), (tied, y), (grid, y)]


@pytest.mark.parametrize("case", range(3))
def test_auc_roc_ap_match_sklearn(case):
    s, y = _cases()[case]
    assert roc_auc(s, y) == pytest.approx(skm.roc_auc_score(y, s), abs=1e-12)
    # Mann-Whitney U / (n_pos n_neg), the definition the docstring states
    u = st.mannwhitneyu(s[y == 1], s[y == 0]).statistic
    assert roc_auc(s, y) == pytest.approx(u / ((y == 1).sum() * (y == 0).sum()), abs=1e-12)
    assert average_precision(s, y) == pytest.approx(skm.average_precision_score(y, s), abs=1e-12)
    fpr, tpr, thr = roc_curve(s, y)
    ref = skm.roc_curve(y, s, drop_intermediate=False)
    for got, want in zip((fpr, tpr, thr), ref):
        np.testing.assert_array_equal(got, want)
    # ties are one step: as many points as distinct scores, plus the origin
    assert len(fpr) == np.unique(s).size + 1 and fpr[0] == tpr[0] == 0.0


def test_tpr_at_fpr_reads_the_roc_curve():
    s, y = _cases()[1]
    fpr, tpr, _ = skm.roc_curve(y, s)
    for target in (0.0, 0.01, 0.1, 0.5, 1.0):
        assert tpr_at_fpr(s, y, target) == tpr[fpr <= target].max()
    assert np.isnan(tpr_at_fpr(s, np.zeros_like(y), 0.1))


def test_one_class_and_bad_input():
    s = np.linspace(0, 1, 10)
    assert np.isnan(roc_auc(s, np.ones(10))) and np.isnan(roc_auc(s, np.zeros(10)))
    assert np.isnan(average_precision(s, np.zeros(10)))
    assert average_precision(s, np.ones(10)) == 1.0
    with pytest.raises(InputError, match="positives and negatives"):
        roc_curve(s, np.zeros(10))
    with pytest.raises(InputError, match="non-finite"):
        roc_auc([0.1, np.nan], [0, 1])
    with pytest.raises(InputError, match="0 or 1"):
        roc_auc([0.1, 0.2], [0, 2])
    with pytest.raises(InputError, match="differ in length"):
        roc_auc([0.1, 0.2, 0.3], [0, 1])


def test_bootstrap_interval_is_scipys_percentile_bootstrap():
    rng_data = np.random.default_rng(2)
    x = rng_data.normal(size=300)
    lo, hi = bootstrap_interval(lambda i: x[i].mean(), x.size, np.random.default_rng(7), n_boot=500, level=0.9)
    ref = st.bootstrap(
        (x,), np.mean, n_resamples=500, method="percentile", confidence_level=0.9, rng=np.random.default_rng(7)
    ).confidence_interval
    assert (lo, hi) == pytest.approx((ref.low, ref.high), abs=1e-12)
    # the vectorised form resamples identically
    vec = bootstrap_interval(
        lambda i: x[i].mean(axis=-1), x.size, np.random.default_rng(7), n_boot=500, level=0.9, vectorized=True
    )
    assert vec == pytest.approx((lo, hi), abs=1e-12)
    assert np.isnan(bootstrap_interval(lambda i: 1.0, 0, np.random.default_rng(0))).all()


def test_auc_bootstrap_equals_sklearn_auc_over_the_same_resamples():
    s, y = _cases()[1]
    lo, hi = auc_bootstrap_interval(s, y, np.random.default_rng(3), n_boot=100)
    slow = bootstrap_interval(lambda i: skm.roc_auc_score(y[i], s[i]), s.size, np.random.default_rng(3), n_boot=100)
    assert (lo, hi) == pytest.approx(slow, abs=1e-12)
    assert lo < roc_auc(s, y) < hi


def test_auc_bootstrap_leaves_out_one_class_resamples():
    # one positive in 20: ~36% of resamples have no positive; they are left out, not NaN the interval
    s = np.r_[5.0, np.linspace(0, 1, 19)]
    y = np.r_[1, np.zeros(19, np.int8)]
    lo, hi = auc_bootstrap_interval(s, y, np.random.default_rng(0), n_boot=200)
    assert lo == hi == 1.0


def test_weighted_auc_rows_matches_sklearn_sample_weight():
    rng = np.random.default_rng(8)
    for s, y in _cases():
        w = rng.integers(0, 4, (20, s.size)).astype(float)  # bootstrap-like counts, zeros included
        w[0] = rng.random(s.size)  # and real-valued weights
        got = weighted_auc_rows(s, y, w)
        want = [skm.roc_auc_score(y, s, sample_weight=row) for row in w]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    s, y = _cases()[0]
    assert np.isnan(weighted_auc_rows(s, y, np.where(y == 1, 0.0, 1.0)[None]))[0]  # no weight on the positives
    with pytest.raises(InputError, match="weights must have shape"):
        weighted_auc_rows(s, y, np.ones(s.size))
    with pytest.raises(InputError, match="nonnegative"):
        weighted_auc_rows(s, y, -np.ones((1, s.size)))


def test_cluster_bootstrap_resamples_whole_clusters():
    s, y = _cases()[0]
    # every cluster its own row (ids in row order): the same resamples as the row bootstrap, so the
    # same interval
    rows = auc_bootstrap_interval(s, y, np.random.default_rng(4), n_boot=300)
    assert (
        auc_bootstrap_interval(s, y, np.random.default_rng(4), n_boot=300, clusters=np.arange(s.size) * 7 + 3) == rows
    )
    # each row repeated 9 times as one cluster (a host's injections and controls): the cluster
    # bootstrap's interval is the 400 rows' interval; resampling the 3,600 rows one by one would
    # make it about three times narrower, as if the repeats were independent draws
    s9, y9, c9 = np.repeat(s, 9), np.repeat(y, 9), np.repeat(np.arange(s.size), 9)
    lo, hi = auc_bootstrap_interval(s9, y9, np.random.default_rng(4), n_boot=300, clusters=c9)
    assert (lo, hi) == pytest.approx(rows, abs=1e-12)
    lo_r, hi_r = auc_bootstrap_interval(s9, y9, np.random.default_rng(4), n_boot=300)
    assert 2.5 < (hi - lo) / (hi_r - lo_r) < 3.5
    with pytest.raises(InputError, match="clusters"):
        auc_bootstrap_interval(s, y, np.random.default_rng(0), clusters=np.arange(3))


def test_jeffreys_matches_astropy():
    k = np.array([0, 1, 5, 17, 40, 40, 3])
    n = np.array([40, 40, 40, 40, 40, 80, 3])
    for level in (0.68, 0.95):
        lo, hi = jeffreys_interval(k, n, level)
        ref = binom_conf_interval(k, n, confidence_level=level, interval="jeffreys")
        np.testing.assert_allclose(lo, ref[0], atol=1e-12)
        np.testing.assert_allclose(hi, ref[1], atol=1e-12)
    lo, hi = jeffreys_interval([0], [0])
    assert np.isnan(lo[0]) and np.isnan(hi[0])
    with pytest.raises(InputError):
        jeffreys_interval([5], [4])


def test_design_effect_of_independent_and_of_wholly_shared_outcomes():
    rng = np.random.default_rng(3)
    hits = rng.random(90) < 0.4
    # every trial its own cluster: exactly 1
    assert design_effect(hits, np.arange(90))[0] == 1.0
    # H clusters of m trials that all succeed or all fail together: (Hm - 1) / (H - 1), from
    # v_cluster = p(1-p)/(H-1) against p(1-p)/(Hm-1)
    h_count, m = 10, 9
    cluster_hit = np.arange(h_count) < 4
    deff = design_effect(np.repeat(cluster_hit, m), np.repeat(np.arange(h_count), m))[0]
    assert deff == pytest.approx((h_count * m - 1) / (h_count - 1), rel=1e-12)
    # per group it is each group's own
    group = np.repeat([0, 1], 45)
    both = design_effect(hits, np.arange(90) // 3, group, 2)
    for g in (0, 1):
        sel = group == g
        assert both[g] == pytest.approx(design_effect(hits[sel], (np.arange(90) // 3)[sel])[0], rel=1e-12)
    # undefined (all succeed, one cluster, no trials) -> 1
    np.testing.assert_array_equal(design_effect([True, True], [0, 1], [0, 2], 3), [1.0, 1.0, 1.0])
    assert design_effect([True, False, True], [7, 7, 7])[0] == 1.0
    with pytest.raises(InputError, match="differ in length"):
        design_effect([True], [0, 1])
    with pytest.raises(InputError, match="group ids"):
        design_effect([True], [0], [2], 2)
