"""A partition write killed with SIGKILL half-way leaves the previous version intact.

A child process streams a ~40 MB table (100 record batches of random doubles, which zstd cannot
shrink) through ``Lake.write_table`` into a local lake. The test waits until the hidden
temporary object in ``<lake>/_staging/`` exists and is growing, SIGKILLs the child (no Python
cleanup runs), and then checks that readers still see the old partition byte for byte, that the
orphaned temporary object is ignored, that re-running the write produces the same bytes as an
uninterrupted write, and that the next run's sweep removes the orphan.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.lake import Lake

REPO = Path(__file__).resolve().parents[1]
PART = {"brick": "b0001"}
N_BATCHES, ROWS = 100, 50_000  # 100 x 50k x (8 B value + 8 B id) = 80 MB before compression

WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np, pyarrow as pa
    from lake_platform.lake import Lake
    from darkhaloscope.seeding import rng_for

    root, pause = sys.argv[1], float(sys.argv[2])
    schema = pa.schema([("id", pa.int64()), ("value", pa.float64())])

    def batches():
        for i in range({n}):
            # Seeded from the batch index: every run writes the same values.
            values = rng_for("kill-midwrite", i).random({rows})
            ids = np.arange(i * {rows}, (i + 1) * {rows}, dtype=np.int64)
            yield pa.record_batch([pa.array(ids), pa.array(values)], schema=schema)
            # The pause stands in for slow upstream work, so the parent can catch the write mid-way.
            time.sleep(pause)

    Lake(root).write_table("imaging", "stamps", batches(), schema=schema, partition={{"brick": "b0001"}})
    print("committed", flush=True)
    """
).format(n=N_BATCHES, rows=ROWS)


def _run_writer(tmp_path: Path, root: Path, pause: float) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, str(script), str(root), str(pause)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _part_file(root: Path) -> Path:
    return root / "imaging" / "stamps" / "brick=b0001" / "part-0.parquet"


def _old_version(root: Path) -> pa.Table:
    old = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "value": pa.array([0.5, 1.5, 2.5])})
    Lake(str(root)).write_table("imaging", "stamps", old, partition=PART)
    return old


@pytest.mark.timeout(80)
def test_sigkill_mid_write_keeps_previous_version_and_rerun_is_identical(tmp_path):
    root = tmp_path / "lake"
    old = _old_version(root)
    old_bytes = _part_file(root).read_bytes()

    proc = _run_writer(tmp_path, root, pause=0.05)
    staging_glob = str(root / "_staging" / "w-*")
    sizes: list[int] = []
    deadline = time.monotonic() + 40
    try:
        # Kill only once the staging file has been seen growing: the write is really in progress.
        while time.monotonic() < deadline and proc.poll() is None:
            found = glob.glob(staging_glob)
            if found and os.path.getsize(found[0]) > 0:  # created empty first, then row groups land
                sizes.append(os.path.getsize(found[0]))
                if len(sizes) >= 2 and sizes[-1] > sizes[0] > 0:
                    break
            time.sleep(0.02)
        assert proc.poll() is None, f"writer ended before it could be killed: {proc.communicate()}"
        assert len(sizes) >= 2 and sizes[-1] > sizes[0] > 0, f"staging file never grew: {sizes}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    # The killed write left its staging file behind (nothing could clean up) ...
    leftovers = glob.glob(staging_glob)
    assert len(leftovers) == 1 and os.path.getsize(leftovers[0]) >= sizes[-1]
    # ... but readers see only the previous version, unchanged to the byte.
    lake = Lake(str(root))
    assert _part_file(root).read_bytes() == old_bytes
    assert lake.read_table("imaging", "stamps", partition=PART).equals(old)
    assert lake.partitions("imaging", "stamps") == [PART]
    assert lake.count_rows("imaging", "stamps") == 3
    assert lake.read_table("imaging", "stamps").num_rows == 3
    assert lake.tables() == [("imaging", "stamps")]

    # Re-running the write commits; an uninterrupted write into a fresh lake gives the same bytes.
    rerun = _run_writer(tmp_path, root, pause=0.0)
    clean_root = tmp_path / "clean"
    clean = _run_writer(tmp_path, clean_root, pause=0.0)
    for p in (rerun, clean):
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()[-2000:]
        assert b"committed" in out
    assert _part_file(root).read_bytes() == _part_file(clean_root).read_bytes()
    assert lake.count_rows("imaging", "stamps") == N_BATCHES * ROWS
    # The orphan from the killed run is still there and still ignored ...
    assert glob.glob(staging_glob) == leftovers
    assert lake.partitions("imaging", "stamps") == [PART]
    assert os.path.getsize(_part_file(root)) > 30e6  # really "tens of MB"
    # ... until the next run sweeps it: older than the sweeping run and its writer is gone
    from lake_platform.staging import sweep_orphans

    assert sweep_orphans(lake, before=time.time()).removed == leftovers
    assert glob.glob(staging_glob) == []
