"""The training catalog: positives plus negatives sampled per (nobs_z_bin, type_bin) stratum.

A stratum is (nobs_z_bin, type_bin). Only *eligible* positives define strata: matched, inside
the negative footprint and passing the negative quality cuts, so positives and negatives come
from the same population (positives from outside the negative footprint, such as the deeper DES
area at δ < −18°, would hand the classifier a depth/PSF shortcut). Per stratum with n_pos eligible
positives:

- target = ratio · n_pos negatives; n2_target = round(target · (1 − n1_fraction)); n1_target = rest;
- N2 is taken first up to n2_target; an N2 shortfall is backfilled from N1, so the stratum still
  reaches its target;
- inside a pool, rows are taken in increasing ``unit_hash_array(object_id, salt)`` (ties by
  object_id): a deterministic pseudo-random order that does not depend on row order, batch
  layout or process, so the Spark path (hash threshold + per-group rank) selects the same rows.

The split column travels with every row (it is the HEALPix split of the row's own position).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..seeding import unit_hash_array
from .crossmatch import POSITIVE_SCHEMA
from .cuts import NEGATIVE_SCHEMA, OBJECT_FIELDS

SAMPLING_SALT = "dhs-training-catalog-v1"
#: Negatives sampled per eligible positive (Paper IV, Inchausti et al. 2025: ~100 non-lenses per lens).
NEGATIVES_PER_POSITIVE = 100
#: Share of each stratum's negatives drawn from pool N1; the rest are N2 hard confusers.
N1_FRACTION = 0.85

CATALOG_SCHEMA = pa.schema(
    [
        pa.field("label", pa.int8(), nullable=False),
        pa.field("role", pa.string(), nullable=False),
        pa.field("stratum", pa.string(), nullable=False),
        pa.field("pool", pa.string(), nullable=False),
        pa.field("confuser_category", pa.string()),
        pa.field("tier", pa.string()),
        pa.field("lens_name", pa.string()),
        pa.field("z_lens", pa.float64()),
        pa.field("separation_arcsec", pa.float64()),
        pa.field("sample_hash", pa.float64(), nullable=False),
        *OBJECT_FIELDS,
    ]
)
STRATA_SCHEMA = pa.schema(
    [
        pa.field("stratum", pa.string(), nullable=False),
        pa.field("n_positives", pa.int64(), nullable=False),
        pa.field("target", pa.int64(), nullable=False),
        pa.field("n1_target", pa.int64(), nullable=False),
        pa.field("n2_target", pa.int64(), nullable=False),
        pa.field("n1_actual", pa.int64(), nullable=False),
        pa.field("n2_actual", pa.int64(), nullable=False),
        pa.field("backfilled", pa.int64(), nullable=False),
        pa.field("n1_available", pa.int64(), nullable=False),
        pa.field("n2_available", pa.int64(), nullable=False),
        pa.field("available", pa.int64(), nullable=False),
    ]
)


def stratum_keys(table: pa.Table) -> np.ndarray:
    """'<nobs_z_bin>|<type_bin>' per row (object array)."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=object)
    joined = pc.binary_join_element_wise(table.column("nobs_z_bin"), table.column("type_bin"), "|")
    return joined.to_numpy(zero_copy_only=False).astype(object)


def _group_codes(negatives: pa.Table) -> tuple[list[tuple[str, str]], np.ndarray]:
    """(stratum, pool) groups of the negatives and each row's group code."""
    key = pc.binary_join_element_wise(
        negatives.column("nobs_z_bin"), negatives.column("type_bin"), negatives.column("pool"), "|"
    )
    enc = pc.dictionary_encode(key).combine_chunks()
    names = [tuple(k.rsplit("|", 1)) for k in enc.dictionary.to_pylist()]
    return names, enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def eligible_positives(positives: pa.Table) -> pa.Table:
    """Positives that are inside the negative footprint and pass the negative quality cuts."""
    for c in ("in_negative_footprint", "passes_negative_cuts"):
        if c not in positives.column_names:
            raise InputError(f"positives table has no column {c!r}")
    keep = pc.and_(positives.column("in_negative_footprint"), positives.column("passes_negative_cuts"))
    return positives.filter(pc.fill_null(keep, False))


def sample_hash(object_ids, salt: str = SAMPLING_SALT) -> np.ndarray:
    """Deterministic sampling key in [0, 1) of each object_id."""
    return unit_hash_array(np.asarray(object_ids, dtype=np.int64), salt)


def stratum_quotas(
    positive_strata: dict[str, int],
    available: dict[tuple[str, str], int],
    ratio: int = NEGATIVES_PER_POSITIVE,
    n1_fraction: float = N1_FRACTION,
) -> pa.Table:
    """Per-stratum targets and achievable counts (STRATA_SCHEMA), strata sorted by name.

    ``positive_strata``: eligible positives per stratum; ``available``: negatives per (stratum, pool).
    """
    if ratio <= 0:
        raise InputError(f"ratio must be > 0, got {ratio}")
    if not 0.0 <= n1_fraction <= 1.0:
        raise InputError(f"n1_fraction must be in [0, 1], got {n1_fraction}")
    rows = {f.name: [] for f in STRATA_SCHEMA}
    for s in sorted(positive_strata):
        n_pos = int(positive_strata[s])
        target = int(round(ratio * n_pos))
        n2_target = int(np.floor(target * (1.0 - n1_fraction) + 0.5))
        n1_target = target - n2_target
        a1 = int(available.get((s, "N1"), 0))
        a2 = int(available.get((s, "N2"), 0))
        n2 = min(n2_target, a2)
        shortfall = n2_target - n2
        n1 = min(n1_target + shortfall, a1)
        backfilled = max(0, n1 - n1_target)
        for k, v in zip(rows, (s, n_pos, target, n1_target, n2_target, n1, n2, backfilled, a1, a2, a1 + a2)):
            rows[k].append(v)
    return pa.Table.from_pydict(rows, schema=STRATA_SCHEMA)


