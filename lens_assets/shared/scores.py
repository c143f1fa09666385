"""Writing and publishing lens-finder score tables (``cutout_scores``, ``injection_scores``): the
score rows stream into their staged partitions, then their contract is refined by the score rules."""

from __future__ import annotations

import itertools
from typing import Iterator

import pyarrow as pa

from darkhaloscope.errors import InputError
from lake_platform import audits as au
from lake_platform.staging import StagedTable
from table_registry import Table

from .publish import Publish, per_partition


def write_scores(staged: StagedTable, batches: Iterator[pa.RecordBatch]) -> None:
    """Stream the score ``batches`` into ``staged`` (its schema the first batch's)."""
    first = next(batches, None)
    if first is None:
        raise InputError(f"no stamps to score for {staged.label}")
    staged.write(itertools.chain([first], batches), schema=first.schema)


def score_outcomes(table: Table, audit: au.Audit, staged: list[StagedTable], spec, device: str):
    """(audit outcomes, metadata per partition) of the staged scores (one or more partitions): their
    contract refined by the score rules (valid rows scored in [0, 1], invalid ones unscored with a
    reason), rows by kind, unscorable rows, the checkpoint's version and the device."""
    md = {}
    for part in staged:
        rows = part.read(columns=["kind", "valid"])
        kinds = {str(d["values"]): int(d["counts"]) for d in rows.column("kind").value_counts().to_pylist()}
        n_invalid = int((~rows.column("valid").to_numpy(zero_copy_only=False)).sum())
        md[part.label] = {
            "rows_by_kind": kinds,
            "n_unscorable": n_invalid,
            "checkpoint_version": spec.data_version,
            "device": device,
        }
    outcomes = au.combine([au.scores_audit(audit, part.dataset()) for part in staged], [p.label for p in staged])
    return outcomes, per_partition(md)


def score_publication(table: Table, audit: au.Audit, staged: list[StagedTable], spec, device: str) -> Publish:
    """The :class:`Publish` of the staged scores alone (:func:`score_outcomes`)."""
    outcomes, md = score_outcomes(table, audit, staged, spec, device)
    return Publish({table: staged}, audits={table: outcomes}, metadata={table: md})
