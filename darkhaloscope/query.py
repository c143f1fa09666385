"""Read-only SQL over the lake with DuckDB: every table is a view named after its asset.

Tables are registered as Arrow datasets over the lake's filesystem (local or S3), so DuckDB needs
no network extension and touches nothing but the lake. Only SELECT statements run; external
access (reading or writing other files, ATTACH, COPY) is disabled and the configuration locked
before the user's SQL is executed.
"""

from __future__ import annotations

import csv
import io
import json

import duckdb

from .errors import InputError
from .lake import Lake

_ALLOWED = {duckdb.StatementType.SELECT}


def connect(lake: Lake) -> duckdb.DuckDBPyConnection:
    """In-memory DuckDB connection with one view per committed lake table, external access off."""
    con = duckdb.connect(":memory:")
    for group, asset in lake.tables():
        con.register(asset, lake.dataset(group, asset))
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def check_read_only(sql: str) -> None:
    """Raise InputError unless every statement in ``sql`` is a SELECT."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise InputError(f"cannot parse SQL: {exc}") from exc
    if not statements:
        raise InputError("no SQL statement given")
    for st in statements:
        if st.type not in _ALLOWED:
            raise InputError(
                f"refused: `dhs query` is read-only and only runs SELECT statements; got a {st.type.name} statement "
                "(materialize assets with `dhs materialize` to change the lake)"
            )


def run_query(lake: Lake, sql: str) -> tuple[list[str], list[tuple]]:
    """Run a read-only query; returns (column names, rows)."""
    check_read_only(sql)
    con = connect(lake)
    try:
        cur = con.execute(sql)
        return [d[0] for d in cur.description], cur.fetchall()
    except duckdb.Error as exc:
        raise InputError(f"query failed: {exc}") from exc
    finally:
        con.close()


def format_rows(columns: list[str], rows: list[tuple], fmt: str = "table") -> str:
    """Render query results as an aligned text table, CSV or JSON (one object per row)."""
    if fmt == "json":
        return json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=None)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
        return buf.getvalue().rstrip("\n")
    if fmt != "table":
        raise InputError(f"unknown format {fmt!r}; use table, csv or json")
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda vals: " | ".join(v.ljust(w) for v, w in zip(vals, widths))  # noqa: E731
    out = [line(columns), "-+-".join("-" * w for w in widths)] + [line(r) for r in cells]
    out.append(f"({len(rows)} rows)")
    return "\n".join(out)


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)) and len(v) > 6:
        return f"[{len(v)} values]"
    return str(v)


def describe_tables(lake: Lake) -> list[dict]:
    """Each committed table: name, group, row count (from footers), partitions and URI."""
    out = []
    for group, asset in lake.tables():
        parts = lake.partitions(group, asset)
        out.append(
            {
                "table": asset,
                "group": group,
                "rows": lake.count_rows(group, asset),
                "partitions": len([p for p in parts if p]),
                "uri": lake.full_uri(lake.table_path(group, asset)),
            }
        )
    return out
