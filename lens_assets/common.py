"""Small helpers shared by the asset modules: metadata, data versions, contract check results."""


import hashlib

import dagster as dg
import pyarrow as pa

from darkhaloscope.contracts import Contract, schema_problems, value_problems
from darkhaloscope.lake import Lake

OWNERS = ["team:dark-halo-scope"]


def schema_metadata(schema: pa.Schema) -> dg.MetadataValue:
    return dg.MetadataValue.table_schema(dg.TableSchema(columns=[dg.TableColumn(f.name, str(f.type)) for f in schema]))


def content_hash(lake: Lake, path_uri: str) -> str:
    """sha256 of a committed lake file (streamed), used as the asset's data version."""
    path = path_uri[len("s3://") :] if path_uri.startswith("s3://") else path_uri
    h = hashlib.sha256()
    with lake.fs.open_input_stream(path) as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()[:16]


def table_result(lake: Lake, uri: str, schema: pa.Schema, rows: int, extra: dict | None = None) -> dg.MaterializeResult:
    """MaterializeResult with the standard lake metadata and a content-hash data version."""
    version = content_hash(lake, uri)
    md = {
        "dagster/uri": dg.MetadataValue.path(uri),
        "dagster/row_count": dg.MetadataValue.int(rows),
        "dagster/column_schema": schema_metadata(schema),
        "data_version": version,
    }
    md.update(extra or {})
    return dg.MaterializeResult(metadata=md, data_version=dg.DataVersion(version))


def contract_result(lake: Lake, group: str, table: str, contract: Contract, partition: dict | None = None) -> dg.AssetCheckResult:
    """Blocking contract check: schema from the footer, then keys and ranges with DuckDB."""
    if partition is not None:
        data = lake.read_table(group, table, partition=partition)
        schema = data.schema
    else:
        data = lake.dataset(group, table)
        schema = lake.read_schema(group, table)
    problems = schema_problems(schema, contract)
    if not problems:
        problems = value_problems(data, contract)
    return dg.AssetCheckResult(
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"problems": dg.MetadataValue.json(problems), "n_problems": len(problems)},
        description="schema, keys and ranges match the contract" if not problems else problems[0],
    )


def as_metadata(values: dict) -> dict:
    """Dagster metadata from a plain dict: JSON for containers, scalars as they are."""
    return {k: dg.MetadataValue.json(v) if isinstance(v, (dict, list, tuple)) else v for k, v in values.items()}


class fail_fast_on_bad_input:
    """Context manager: permanent errors (bad input, refused credentials, a lake that is not a
    writable folder) fail the step once, without retries: retrying only repeats the error (and
    could hammer a service with bad credentials).
    """

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        from darkhaloscope.errors import PERMANENT_ERRORS

        if exc is not None and isinstance(exc, PERMANENT_ERRORS):
            raise dg.Failure(description=f"{type(exc).__name__}: {exc}", allow_retries=False) from exc
        return False


def markdown_table(table: pa.Table) -> str:
    """A small Arrow table as a Markdown table (for materialization metadata)."""
    cols = table.column_names
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    rows += ["| " + " | ".join(str(v) for v in r.values()) + " |" for r in table.to_pylist()]
    return "\n".join(rows)
