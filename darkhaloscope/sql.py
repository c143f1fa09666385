"""Short DuckDB queries over Arrow data (the audits' SQL re-checks), on one in-memory database per
process.

Opening a DuckDB database costs more than checking a small partition, and the per-partition audits
of a survey-wide run open thousands, so each query takes a :func:`cursor` of one shared database
instead: a connection of its own (tables it registers are its alone and go when it closes), safe
to use beside other threads' cursors. A forked process opens its own database: DuckDB's threads do
not survive a fork, and the parent's database is kept from being closed in the child, where
closing it would wait for those threads forever.
"""

from __future__ import annotations

import os
import threading

import duckdb

_LOCK = threading.Lock()
_DATABASE: tuple[int, duckdb.DuckDBPyConnection] | None = None
_INHERITED: list[duckdb.DuckDBPyConnection] = []


def cursor() -> duckdb.DuckDBPyConnection:
    """A new connection to this process's in-memory DuckDB database; the caller closes it."""
    global _DATABASE
    with _LOCK:
        if _DATABASE is None or _DATABASE[0] != os.getpid():
            if _DATABASE is not None:
                _INHERITED.append(_DATABASE[1])
            _DATABASE = (os.getpid(), duckdb.connect(":memory:"))
        return _DATABASE[1].cursor()
