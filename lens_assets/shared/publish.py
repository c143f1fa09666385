"""The one publish path of every lake asset: stage → audit → gate, from the tables registry.

:func:`lake_asset` turns a function into a Dagster asset (one table) or multi-asset (several) whose
key, group, partitions and asset checks come from the registry entries (``table_registry``). The
function reads its inputs, calls the library and returns a :class:`Publish`: for each table, its
data (an Arrow table, which is staged here, or what it staged itself with :func:`stage`), the
outcomes of the audits only it can run, and its metadata. Then, in the asset's own step:

1. every table with a contract is audited against it on the staged data (every partition);
2. each declared audit must have an outcome (a missing one is a programming error, named);
3. :func:`gate` reports every outcome as the asset check of the same name and, when a blocking
   audit failed, moves the staged data to ``_rejected/`` and fails the step without retries —
   nothing is published and no materialization is recorded, so the published version stays as
   it was, byte for byte; otherwise the lake IO manager publishes the staged tables.

Bad input (:data:`~darkhaloscope.errors.PERMANENT_ERRORS`) raised by the function fails the step
once, without retries: retrying only repeats the error.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Sequence

import dagster as dg
import pyarrow as pa

from darkhaloscope.errors import PERMANENT_ERRORS
from io_managers.parquet import column_schema
from lake_platform.audits import AuditOutcome, blocking_failures, combine, contract_audit
from lake_platform.staging import Stage, StagedTable
from table_registry import Table

from .partitions import partitions_def

OWNERS = ["team:dark-halo-scope"]
#: The columns of a gates table in the UI (``darkhaloscope.training.gates``' records).
GATE_COLUMNS = (
    ("name", "string"),
    ("value", "float"),
    ("threshold", "float"),
    ("passed", "bool"),
    ("blocking", "bool"),
)


@dataclass
class Publish:
    """What a lake asset's function returns.

    ``tables``: per registry table, an Arrow table (staged here, in the run's partition) or the
    staged tables it wrote itself (one per partition); ``audits``: per table, the outcomes of its
    audits other than the contract (an outcome named like the contract audit refines it: it is
    consulted when the contract holds); ``metadata``: per table, materialization metadata;
    ``after``: called once the tables are published (e.g. to drop in-flight chunks)."""

    tables: Mapping[Table, pa.Table | StagedTable | Sequence[StagedTable]]
    audits: Mapping[Table, Sequence[AuditOutcome]] = field(default_factory=dict)
    metadata: Mapping[Table, Mapping] = field(default_factory=dict)
    after: Callable[[], None] | None = None


def inputs(**tables: Table) -> dict[str, dg.AssetIn]:
    """An asset's ``ins``: each argument name loads the table given for it."""
    return {name: dg.AssetIn(list(table.key)) for name, table in tables.items()}


def check_specs(table: Table) -> list[dg.AssetCheckSpec]:
    """One asset check per audit of ``table``, blocking exactly when the audit blocks publication."""
    key = dg.AssetKey(list(table.key))
    return [dg.AssetCheckSpec(a.name, asset=key, blocking=a.blocking, description=a.description) for a in table.audits]


def as_metadata(values: Mapping) -> dict:
    """Dagster metadata from a plain dict: JSON for containers, metadata values and scalars as they are."""
    return {
        str(k): dg.MetadataValue.json(v)
        if v is None or (isinstance(v, (dict, list, tuple)) and not isinstance(v, dg.MetadataValue))
        else v
        for k, v in values.items()
    }


def per_partition(metadata: Mapping[str, Mapping]) -> dict:
    """Materialization metadata of a run over one partition or several: one partition's metadata
    as it is; several under ``partitions``, keyed by partition (a multi-partition run records one
    materialization per partition, each carrying the run's metadata)."""
    if len(metadata) == 1:
        return dict(next(iter(metadata.values())))
    return {"partitions": {k: dict(v) for k, v in metadata.items()}}


def markdown_table(table: pa.Table) -> str:
    """A small Arrow table as a Markdown table (for materialization metadata)."""
    cols = table.column_names
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    rows += ["| " + " | ".join(str(v) for v in r.values()) + " |" for r in table.to_pylist()]
    return "\n".join(rows)


def rows_table(rows: Sequence[Mapping], columns: Sequence[tuple[str, str]]) -> dg.TableMetadataValue:
    """Rows (dicts) as a table in the UI: ``columns`` (name, Dagster type: ``string``, ``float``,
    ``int``, ``bool``) in order; other keys of a row are left out."""
    schema = dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in columns])
    return dg.MetadataValue.table(
        records=[dg.TableRecord({name: row.get(name) for name, _ in columns}) for row in rows], schema=schema
    )


