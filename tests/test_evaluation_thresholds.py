"""Thresholds from negatives: order statistic on n_valid, resolvability, bootstrap interval."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats as st

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation import thresholds_from_negatives, usable_thresholds
from darkhaloscope.seeding import rng_for


def _neg(scores, valid=None, mask=None) -> pa.Table:
    scores = np.asarray(scores, dtype=np.float32)
    valid = np.ones(scores.size, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    return pa.table(
        {
            "object_id": np.arange(scores.size, dtype=np.int64),
            "score": pa.array(scores, mask=mask),
            "valid": valid,
            "split": ["val"] * scores.size,
            "pool": ["N1"] * scores.size,
            "confuser_category": pa.nulls(scores.size, pa.string()),
        }
    )


def _row(table: pa.Table, name: str) -> dict:
    rows = [r for r in table.to_pylist() if r["name"] == name]
    assert len(rows) == 1, name
    return rows[0]


def test_fpr_1e3_matches_normal_quantile():
    n = 200_000
    scores = rng_for("test", "thresholds", "normal").standard_normal(n)
    t = thresholds_from_negatives(_neg(scores), target_fprs=(1e-3,), top_percentiles=(), n_boot=20)
    row = _row(t, "fpr=1e-3")
    q = st.norm.ppf(1 - 1e-3)
    # standard error of a sample quantile: sqrt(p(1-p)/n) / pdf(q)
    se = np.sqrt(1e-3 * (1 - 1e-3) / n) / st.norm.pdf(q)
    assert abs(row["threshold"] - q) < 4 * se
    assert row["n_valid_negatives"] == n
    assert row["n_above"] == 200
    assert row["achieved_fpr"] == pytest.approx(1e-3)
    assert row["resolvable"] is True
    assert row["threshold_ci68_lo"] <= row["threshold"] <= row["threshold_ci68_hi"]
    # the bootstrap spread is of the order of the analytic standard error
    assert 0.2 * se < 0.5 * (row["threshold_ci68_hi"] - row["threshold_ci68_lo"]) < 3 * se


def test_order_statistic_exact_on_distinct_scores():
    t = thresholds_from_negatives(_neg(np.arange(1000)), target_fprs=(1e-2, 1e-3), top_percentiles=(0.5,), n_boot=10)
    # k = 10 allowed above -> the 11th highest of 999..0
    assert _row(t, "fpr=1e-2")["threshold"] == 989.0
    assert _row(t, "fpr=1e-2")["n_above"] == 10
    assert _row(t, "fpr=1e-3")["threshold"] == 998.0
    assert _row(t, "fpr=1e-3")["n_above"] == 1
    top = _row(t, "top=0.5%")
    assert top["kind"] == "top_percentile" and top["target"] == pytest.approx(5e-3)
    assert top["threshold"] == 994.0


def test_rank_uses_n_valid_not_n_total():
    good = np.arange(1000, dtype=np.float64)
    # 1000 more rows that must not count: NaN scores, null scores and rows flagged invalid
    bad = np.r_[np.full(400, np.nan), np.zeros(300), np.full(300, 5000.0)]
    scores = np.r_[good, bad]
    valid = np.r_[np.ones(1400, dtype=bool), np.ones(300, dtype=bool), np.zeros(300, dtype=bool)]
    mask = np.zeros(2000, dtype=bool)
    mask[1400:1700] = True  # null score although flagged valid
    t = thresholds_from_negatives(_neg(scores, valid, mask), target_fprs=(1e-2,), top_percentiles=(), n_boot=10)
    row = _row(t, "fpr=1e-2")
    assert row["n_total_negatives"] == 2000
    assert row["n_valid_negatives"] == 1000
    # ranking on n_total would allow 20 above (threshold 979) and double the realised FPR
    assert row["threshold"] == 989.0
    assert row["achieved_fpr"] == pytest.approx(0.01)


def test_unresolvable_target_is_flagged_not_invented():
    scores = rng_for("test", "thresholds", "small").standard_normal(500)
    t = thresholds_from_negatives(_neg(scores), target_fprs=(1e-2, 1e-4), top_percentiles=(0.01,), n_boot=10)
    ok = _row(t, "fpr=1e-2")
    assert ok["resolvable"] is True and ok["threshold"] is not None
    for name in ("fpr=1e-4", "top=0.01%"):
        row = _row(t, name)
        assert row["resolvable"] is False
        assert row["threshold"] is None and row["achieved_fpr"] is None
        assert "not resolvable" in row["note"] and "10000" in row["note"]
    assert [n for n, _ in usable_thresholds(t)] == ["fpr=1e-2"]


def test_ties_never_exceed_target():
    rng = rng_for("test", "thresholds", "ties")
    for trial in range(5):
        scores = rng.integers(0, 20, 3000).astype(np.float64)
        t = thresholds_from_negatives(
            _neg(scores), target_fprs=(1e-2, 5e-2, 0.2), top_percentiles=(), n_boot=5, seed_key=("ties", trial)
        )
        for row in t.to_pylist():
            assert row["n_above"] == int(np.sum(scores > row["threshold"]))
            assert row["achieved_fpr"] <= row["target"] + 1e-12


def test_fixed_score_rows_and_determinism():
    scores = rng_for("test", "thresholds", "fixed").random(5000)
    a = thresholds_from_negatives(_neg(scores), fixed_scores=(0.5,), n_boot=20)
    b = thresholds_from_negatives(_neg(scores), fixed_scores=(0.5,), n_boot=20)
    assert a.equals(b)
    fixed = _row(a, "score>0.5")
    assert fixed["kind"] == "fixed" and fixed["target"] is None
    assert fixed["achieved_fpr"] == pytest.approx(np.mean(scores > 0.5))
    assert a.column("name").to_pylist() == ["fpr=1e-2", "fpr=1e-3", "fpr=1e-4", "top=0.01%", "score>0.5"]
    c = thresholds_from_negatives(_neg(scores), fixed_scores=(0.5,), n_boot=20, seed_key=("other",))
    assert c.column("threshold").equals(a.column("threshold"))


@pytest.mark.parametrize(
    "kwargs, table, match",
    [
        ({"target_fprs": (0.0,)}, None, "target_fprs"),
        ({"top_percentiles": (150.0,)}, None, "top_percentiles"),
        ({}, pa.table({"score": [0.1, 0.2]}), "valid"),
        ({}, pa.table({"score": [0.1, 0.2], "valid": pa.array([True, None])}), "'valid'"),
    ],
)
def test_bad_input_names_the_problem(kwargs, table, match):
    table = _neg(np.arange(100)) if table is None else table
    with pytest.raises(InputError, match=match):
        thresholds_from_negatives(table, n_boot=5, **kwargs)
