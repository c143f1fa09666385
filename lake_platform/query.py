"""Read-only SQL over the lake with DuckDB: every table is a view named after its asset.

Tables are registered as Arrow datasets over the lake's filesystem (local or S3), so DuckDB needs
no network extension and touches nothing but the lake. Only SELECT statements run; external
access (reading or writing other files, ATTACH, COPY) is disabled and the configuration locked
before the user's SQL is executed.

Integrity: every view holds only the parts its table's manifests record (``lake_platform.manifest``);
the tables a query names are verified byte for byte (sha256) first, the others by size and footer.
A table that fails is left out and a query naming it refused with the reason, so one damaged table
never takes the others (or ``SELECT 1``) down with it.

Limits: one statement at a time; a query is interrupted (DuckDB ``interrupt()``) when it has not
finished within its timeout, fetching included, and its rows are fetched in a stream, at most
``max_rows`` of them, printed within a byte budget (:func:`render`), so neither a runaway query nor a
huge result can hold the caller.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import threading
from dataclasses import dataclass
from typing import Iterable

import duckdb

from darkhaloscope.errors import InputError

from .lake import Lake

_ALLOWED = {duckdb.StatementType.SELECT}
#: Seconds a query may run (``dhs query --timeout``) and rows it may return (``--max-rows``).
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_ROWS = 10_000
#: The longest ``--timeout`` (s): a day; longer waits are a batch job's (``dhs export``), and
#: ``threading.Timer`` overflows on values past ``threading.TIMEOUT_MAX``.
MAX_TIMEOUT_S = 86_400.0
#: Bytes of printed results (``dhs query --max-bytes``): rows past it are left out with a note,
#: and a text or binary cell is cut at a sixteenth of it.
DEFAULT_MAX_BYTES = 16 * 2**20
_FETCH_ROWS = 2048


class QueryTimeout(InputError):
    """The query was interrupted because it ran past its timeout."""


@dataclass(frozen=True)
class QueryResult:
    """Column names, rows (at most the row cap) and whether the query had more rows than that."""

    columns: list[str]
    rows: list[tuple]
    truncated: bool


def connect(lake: Lake, verify: Iterable[str] = ()) -> tuple[duckdb.DuckDBPyConnection, dict[str, str]]:
    """In-memory DuckDB connection with one view per committed lake table, external access off,
    and ``{table: why}`` of the tables left out. Every view holds only the parts its manifests
    record; those of the tables named in ``verify`` (the ones a query reads) are verified byte for
    byte (sha256), the others by size. A table that fails is left out, with its reason
    (``<group>/<table>: <file>: <problem>``), so that every other table stays queryable."""
    con = duckdb.connect(":memory:")
    refused = {}
    wanted = set(verify)
    for group, asset in lake.tables():
        try:
            if asset in wanted:
                con.register(asset, lake.dataset(group, asset))
            else:
                files = lake.check(group, asset, content=False)
                if files.problems:
                    raise InputError(files.message(f"{group}/{asset}"))
                con.register(asset, lake.dataset_of(group, asset, files.parts))
        except InputError as exc:
            refused[asset] = str(exc)
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con, refused


def _tables_read(sql: str) -> set[str]:
    """Every word of ``sql`` that could name a table, lower-cased: a superset of the tables it
    reads (DuckDB's ``get_table_names`` binds the query, and fails on a join's USING columns
    before any table exists)."""
    return {word.lower() for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sql)}


def check_read_only(sql: str) -> None:
    """Raise InputError unless ``sql`` is one SELECT statement."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise InputError(f"cannot parse SQL: {exc}") from exc
    if not statements:
        raise InputError("no SQL statement given")
    for st in statements:
        if st.type not in _ALLOWED:
            raise InputError(
                f"refused: `dhs query` is read-only and only runs SELECT statements, not {_statement_name(st)} "
                "(materialize assets with `dhs materialize` to change the lake)"
            )
    if len(statements) > 1:
        # only the last statement's rows would be printed: the others would pass unseen
        raise InputError(f"refused: `dhs query` runs one statement at a time, got {len(statements)}")


def _statement_name(statement) -> str:
    """The statement's own leading keywords (DuckDB files INSTALL under LOAD, so its type name would mislead)."""
    words = statement.query.split()
    if statement.type == duckdb.StatementType.LOAD and words:
        lead = [w.upper() for w in words[:2]]
        return "FORCE INSTALL" if lead == ["FORCE", "INSTALL"] else lead[0]
    return statement.type.name


def check_limits(timeout_s: float, max_rows: int | None) -> None:
    """InputError unless 0 < ``timeout_s`` <= :data:`MAX_TIMEOUT_S` and ``max_rows`` (None: all) >= 1."""
    if not 0 < timeout_s <= MAX_TIMEOUT_S or (max_rows is not None and max_rows < 1):
        raise InputError(
            f"timeout must be a number of seconds in (0, {MAX_TIMEOUT_S:g}] and max rows >= 1, got "
            f"timeout={timeout_s:g}, max rows={max_rows}"
        )


