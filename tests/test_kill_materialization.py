"""`dhs materialize` killed with SIGKILL while it commits a partition to an S3 lake.

The lake is on the loopback S3 server behind the fault proxy, which holds the upload of the run's
staged ``sweeps`` partition silent: the materialization is then provably mid-write when the whole
process group gets SIGKILL (no Python cleanup runs). The published partition from the previous run
must still be there, byte for byte and readable; the next ``dhs`` marks the killed run failed and
its run sweeps the killed run's staging area; and a re-run publishes the same bytes.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from astropy.io import fits

from darkhaloscope.survey import sweep_model as sm
from resources.survey import SWEEP_DIR
from tests.support.fault_proxy import FaultProxy
from tests.support.s3_server import fresh_bucket
from tests.support.sweep_rows import dr10_rows

pytestmark = pytest.mark.s3
REPO = Path(__file__).resolve().parents[1]
NAME = "sweep-030m005-035p000.fits"
PART_KEY = f"lake/survey/sweeps/sweep_file={NAME}/part-0.parquet"


def _materialize(tmp_path: Path, bucket: str, proxy: FaultProxy) -> subprocess.Popen:
    env = dict(
        os.environ,
        DHS_LAKE=f"s3://{bucket}/lake",
        DHS_S3_ENDPOINT=proxy.endpoint_url,
        DHS_SURVEY=str(tmp_path / "mirror"),
        DAGSTER_HOME=str(tmp_path / "dagster_home"),
        PYTHONPATH=str(REPO),
        PYTHONWARNINGS="ignore",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "dhs.main", "materialize", "sweeps"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.mark.timeout(180)
def test_sigkill_mid_commit_keeps_the_partition_and_a_rerun_is_identical(tmp_path, s3_server):
    path = tmp_path / "mirror" / SWEEP_DIR / NAME
    path.parent.mkdir(parents=True)
    rows = dr10_rows(3000)
    fits.HDUList(
        [
            fits.PrimaryHDU(),
            fits.BinTableHDU.from_columns(
                [fits.Column(name=n, format=t, array=rows[n]) for n, t in sm.DR10_SWEEP_COLUMNS if t != "L"]
            ),
        ]
    ).writeto(path)
    bucket = fresh_bucket(s3_server)
    s3 = s3_server.client()
    with FaultProxy(s3_server.host, s3_server.port, stall_s=150) as proxy:
        first = _materialize(tmp_path, bucket, proxy)
        out, _ = first.communicate(timeout=120)
        assert first.returncode == 0, out
        committed = s3.get_object(Bucket=bucket, Key=PART_KEY)["Body"].read()

        # Hold every upload into the sweeps partition silent, run again, and kill once it hangs there.
        proxy.fail("stall", path_re=r"/lake/_staging/[0-9a-f-]+/_staging/w-")
        proxy.reset_counters()
        second = _materialize(tmp_path, bucket, proxy)
        deadline = time.monotonic() + 90
        while not proxy.actions["stall"] and time.monotonic() < deadline and second.poll() is None:
            time.sleep(0.05)
        assert proxy.actions["stall"], f"the write never reached the staging upload: {proxy.log[-5:]}"
        os.killpg(second.pid, signal.SIGKILL)
        second.wait(timeout=30)
        assert second.returncode == -signal.SIGKILL

        assert s3.get_object(Bucket=bucket, Key=PART_KEY)["Body"].read() == committed
        assert pq.read_table(io.BytesIO(committed)).num_rows == 3000
        killed_staging = _staging_owners(s3, bucket)
        assert killed_staging, "the killed run left no staging area"
        proxy.clear()
        third = _materialize(tmp_path, bucket, proxy)
        out, _ = third.communicate(timeout=120)
        assert third.returncode == 0, out
        assert "was killed: marked failed" in out
    assert s3.get_object(Bucket=bucket, Key=PART_KEY)["Body"].read() == committed
    killed = [r for r in _runs(tmp_path) if r.status.value == "FAILURE"]
    assert len(killed) == 1 and killed[0].run_id in killed_staging
    assert not _staging_owners(s3, bucket) & killed_staging  # swept by the re-run


def _staging_owners(s3, bucket: str) -> set[str]:
    """Run ids owning a staging area in the lake."""
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="lake/_staging/").get("Contents", [])]
    return {k.split("/")[2] for k in keys if k.count("/") > 2 and not k.split("/")[2].startswith("w-")}


def _runs(tmp_path: Path):
    import dagster as dg

    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        return list(instance.get_runs())
