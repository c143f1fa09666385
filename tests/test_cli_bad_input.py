"""``dhs`` refuses bad input with one line and exit 2 (a run that fails: exit 1 naming the asset),
never a traceback: settings validated before anything runs, grade ids range-checked, query
timeouts finite, CSV output safe to open in a spreadsheet, an unreachable S3 lake named."""

from __future__ import annotations

import socket

import pyarrow as pa
import pytest

from dhs.main import main
from lake_platform.lake import Lake
from lake_platform.query import format_rows
from tests.support.sweep_rows import write_sweep

GRADES_HEADER = "object_id,grade,ra,dec,score,model_version,known\n"


@pytest.fixture()
def in_tmp(tmp_path, monkeypatch):
    """A working folder with its own lake, instance and mock cache."""
    monkeypatch.chdir(tmp_path)
    for name, value in (
        ("DHS_LAKE", tmp_path / "lake"),
        ("DAGSTER_HOME", tmp_path / "home"),
        ("DHS_MOCK_DIR", tmp_path / "mock"),
    ):
        monkeypatch.setenv(name, str(value))
    return tmp_path


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("DHS_MOCK_SEED", "abc", "expected a whole number >= 0"),
        ("DHS_MOCK_SEED", "-1", "expected a whole number >= 0"),
        ("DHS_MOCK_SEED", "1e3", "expected a whole number >= 0"),
        ("DHS_DEVICE", "gpu", "expected one of auto, cpu, cuda"),
        ("DHS_PROFILE", "huge", "expected one of demo, full"),
        ("DHS_S3_ENDPOINT", "127.0.0.1:9000", "expected an http:// or https:// URL"),
        ("DHS_REJECTED_KEEP_DAYS", "inf", "expected a finite number > 0"),
    ],
)
def test_a_bad_setting_is_refused_before_anything_runs(in_tmp, monkeypatch, capsys, name, value, says):
    monkeypatch.setenv(name, value)
    assert main(["materialize", "sweeps"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {name}='{value}': {says}" and "Traceback" not in err
    assert not (in_tmp / "mock").exists() and not (in_tmp / "lake").exists()  # nothing generated, nothing written


def test_cuda_without_a_gpu_is_refused_before_anything_runs(in_tmp, monkeypatch, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: DHS_DEVICE=cuda is valid here")
    monkeypatch.setenv("DHS_DEVICE", "cuda")
    assert main(["demo"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "error: DHS_DEVICE='cuda': torch sees no CUDA device on this machine (use auto or cpu)"
    )


def test_a_grade_id_beyond_int64_names_its_line(in_tmp, capsys):
    Lake(str(in_tmp / "lake")).write_table("search", "candidates", pa.table({"object_id": pa.array([1], pa.int64())}))
    csv = in_tmp / "grades.csv"
    csv.write_text(GRADES_HEADER + "1,A,31.0,-2.0,0.9,v1,false\n" + "1" * 30 + ",B,31.0,-2.0,0.9,v1,false\n")
    assert main(["grade", str(csv)]) == 2
    err = capsys.readouterr().err
    assert f"error: {csv}:3: object_id {'1' * 30} out of range" in err and "Traceback" not in err


def test_a_query_timeout_must_be_finite(in_tmp, capsys):
    for timeout in ("inf", "nan", "0", "1e12"):
        assert main(["query", "select 1", "--timeout", timeout]) == 2
        assert "timeout must be a number of seconds in (0, 86400]" in capsys.readouterr().err


def test_csv_output_neutralises_cells_a_spreadsheet_would_evaluate():
    rows = [('=HYPERLINK("x").csv', -1.5), ("+1", 2), ("@SUM(A1)", None), ("-cmd", 0), ("plain", 3)]
    lines = format_rows(["source_file", "value"], rows, "csv").splitlines()
    # a leading ' makes a spreadsheet show the text; numbers (-1.5 included) are left as they are
    assert lines[1:] == ['"\'=HYPERLINK(""x"").csv",-1.5', "'+1,2", "'@SUM(A1),", "'-cmd,0", "plain,3"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_s3_lake_is_named_not_a_traceback(in_tmp, monkeypatch, capsys):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    write_sweep(in_tmp / "mirror", "sweep-030m005-035p000.fits")
    monkeypatch.setenv("DHS_LAKE", "s3://nowhere/lake")
    monkeypatch.setenv("DHS_S3_ENDPOINT", endpoint)
    monkeypatch.setenv("DHS_SURVEY", str(in_tmp / "mirror"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    assert main(["tables"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach the S3 endpoint") and endpoint.removeprefix("http://") in err
    assert main(["materialize", "sweeps"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("FAILED: asset sweep_files") and "cannot reach the S3 endpoint" in err
