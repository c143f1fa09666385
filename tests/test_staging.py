"""Write–audit–publish in the library: stage, read back, publish, reject, sweep orphans — on a
local lake and on the loopback S3 server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from lake_platform.lake import PART_FILE, STAGING_DIR, Lake
from lake_platform.staging import REJECTED_DIR, Stage, StageOwner, rejected, sweep_orphans


def _table(n: int, version: int = 1) -> pa.Table:
    return pa.table({"object_id": pa.array(range(n), pa.int64()), "version": pa.array([version] * n, pa.int32())})


def _stage(lake: Lake, owner: str = "run-1", started_at: float | None = None) -> Stage:
    return Stage(lake, owner).open(StageOwner.current(owner, started_at=started_at))


def test_staged_data_is_invisible_until_published_then_replaces_the_old_version(lake):
    lake.write_table("catalog", "rows", _table(3, version=1), partition={"sweep_file": "a.fits"})
    staged = _stage(lake).table("catalog", "rows", {"sweep_file": "a.fits"})
    staged.write(_table(5, version=2))
    staged.write_bytes("note.json", b"{}")
    assert staged.read().num_rows == 5 and staged.num_rows() == 5 and staged.schema().names == ["object_id", "version"]
    # readers of the published table see only the old version, and no table is staged-only
    assert lake.read_table("catalog", "rows").column("version").to_pylist() == [1, 1, 1]
    assert lake.tables() == [("catalog", "rows")]
    version = staged.content_hash()
    info = staged.publish()
    assert info.rows == 5 and info.uri.endswith(f"catalog/rows/sweep_file=a.fits/{PART_FILE}")
    assert lake.read_table("catalog", "rows").column("version").to_pylist() == [2] * 5
    assert lake.read_bytes("catalog", "rows", "note.json", partition={"sweep_file": "a.fits"}) == b"{}"
    assert staged.staged_files() == []
    # the same bytes staged again have the same content hash (the data version)
    again = _stage(lake, "run-2").table("catalog", "rows", {"sweep_file": "a.fits"})
    again.write(_table(5, version=2))
    again.write_bytes("note.json", b"{}")
    assert again.content_hash() == version


def test_rejected_data_is_kept_with_its_reason_and_the_published_version_is_untouched(lake):
    lake.write_table("catalog", "rows", _table(3, version=1))
    path = f"{lake.partition_path('catalog', 'rows')}/{PART_FILE}"
    with lake.fs.open_input_stream(path) as f:
        before = f.read()
    staged = _stage(lake, "run-7").table("catalog", "rows")
    staged.write(_table(4, version=9))
    where = staged.reject({"failed_checks": [{"check": "rows_contract", "description": "duplicate key"}]})
    with lake.fs.open_input_stream(path) as f:
        assert f.read() == before
    assert where == lake.full_uri(f"{lake.root}/{REJECTED_DIR}/run-7/catalog/rows")
    [record] = rejected(lake)
    assert (
        record["owner"] == "run-7" and record["failed_checks"][0]["check"] == "rows_contract" and record["uri"] == where
    )
    assert Lake(where if not lake.is_s3 else lake.uri).is_s3 == lake.is_s3
    assert lake.tables() == [("catalog", "rows")]
    with pytest.raises(InputError, match="nothing staged"):
        staged.publish()


def test_sweep_removes_dead_runs_and_old_rejections_but_keeps_live_and_newer_runs(lake):
    t0 = time.time()
    dead = _stage(lake, "dead-run", started_at=t0 - 100)
    dead.table("catalog", "rows").write(_table(2))
    live = _stage(lake, "live-run", started_at=t0 - 50)
    live.table("catalog", "rows").write(_table(2))
    newer = _stage(lake, "newer-run", started_at=t0 + 1000)
    newer.table("catalog", "rows").write(_table(2))
    old_reject = _stage(lake, "rejected-run", started_at=t0 - 100).table("catalog", "rows")
    old_reject.write(_table(1))
    old_reject.reject({"failed_checks": []})

    report = sweep_orphans(
        lake, before=time.time() + 1, run_alive=lambda owner: owner.run_id == "live-run", rejected_keep_days=0.0
    )
    remaining = {i.base_name for i in lake.fs.get_file_info(_selector(lake, STAGING_DIR))}
    assert {"live-run", "newer-run"} <= remaining and "dead-run" not in remaining
    assert any(p.endswith("dead-run") for p in report.removed) and any(
        p.endswith("rejected-run") for p in report.removed
    )
    assert rejected(lake) == []


def test_a_killed_writers_temporary_object_is_swept_once_its_process_is_gone(tmp_path):
    """A writer SIGKILLed mid-write leaves its temporary object in _staging; it is removed by the
    next sweep, and a live writer's is not."""
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("catalog", "rows", _table(1))
    script = (
        "import sys, time, pyarrow as pa\n"
        "from lake_platform.lake import Lake\n"
        "def batches():\n"
        "    yield pa.record_batch([pa.array([1], pa.int64())], names=['x'])\n"
        "    print('writing', flush=True); time.sleep(60)\n"
        "Lake(sys.argv[1]).write_table('catalog', 'rows', batches(), schema=pa.schema([('x', pa.int64())]))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    proc = subprocess.Popen([sys.executable, "-c", script, lake.root], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "writing"
        temps = [i.path for i in lake.fs.get_file_info(_selector(lake, STAGING_DIR))]
        assert len(temps) == 1 and os.path.basename(temps[0]).startswith("w-")
        assert sweep_orphans(lake, before=time.time() + 1).removed == []  # its writer is alive
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert sweep_orphans(lake, before=time.time() + 1).removed == temps
    assert lake.read_table("catalog", "rows").num_rows == 1


def test_owner_record_round_trips_and_names_pid_and_host(lake):
    stage = _stage(lake, "run-42", started_at=123.0)
    with lake.fs.open_input_stream(stage.owner_path) as f:
        owner = json.loads(f.read())
    assert (
        owner["run_id"] == "run-42" and owner["pid"] == os.getpid() and owner["started_at"] == 123.0 and owner["host"]
    )
    # a later step of the same run keeps the first record
    Stage(lake, "run-42").open(StageOwner.current("run-42", started_at=999.0))
    with lake.fs.open_input_stream(stage.owner_path) as f:
        assert json.loads(f.read())["started_at"] == 123.0


def _selector(lake: Lake, name: str):
    import pyarrow.fs as pafs

    return pafs.FileSelector(f"{lake.root}/{name}", allow_not_found=True)
