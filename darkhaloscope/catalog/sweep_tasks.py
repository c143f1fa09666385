"""The catalog stage's unit of work: one sweeps partition (one sweep file) read from the lake's
``sweeps`` table, passed in as a :class:`~darkhaloscope.storage.PartitionedTable`.

:func:`build_negative_partition` turns one sweeps partition into the matching ``negatives``
partition. The Spark path (:func:`spark.negatives_on_spark`) runs it as one task per sweep file on
the executors; a test or a benchmark runs it in a loop in-process. Both therefore read, cut,
describe and commit exactly the same bytes. The positives' cross-match reads its candidates with
the same reader (:func:`sweeps_partition_batches`).

A sweep file is streamed in record batches, so memory holds one batch of the input plus the
survivors: the cuts are row-wise and the known-lens exclusion is per row, so batching changes
neither the rows selected nor the funnel (funnels of batches add up). The partition is sorted by
``object_id`` and committed atomically (``PartitionedTable.write``), so a task retried or run twice
rewrites the same bytes. A sweep file with no survivors gets an empty partition: its presence
records that the file was processed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..storage import PartitionedTable
from ..survey.sweeps import SWEEP_DIM
from .cuts import (
    NEGATIVE_SCHEMA,
    OBJECT_FIELDS,
    KnownLensIndex,
    NegativeSelectionConfig,
    merge_funnels,
    select_negatives,
)

#: Sweep columns the catalog functions read; the rest of a sweeps table (dchisq, ivars, ...) is
#: never read from disk.
SWEEP_INPUT_COLUMNS = tuple(
    dict.fromkeys(
        [
            "object_id",
            "release",
            "brickid",
            "objid",
            "brickname",
            "sweep_file",
            "row_index",
            "ra",
            "dec",
            "type",
            "maskbits",
            "fitbits",
            *(
                f.name
                for f in OBJECT_FIELDS
                if f.name
                in {
                    "flux_g",
                    "flux_r",
                    "flux_z",
                    "flux_w1",
                    "ebv",
                    "shape_r",
                    "shape_e1",
                    "shape_e2",
                    "sersic",
                    "nobs_g",
                    "nobs_r",
                    "nobs_z",
                }
            ),
            *(f"{k}_{b}" for k in ("psfsize", "psfdepth", "galdepth", "mw_transmission") for b in ("g", "r", "z")),
        ]
    )
)
#: Rows per record batch read from a sweep file (the cuts run at tens of millions of rows/s, so
#: larger batches only cost memory).
BATCH_ROWS = 262_144


def sweep_file_names(table: PartitionedTable) -> list[str]:
    """Sweep file names of every committed partition of ``table`` (partitioned by sweep file), sorted."""
    return sorted(p[SWEEP_DIM] for p in table.partitions())


def sweeps_partition_batches(sweeps: PartitionedTable, sweep_file: str, batch_rows: int = BATCH_ROWS):
    """Record batches of one partition of the ``sweeps`` table with the columns of
    :data:`SWEEP_INPUT_COLUMNS` it has (older data models lack some); raises InputError when a row
    belongs to another sweep file."""
    partition = {SWEEP_DIM: sweep_file}
    names = set(sweeps.schema(partition).names)
    columns = [c for c in SWEEP_INPUT_COLUMNS if c in names]
    for batch in sweeps.batches(columns=columns, batch_size=batch_rows, partition=partition):
        if batch.num_rows and SWEEP_DIM in names:
            files = pc.unique(batch.column(SWEEP_DIM)).to_pylist()
            if files != [sweep_file]:
                raise InputError(
                    f"sweeps partition {sweep_file!r} ({sweeps.location(partition)}) "
                    f"holds rows of sweep_file {sorted(map(str, files))}: one partition must hold one sweep file"
                )
        yield batch


def build_negative_partition(
    sweeps: PartitionedTable,
    sweep_file: str,
    known_lenses: KnownLensIndex,
    negatives: PartitionedTable,
    config: NegativeSelectionConfig = NegativeSelectionConfig(),
    batch_rows: int = BATCH_ROWS,
) -> dict[str, dict[str, int]]:
    """Select the negatives of one sweep file of ``sweeps`` and commit them as its partition of
    ``negatives`` (a run's staging area when the partition is audited before publication).

    Returns the funnel of that file (see :func:`cuts.select_negatives`).
    """
    parts, funnels = [], []
    for batch in sweeps_partition_batches(sweeps, sweep_file, batch_rows):
        selected, funnel = select_negatives(batch, known_lenses, config)
        parts.append(selected)
        funnels.append(funnel)
    table = pa.concat_tables(parts) if parts else NEGATIVE_SCHEMA.empty_table()
    if table.num_rows:
        table = table.take(pa.array(np.argsort(table.column("object_id").to_numpy(), kind="stable")))
    negatives.write(table, partition={SWEEP_DIM: sweep_file})
    # an empty sweep file still has its funnel row: zero input, zero selected
    return merge_funnels({sweep_file: {}}, *funnels)
