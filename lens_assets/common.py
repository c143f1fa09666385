"""Shared by the asset modules: the write–audit–publish gate, check specs from audits, metadata.

Every asset stages its tables in the run's staging area (``LakeResource.stage``), audits the
staged data with the library's audits, and hands the staged tables to the lake IO manager, whose
``handle_output`` publishes them. :func:`gate` is the one place that decides: it reports each
audit as the asset check of the same name and, when a blocking audit failed, moves the staged
data to ``_rejected/`` and fails the step without retries — nothing is published and no
materialization is recorded, so the published version stays as it was, byte for byte.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from typing import Iterator, Mapping, Sequence

import dagster as dg
import pyarrow as pa

from darkhaloscope.audits import Audit, AuditOutcome, blocking_failures
from darkhaloscope.errors import PERMANENT_ERRORS
from darkhaloscope.staging import StagedTable

OWNERS = ["team:dark-halo-scope"]


def check_specs(key: Sequence[str], audits: Sequence[Audit]) -> list[dg.AssetCheckSpec]:
    """One asset check per audit, blocking exactly when the audit blocks publication."""
    return [dg.AssetCheckSpec(a.name, asset=dg.AssetKey(list(key)), blocking=a.blocking, description=a.description) for a in audits]


def schema_metadata(schema: pa.Schema) -> dg.MetadataValue:
    return dg.MetadataValue.table_schema(dg.TableSchema(columns=[dg.TableColumn(f.name, str(f.type)) for f in schema]))


def as_metadata(values: Mapping) -> dict:
    """Dagster metadata from a plain dict: JSON for containers, scalars as they are."""
    return {str(k): dg.MetadataValue.json(v) if isinstance(v, (dict, list, tuple)) or v is None else v for k, v in values.items()}


def markdown_table(table: pa.Table) -> str:
    """A small Arrow table as a Markdown table (for materialization metadata)."""
    cols = table.column_names
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    rows += ["| " + " | ".join(str(v) for v in r.values()) + " |" for r in table.to_pylist()]
    return "\n".join(rows)


def data_version(staged: Sequence[StagedTable]) -> dg.DataVersion:
    """Content hash of the staged files (over every partition of a multi-partition run)."""
    hashes = [s.content_hash() for s in staged]
    return dg.DataVersion(hashes[0] if len(hashes) == 1 else hashlib.sha256("".join(hashes).encode()).hexdigest()[:16])


class BlockingAuditFailed(dg.Failure):
    """A blocking audit failed on staged data: nothing was published (never retried)."""


def _check_result(key: dg.AssetKey, outcome: AuditOutcome, staged: Sequence[StagedTable]) -> dg.AssetCheckResult:
    parts = [s.partition for s in staged if s.partition]
    md = as_metadata(outcome.metadata)
    if parts:
        md["partitions"] = dg.MetadataValue.json(parts)
    return dg.AssetCheckResult(
        asset_key=key, check_name=outcome.name, passed=outcome.passed, metadata=md, description=outcome.description[:2000],
        severity=dg.AssetCheckSeverity.ERROR if outcome.severity == "ERROR" else dg.AssetCheckSeverity.WARN,
    )


def gate(
    context: dg.AssetExecutionContext,
    outputs: Mapping[Sequence[str], tuple[Sequence[StagedTable], Sequence[AuditOutcome]]],
    metadata: Mapping[Sequence[str], Mapping] | None = None,
) -> Iterator:
    """Publish every staged output if no blocking audit failed, else reject them all.

    ``outputs``: {asset key path: (staged tables or partitions, audit outcomes)}. Passing: yields
    per asset a ``MaterializeResult`` carrying the staged tables (the IO manager publishes them;
    data version = content hash) and then its check results. Failing: yields every check result,
    moves all staged data to ``_rejected/`` and raises :class:`BlockingAuditFailed` naming the
    failed checks and where the rejected data is kept.
    """
    keyed = {dg.AssetKey(list(k)): v for k, v in outputs.items()}
    failed = [(k, o) for k, (_, outcomes) in keyed.items() for o in blocking_failures(list(outcomes))]
    if failed:
        for k, (staged, outcomes) in keyed.items():
            yield from (_check_result(k, o, staged) for o in outcomes)
        reason = {"run_id": context.run.run_id, "failed_checks": [{"asset": k.to_user_string(), "check": o.name, "description": o.description} for k, o in failed]}
        kept = [s.reject(reason) for staged, _ in keyed.values() for s in staged]
        names = ", ".join(f"{k.to_user_string()}:{o.name}" for k, o in failed)
        raise BlockingAuditFailed(
            description=f"blocking check(s) failed: {names} — {failed[0][1].description}. Nothing was published: "
            f"the published version is unchanged. The rejected data is kept at {'; '.join(kept)} "
            "(removed after DHS_REJECTED_KEEP_DAYS, default 7 days)",
            metadata={"failed_checks": dg.MetadataValue.json([f"{k.to_user_string()}:{o.name}" for k, o in failed]),
                      "rejected_at": dg.MetadataValue.json(kept)},
            allow_retries=False,
        )
    for k, (staged, outcomes) in keyed.items():
        md = dict((metadata or {}).get(tuple(k.path), {}))
        yield dg.MaterializeResult(asset_key=k, value=list(staged), data_version=data_version(staged), metadata=md)
        yield from (_check_result(k, o, staged) for o in outcomes)


@contextmanager
def fail_fast_on_bad_input() -> Iterator[None]:
    """Permanent errors (bad input, refused credentials, a lake that is not a writable folder)
    fail the step once, without retries: retrying only repeats the error (and could hammer a
    service with bad credentials)."""
    try:
        yield
    except PERMANENT_ERRORS as exc:
        raise dg.Failure(description=f"{type(exc).__name__}: {exc}", allow_retries=False) from exc


# -- the training stage still commits directly (its publication step is being separated); these
# -- two helpers go once training_set and lens_finder publish through the gate as well.
def content_hash(lake, path_uri: str) -> str:
    """sha256 of a committed lake file (streamed), used as the asset's data version."""
    path = path_uri[len("s3://") :] if path_uri.startswith("s3://") else path_uri
    h = hashlib.sha256()
    with lake.fs.open_input_stream(path) as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()[:16]


def table_result(lake, uri: str, schema: pa.Schema, rows: int, extra: dict | None = None) -> dg.MaterializeResult:
    """MaterializeResult with the standard lake metadata and a content-hash data version."""
    version = content_hash(lake, uri)
    md = {"dagster/uri": dg.MetadataValue.path(uri), "dagster/row_count": dg.MetadataValue.int(rows),
          "dagster/column_schema": schema_metadata(schema), "data_version": version}
    md.update(extra or {})
    return dg.MaterializeResult(metadata=md, data_version=dg.DataVersion(version))
