"""Recall of real known lenses and false-positive rates by negative pool and confuser category.

Tier A (confident lenses) and tier B are reported separately and together; the headline is the
tier-A recall, because tier B (probable lenses, a share of which are not lenses) outnumbers tier A
about ten to one and would dominate an all-tier number. A lens seen in training
must never be evaluated: :func:`real_lens_recall` refuses such input and names the object ids.
Unscorable rows (``valid`` false, null/NaN score) are counted and excluded from the denominator.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from .selection import proportion_columns
from .thresholds import require_columns, usable_thresholds, valid_scores

_RATE_FIELDS = [
    ("ci68_lo", pa.float64()),
    ("ci68_hi", pa.float64()),
    ("ci95_lo", pa.float64()),
    ("ci95_hi", pa.float64()),
]

#: Schema of :func:`real_lens_recall`.
RECALL_SCHEMA = pa.schema(
    [
        ("threshold_name", pa.string()),
        ("threshold", pa.float64()),
        ("tier", pa.string()),
        ("n", pa.int64()),
        ("n_unscorable", pa.int64()),
        ("n_detected", pa.int64()),
        ("recall", pa.float64()),
    ]
    + _RATE_FIELDS
    + [("median_score", pa.float64())]
)

#: Schema of :func:`fpr_by_confuser`.
CONFUSER_SCHEMA = pa.schema(
    [
        ("threshold_name", pa.string()),
        ("threshold", pa.float64()),
        ("group", pa.string()),
        ("pool", pa.string()),
        ("confuser_category", pa.string()),
        ("n_valid", pa.int64()),
        ("n_above", pa.int64()),
        ("fpr", pa.float64()),
    ]
    + _RATE_FIELDS
)

_TIERS = ("A", "B")


def _ids(table: pa.Table, column: str) -> np.ndarray:
    col = table.column(column)
    if col.null_count:
        raise InputError(f"column {column!r} has {col.null_count} null value(s)")
    return np.asarray(col.to_pylist(), dtype=object)


def _plain(values: Iterable) -> list:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.to_pylist()
    if isinstance(values, np.ndarray):
        return values.tolist()
    return list(values)


def _kind(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "bool"
    if isinstance(x, (int, np.integer)):
        return "int"
    return type(x).__name__


def check_no_training_leak(object_ids: Iterable, training_object_ids: Iterable, what: str) -> None:
    """Raise InputError naming every evaluated object id that was also seen in training.

    Arrow arrays are converted to Python values first (Arrow scalars never compare equal to
    ints, which would let every leak through), and ids of different kinds (int against str)
    are refused for the same reason.
    """
    evaluated = _plain(object_ids)
    train = set(_plain(training_object_ids))
    kinds_eval = {_kind(x) for x in evaluated}
    kinds_train = {_kind(x) for x in train}
    if evaluated and train and kinds_eval != kinds_train:
        raise InputError(
            f"{what}: evaluated object ids are {sorted(kinds_eval)} but training ids "
            f"are {sorted(kinds_train)}; they cannot be compared"
        )
    leaked = sorted({o for o in evaluated if o in train}, key=str)
    if leaked:
        shown = ", ".join(str(x) for x in leaked[:20])
        more = f" (and {len(leaked) - 20} more)" if len(leaked) > 20 else ""
        raise InputError(f"{what}: {len(leaked)} evaluated object(s) were seen in training: object_id {shown}{more}")


def held_out_lenses(
    real_scores: pa.Table, training_object_ids: Iterable, split: str | None, what: str
) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
    """(rows of ``split``, their tiers, scores with NaN where unusable, usable mask) of real lenses.

    ``real_scores`` needs ``object_id``, ``tier`` ('A' | 'B'), ``split``, ``score``, ``valid``;
    ``split`` None keeps every row. Raises InputError when a kept lens is in
    ``training_object_ids`` or has ``split = 'train'``, naming the object ids.
    """
    require_columns(real_scores, ("object_id", "tier", "split", "score", "valid"), what)
    if split is not None:
        real_scores = real_scores.filter(pc.fill_null(pc.equal(real_scores.column("split"), pa.scalar(split)), False))
    oid = _ids(real_scores, "object_id")
    tier = _ids(real_scores, "tier")
    bad_tier = sorted({str(t) for t in tier if t not in _TIERS})
    if bad_tier:
        raise InputError(f"{what}: column 'tier' has values {bad_tier}; expected 'A' or 'B'")
    splits = np.asarray(real_scores.column("split").to_pylist(), dtype=object)
    # a row labelled split='train' was seen in training even if the id list given omits it
    seen = _plain(training_object_ids) + oid[splits == "train"].tolist()
    check_no_training_leak(oid, seen, what)
    score, usable = valid_scores(real_scores, what)
    return real_scores, tier, score, usable


def tier_groups(tier: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """[(label, mask)] for tier 'A', tier 'B' and 'all' of the ``tier`` column's values."""
    return [("A", tier == "A"), ("B", tier == "B"), ("all", np.ones(tier.size, dtype=bool))]


