"""The galaxies a survey-wide search covers: every sweep row that passes the negative pools' cuts
(footprint, TYPE, maskbits, nobs, z magnitude; :func:`catalog.cuts.preselection`) — before the
known-lens exclusion and before any sampling, so the known lenses are searched as well (the
candidates mark them as known) — described like the negatives (:func:`catalog.cuts.describe_objects`,
with the HEALPix split) and ordered brick by brick, so that cutting their stamps reads each coadd
brick once.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa

from ..catalog.cuts import CUT_STEPS, OBJECT_FIELDS, NegativeSelectionConfig, as_table, describe_objects, preselection
from ..errors import InputError

#: Columns of a ``search_targets`` partition (the negatives' object columns).
TARGET_SCHEMA = pa.schema(list(OBJECT_FIELDS))


def select_targets(batch: pa.RecordBatch | pa.Table, config: NegativeSelectionConfig) -> pa.Table:
    """:data:`TARGET_SCHEMA` rows of the sweep rows in ``batch`` that pass the preselection."""
    table = as_table(batch)
    alive, _ = preselection(table, config)
    cols = describe_objects(table.take(pa.array(np.flatnonzero(alive), pa.int64())), config)
    return pa.Table.from_arrays([cols[f.name] for f in TARGET_SCHEMA], schema=TARGET_SCHEMA)


def search_targets(batches: Iterable[pa.RecordBatch | pa.Table], config: NegativeSelectionConfig) -> pa.Table:
    """The targets of one sweep file's record batches, in brick order (brickid, then object id)."""
    parts = [select_targets(b, config) for b in batches]
    table = pa.concat_tables(parts) if parts else TARGET_SCHEMA.empty_table()
    return brick_order(table)


def brick_order(table: pa.Table) -> pa.Table:
    """Rows sorted by brick (``brickid``, a missing one last) and object id within a brick."""
    if table.num_rows == 0:
        return table
    return table.sort_by([("brickid", "ascending", "at_end"), ("object_id", "ascending", "at_end")])


def funnel_preselected(funnel: pa.Table, sweep_file: str) -> int:
    """Rows of ``sweep_file`` the negatives' funnel has left before its ``known_lens`` step: the
    number of search targets the same selection gives."""
    step = CUT_STEPS[CUT_STEPS.index("known_lens") - 1]
    rows = [
        r
        for r in funnel.select(["sweep_file", "step", "n_remaining"]).to_pylist()
        if r["sweep_file"] == sweep_file and r["step"] == step
    ]
    if len(rows) != 1:
        raise InputError(
            f"selection_funnel has {len(rows)} rows for sweep file {sweep_file!r} at step {step!r} (expected 1)"
        )
    return int(rows[0]["n_remaining"])
