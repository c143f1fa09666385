"""Positives: known galaxy-scale lenses cross-matched to sweep sources.

Each graded galaxy-scale lens (kind 'galaxy', grade 'confident' -> tier A, 'probable' -> tier B)
is matched to its nearest sweep source within ``radius_arcsec`` (default 1.5″: a known lens's
position is that of its lens galaxy, which its sweep source fits to a small fraction of that, so
1.5″ leaves room without grabbing neighbours).

Matching is split in two so that it runs at survey scale: :func:`match_candidates` finds every
(lens, source) pair within the radius in one batch of sweep rows (what a Spark partition does
against the broadcast lenses), and :func:`reduce_matches` keeps the nearest source per lens and
then one lens per source (the driver's reduction). :func:`crossmatch_positives` chains both.

Positives are described by exactly the columns negatives get (cuts.describe_objects) and are
flagged, never dropped, on the negative selection: ``in_negative_footprint`` (the declination
cut) and ``passes_negative_cuts`` (type, maskbits, nobs, zmag), with ``failed_cuts`` naming the
cuts a positive fails (known lenses reach beyond the DECaLS negative footprint, e.g. into the
deeper DES area at δ < −18°, so an unflagged positive set would differ from the negatives in depth
and seeing).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.spatial import cKDTree

from .. import sky
from ..errors import InputError
from .cuts import (
    OBJECT_FIELDS,
    QUALITY_CUTS,
    NegativeSelectionConfig,
    as_table,
    cut_masks,
    describe_objects,
)

TIERS = {"confident": "A", "probable": "B"}
DEFAULT_MATCH_RADIUS_ARCSEC = 1.5

LENS_FIELDS: tuple[pa.Field, ...] = (
    pa.field("lens_index", pa.int64(), nullable=False),
    pa.field("name", pa.string(), nullable=False),
    pa.field("lens_ra", pa.float64(), nullable=False),
    pa.field("lens_dec", pa.float64(), nullable=False),
    pa.field("z_lens", pa.float64()),
    pa.field("grade", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("reference", pa.string()),
    pa.field("tier", pa.string(), nullable=False),
    pa.field("separation_arcsec", pa.float64(), nullable=False),
)
FLAG_FIELDS: tuple[pa.Field, ...] = (
    pa.field("in_negative_footprint", pa.bool_(), nullable=False),
    pa.field("passes_negative_cuts", pa.bool_(), nullable=False),
    pa.field("failed_cuts", pa.string(), nullable=False),
)
POSITIVE_SCHEMA = pa.schema([*LENS_FIELDS, *OBJECT_FIELDS, *FLAG_FIELDS])


def graded_galaxy_lenses(known_lenses: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """Validated lens table (with ``lens_index`` = row in the input, and ``tier``) of the
    galaxy-scale lenses graded confident or probable, plus the boolean mask of those rows."""
    for c in ("name", "ra", "dec", "grade", "kind"):
        if c not in known_lenses.column_names:
            raise InputError(f"known_lenses table has no column {c!r}")
    ra = known_lenses.column("ra").to_numpy(zero_copy_only=False).astype(np.float64)
    dec = known_lenses.column("dec").to_numpy(zero_copy_only=False).astype(np.float64)
    names = known_lenses.column("name").to_pylist()
    bad = ~np.isfinite(ra) | ~np.isfinite(dec) | (np.abs(dec) > 90)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"known_lenses: lens {names[i]!r} has invalid ra={ra[i]!r}, dec={dec[i]!r} (degrees)")
    grade = pc.utf8_lower(pc.utf8_trim_whitespace(pc.cast(known_lenses.column("grade"), pa.string())))
    kind = pc.utf8_lower(pc.utf8_trim_whitespace(pc.cast(known_lenses.column("kind"), pa.string())))
    grade_np = np.asarray(grade.to_pylist(), dtype=object)
    kind_np = np.asarray(kind.to_pylist(), dtype=object)
    keep = (kind_np == "galaxy") & np.isin(grade_np, list(TIERS))
    idx = np.flatnonzero(keep)

    def opt(name, typ):
        if name not in known_lenses.column_names:
            return pa.nulls(len(idx), typ)
        return pc.cast(known_lenses.column(name), typ).take(pa.array(idx)).combine_chunks()

    lenses = pa.table(
        {
            "lens_index": pa.array(idx, pa.int64()),
            "name": pa.array([names[i] for i in idx], pa.string()),
            "lens_ra": pa.array(ra[idx], pa.float64()),
            "lens_dec": pa.array(dec[idx], pa.float64()),
            "z_lens": opt("z_lens", pa.float64()),
            "grade": pa.array(grade_np[idx], pa.string()),
            "kind": pa.array(kind_np[idx], pa.string()),
            "reference": opt("reference", pa.string()),
            "tier": pa.array([TIERS[g] for g in grade_np[idx]], pa.string()),
        }
    )
    return lenses, keep


def match_candidates(
    sweeps_batch: pa.RecordBatch | pa.Table,
    lenses: pa.Table,
    radius_arcsec: float = DEFAULT_MATCH_RADIUS_ARCSEC,
    config: NegativeSelectionConfig = NegativeSelectionConfig(),
) -> pa.Table:
    """Every (lens, sweep source) pair closer than ``radius_arcsec`` (inclusive), as POSITIVE_SCHEMA rows.

    ``lenses`` is the output of :func:`graded_galaxy_lenses` (small; broadcast in Spark).
    """
    table = as_table(sweeps_batch)
    if radius_arcsec <= 0:
        raise InputError(f"radius_arcsec must be > 0, got {radius_arcsec}")
    if lenses.num_rows == 0 or table.num_rows == 0:
        return POSITIVE_SCHEMA.empty_table()
    lens_xyz = sky.unit_vectors(lenses.column("lens_ra").to_numpy(), lenses.column("lens_dec").to_numpy())
    ra = table.column("ra").to_numpy(zero_copy_only=False).astype(np.float64)
    dec = table.column("dec").to_numpy(zero_copy_only=False).astype(np.float64)
    chord = sky.chord_for_arcsec(radius_arcsec)
    # Cheap prefilter: sources with any lens nearby (k=1 against the small lens tree) ...
    lens_tree = cKDTree(lens_xyz)
    d, _ = lens_tree.query(sky.unit_vectors(ra, dec), k=1, distance_upper_bound=chord * (1 + 1e-9))
    near = np.flatnonzero(d <= chord)
    if len(near) == 0:
        return POSITIVE_SCHEMA.empty_table()
    # ... then all pairs among those few, so two lenses sharing a source both see it.
    src_tree = cKDTree(sky.unit_vectors(ra[near], dec[near]))
    pairs = lens_tree.query_ball_tree(src_tree, r=chord * (1 + 1e-9))
    li = np.array([i for i, js in enumerate(pairs) for _ in js], dtype=np.int64)
    si = np.array([j for js in pairs for j in js], dtype=np.int64)
    rows = near[si]
    sep = sky.angular_separation_arcsec(
        lenses.column("lens_ra").to_numpy()[li], lenses.column("lens_dec").to_numpy()[li], ra[rows], dec[rows]
    )
    ok = sep <= radius_arcsec
    li, rows, sep = li[ok], rows[ok], sep[ok]
    matched = table.take(pa.array(rows, pa.int64()))
    cols = describe_objects(matched, config)
    masks = cut_masks(matched, config)
    passes = np.ones(len(rows), dtype=bool)
    failed = np.full(len(rows), "", dtype=object)
    for c in QUALITY_CUTS:
        passes &= masks[c]
        failed = np.where(masks[c], failed, np.where(failed == "", c, failed + "," + c))
    lens_part = lenses.take(pa.array(li, pa.int64()))
    for f in LENS_FIELDS:
        if f.name != "separation_arcsec":
            cols[f.name] = lens_part.column(f.name).combine_chunks()
    cols["separation_arcsec"] = pa.array(sep, pa.float64())
    cols["in_negative_footprint"] = pa.array(masks["dec_footprint"], pa.bool_())
    cols["passes_negative_cuts"] = pa.array(passes, pa.bool_())
    cols["failed_cuts"] = pa.array(failed, pa.string())
    return pa.Table.from_arrays([cols[f.name] for f in POSITIVE_SCHEMA], schema=POSITIVE_SCHEMA)


def reduce_matches(candidates: pa.Table) -> tuple[pa.Table, int]:
    """Nearest source per lens, then one lens per source (the closest; ties to the lower lens_index).

    Returns (positives sorted by lens_index, number of lens matches dropped because their source
    was the nearest source of a closer lens). Deterministic whatever the order of ``candidates``.
    """
    if candidates.num_rows == 0:
        return POSITIVE_SCHEMA.empty_table(), 0
    li = candidates.column("lens_index").to_numpy()
    oid = candidates.column("object_id").to_numpy()
    sep = candidates.column("separation_arcsec").to_numpy()
    order = np.lexsort((oid, sep, li))
    first = np.ones(len(order), dtype=bool)
    first[1:] = li[order][1:] != li[order][:-1]
    best = order[first]
    order2 = np.lexsort((li[best], sep[best], oid[best]))
    b2 = best[order2]
    keep = np.ones(len(b2), dtype=bool)
    keep[1:] = oid[b2][1:] != oid[b2][:-1]
    final = np.sort(b2[keep], kind="stable")
    final = final[np.argsort(li[final], kind="stable")]
    return candidates.take(pa.array(final, pa.int64())).cast(POSITIVE_SCHEMA), int((~keep).sum())


def crossmatch_summary(positives: pa.Table, known_lenses: pa.Table, n_graded: int, n_dropped_shared: int) -> dict:
    """Counts for asset metadata: lenses in, graded galaxy-scale, matched, tiers, flags."""
    matched = set(positives.column("name").to_pylist())
    lenses, keep = graded_galaxy_lenses(known_lenses)
    unmatched = [n for n in lenses.column("name").to_pylist() if n not in matched]
    tier = positives.column("tier").to_numpy(zero_copy_only=False)
    inf = positives.column("in_negative_footprint").to_numpy(zero_copy_only=False)
    ok = positives.column("passes_negative_cuts").to_numpy(zero_copy_only=False)
    failed = positives.column("failed_cuts").to_pylist()
    per_cut = {c: sum(1 for f in failed if c in f.split(",")) for c in QUALITY_CUTS}
    return {
        "n_lenses": known_lenses.num_rows,
        "n_graded_galaxy_scale": n_graded,
        "n_matched": positives.num_rows,
        "n_unmatched": len(unmatched),
        "unmatched_names": unmatched[:50],
        "n_tier_a": int((tier == "A").sum()),
        "n_tier_b": int((tier == "B").sum()),
        "n_outside_negative_footprint": int((~inf).sum()),
        "n_failing_negative_cuts": int((~ok).sum()),
        "n_failing_by_cut": per_cut,
        "n_eligible": int((inf & ok).sum()),
        "n_dropped_shared_source": n_dropped_shared,
    }


def crossmatch_positives(
    sweeps_batch: pa.RecordBatch | pa.Table,
    known_lenses: pa.Table,
    radius_arcsec: float = DEFAULT_MATCH_RADIUS_ARCSEC,
    config: NegativeSelectionConfig = NegativeSelectionConfig(),
) -> tuple[pa.Table, dict]:
    """Match graded galaxy-scale lenses to their nearest sweep source within ``radius_arcsec``.

    Returns (positives with POSITIVE_SCHEMA, one row per matched lens, sorted by lens_index; summary).
    """
    lenses, keep = graded_galaxy_lenses(known_lenses)
    cands = match_candidates(sweeps_batch, lenses, radius_arcsec, config)
    positives, dropped = reduce_matches(cands)
    return positives, crossmatch_summary(positives, known_lenses, int(keep.sum()), dropped)