def real_lens_recall(
    real_scores: pa.Table,
    thresholds: pa.Table,
    training_object_ids: Iterable,
    split: str | None = None,
) -> pa.Table:
    """Recall of real lenses per tier ('A', 'B', 'all') and threshold, with Jeffreys intervals.

    Parameters
    ----------
    real_scores : ``object_id``, ``tier`` ('A' | 'B'), ``split``, ``score``, ``valid``
        (``name`` is carried by the caller, not needed here).
    thresholds : table from :func:`thresholds_from_negatives`.
    training_object_ids : every object id the model saw in training.
    split : evaluate only rows of this split (e.g. 'test'); None evaluates every row given.

    Raises InputError when an evaluated lens is in ``training_object_ids`` or has
    ``split = 'train'``, naming the object ids. ``n`` counts scorable lenses; ``n_unscorable`` the
    rest; ``recall = n_detected / n`` (null when n = 0); ``median_score`` over scorable lenses.
    """
    _, tier, score, usable = held_out_lenses(real_scores, training_object_ids, split, "real-lens scores")
    cols: dict[str, list] = {f.name: [] for f in RECALL_SCHEMA}
    groups = tier_groups(tier)
    for name, thr in usable_thresholds(thresholds):
        n = [int(np.sum(g & usable)) for _, g in groups]
        k = [int(np.sum(g & usable & (np.where(usable, score, -np.inf) > thr))) for _, g in groups]
        props = proportion_columns(k, n, 1)
        for j, (label, g) in enumerate(groups):
            s = score[g & usable]
            cols["threshold_name"].append(name)
            cols["threshold"].append(thr)
            cols["tier"].append(label)
            cols["n"].append(n[j])
            cols["n_unscorable"].append(int(np.sum(g & ~usable)))
            cols["n_detected"].append(k[j])
            cols["recall"].append(props["completeness"][j])
            for f in ("ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi"):
                cols[f].append(props[f][j])
            cols["median_score"].append(float(np.median(s)) if s.size else None)
    return pa.Table.from_pydict(cols, schema=RECALL_SCHEMA)


def fpr_by_confuser(neg_scores: pa.Table, thresholds: pa.Table) -> pa.Table:
    """False-positive rate of valid negatives above each threshold, by group.

    Groups per threshold: ``'all'``; each ``pool`` ('N1', 'N2'); each (pool, confuser_category)
    with a non-null category. ``fpr = n_above / n_valid`` (dimensionless) with Jeffreys 68 %/95 %.
    """
    what = "negative scores"
    require_columns(neg_scores, ("pool", "confuser_category", "score", "valid"), what)
    pool = _ids(neg_scores, "pool")
    cat = np.asarray(neg_scores.column("confuser_category").to_pylist(), dtype=object)
    score, usable = valid_scores(neg_scores, what)

    groups: list[tuple[str, str | None, str | None, np.ndarray]] = [("all", None, None, np.ones(pool.size, dtype=bool))]
    for p in sorted(set(pool.tolist())):
        in_pool = pool == p
        groups.append(("pool", p, None, in_pool))
        for c in sorted({x for x in cat[in_pool] if x is not None}):
            groups.append(("confuser_category", p, c, in_pool & (cat == c)))

    cols: dict[str, list] = {f.name: [] for f in CONFUSER_SCHEMA}
    for name, thr in usable_thresholds(thresholds):
        above = usable & (np.where(usable, score, -np.inf) > thr)
        n = [int(np.sum(g & usable)) for *_, g in groups]
        k = [int(np.sum(g & above)) for *_, g in groups]
        props = proportion_columns(k, n, 1)
        for j, (kind, p, c, _) in enumerate(groups):
            cols["threshold_name"].append(name)
            cols["threshold"].append(thr)
            cols["group"].append(kind)
            cols["pool"].append(p)
            cols["confuser_category"].append(c)
            cols["n_valid"].append(n[j])
            cols["n_above"].append(k[j])
            cols["fpr"].append(props["completeness"][j])
            for f in ("ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi"):
                cols[f].append(props[f][j])
    return pa.Table.from_pydict(cols, schema=CONFUSER_SCHEMA)
