"""`dhs query` / `dhs tables`: views named after assets, read-only, same answers on local and S3."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from dhs.main import main
from lake_platform.query import describe_tables, format_rows, run_query


def _fill(lake):
    lake.write_table(
        "survey",
        "sweeps",
        pa.table({"object_id": [1, 2, 3], "ra": [10.0, 11.0, 12.0]}),
        partition={"sweep_file": "a.fits"},
    )
    lake.write_table("survey", "sweeps", pa.table({"object_id": [4], "ra": [13.0]}), partition={"sweep_file": "b.fits"})
    lake.write_table("catalog", "negatives", pa.table({"object_id": [2, 4], "pool": ["N1", "N2"]}))


def test_views_named_after_assets(lake):
    _fill(lake)
    cols, rows = run_query(
        lake, "SELECT s.sweep_file, count(*) AS n FROM sweeps s JOIN negatives USING (object_id) GROUP BY 1 ORDER BY 1"
    )
    assert cols == ["sweep_file", "n"] and rows == [("a.fits", 1), ("b.fits", 1)]


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE x AS SELECT 1",
        "INSERT INTO negatives VALUES (9, 'N1')",
        "DROP VIEW sweeps",
        "COPY sweeps TO '/tmp/dhs-leak.csv'",
        "ATTACH '/tmp/dhs-other.db'",
        "SELECT 1; DELETE FROM sweeps",
    ],
)
def test_writes_are_refused(lake, sql):
    _fill(lake)
    with pytest.raises(InputError, match="read-only"):
        run_query(lake, sql)


def test_files_outside_the_lake_cannot_be_read(lake, tmp_path):
    _fill(lake)
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    with pytest.raises(InputError, match="disabled"):
        run_query(lake, f"SELECT * FROM read_csv('{secret}')")


def test_local_and_s3_lakes_answer_identically(tmp_path, s3_server):
    from lake_platform.lake import Lake
    from tests.support.s3_server import fresh_bucket

    local = Lake(str(tmp_path / "lake"))
    remote = Lake(f"s3://{fresh_bucket(s3_server)}/lake", s3_endpoint=s3_server.endpoint_url)
    for lk in (local, remote):
        _fill(lk)
    sql = "SELECT sweep_file, sum(ra) AS s, count(*) AS n FROM sweeps GROUP BY 1 ORDER BY 1"
    assert run_query(local, sql) == run_query(remote, sql)
    strip = lambda d: [{k: v for k, v in t.items() if k != "uri"} for t in d]  # noqa: E731
    assert strip(describe_tables(local)) == strip(describe_tables(remote))


def test_formats(lake):
    _fill(lake)
    cols, rows = run_query(lake, "SELECT object_id, pool FROM negatives ORDER BY 1")
    assert json.loads(format_rows(cols, rows, "json")) == [
        {"object_id": 2, "pool": "N1"},
        {"object_id": 4, "pool": "N2"},
    ]
    assert format_rows(cols, rows, "csv").splitlines() == ["object_id,pool", "2,N1", "4,N2"]
    assert "(2 rows)" in format_rows(cols, rows, "table")


def test_cli_query_and_tables(tmp_path, monkeypatch, capsys):
    from lake_platform.lake import Lake

    monkeypatch.setenv("DHS_LAKE", str(tmp_path / "lake"))
    _fill(Lake(str(tmp_path / "lake")))
    assert main(["query", "SELECT count(*) AS n FROM sweeps", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["n", "4"]
    assert main(["query", "DELETE FROM sweeps"]) == 2
    assert "read-only" in capsys.readouterr().err
    assert main(["tables", "--format", "json"]) == 0
    tables = {t["table"]: t for t in json.loads(capsys.readouterr().out)}
    assert tables["sweeps"]["rows"] == 4 and tables["sweeps"]["partitions"] == 2


RUNAWAY = "SELECT count(*) FROM range(1000000000000)"  # a trillion rows: minutes of CPU if not stopped


def test_a_runaway_query_is_interrupted_at_its_timeout(tmp_path, monkeypatch, capsys):
    import time

    from lake_platform.lake import Lake

    monkeypatch.setenv("DHS_LAKE", str(tmp_path / "lake"))
    _fill(Lake(str(tmp_path / "lake")))
    t0 = time.monotonic()
    assert main(["query", RUNAWAY, "--timeout", "0.5"]) == 2
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err
    assert err.startswith("error: query interrupted after 0.5 s") and "--timeout" in err and "Traceback" not in err
    # the same connection settings answer a quick query right after
    assert main(["query", "SELECT count(*) AS n FROM sweeps", "--format", "csv", "--timeout", "5"]) == 0
    assert capsys.readouterr().out.splitlines() == ["n", "4"]


def test_results_are_capped_with_a_note(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DHS_LAKE", str(tmp_path / "lake"))
    (tmp_path / "lake").mkdir()  # an empty lake: a read command refuses one that does not exist
    # a trillion-row result is streamed: only the first rows are ever produced
    assert main(["query", "SELECT range AS i FROM range(1000000000000)", "--format", "csv", "--max-rows", "5"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["i", "0", "1", "2", "3", "4"]
    assert "note: output cut at 5 rows (--max-rows)" in captured.err
    assert main(["query", "SELECT range AS i FROM range(10000)", "--format", "csv"]) == 0  # exactly the default cap
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 10_001 and "note" not in captured.err
    assert main(["query", "SELECT range AS i FROM range(10001)", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 10_001 and "cut at 10,000 rows" in captured.err


@pytest.mark.parametrize(
    "sql, name", [("INSTALL httpfs", "INSTALL"), ("FORCE INSTALL httpfs", "FORCE INSTALL"), ("LOAD httpfs", "LOAD")]
)
def test_refusals_name_the_statement_as_written(lake, sql, name):
    with pytest.raises(InputError, match=f"read-only and only runs SELECT statements, not {name} "):
        run_query(lake, sql)