def query(
    lake: Lake, sql: str, timeout_s: float = DEFAULT_TIMEOUT_S, max_rows: int | None = DEFAULT_MAX_ROWS
) -> QueryResult:
    """Run a read-only query within ``timeout_s`` seconds, returning at most ``max_rows`` rows (None: all).

    Raises InputError for refused or failing SQL and :class:`QueryTimeout` when the query was
    interrupted at its timeout.
    """
    check_limits(timeout_s, max_rows)
    check_read_only(sql)
    read = _tables_read(sql)
    con, refused = connect(lake, verify=read)
    blocked = sorted(read & set(refused))
    if blocked:
        con.close()
        raise InputError(f"refused: {refused[blocked[0]]}")
    expired = threading.Event()

    def interrupt() -> None:
        expired.set()
        con.interrupt()

    timer = threading.Timer(timeout_s, interrupt)
    timer.daemon = True
    timer.start()
    try:
        cur = con.execute(sql)
        rows: list[tuple] = []
        while max_rows is None or len(rows) <= max_rows:
            chunk = cur.fetchmany(_FETCH_ROWS)
            if not chunk:
                break
            rows += chunk
        truncated = max_rows is not None and len(rows) > max_rows
        return QueryResult([d[0] for d in cur.description], rows[:max_rows] if truncated else rows, truncated)
    except duckdb.Error as exc:
        if expired.is_set():
            raise QueryTimeout(
                f"query interrupted after {timeout_s:g} s (the timeout): narrow it, or allow more with --timeout"
            ) from exc
        raise InputError(f"query failed: {exc}") from exc
    finally:
        timer.cancel()
        con.close()


def run_query(lake: Lake, sql: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[list[str], list[tuple]]:
    """Run a read-only query within ``timeout_s`` seconds; returns (column names, every row)."""
    result = query(lake, sql, timeout_s=timeout_s, max_rows=None)
    return result.columns, result.rows


def render(columns: list[str], rows: list[tuple], fmt: str = "table", max_bytes: int = DEFAULT_MAX_BYTES):
    """(``format_rows`` of the rows that fit in about ``max_bytes`` bytes, whether any were cut):
    a text or binary cell longer than a sixteenth of it is shortened (saying by how much), and
    the rows past the budget are left out, so a huge cell or result cannot hold the terminal."""
    if max_bytes < 1024:
        raise InputError(f"max bytes must be >= 1024, got {max_bytes}")
    cell_cap = max_bytes // 16
    kept, used, cut = [], 0, False
    for row in rows:
        short = tuple(_shorten(v, cell_cap) for v in row)
        cut = cut or any(a is not b for a, b in zip(short, row))
        used += sum(len(v) if isinstance(v, (str, bytes)) else len(str(v)) for v in short) + 3 * len(short)
        if used > max_bytes:
            return format_rows(columns, kept, fmt), True
        kept.append(short)
    return format_rows(columns, kept, fmt), cut


def _shorten(value, cap: int):
    """``value``, or its first ``cap`` characters (bytes) and how many more there were."""
    if isinstance(value, (str, bytes)) and len(value) > cap:
        more = f"... ({len(value) - cap:,} more {'characters' if isinstance(value, str) else 'bytes'})"
        return value[:cap] + (more if isinstance(value, str) else more.encode())
    return value


def _finite(value):
    """``value`` for strict JSON (RFC 8259 has no NaN or Infinity): a non-finite float becomes None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def format_rows(columns: list[str], rows: list[tuple], fmt: str = "table") -> str:
    """Render query results as an aligned text table (control characters escaped), CSV or strict
    JSON (one object per row; NaN and infinities as null)."""
    if fmt == "json":
        objects = [{c: _finite(v) for c, v in zip(columns, r)} for r in rows]
        return json.dumps(objects, default=str, indent=None, allow_nan=False)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([csv_safe(c) for c in columns])
        w.writerows([csv_safe(v) for v in r] for r in rows)
        return buf.getvalue().rstrip("\n")
    if fmt != "table":
        raise InputError(f"unknown format {fmt!r}; use table, csv or json")
    cells = [[_cell(v) for v in r] for r in rows]
    columns = [_escape(c) for c in columns]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda vals: " | ".join(v.ljust(w) for v, w in zip(vals, widths))  # noqa: E731
    out = [line(columns), "-+-".join("-" * w for w in widths)] + [line(r) for r in cells]
    out.append(f"({len(rows)} rows)")
    return "\n".join(out)


#: First characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value):
    """``value`` for a CSV cell: text that a spreadsheet would evaluate as a formula (a table or a
    file name starting with ``= + - @``, tab or carriage return) gets a leading ``'``; numbers and
    other values are unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


#: C0 and C1 control characters and DEL: a terminal acts on them (moves the cursor, clears the
#: screen, rewrites the title) instead of printing them (ECMA-48).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(text: str) -> str:
    """``text`` with each control character written as its ``\\xNN`` escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)) and len(v) > 6:
        return f"[{len(v)} values]"
    return _escape(str(v))


def describe_tables(lake: Lake, refused: dict[str, str] | None = None) -> list[dict]:
    """Each committed table: name, group, row count (from footers), partitions and URI. A table
    whose files do not match its manifests (sizes checked) raises InputError naming the file, or,
    given ``refused``, is left out and recorded there as ``{"<group>/<table>": why}``."""
    out = []
    for group, asset in lake.tables():
        try:
            parts = lake.partitions(group, asset)
            rows = lake.count_rows(group, asset)
        except InputError as exc:
            if refused is None:
                raise
            refused[f"{group}/{asset}"] = str(exc)
            continue
        out.append(
            {
                "table": asset,
                "group": group,
                "rows": rows,
                "partitions": len([p for p in parts if p]),
                "uri": lake.full_uri(lake.table_path(group, asset)),
            }
        )
    return out
