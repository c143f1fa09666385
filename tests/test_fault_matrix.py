"""Fault matrix of a lake that protects itself (issue 52): each case damages a committed lake the
way an operator, a crashed copy or bit rot would, and checks that readers name the file and never
serve its rows, that every other table stays readable, and that nothing is written.

Rows of docs/bad_input_matrix.md ("Integrity on read" and "Output hygiene") quote these messages.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from darkhaloscope.errors import InputError
from dhs.main import main
from lake_platform.contracts import Column, Contract, Range
from lake_platform.lake import PART_FILE, Lake
from lake_platform.manifest import MANIFEST_DIR, RECORD_DIR
from lake_platform.query import check_read_only, describe_tables, run_query

A, B = "a.fits", "b.fits"


def _scores(n: int, offset: float = 0.0) -> pa.Table:
    return pa.table({"object_id": np.arange(n, dtype=np.int64), "score": np.linspace(0.1, 0.9, n) + offset})


def _fill(lake: Lake) -> None:
    """Two tables: evaluation/cutout_scores (two partitions) and catalog/negatives."""
    lake.write_table("evaluation", "cutout_scores", _scores(6), partition={"sweep_file": A})
    lake.write_table("evaluation", "cutout_scores", _scores(4), partition={"sweep_file": B})
    lake.write_table("catalog", "negatives", pa.table({"object_id": np.arange(3, dtype=np.int64)}))


def _part(lake: Lake, sweep: str = A) -> str:
    return f"{lake.partition_path('evaluation', 'cutout_scores', {'sweep_file': sweep})}/{PART_FILE}"


def _bytes(lake: Lake, path: str) -> bytes:
    with lake.fs.open_input_stream(path) as f:
        return f.read()


def _put(lake: Lake, path: str, payload: bytes) -> None:
    lake.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with lake.fs.open_output_stream(path) as out:
        out.write(payload)


def _snapshot(lake: Lake) -> dict[str, str]:
    infos = lake.fs.get_file_info(pafs.FileSelector(lake.root, recursive=True, allow_not_found=True))
    return {i.path: hashlib.sha256(_bytes(lake, i.path)).hexdigest() for i in infos if i.type == pafs.FileType.File}


def _flip_a_byte(lake: Lake) -> None:
    data = bytearray(_bytes(lake, _part(lake)))
    data[len(data) // 3] ^= 0x40  # inside the column chunks: the footer still parses
    _put(lake, _part(lake), bytes(data))


def _truncate(lake: Lake) -> None:
    _put(lake, _part(lake), _bytes(lake, _part(lake))[:-100])


def _stray_backup(lake: Lake) -> None:
    folder = lake.partition_path("evaluation", "cutout_scores", {"sweep_file": A})
    _put(lake, f"{folder}/backup/{PART_FILE}", _bytes(lake, _part(lake)))


def _delete_part(lake: Lake) -> None:
    lake.fs.delete_file(_part(lake))


def _delete_the_partition(lake: Lake) -> None:
    """The partition's folder and its manifest's folder removed together (``rm -r`` of both)."""
    lake.fs.delete_dir(lake.partition_path("evaluation", "cutout_scores", {"sweep_file": A}))
    lake.fs.delete_dir(lake.manifest_path("evaluation", "cutout_scores", {"sweep_file": A}).rsplit("/", 1)[0])


def _break_the_footer(lake: Lake) -> None:
    data = _bytes(lake, _part(lake))
    _put(lake, _part(lake), data[:-8] + b"\0" * 8)  # the footer's length and magic, same size


CASES = {
    "a byte flipped": (
        _flip_a_byte,
        "evaluation/cutout_scores: sweep_file=a.fits/part-0.parquet: its sha256 differs from the manifest's: "
        "altered, not read",
    ),
    "truncated": (
        _truncate,
        "evaluation/cutout_scores: sweep_file=a.fits/part-0.parquet: is {size} bytes, the manifest records "
        "{full}: truncated or altered, not read",
    ),
    "a stray backup in a partition": (
        _stray_backup,
        "evaluation/cutout_scores: sweep_file=a.fits/backup/part-0.parquet: no manifest records it (a stray "
        "file, or a lake written before manifests: `dhs verify --adopt` records them), not read",
    ),
    "a part deleted": (
        _delete_part,
        "evaluation/cutout_scores: sweep_file=a.fits/part-0.parquet: missing: the manifest records it ({full} bytes)",
    ),
    "a whole partition deleted, its manifest too": (
        _delete_the_partition,
        "evaluation/cutout_scores: sweep_file=a.fits: gone: the table's commit record lists this partition, its "
        "manifest and parts are missing",
    ),
    "the footer overwritten": (
        _break_the_footer,
        "evaluation/cutout_scores: sweep_file=a.fits/part-0.parquet: its sha256 differs from the manifest's: "
        "altered, not read",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_part_is_named_and_never_read(lake, case):
    _fill(lake)
    full = lake.fs.get_file_info(_part(lake)).size
    damage, says = CASES[case]
    damage(lake)
    size = lake.fs.get_file_info(_part(lake)).size
    says = says.format(size=size, full=full)
    before = _snapshot(lake)
    for read in (
        lambda: lake.read_table("evaluation", "cutout_scores"),
        lambda: list(lake.iter_batches("evaluation", "cutout_scores")),
        lambda: run_query(lake, "SELECT count(*) FROM cutout_scores"),
    ):
        with pytest.raises(InputError) as err:
            read()
        assert says in str(err.value)
    if case != "a stray backup in a partition":  # the backup lies in sweep_file=a.fits only
        with pytest.raises(InputError, match=r"sweep_file\W+a\.fits"):  # the partition gone: {'sweep_file': 'a.fits'}
            lake.read_table("evaluation", "cutout_scores", partition={"sweep_file": A})
    # the other partition, the other table and a query that reads no table still answer
    assert lake.read_table("evaluation", "cutout_scores", partition={"sweep_file": B}).num_rows == 4
    assert run_query(lake, "SELECT count(*) FROM negatives") == (["count_star()"], [(3,)])
    assert run_query(lake, "SELECT 1 AS one") == (["one"], [(1,)])
    assert _snapshot(lake) == before  # reading wrote nothing


def test_a_lake_written_before_manifests_is_refused_until_adopted(lake):
    _fill(lake)
    lake.fs.delete_dir(f"{lake.root}/{MANIFEST_DIR}")
    with pytest.raises(InputError, match=r"catalog/negatives: part-0.parquet: no manifest records it"):
        lake.read_table("catalog", "negatives")
    problems = lake.verify("evaluation", "cutout_scores")
    assert [p.split(": no manifest")[0] for p in problems] == [
        "evaluation/cutout_scores: sweep_file=a.fits/part-0.parquet",
        "evaluation/cutout_scores: sweep_file=b.fits/part-0.parquet",
    ]
    assert lake.verify("evaluation", "cutout_scores", adopt=True) == []
    assert lake.read_table("evaluation", "cutout_scores").num_rows == 10
    assert lake.partitions("evaluation", "cutout_scores") == [{"sweep_file": A}, {"sweep_file": B}]


def test_adopt_records_no_stray_file_and_no_altered_part(lake):
    _fill(lake)
    _stray_backup(lake)
    _flip_a_byte(lake)
    problems = lake.verify("evaluation", "cutout_scores", adopt=True)
    assert [p.split(": ")[1] for p in problems] == [
        "sweep_file=a.fits/part-0.parquet",
        "sweep_file=a.fits/backup/part-0.parquet",
    ]
    assert "its sha256 differs" in problems[0] and "no manifest records it" in problems[1]


def test_a_manifest_that_is_not_one_is_named(lake):
    _fill(lake)
    _put(lake, lake.manifest_path("catalog", "negatives"), b"{not json")
    with pytest.raises(InputError, match=r"catalog/negatives: _manifests/.../manifest.json: unreadable manifest"):
        lake.read_table("catalog", "negatives")


def test_a_score_outside_its_contract_is_refused_on_read(tmp_path):
    contract = Contract(
        "cutout_scores",
        (Column("object_id", pa.int64(), "", "id"), Column("score", pa.float64(), "", "a score")),
        ranges=(Range("score", 0.0, 1.0),),
    )
    lake = Lake(str(tmp_path / "lake"), contracts=lambda g, t: contract if t == "cutout_scores" else None)
    lake.write_table("evaluation", "cutout_scores", _scores(6), partition={"sweep_file": A})
    lake.write_table("evaluation", "cutout_scores", _scores(4, offset=1e295), partition={"sweep_file": B})
    with pytest.raises(InputError) as err:
        lake.read_table("evaluation", "cutout_scores")
    assert str(err.value) == (
        "evaluation/cutout_scores: sweep_file=b.fits/part-0.parquet: column score holds 1e+295 (row group 0), "
        "outside the contract's [0.0, 1.0]: not read"
    )
    assert lake.read_table("evaluation", "cutout_scores", partition={"sweep_file": A}).num_rows == 6


def test_a_publish_records_the_manifest_last_and_the_staged_reads_verify(tmp_path):
    from lake_platform.staging import Stage, StageOwner

    lake = Lake(str(tmp_path / "lake"))
    stage = Stage(lake, "run1").open(StageOwner.current("run1"))
    staged = stage.table("evaluation", "cutout_scores", {"sweep_file": A})
    staged.write(_scores(5))
    assert staged.staged_files()[-1] == staged.staged_manifest
    staged.publish()
    record = json.loads(_bytes(lake, lake.manifest_path("evaluation", "cutout_scores", {"sweep_file": A})))
    part = _part(lake)
    assert record["parts"] == [
        {"name": PART_FILE, "bytes": os.path.getsize(part), "sha256": hashlib.sha256(_bytes(lake, part)).hexdigest()}
    ]
    assert lake.read_table("evaluation", "cutout_scores").num_rows == 5
    lake.delete_partition("evaluation", "cutout_scores", {"sweep_file": A})
    assert lake.tables() == []


# --------------------------------------------------------------------------- the command line
@pytest.fixture()
def cli_lake(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DHS_LAKE", str(tmp_path / "lake"))
    lake = Lake(str(tmp_path / "lake"))
    _fill(lake)
    return lake


def test_dhs_tables_names_a_damaged_table_and_lists_the_others(cli_lake, capsys):
    _stray_backup(cli_lake)
    assert main(["tables", "--format", "csv"]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines()[1].startswith("negatives,catalog,3,0,") and "cutout_scores" not in out
    assert err.strip() == (
        "error: evaluation/cutout_scores: sweep_file=a.fits/backup/part-0.parquet: no manifest records it (a "
        "stray file, or a lake written before manifests: `dhs verify --adopt` records them), not read"
    )


def test_dhs_tables_names_a_broken_footer(cli_lake, capsys):
    _break_the_footer(cli_lake)
    refused: dict[str, str] = {}
    assert [t["table"] for t in describe_tables(cli_lake, refused)] == ["negatives"]
    assert refused["evaluation/cutout_scores"].startswith(
        "evaluation/cutout_scores: sweep_file=a.fits/part-0.parquet: unreadable Parquet footer ("
    )


def test_dhs_query_refuses_a_damaged_table_by_name_and_answers_the_others(cli_lake, capsys):
    _flip_a_byte(cli_lake)
    assert main(["query", "SELECT count(*) AS n FROM cutout_scores"]) == 2
    _, err = capsys.readouterr()
    assert err.strip() == (
        "error: refused: evaluation/cutout_scores: sweep_file=a.fits/part-0.parquet: its sha256 differs from "
        "the manifest's: altered, not read"
    )
    assert main(["query", "SELECT count(*) AS n FROM negatives", "--format", "csv"]) == 0
    assert capsys.readouterr().out.strip() == "n\n3"
    assert main(["query", "SELECT 1 AS one", "--format", "csv"]) == 0


def test_dhs_verify_reports_and_adopts(cli_lake, capsys):
    assert main(["verify"]) == 0
    assert capsys.readouterr().out.strip() == "verified 2 tables: 0 problems"
    cli_lake.fs.delete_dir(f"{cli_lake.root}/{MANIFEST_DIR}/catalog")
    assert main(["verify"]) == 2
    out, err = capsys.readouterr()
    assert err.strip().startswith("error: catalog/negatives: part-0.parquet: no manifest records it")
    assert out.strip() == "verified 2 tables: 1 problems"
    assert main(["verify", "--adopt"]) == 0
    assert "0 problems" in capsys.readouterr().out
    assert main(["query", "SELECT count(*) AS n FROM negatives", "--format", "csv"]) == 0


def test_a_deleted_partition_is_refused_by_every_command(cli_lake, capsys):
    _delete_the_partition(cli_lake)
    gone = (
        "evaluation/cutout_scores: sweep_file=a.fits: gone: the table's commit record lists this partition, its "
        "manifest and parts are missing"
    )
    assert main(["query", "SELECT count(*) AS n FROM cutout_scores"]) == 2
    assert capsys.readouterr().err.strip() == f"error: refused: {gone}"
    assert main(["tables", "--format", "csv"]) == 2
    out, err = capsys.readouterr()
    assert "negatives" in out and "cutout_scores" not in out and err.strip() == f"error: {gone}"
    assert main(["verify"]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == f"error: {gone}" and out.strip() == "verified 2 tables: 1 problems"


def test_a_lake_written_before_commit_records_reads_and_is_adopted(lake):
    _fill(lake)
    for table in ("evaluation/cutout_scores", "catalog/negatives"):
        lake.fs.delete_dir(f"{lake.root}/{MANIFEST_DIR}/{table}/{RECORD_DIR}")
    assert lake.read_table("evaluation", "cutout_scores").num_rows == 10
    assert lake.verify("evaluation", "cutout_scores") == [
        f"evaluation/cutout_scores: sweep_file={s}: not in the table's commit records (written before them: "
        "`dhs verify --adopt` records it)"
        for s in (A, B)
    ]
    assert lake.verify("catalog", "negatives", adopt=True) == []
    assert lake.verify("evaluation", "cutout_scores", adopt=True) == []
    _delete_the_partition(lake)  # once adopted, a partition that goes is named
    with pytest.raises(InputError, match="sweep_file=a.fits: gone: the table's commit record lists this partition"):
        lake.read_table("evaluation", "cutout_scores")


def test_a_table_whose_every_partition_is_gone_is_listed_and_refused(lake):
    _fill(lake)
    lake.delete_partition("evaluation", "cutout_scores", {"sweep_file": B})  # an upstream removal: no record left
    _delete_the_partition(lake)
    assert lake.tables() == [("catalog", "negatives"), ("evaluation", "cutout_scores")]
    with pytest.raises(InputError, match="sweep_file=a.fits: gone"):
        lake.partitions("evaluation", "cutout_scores")


@pytest.mark.parametrize("sql", ["SELECT 1; SELECT 2", "select 1 ; select 2;"])
def test_more_than_one_statement_is_refused(sql):
    with pytest.raises(InputError, match="runs one statement at a time, got 2"):
        check_read_only(sql)


# --------------------------------------------------------------------------- output hygiene
def test_json_output_is_strict():
    from lake_platform.query import format_rows

    text = format_rows(["x", "v"], [(float("nan"), [1.0, float("inf")]), (float("-inf"), None)], "json")
    assert text == '[{"x": null, "v": [1.0, null]}, {"x": null, "v": null}]'
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


def test_control_characters_are_escaped_in_table_output():
    from lake_platform.query import format_rows

    text = format_rows(["name\x07"], [("a\x1b[2J\x1b]0;owned\x07b\r\n\x9b",)])
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\x9b" not in text
    assert text.splitlines()[0].rstrip() == "name\\x07"
    assert text.splitlines()[2].rstrip() == "a\\x1b[2J\\x1b]0;owned\\x07b\\x0d\\x0a\\x9b"


def test_printed_results_are_capped_in_bytes_with_a_note(cli_lake, capsys):
    sql = "SELECT i, repeat('x', 100000) AS big FROM range(50) t(i)"
    assert main(["query", sql, "--max-bytes", "65536", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert len(out.encode()) < 70_000 and "... (95,904 more characters)" in out
    assert err.strip() == "note: output cut at 65,536 bytes (--max-bytes): long cells shortened"
    assert main(["query", "SELECT 1", "--max-bytes", "10"]) == 2
    assert capsys.readouterr().err.strip() == "error: --max-bytes must be >= 1024, got 10"


def test_a_timeout_past_a_day_is_refused(cli_lake, capsys):
    assert main(["query", "SELECT 1", "--timeout", "1e12"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: timeout must be a number of seconds in (0, 86400] and max rows >= 1, got timeout=1e+12, max rows=10000"
    )


def test_dhs_cutout_refuses_to_overwrite_without_force(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.fits").write_bytes(b"keep me")
    assert main(["cutout", "10", "-40", "--out", "c.fits"]) == 2
    assert capsys.readouterr().err.strip() == "error: c.fits exists: pass --force to replace it"
    assert (tmp_path / "c.fits").read_bytes() == b"keep me"


def test_a_cutout_too_large_for_memory_is_refused_before_allocating():
    from darkhaloscope.imaging.cutout_io import check_cutout_request

    with pytest.raises(InputError) as err:
        check_cutout_request(10.0, -40.0, 100_000, max_size=100_000)
    assert str(err.value) == (
        "size 100000 pixels needs 223.5 GiB for its image and inverse variance (3 bands, float32), over the "
        "1 GiB a cutout may take"
    )


def test_an_unknown_asset_is_a_user_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DHS_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DHS_MOCK_DIR", str(tmp_path / "mock"))
    assert main(["materialize", "no_such_asset"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown asset 'no_such_asset'; known assets: ")


# --------------------------------------------------------------------------- grades landed as checked
GRADES_HEADER = "object_id,grade,ra,dec,score,model_version,known\n"


@pytest.mark.parametrize(
    "body, says",
    [
        ("--5,A,150.0,1.0,0.9,v1,false\n", "g.csv:2: object_id '--5' is not an integer (ASCII digits)"),
        ("\u00b2,A,150.0,1.0,0.9,v1,false\n", "g.csv:2: object_id '\u00b2' is not an integer (ASCII digits)"),
        ("\u0667,A,150.0,1.0,0.9,v1,false\n", "g.csv:2: object_id '\u0667' is not an integer (ASCII digits)"),
        ("7,A,\u0661\u0665\u0660,1.0,0.9,v1,false\n", "g.csv:2: ra '\u0661\u0665\u0660' is not a number"),
        ("7,A,150.0\n", "g.csv:2: 3 fields, the header has 7"),
        ("7,A,150.0,1.0,0.9,v1,false,extra\n", "g.csv:2: 8 fields, the header has 7"),
        ("7,A,150.0,1.0,0.9,v1," + "x" * 140_000 + "\n", "g.csv:2: field larger than field limit (131072)"),
    ],
)
def test_a_bad_grades_row_is_named_by_file_and_line(body, says):
    from darkhaloscope.search.grades import parse_grades_csv

    with pytest.raises(InputError) as err:
        parse_grades_csv((GRADES_HEADER + body).encode(), "g.csv")
    assert str(err.value) == says


def test_a_reordered_header_with_a_short_row_is_named():
    from darkhaloscope.search.grades import parse_grades_csv

    with pytest.raises(InputError, match=r"^g.csv:3: 2 fields, the header has 7$"):
        parse_grades_csv(
            b"known,model_version,score,dec,ra,grade,object_id\nfalse,v1,0.9,1.0,150.0,A,7\nfalse,v1\n", "g.csv"
        )


def test_a_grades_file_that_is_no_file_or_too_large_is_refused(tmp_path):
    from darkhaloscope.search.grades import read_grades_file

    with pytest.raises(InputError, match="^/dev/zero: not a regular file$"):
        read_grades_file("/dev/zero")
    big = tmp_path / "big.csv"
    big.write_bytes(b"x" * 2000)
    with pytest.raises(InputError, match=r"big.csv: larger than 1,024 bytes, the most a grades file may hold$"):
        read_grades_file(str(big), max_bytes=1024)


def _candidates(tmp_path) -> Lake:
    lake = Lake(str(tmp_path / "lake"))
    cand = {"object_id": pa.array([7, 8], pa.int64()), "ra": [150.0, 150.1], "dec": [1.0, 1.0]}
    lake.write_table("search", "candidates", pa.table({**cand, "score": [0.9, 0.8], "model_version": ["v1", "v1"]}))
    return lake


def test_a_grades_file_changed_after_its_check_lands_nothing(tmp_path):
    from darkhaloscope.search.grades import checked_grades_file

    lake = _candidates(tmp_path)
    path = tmp_path / "g.csv"
    path.write_text(GRADES_HEADER + "7,A,150.0,1.0,0.9,v1,false\n")
    checked = hashlib.sha256(path.read_bytes()).hexdigest()
    assert checked_grades_file(str(path), checked, lake.table("search", "candidates"), None) == path.read_bytes()
    path.write_text(GRADES_HEADER + "9,A,150.0,1.0,0.9,made-up,false\n")  # replaced between check and run
    with pytest.raises(InputError, match=r"g.csv: changed since it was checked \(sha256 [0-9a-f]{16}…, checked "):
        checked_grades_file(str(path), checked, lake.table("search", "candidates"), None)


def test_the_ui_path_checks_ids_against_the_candidates(tmp_path):
    from darkhaloscope.search.grades import checked_grades_file

    lake = _candidates(tmp_path)
    path = tmp_path / "g.csv"
    path.write_text(GRADES_HEADER + "9,A,150.0,1.0,0.9,v1,false\n")
    with pytest.raises(InputError, match=r"g.csv: 1 object_id\(s\) are not candidates, e.g. \[9\]"):
        checked_grades_file(str(path), "", lake.table("search", "candidates"), None)  # no sha256: the launchpad
    with pytest.raises(InputError, match="no published candidates to check the grades against"):
        checked_grades_file(str(path), "", lake.table("search", "no_candidates"), None)


# --------------------------------------------------------------------------- settings refused before work
@pytest.mark.parametrize(
    "name, value, says",
    [
        ("DHS_LAKE", "s3://", "expected s3://bucket/prefix (no bucket named)"),
        ("DHS_LAKE", "s3:///lake", "expected s3://bucket/prefix (no bucket named)"),
        ("DHS_LAKE", "gs://bucket/lake", "expected a local folder or s3://bucket/prefix"),
        (
            "DHS_SURVEY",
            "/nonexistent/dr10",
            "no such folder (expected mock, a DR10 mirror's folder or s3://bucket/prefix)",
        ),
        ("DHS_SURVEY", "s3://", "expected s3://bucket/prefix (no bucket named)"),
        ("DHS_MOCK_DIR", "/nonexistent/mock", "its parent folder /nonexistent does not exist"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_before_work(tmp_path, monkeypatch, capsys, name, value, says):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(name, value)
    assert main(["materialize", "sweeps"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {name}='{value}': {says}"
    assert os.listdir(tmp_path) == []  # nothing written, not even a folder named s3:


def test_values_are_stripped_where_they_are_checked(monkeypatch):
    from resources.settings import setting, validate

    monkeypatch.setenv("DHS_PROFILE", "demo ")
    validate()
    assert setting("DHS_PROFILE") == "demo"


@pytest.mark.parametrize("command", [["tables"], ["query", "SELECT 1"], ["verify"], ["export", "sweeps"]])
def test_a_read_command_refuses_a_local_lake_that_does_not_exist(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DHS_LAKE", str(tmp_path / "nonexistent" / "lake"))
    assert main(command) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: DHS_LAKE='{tmp_path}/nonexistent/lake': no lake there (dhs materialize creates one)"
    )
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- bounded waits
def test_an_s3_endpoint_that_never_answers_is_named_in_bounded_time(tmp_path, monkeypatch, capsys):
    import socket
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # the kernel accepts connections; nobody reads or answers them
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    monkeypatch.chdir(tmp_path)
    for name, value in (
        ("DHS_LAKE", "s3://silent/lake"),
        ("DHS_S3_ENDPOINT", endpoint),
        ("DHS_S3_CONNECT_TIMEOUT_S", "0.5"),
        ("DHS_S3_REQUEST_TIMEOUT_S", "0.5"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
    ):
        monkeypatch.setenv(name, value)
    t0 = time.monotonic()
    try:
        assert main(["tables"]) == 2
    finally:
        silent.close()
    assert time.monotonic() - t0 < 60
    err = capsys.readouterr().err
    assert err.startswith("error: the S3 endpoint did not answer in time while accessing s3://silent/lake")
    assert "DHS_S3_REQUEST_TIMEOUT_S" in err and "Traceback" not in err


# --------------------------------------------------------------------------- a stop that stops
def _stopped(tmp_path, grace_s: float, *flags: str):
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.stop_target", str(tmp_path), str(grace_s), *flags],
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path / "home")},
    )
    deadline = time.monotonic() + 120
    while not (tmp_path / "child").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
        time.sleep(0.2)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=grace_s + 30)
    child = int((tmp_path / "child").read_text())
    time.sleep(0.5)
    gone = not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z"
    return proc.returncode, err, time.monotonic() - t0, (tmp_path / "attempts").read_text().count("attempt"), gone


def test_sigterm_stops_the_step_retries_nothing_and_kills_what_it_launched(tmp_path):
    (tmp_path / "home").mkdir()
    status, err, seconds, attempts, child_gone = _stopped(tmp_path, 30.0)
    assert status == 128 + 15 and err.strip().splitlines()[-1] == "stopped by SIGTERM"
    assert attempts == 1 and child_gone  # the retry policy did not launch it again
    assert seconds < 30


def test_a_step_that_ignores_the_stop_is_killed_after_the_grace(tmp_path):
    (tmp_path / "home").mkdir()
    status, err, seconds, attempts, child_gone = _stopped(tmp_path, 2.0, "stubborn")
    assert status == 128 + 15 and child_gone and attempts == 1
    assert err.strip().splitlines()[-1] == (
        "stopped by SIGTERM: the run had not ended 2 s after it (DHS_STOP_GRACE_S); its processes were killed"
    )
    assert 2 <= seconds < 15


# --------------------------------------------------------------------------- an asset's input that fails verification
def test_an_asset_whose_input_was_altered_fails_naming_it_and_publishes_nothing(tmp_path):
    import dagster as dg

    from io_managers import LakeIOManager
    from lens_assets.evaluation import cutout_scores, thresholds
    from lens_assets.ops import deliver_run_alerts
    from lens_assets.shared.partitions import sweep_partitions
    from resources import ComputeResource, LakeResource
    from resources.alert_sinks import AlertSinksResource
    from tests.support.wap import published_files, run_assets
    from tests.support.webhook_receiver import WebhookReceiver
    from tests.test_scores_asset import SWEEP
    from tests.test_scores_asset import _lake as scored_lake

    lake = scored_lake(tmp_path)
    resource = LakeResource(uri=lake.uri)
    resources = {
        "lake": resource,
        "io_manager": LakeIOManager(uri=resource.uri),
        "compute": ComputeResource(device="cpu", profile="demo"),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(sweep_partitions.name, [SWEEP])
    assert run_assets([cutout_scores.key], resources, instance, partition_key=SWEEP).success
    part = f"{lake.partition_path('evaluation', 'cutout_scores', {'sweep_file': SWEEP})}/{PART_FILE}"
    data = bytearray(_bytes(lake, part))
    data[len(data) // 3] ^= 0x40
    _put(lake, part, bytes(data))
    before = published_files(lake)
    failed = run_assets([thresholds.key], resources, instance, raise_on_error=False)
    assert not failed.success
    failure = next(e for e in failed.all_events if e.event_type_value == "STEP_FAILURE")
    assert (
        f"evaluation/cutout_scores: sweep_file={SWEEP}/part-0.parquet: its sha256 differs from the manifest's"
        in str(failure.step_failure_data.error)
    )
    assert published_files(lake) == before and not lake.exists("evaluation", "thresholds")
    # the failure reaches the configured alert sink, as dhs materialize delivers it after the run
    with WebhookReceiver(lifetime_s=60) as receiver:
        sinks = AlertSinksResource(webhook_url=receiver.url, lake_uri=lake.uri, webhook_backoff_s=0.05).build_sinks()
        outcomes = deliver_run_alerts(instance, failed.run_id, sinks)
        bodies = [r.json() for r in receiver.accepted()]
    assert len(outcomes) == 1 and outcomes[0].ok
    assert [(b["kind"], b["asset"], b["severity"]) for b in bodies] == [
        ("run_failed", "evaluation/thresholds", "ERROR")
    ]
    assert f"sweep_file={SWEEP}/part-0.parquet: its sha256 differs from the manifest's" in bodies[0]["description"]
    assert published_files(lake) == before  # the alert log (ops/) is all the delivery wrote


def test_a_manifest_naming_a_file_outside_its_folder_is_refused(lake):
    _fill(lake)
    path = lake.manifest_path("catalog", "negatives")
    record = json.loads(_bytes(lake, path))
    record["parts"][0]["name"] = "../../evaluation/cutout_scores/sweep_file=a.fits/part-0.parquet"
    _put(lake, path, json.dumps(record).encode())
    with pytest.raises(
        InputError, match=r"unreadable manifest \('\.\./\.\./evaluation/.*' is not a part file of its folder\)"
    ):
        lake.read_table("catalog", "negatives")


def test_dhs_main_says_stopped_in_one_line_and_exits_128_plus_the_signal(tmp_path):

    script = (
        "import os, signal, sys, time\n"
        "import dhs.main as m\n"
        "def slow(args):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "    return 0\n"
        "m.cmd_materialize = slow\n"
        "sys.exit(m.main(['materialize', 'sweeps']))\n"
    )
    done = _run_stop_script(script, tmp_path)
    assert done.returncode == 128 + 15 and done.stderr.strip() == "stopped by SIGTERM", done.stderr


def _run_stop_script(script: str, tmp_path):
    """``python -c script`` from the repository with a fresh Dagster home and lake under ``tmp_path``."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        env={**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "DHS_LAKE": str(tmp_path / "lake")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_after_a_stop_dagster_console_records_stay_off_the_terminal(tmp_path):

    script = (
        "import os, signal, sys, time\n"
        "import dhs.main as m\n"
        "def slow(args):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(30)\n"
        "    finally:\n"
        "        time.sleep(0.5)\n"  # the stop's watcher has seen the signal
        "        sys.stderr.write('2026-12-02 07:19:28 +0000 - dagster - ERROR - STEP_FAILURE\\nStack Trace:\\n')\n"
        "        print('a line of the command itself', file=sys.stderr)\n"
        "m.cmd_materialize = slow\n"
        "sys.exit(m.main(['materialize', 'sweeps']))\n"
    )
    done = _run_stop_script(script, tmp_path)
    assert done.returncode == 128 + 15
    assert done.stderr.splitlines() == ["a line of the command itself", "stopped by SIGTERM"], done.stderr
