"""Stratified training catalog: ratios, N1:N2 mix, backfill, determinism, strata coverage."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.catalog.crossmatch import POSITIVE_SCHEMA
from darkhaloscope.catalog.cuts import NEGATIVE_SCHEMA
from darkhaloscope.catalog.sampling import (
    CATALOG_SCHEMA,
    STRATA_SCHEMA,
    build_training_catalog,
    sample_hash,
    stratum_quotas,
)
from darkhaloscope.catalog.verify import strata_coverage
from darkhaloscope.errors import InputError


def negatives(spec: dict[tuple[str, str, str], int], start: int = 0) -> pa.Table:
    """NEGATIVE_SCHEMA rows: ``spec`` maps (nobs_z_bin, type_bin, pool) to a row count."""
    cols = {f.name: [] for f in NEGATIVE_SCHEMA}
    oid = start
    for (nb, tb, pool), n in spec.items():
        for _ in range(n):
            oid += 1
            row = {f.name: None for f in NEGATIVE_SCHEMA}
            row.update(
                object_id=oid,
                sweep_file="s.fits",
                row_index=oid,
                ra=150.0 + oid * 1e-3,
                dec=1.0,
                healpix_128=0,
                split="train",
                nobs_z_bin=nb,
                type_bin=tb,
                pool=pool,
                confuser_category="ring_proxy" if pool == "N2" else None,
            )
            for k, v in row.items():
                cols[k].append(v)
    return pa.Table.from_pydict(cols, schema=NEGATIVE_SCHEMA)


def positives(spec: list[tuple[str, str, bool, bool]], start: int = 10**9) -> pa.Table:
    """POSITIVE_SCHEMA rows from (nobs_z_bin, type_bin, in_footprint, passes_cuts)."""
    cols = {f.name: [] for f in POSITIVE_SCHEMA}
    for i, (nb, tb, foot, ok) in enumerate(spec):
        row = {f.name: None for f in POSITIVE_SCHEMA}
        row.update(
            lens_index=i,
            name=f"L{i}",
            lens_ra=10.0,
            lens_dec=1.0,
            grade="confident",
            kind="galaxy",
            tier="A",
            separation_arcsec=0.1,
            object_id=start + i,
            sweep_file="s.fits",
            row_index=i,
            ra=10.0 + i * 1e-3,
            dec=1.0,
            healpix_128=0,
            split="val",
            nobs_z_bin=nb,
            type_bin=tb,
            in_negative_footprint=foot,
            passes_negative_cuts=ok,
            failed_cuts="" if ok else "nobs",
        )
        for k, v in row.items():
            cols[k].append(v)
    return pa.Table.from_pydict(cols, schema=POSITIVE_SCHEMA)


def test_ratio_and_n1_n2_mix_per_stratum():
    neg = negatives(
        {
            ("3-5", "DEV", "N1"): 400,
            ("3-5", "DEV", "N2"): 100,
            ("6-10", "SER", "N1"): 300,
            ("6-10", "SER", "N2"): 60,
            ("11+", "REX", "N1"): 50,
        }
    )
    pos = positives(
        [("3-5", "DEV", True, True)] * 2
        + [("6-10", "SER", True, True)]
        + [("11+", "REX", False, True), ("11+", "REX", True, False)]
    )
    cat, strata = build_training_catalog(neg, pos, ratio=100, n1_fraction=0.85)
    assert cat.schema == CATALOG_SCHEMA and strata.schema == STRATA_SCHEMA
    s = {r["stratum"]: r for r in strata.to_pylist()}
    # Only eligible positives (in footprint and passing cuts) define strata.
    assert set(s) == {"3-5|DEV", "6-10|SER"}
    assert s["3-5|DEV"] == dict(
        s["3-5|DEV"], n_positives=2, target=200, n1_target=170, n2_target=30, n1_actual=170, n2_actual=30, backfilled=0
    )
    assert s["6-10|SER"]["n1_actual"] == 85 and s["6-10|SER"]["n2_actual"] == 15
    labels = cat.column("label").to_numpy()
    assert labels.sum() == 3 and (labels == 0).sum() == 300
    roles = cat.column("role").to_pylist()
    assert roles[:3] == ["positive"] * 3
    neg_part = cat.filter(pa.compute.equal(cat.column("role"), "negative"))
    pools = np.array(neg_part.column("pool").to_pylist())
    assert (pools == "N2").sum() == 45
    assert set(cat.filter(pa.compute.equal(cat.column("role"), "positive")).column("pool").to_pylist()) == {"positive"}


def test_n2_shortfall_backfilled_from_n1_and_availability_reported():
    neg = negatives({("3-5", "DEV", "N1"): 500, ("3-5", "DEV", "N2"): 4, ("6-10", "DEV", "N1"): 20})
    pos = positives([("3-5", "DEV", True, True), ("6-10", "DEV", True, True)])
    cat, strata = build_training_catalog(neg, pos, ratio=100)
    s = {r["stratum"]: r for r in strata.to_pylist()}
    a = s["3-5|DEV"]
    assert (a["n2_target"], a["n2_actual"], a["n1_actual"], a["backfilled"]) == (15, 4, 96, 11)
    b = s["6-10|DEV"]
    assert (b["n1_actual"], b["n2_actual"], b["available"]) == (20, 0, 20)
    assert cat.num_rows == 2 + 100 + 20


def test_selection_is_hash_ordered_and_independent_of_row_order():
    neg = negatives({("3-5", "DEV", "N1"): 300, ("3-5", "DEV", "N2"): 80})
    pos = positives([("3-5", "DEV", True, True)])
    cat1, q1 = build_training_catalog(neg, pos, ratio=50)
    perm = np.random.default_rng(0).permutation(neg.num_rows)
    cat2, q2 = build_training_catalog(neg.take(pa.array(perm)), pos, ratio=50)
    assert cat1.equals(cat2) and q1.equals(q2)
    # n2_target = round(7.5) = 8, so the chosen N1 are exactly the 42 smallest hashes.
    n1 = neg.filter(pa.compute.equal(neg.column("pool"), "N1"))
    h = sample_hash(n1.column("object_id").to_numpy())
    want = set(n1.column("object_id").to_numpy()[np.argsort(h)[:42]].tolist())
    got = cat1.filter(pa.compute.equal(cat1.column("pool"), "N1")).column("object_id").to_pylist()
    assert len(got) == 42 and set(got) == want
    # A different salt picks a different sample.
    cat3, _ = build_training_catalog(neg, pos, ratio=50, salt="other")
    assert set(cat3.column("object_id").to_pylist()) != set(cat1.column("object_id").to_pylist())


def test_quota_arithmetic_and_bad_arguments():
    q = stratum_quotas(
        {"3-5|SER": 3}, {("3-5|SER", "N1"): 10**6, ("3-5|SER", "N2"): 10**6}, ratio=100, n1_fraction=0.85
    )
    r = q.to_pylist()[0]
    assert r["target"] == 300 and r["n1_target"] + r["n2_target"] == 300 and r["n2_target"] == 45
    with pytest.raises(InputError):
        stratum_quotas({}, {}, ratio=0)
    with pytest.raises(InputError):
        stratum_quotas({}, {}, n1_fraction=1.5)
    with pytest.raises(InputError, match="negatives"):
        build_training_catalog(pa.table({"x": [1]}), positives([]))


def test_strata_coverage_reports_missing_strata():
    neg = negatives({("3-5", "DEV", "N1"): 5})
    pos = positives([("3-5", "DEV", True, True), ("11+", "SER", True, True), ("6-10", "SER", False, True)])
    cov = strata_coverage(pos, neg)
    assert not cov["ok"] and cov["missing"] == ["11+|SER"]
    assert cov["strata"]["3-5|DEV"] == {"n_positives": 1, "n_negatives": 5}
