"""The audits' shared DuckDB database: cursors see only what they registered, threads and forked
processes each query their own data."""

import multiprocessing
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa
import pytest

from darkhaloscope import sql


def test_a_cursors_registrations_are_its_own():
    with sql.cursor() as a, sql.cursor() as b:
        a.register("t", pa.table({"x": [1, 2, 3]}))
        assert a.execute("SELECT sum(x) FROM t").fetchone() == (6,)
        with pytest.raises(duckdb.CatalogException):
            b.execute("SELECT * FROM t")


def _sum_of(n: int) -> int:
    with sql.cursor() as con:
        con.register("t", pa.table({"x": list(range(n))}))
        return con.execute("SELECT sum(x) FROM t").fetchone()[0]


def test_threads_query_their_own_tables_at_once():
    sizes = [10, 1_000, 100_000, 7] * 8
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(_sum_of, sizes)) == [n * (n - 1) // 2 for n in sizes]


def test_a_forked_process_opens_its_own_database():
    assert _sum_of(5) == 10  # the parent's database exists before the fork
    with multiprocessing.get_context("fork").Pool(1) as pool:
        # a child that closed the parent's database would wait for its threads forever
        assert pool.map_async(_sum_of, [100, 200]).get(timeout=60) == [4950, 19900]
