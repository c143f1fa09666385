"""Real-lens recall per tier with the training-leak guard, and FPR by pool / confuser category."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats as st

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation import fpr_by_confuser, real_lens_recall

THR = pa.table({"name": ["t0.5", "t0.9"], "threshold": [0.5, 0.9]})


def _real() -> pa.Table:
    # tier A: scores 0.95, 0.95, 0.7, 0.3 and one unscorable; tier B: 0.6, 0.2, 0.1
    return pa.table(
        {
            "object_id": pa.array([11, 12, 13, 14, 15, 21, 22, 23], pa.int64()),
            "name": [f"L{i}" for i in range(8)],
            "tier": ["A", "A", "A", "A", "A", "B", "B", "B"],
            "split": ["val", "val", "test", "test", "val", "val", "test", "val"],
            "score": pa.array([0.95, 0.95, 0.7, 0.3, None, 0.6, 0.2, 0.1], pa.float32()),
            "valid": [True, True, True, True, False, True, True, True],
        }
    )


def _rows(table: pa.Table, **match) -> list[dict]:
    return [r for r in table.to_pylist() if all(r[k] == v for k, v in match.items())]


def test_recall_per_tier_with_jeffreys_intervals():
    r = real_lens_recall(_real(), THR, training_object_ids=[1, 2, 3])
    assert r.num_rows == 6
    a = _rows(r, threshold_name="t0.5", tier="A")[0]
    assert (a["n"], a["n_unscorable"], a["n_detected"]) == (4, 1, 3)
    assert a["recall"] == pytest.approx(0.75)
    assert a["ci68_lo"] == pytest.approx(st.beta.ppf(0.16, 3.5, 1.5), rel=1e-10)
    assert a["ci95_hi"] == pytest.approx(st.beta.ppf(0.975, 3.5, 1.5), rel=1e-10)
    assert a["median_score"] == pytest.approx(np.median(np.float32([0.95, 0.95, 0.7, 0.3])))
    b = _rows(r, threshold_name="t0.9", tier="B")[0]
    assert (b["n"], b["n_detected"], b["recall"], b["ci68_lo"]) == (3, 0, 0.0, 0.0)
    both = _rows(r, threshold_name="t0.5", tier="all")[0]
    assert (both["n"], both["n_detected"]) == (7, 4)


def test_split_filter():
    r = real_lens_recall(_real(), THR, training_object_ids=[], split="test")
    a = _rows(r, threshold_name="t0.5", tier="A")[0]
    assert (a["n"], a["n_detected"]) == (2, 1)


def test_leak_guard_names_the_objects():
    with pytest.raises(InputError, match=r"seen in training.*object_id 13, 22"):
        real_lens_recall(_real(), THR, training_object_ids={22, 13, 999})
    leaked = _real()
    splits = leaked.column("split").to_pylist()
    splits[0] = "train"
    leaked = leaked.set_column(leaked.schema.get_field_index("split"), "split", pa.array(splits))
    with pytest.raises(InputError, match="object_id 11"):
        real_lens_recall(leaked, THR, training_object_ids=[])
    # filtering to another split removes the train row, so evaluation goes ahead
    assert real_lens_recall(leaked, THR, training_object_ids=[], split="test").num_rows == 6


def test_bad_tier_and_missing_columns():
    bad = _real()
    tiers = bad.column("tier").to_pylist()
    tiers[3] = "C"
    bad = bad.set_column(bad.schema.get_field_index("tier"), "tier", pa.array(tiers))
    with pytest.raises(InputError, match="'tier'.*'C'"):
        real_lens_recall(bad, THR, [])
    with pytest.raises(InputError, match="split"):
        real_lens_recall(_real().drop_columns(["split"]), THR, [])


def test_fpr_by_pool_and_confuser_category():
    neg = pa.table(
        {
            "object_id": np.arange(10, dtype=np.int64),
            "score": pa.array([0.95, 0.1, 0.2, 0.6, 0.7, 0.1, 0.99, 0.3, np.nan, 0.0], pa.float32()),
            "valid": [True] * 9 + [False],
            "split": ["val"] * 10,
            "pool": ["N1"] * 4 + ["N2"] * 6,
            "confuser_category": [None] * 4 + ["ring", "ring", "spiral", "spiral", "spiral", "ring"],
        }
    )
    f = fpr_by_confuser(neg, THR)
    allr = _rows(f, threshold_name="t0.5", group="all")[0]
    assert (allr["n_valid"], allr["n_above"]) == (8, 4)  # NaN and invalid rows excluded
    n1 = _rows(f, threshold_name="t0.5", group="pool", pool="N1")[0]
    assert (n1["n_valid"], n1["n_above"], n1["fpr"]) == (4, 2, 0.5)
    ring = _rows(f, threshold_name="t0.5", group="confuser_category", confuser_category="ring")[0]
    assert (ring["pool"], ring["n_valid"], ring["n_above"]) == ("N2", 2, 1)
    spiral = _rows(f, threshold_name="t0.9", confuser_category="spiral")[0]
    assert (spiral["n_valid"], spiral["n_above"]) == (2, 1)
    assert spiral["ci68_lo"] == pytest.approx(st.beta.ppf(0.16, 1.5, 1.5), rel=1e-10)
    assert not _rows(f, group="confuser_category", pool="N1")


def test_leak_guard_with_arrow_ids_and_mismatched_kinds():
    train = pa.chunked_array([pa.array([5, 14], pa.int64())])
    with pytest.raises(InputError, match="object_id 14"):
        real_lens_recall(_real(), THR, training_object_ids=train)
    with pytest.raises(InputError, match="cannot be compared"):
        real_lens_recall(_real(), THR, training_object_ids=["11", "12"])