def figures_markdown(page: str, skip_prefix: str = "fig-mosaic") -> dg.MarkdownMetadataValue:
    """The figures of an HTML page (its ``<img>`` elements with a data-URI PNG and an id) as
    Markdown images, which the UI shows with the materialization; figures whose id starts with
    ``skip_prefix`` (the example-stamp mosaics, the largest) are named, not shown."""
    import re

    parts, skipped = [], []
    for tag in re.findall(r"<img\b[^>]*>", page):
        attrs = dict(re.findall(r'(\w[\w-]*)="([^"]*)"', tag))
        if not attrs.get("src", "").startswith("data:image/png;base64,") or "id" not in attrs:
            continue
        if attrs["id"].startswith(skip_prefix):
            skipped.append(attrs["id"])
            continue
        parts.append(f"**{attrs.get('alt') or attrs['id']}**\n\n![{attrs['id']}]({attrs['src']})")
    if skipped:
        parts.append(f"In the report only: {', '.join(skipped)}.")
    return dg.MetadataValue.md("\n\n".join(parts))


def stage(context: dg.AssetExecutionContext) -> Stage:
    """The run's staging area (opened, and orphans swept, on first use in the run)."""
    return context.resources.lake.stage(context)


def staged_table(context: dg.AssetExecutionContext, table: Table, partition_key: str | None = None) -> StagedTable:
    """The staged table (or its partition ``partition_key``, by default the run's partition)."""
    if table.partitioned_by is None:
        return stage(context).table(*table.key)
    key = partition_key if partition_key is not None else context.partition_key
    return stage(context).table(*table.key, {table.partitioned_by: key})


def lake_asset(*tables: Table, code_version: str, kinds: set[str] | None = None, **asset_kwargs):
    """Decorator: the function becomes the asset publishing ``tables`` (registry entries, each in
    its stage's group) through :class:`Publish` (module doc). ``asset_kwargs`` go to ``dg.asset`` /
    ``dg.multi_asset`` (``ins``, ``deps``, ``pool``, ``backfill_policy``, ``retry_policy``,
    ``automation_condition``, ...)."""
    specs = [c for t in tables for c in check_specs(t)]
    parts = {partitions_def(t.partitioned_by) for t in tables}
    if len(parts) != 1:
        raise ValueError(f"tables {[t.path for t in tables]} are partitioned differently")
    # a multi-asset takes its automation condition per output
    automation = asset_kwargs.pop("automation_condition", None) if len(tables) > 1 else None
    common = dict(partitions_def=parts.pop(), check_specs=specs, **asset_kwargs)

    def decorate(fn):
        if "lake" not in inspect.signature(fn).parameters:
            raise TypeError(f"{fn.__name__} must take the lake resource (lake: LakeResource): it stages the tables")

        @functools.wraps(fn)
        def body(context: dg.AssetExecutionContext, *args, **kwargs):
            with fail_fast_on_bad_input():
                result = fn(context, *args, **kwargs)
                if not isinstance(result, Publish):
                    raise TypeError(f"{fn.__name__} must return a Publish, got {type(result).__name__}")
                staged = {t: _staged(context, t, result.tables[t]) for t in tables}
                outcomes = {t: _audits(t, staged[t], result.audits.get(t, ())) for t in tables}
            yield from gate(
                context,
                {t.key: (staged[t], outcomes[t]) for t in tables},
                {t.key: as_metadata(result.metadata.get(t, {})) for t in tables},
            )
            if result.after is not None:
                result.after()

        if len(tables) == 1:
            t = tables[0]
            return dg.asset(
                key=list(t.key),
                code_version=code_version,
                kinds=kinds,
                owners=OWNERS,
                description=fn.__doc__ or t.description,
                metadata=_columns_metadata(t),
                group_name=t.group,
                **common,
            )(body)
        outs = {
            t.name: dg.AssetOut(
                key=list(t.key),
                code_version=code_version,
                kinds=kinds,
                owners=OWNERS,
                description=t.description,
                automation_condition=automation,
                metadata=_columns_metadata(t),
                group_name=t.group,
            )
            for t in tables
        }
        return dg.multi_asset(outs=outs, name=fn.__name__, description=fn.__doc__, **common)(body)

    return decorate