def _available(negatives: pa.Table) -> dict[tuple[str, str], int]:
    if negatives.num_rows == 0:
        return {}
    names, codes = _group_codes(negatives)
    counts = np.bincount(codes, minlength=len(names))
    return {n: int(c) for n, c in zip(names, counts)}


def select_negatives_by_quota(negatives: pa.Table, quotas: pa.Table, salt: str = SAMPLING_SALT) -> pa.Table:
    """The first n1_actual N1 and n2_actual N2 rows of each stratum in (hash, object_id) order."""
    if negatives.num_rows == 0:
        return negatives
    names, codes = _group_codes(negatives)
    q = quotas.to_pydict()
    want = {}
    for s, n1, n2 in zip(q["stratum"], q["n1_actual"], q["n2_actual"]):
        want[(s, "N1")], want[(s, "N2")] = n1, n2
    k = np.array([want.get(n, 0) for n in names], dtype=np.int64)
    oid = negatives.column("object_id").to_numpy()
    h = sample_hash(oid, salt)
    # One sort by (group, hash, object_id) is the per-stratum argsort of the hashes for all strata.
    order = np.lexsort((oid, h, codes))
    sc = codes[order]
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    first = np.repeat(starts, np.diff(np.r_[starts, len(sc)]))
    rank = np.arange(len(sc)) - first
    return negatives.take(pa.array(order[rank < k[sc]], pa.int64()))


def assemble_catalog(positives: pa.Table, negatives: pa.Table, salt: str = SAMPLING_SALT) -> pa.Table:
    """CATALOG_SCHEMA table: eligible positives (label 1, by stratum then object_id) then the given
    negatives (label 0, by stratum, pool, hash, object_id)."""
    parts = []
    for role, t in (("positive", positives), ("negative", negatives)):
        n = t.num_rows
        strata = stratum_keys(t)
        oid = t.column("object_id").to_numpy() if n else np.zeros(0, dtype=np.int64)
        h = sample_hash(oid, salt)
        if role == "positive":
            order = np.lexsort((oid, strata.astype(str)))
            cols = {
                "label": pa.array(np.ones(n, np.int8)),
                "pool": pa.array(["positive"] * n, pa.string()),
                "confuser_category": pa.nulls(n, pa.string()),
                "tier": t.column("tier").combine_chunks(),
                "lens_name": t.column("name").combine_chunks(),
                "z_lens": t.column("z_lens").combine_chunks(),
                "separation_arcsec": t.column("separation_arcsec").combine_chunks(),
            }
        else:
            pool = np.asarray(t.column("pool").to_pylist(), dtype=object) if n else np.zeros(0, dtype=object)
            order = np.lexsort((oid, h, pool.astype(str), strata.astype(str)))
            cols = {
                "label": pa.array(np.zeros(n, np.int8)),
                "pool": t.column("pool").combine_chunks(),
                "confuser_category": t.column("confuser_category").combine_chunks(),
                "tier": pa.nulls(n, pa.string()),
                "lens_name": pa.nulls(n, pa.string()),
                "z_lens": pa.nulls(n, pa.float64()),
                "separation_arcsec": pa.nulls(n, pa.float64()),
            }
        cols["role"] = pa.array([role] * n, pa.string())
        cols["stratum"] = pa.array(strata, pa.string())
        cols["sample_hash"] = pa.array(h, pa.float64())
        for f in OBJECT_FIELDS:
            cols[f.name] = t.column(f.name).combine_chunks()
        tab = pa.Table.from_arrays([cols[f.name] for f in CATALOG_SCHEMA], schema=CATALOG_SCHEMA)
        parts.append(tab.take(pa.array(order, pa.int64())))
    return pa.concat_tables(parts)


def _check_schema(table: pa.Table, schema: pa.Schema, what: str) -> None:
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise InputError(f"{what} table lacks columns {missing}")


def build_training_catalog(
    negatives: pa.Table,
    positives: pa.Table,
    ratio: int = NEGATIVES_PER_POSITIVE,
    n1_fraction: float = N1_FRACTION,
    salt: str = SAMPLING_SALT,
) -> tuple[pa.Table, pa.Table]:
    """Positives plus ``ratio`` negatives per eligible positive, stratum by stratum.

    ``negatives``: NEGATIVE_SCHEMA (the pool); ``positives``: POSITIVE_SCHEMA (crossmatch output).
    Returns (catalog with CATALOG_SCHEMA, per-stratum table with STRATA_SCHEMA).
    """
    _check_schema(negatives, NEGATIVE_SCHEMA, "negatives")
    _check_schema(positives, POSITIVE_SCHEMA, "positives")
    pos = eligible_positives(positives)
    pos_strata = stratum_keys(pos)
    keys, counts = np.unique(pos_strata.astype(str), return_counts=True)
    quotas = stratum_quotas(dict(zip(keys, counts)), _available(negatives), ratio, n1_fraction)
    chosen = select_negatives_by_quota(negatives, quotas, salt) if negatives.num_rows else negatives
    return assemble_catalog(pos, chosen, salt), quotas
