"""Through the UI path — `dagster dev` (webserver + daemon), runs launched over GraphQL as the UI
launches them — on an S3 lake (the loopback S3 server behind the fault proxy):

* a failing blocking check (a reader bug that duplicates rows, injected into the daemon's
  processes) fails the run once: the published partition stays byte for byte, the run-retry
  daemon does not re-run it, the alert sensor sends exactly one alert;
* a transient storage fault (S3 answering 500 to the staged upload) is absorbed by the lake's
  retries inside the run: one run, success, no alert.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import dagster as dg
import pytest

from darkhaloscope.survey.sweeps import SweepBox
from lake_platform.lake import Lake
from tests.support.dagster_ui import REPO, DagsterDev
from tests.support.fault_proxy import FaultProxy
from tests.support.s3_server import fresh_bucket
from tests.support.sweep_rows import write_sweep
from tests.support.wap import published_files
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.slow, pytest.mark.s3]
BAD, GOOD = "sweep-030m005-035p000.fits", "sweep-035m005-040p000.fits"
SWEEPS = ["survey", "sweeps"]


def _mirror(root: Path) -> Path:
    for name, box in ((BAD, SweepBox(30, 35, -5, 0)), (GOOD, SweepBox(35, 40, -5, 0))):
        write_sweep(root, name, 500, box)
    return root


def _retry_decision(instance: dg.DagsterInstance, run_id: str) -> tuple[str | None, str | None]:
    """(failure reason, will-retry) the instance recorded when the run failed: the run-retry
    daemon re-launches only runs tagged ``dagster/will_retry = true``."""
    tags = instance.get_run_by_id(run_id).tags
    return tags.get("dagster/failure_reason"), tags.get("dagster/will_retry")


def _alerts_for(rx: WebhookReceiver, run_id: str) -> list[dict]:
    return [r.json() for r in rx.accepted() if r.json().get("run_id") == run_id]


@pytest.mark.timeout(600)
def test_ui_runs_fail_once_on_a_blocking_check_and_absorb_transient_storage_faults(tmp_path, s3_server):
    bucket = fresh_bucket(s3_server)
    flag = tmp_path / "duplicate-rows"
    with FaultProxy(s3_server.host, s3_server.port, lifetime_s=500) as proxy, WebhookReceiver(lifetime_s=500) as rx:
        env = dict(
            os.environ,
            DHS_LAKE=f"s3://{bucket}/lake",
            DHS_S3_ENDPOINT=proxy.endpoint_url,
            DHS_SURVEY=str(_mirror(tmp_path / "mirror")),
            DHS_ALERT_WEBHOOK=rx.url,
            DHS_TEST_DUPLICATE_ROWS=str(flag),
            PYTHONWARNINGS="ignore",
            DHS_AUTOMATION="off",  # the test launches every run itself: the survey_flow sensor stays stopped
            PYTHONPATH=os.pathsep.join([str(REPO / "tests" / "support" / "faults"), str(REPO)]),
        )
        lake = Lake(f"s3://{bucket}/lake", s3_endpoint=s3_server.endpoint_url)
        with DagsterDev(tmp_path / "home", env, tmp_path / "dagster-dev.log") as ui:
            instance = dg.DagsterInstance.from_config(str(tmp_path / "home"))
            instance.add_dynamic_partitions("sweep_file", [BAD, GOOD])
            assert ui.wait(ui.launch([SWEEPS], BAD)) == "SUCCESS"
            before = published_files(lake)

            flag.write_text("on")  # the reader now duplicates rows: sweeps_contract must refuse them
            failed = ui.launch([SWEEPS], BAD)
            assert ui.wait(failed) == "FAILURE"
            assert published_files(lake) == before
            assert _retry_decision(instance, failed) == ("STEP_FAILURE", "false")
            checks = {
                e.dagster_event.event_specific_data.check_name: e.dagster_event.event_specific_data.passed
                for e in instance.all_logs(failed, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
            }
            assert checks["sweeps_contract"] is False

            flag.unlink()
            proxy.fail("error500", times=2, path_re=r"/lake/_staging/[0-9a-f-]+/_staging/w-")  # the SDK retries these
            transient = ui.launch([SWEEPS], GOOD)
            assert ui.wait(transient) == "SUCCESS"
            assert proxy.actions["error500"] == 2  # the faults really happened

            deadline = time.monotonic() + 120  # the alert sensor ticks every 30 s
            while time.monotonic() < deadline and not _alerts_for(rx, failed):
                time.sleep(2.0)
            time.sleep(35)  # one more tick: nothing is sent twice
            runs = instance.get_runs()
            alerts = _alerts_for(rx, failed)
    assert [r.run_id for r in runs if r.tags.get("dagster/parent_run_id") == failed] == []
    assert len(runs) == 3
    assert [(a["kind"], a["check"]) for a in alerts if a["severity"] == "ERROR"] == [
        ("check_failed", "sweeps_contract"),
        ("check_failed", "sweeps_row_count"),
    ]
    assert not [a for a in alerts if a["kind"] == "run_failed"]
    assert not _alerts_for(rx, transient)