def _columns_metadata(table: Table) -> dict:
    """The table's declared columns with their descriptions and units, shown by the UI before (and
    beside) any materialization."""
    return {"dagster/column_schema": column_schema(table.contract)} if table.contract is not None else {}


def _staged(context: dg.AssetExecutionContext, table: Table, data) -> list[StagedTable]:
    if isinstance(data, pa.Table):
        staged = staged_table(context, table)
        staged.write(data)
        return [staged]
    return [data] if isinstance(data, StagedTable) else list(data)


def _audits(table: Table, staged: list[StagedTable], given: Sequence[AuditOutcome]) -> list[AuditOutcome]:
    """The contract audit (every partition, refined by the function's outcome of the same name
    where it holds), then the function's other outcomes; every declared audit must be there."""
    outcomes = list(given)
    audit = table.contract_audit
    if audit is not None:
        checked = combine(
            [contract_audit(audit, s.dataset(), table.contract) for s in staged], [s.label for s in staged]
        )
        refined = [o for o in outcomes if o.name == audit.name]
        outcomes = [o for o in outcomes if o.name != audit.name]
        outcomes.insert(0, refined[0] if checked[0].passed and refined else checked[0])
    missing = sorted({a.name for a in table.audits} - {o.name for o in outcomes})
    unknown = sorted({o.name for o in outcomes} - {a.name for a in table.audits})
    if missing or unknown:
        raise RuntimeError(f"{table.path}: audits declared but not run {missing}, run but not declared {unknown}")
    return outcomes


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
        asset_key=key,
        check_name=outcome.name,
        passed=outcome.passed,
        metadata=md,
        description=outcome.description[:2000],
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
        reason = {
            "run_id": context.run.run_id,
            "failed_checks": [
                {"asset": k.to_user_string(), "check": o.name, "description": o.description} for k, o in failed
            ],
        }
        kept = [s.reject(reason) for staged, _ in keyed.values() for s in staged]
        names = ", ".join(f"{k.to_user_string()}:{o.name}" for k, o in failed)
        raise BlockingAuditFailed(
            description=f"blocking check(s) failed: {names} — {failed[0][1].description}. Nothing was published: "
            f"the published version is unchanged. The rejected data is kept at {'; '.join(kept)} "
            "(removed after DHS_REJECTED_KEEP_DAYS, default 7 days)",
            metadata={
                "failed_checks": dg.MetadataValue.json([f"{k.to_user_string()}:{o.name}" for k, o in failed]),
                "rejected_at": dg.MetadataValue.json(kept),
            },
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
    service with bad credentials). So does a stop (SIGTERM, SIGINT: Dagster interrupts the step):
    a retry policy would otherwise launch the step again after the operator stopped it."""
    try:
        yield
    except PERMANENT_ERRORS as exc:
        raise dg.Failure(description=f"{type(exc).__name__}: {exc}", allow_retries=False) from exc
    except dg.DagsterExecutionInterruptedError as exc:
        raise dg.Failure(
            description="stopped by a signal (SIGTERM or SIGINT): not retried", allow_retries=False
        ) from exc


def file_link(uri: str):
    """Metadata linking to a published file: a ``file://`` URL for a local path (a click opens it in
    the UI), the URI itself (``s3://...``) otherwise."""
    return dg.MetadataValue.url(f"file://{uri}") if "://" not in uri else uri
