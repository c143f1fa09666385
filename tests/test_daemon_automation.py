"""Through `dagster dev` (webserver + daemon), no run launched from a terminal:

* a survey-wide backfill submitted with ``dhs backfill`` (GraphQL, as the UI's "Materialize all")
  is planned and run by the daemon: every partition of the per-sweep-file assets, upstream before
  downstream, then the candidates;
* a sweep file that then appears in the mirror flows through ingest, the catalog, the search and
  the candidates on its own: ``sweep_file_sensor`` registers its partition and the ``survey_flow``
  automation sensor requests its assets as their upstream partitions arrive.

The survey is a DR10 mirror of two mock sweep files (one there from the start, one added), the
image source a loopback cutout service; the lens finder (untrained), known lenses, thresholds
and injection scores the search and the candidates read are written to the lake and reported to
the instance as materialized, as if made by earlier runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.constants import DR10_SWEEP_DIR
from darkhaloscope.lensing.bank import PLAN_SUMMARY_KEY
from lake_platform.lake import Lake
from mock_survey.survey import MockSurveyConfig, generate_mock_survey
from tests.spark_fixtures import known_lenses_table
from tests.support.cutout_server import CutoutServer
from tests.support.dagster_ui import REPO, DagsterDev
from tests.support.tiny_finder import publish_tiny_finder

pytestmark = [pytest.mark.slow, pytest.mark.spark]

FLOW = [("survey", "sweeps"), ("catalog", "negatives"), ("search", "search_targets"), ("search", "search_scores")]
#: Bounds on the daemon's work on a loaded 2-core machine (seconds).
BACKFILL_S, FLOW_S = 900, 900


def _prepared_lake(root: Path) -> Lake:
    """A lake with what the flow reads besides the survey, and no sweep-file partition yet."""
    lake = Lake(str(root))
    publish_tiny_finder(lake)
    lake.write_table("survey", "known_lenses", known_lenses_table([{"name": "FAR", "ra": 200.0, "dec": 40.0}]))
    lake.write_table(
        "evaluation", "thresholds", pa.table({"name": ["score>0"], "threshold": pa.array([0.0], pa.float64())})
    )
    inj = pa.table(
        {
            "kind": ["injection"] * 2,
            "injection_id": pa.array(np.arange(2)),
            "success": [True, True],
            "score": pa.array([0.9, 0.2], pa.float64()),
            "valid": [True, True],
            "src_mag_r": pa.array(np.full(2, 22.0)),
        }
    )
    lake.write_table("evaluation", "injection_scores", inj, partition={"injection_batch": "batch-00000"})
    # the plan whose one batch those scores are (injection_batch_sensor keeps the partitions in step with it)
    plan = pa.table({"batch": pa.array([0], pa.int32())}).replace_schema_metadata({PLAN_SUMMARY_KEY: b"{}"})
    lake.write_table("injection", "injection_plan", plan)
    return lake


def _report_made(instance: dg.DagsterInstance) -> None:
    """The prepared tables, recorded as materialized (the automation reads the instance)."""
    instance.add_dynamic_partitions("injection_batch", ["batch-00000"])
    for path in (
        ("survey", "sweep_files"),
        ("survey", "known_lenses"),
        ("training", "lens_finder"),
        ("injection", "injection_plan"),
    ):
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=list(path)))
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=["evaluation", "thresholds"]))
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=["evaluation", "injection_scores"], partition="batch-00000")
    )


def _published(lake: Lake, name: str) -> list[tuple[str, str]]:
    return [t for t in FLOW if not lake.exists(*t, {"sweep_file": name})]


def _by_automation(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """The run was requested by the survey_flow sensor (as a run, or in a backfill it submitted)."""
    if run.tags.get("dagster/sensor_name") == "survey_flow":
        return True
    backfill = run.tags.get("dagster/backfill")
    return backfill is not None and instance.get_backfill(backfill).tags.get("dagster/sensor_name") == "survey_flow"


def _materialized_after(instance: dg.DagsterInstance, key: list[str], t: float) -> bool:
    event = instance.get_latest_materialization_event(dg.AssetKey(key))
    return event is not None and event.timestamp > t


def _flow_done(instance: dg.DagsterInstance, lake: Lake, name: str, t: float) -> bool:
    """The new file's tables are published, the candidates and their gallery made again after ``t``,
    and no run is still queued or in progress (the gallery's run follows the candidates')."""
    return (
        _published(lake, name) == []
        and all(_materialized_after(instance, ["search", table], t) for table in ("candidates", "candidate_gallery"))
        and all(r.is_finished for r in instance.get_runs())
    )


@pytest.mark.timeout(BACKFILL_S + FLOW_S + 600)
def test_a_backfill_and_a_new_sweep_file_run_through_the_daemon(tmp_path):
    mock = generate_mock_survey(
        tmp_path / "mock", MockSurveyConfig(blocks=((55, 0), (60, 0)), n_rows_per_file=700, n_hidden_lenses=0)
    )
    first, added = sorted(mock.sweep_files, key=lambda p: p.name)
    sweep_dir = tmp_path / "mirror" / DR10_SWEEP_DIR
    sweep_dir.mkdir(parents=True)
    shutil.copy(first, sweep_dir / first.name)
    lake = _prepared_lake(tmp_path / "lake")
    with CutoutServer(size=101, lifetime_s=BACKFILL_S + FLOW_S + 400) as server:
        env = dict(
            os.environ,
            DHS_LAKE=lake.uri,
            DHS_SURVEY=str(tmp_path / "mirror"),
            DHS_CUTOUT_SOURCE=server.base_url,
            DHS_DEVICE="cpu",
            DHS_SPARK_MASTER="local[2]",
            DHS_PARTITIONS_PER_RUN="4",
            PYTHONWARNINGS="ignore",
        )
        home = tmp_path / "home"
        home.mkdir()
        with dg.DagsterInstance.from_config(str(home)) as instance:
            # the survey as it is before the daemon starts: its partitions are the backfill's to run
            instance.add_dynamic_partitions("sweep_file", [first.name])
            _report_made(instance)
        with DagsterDev(home, env, tmp_path / "dagster-dev.log") as ui:
            instance = dg.DagsterInstance.from_config(str(home))
            submitted = subprocess.run(
                [sys.executable, "-m", "dhs.main", "backfill", "sweeps", "negatives", "search_targets"]
                + ["search_scores", "candidates", "--wait", "--timeout", str(BACKFILL_S)],
                cwd=REPO,
                env={**env, "DAGSTER_HOME": str(home), "DHS_DAGSTER_URL": ui.url.removesuffix("/graphql")},
                capture_output=True,
                text=True,
                timeout=BACKFILL_S + 300,
            )
            assert submitted.returncode == 0, submitted.stdout + submitted.stderr
            assert "COMPLETED_SUCCESS" in submitted.stdout
            assert _published(lake, first.name) == [] and lake.exists("search", "candidates")
            (backfill_id,) = re.findall(r"^backfill (\S+) submitted", submitted.stdout, re.M)
            backfill_runs = [r for r in instance.get_runs() if r.tags.get("dagster/backfill") == backfill_id]
            ran = {k.to_user_string() for r in backfill_runs for k in r.asset_selection or ()}
            assert ran >= {"survey/sweeps", "catalog/negatives", "search/search_targets", "search/search_scores"}
            assert "search/candidates" in ran

            t_added = time.time()
            shutil.copy(added, sweep_dir / added.name)  # a new sweep file appears in the mirror
            deadline = time.monotonic() + FLOW_S
            while time.monotonic() < deadline and not _flow_done(instance, lake, added.name, t_added):
                time.sleep(10)
            runs = [r for r in instance.get_runs() if r.tags.get("dagster/backfill") != backfill_id]
    assert _published(lake, added.name) == [], f"not published for the new file: {_published(lake, added.name)}"
    assert _materialized_after(instance, ["search", "candidates"], t_added)
    assert _materialized_after(instance, ["search", "candidate_gallery"], t_added)
    assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS] * len(runs)
    # every other run was requested by the automation sensor (the candidates after the backfill's
    # search, then the new file's flow), none by hand
    assert runs and all(_by_automation(instance, r) for r in runs)
    requested = {k.to_user_string() for r in runs for k in r.asset_selection or ()}
    assert requested >= {"survey/sweeps", "catalog/negatives", "search/search_targets", "search/search_scores"}
    scores = lake.read_table("search", "search_scores")
    assert set(scores.column("sweep_file").to_pylist()) == {first.name, added.name}
    candidates = lake.read_table("search", "candidates")
    assert set(candidates.column("sweep_file").to_pylist()) <= {first.name, added.name}
