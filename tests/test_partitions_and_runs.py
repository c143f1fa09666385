"""Partitions registered outside the assets (sensors and the functions `dhs` shares with them),
`dhs materialize`'s selection and staleness, and killed runs marked failed."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time

import dagster as dg
import pyarrow as pa
import pytest

from darkhaloscope.lensing.bank import PLAN_SUMMARY_KEY
from darkhaloscope.survey.sweeps import SweepBox
from dhs.materialize import MaterializeError, Materializer, Unit
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lens_assets.injection import injection_batch_sensor
from lens_assets.ops import HOST_TAG, reap_dead_runs
from lens_assets.survey import known_lenses, sweep_file_sensor, sweep_files, sweeps
from resources import LakeResource, SurveyResource
from resources.alert_sinks import AlertSinksResource
from resources.survey import SWEEP_DIR
from tests.support.sweep_rows import write_sweep

A, B = "sweep-030m005-035p000.fits", "sweep-035m005-040p000.fits"


def _write_sweep(root, name: str, box: SweepBox) -> None:
    write_sweep(root, name, 20, box)


def _apply(instance: dg.DagsterInstance, result: dg.SensorResult) -> None:
    for req in result.dynamic_partitions_requests or []:
        if isinstance(req, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        else:
            for key in req.partition_keys:
                instance.delete_dynamic_partition(req.partitions_def_name, key)


def test_sweep_file_sensor_adds_new_files_and_removes_vanished_ones(tmp_path):
    mirror = tmp_path / "mirror"
    _write_sweep(mirror, A, SweepBox(30, 35, -5, 0))
    instance = dg.DagsterInstance.ephemeral()
    survey = SurveyResource(survey=str(mirror))
    with dg.build_sensor_context(instance=instance, resources={"survey": survey}) as context:
        _apply(instance, sweep_file_sensor(context))
    assert instance.get_dynamic_partitions("sweep_file") == [A]
    _write_sweep(mirror, B, SweepBox(35, 40, -5, 0))
    (mirror / SWEEP_DIR / A).unlink()
    with dg.build_sensor_context(instance=instance, resources={"survey": survey}) as context:
        result = sweep_file_sensor(context)
    _apply(instance, result)
    assert instance.get_dynamic_partitions("sweep_file") == [B]
    with dg.build_sensor_context(instance=instance, resources={"survey": survey}) as context:
        assert sweep_file_sensor(context).dynamic_partitions_requests == []  # nothing changed


def test_injection_batch_sensor_follows_the_published_plan(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    instance = dg.DagsterInstance.ephemeral()
    resources = {"lake": LakeResource(uri=lake.uri)}
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        assert injection_batch_sensor(context).dynamic_partitions_requests == []  # no plan published yet
    plan = pa.table({"batch": pa.array([0, 0, 1, 2], pa.int32())}).replace_schema_metadata({PLAN_SUMMARY_KEY: b"{}"})
    lake.write_table("injection", "injection_plan", plan)
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        _apply(instance, injection_batch_sensor(context))
    assert instance.get_dynamic_partitions("injection_batch") == ["batch-00000", "batch-00001", "batch-00002"]


def _survey_defs(tmp_path, lake: Lake) -> dg.Definitions:
    resource = LakeResource(uri=lake.uri)
    return dg.Definitions(
        assets=[sweep_files, sweeps, known_lenses],
        resources={
            "survey": SurveyResource(survey=str(tmp_path / "mirror")),
            "lake": resource,
            "io_manager": LakeIOManager(uri=resource.uri),
            "alert_sinks": AlertSinksResource(lake_uri=lake.uri),
        },
    )


def test_materialize_takes_dagster_selections_and_reruns_only_what_dagster_calls_stale(tmp_path):
    _write_sweep(tmp_path / "mirror", A, SweepBox(30, 35, -5, 0))
    lake = Lake(str(tmp_path / "lake"))
    defs = _survey_defs(tmp_path, lake)
    instance = dg.DagsterInstance.ephemeral()
    out = io.StringIO()
    Materializer(defs, instance, out=out).run(["group:survey"])
    assert [line.split(" ok")[0] for line in out.getvalue().splitlines() if " ok in " in line] == [
        "[1/3] known_lenses",
        "[2/3] sweep_files",
        f"[3/3] sweeps [{A}]",
    ]
    again = io.StringIO()
    Materializer(defs, instance, out=again).run(["survey/sweeps"])  # upstream fresh: only the target runs
    assert "[1/2] sweep_files: up to date, skipped" in again.getvalue() and f"[2/2] sweeps [{A}] ok" in again.getvalue()
    # a table gone from the lake (its folder and its manifests: a part gone alone is named as
    # missing, lake_platform.manifest) runs again, though the instance still records it
    shutil.rmtree(tmp_path / "lake" / "survey" / "sweep_files")
    shutil.rmtree(tmp_path / "lake" / "_manifests" / "survey" / "sweep_files")
    gone = io.StringIO()
    Materializer(defs, instance, out=gone).run(["survey/sweeps"])
    assert "[1/2] sweep_files ok" in gone.getvalue() and lake.exists("survey", "sweep_files")
    # a new code version of sweep_files makes it stale in Dagster's eyes: it runs again
    changed = sweep_files.map_asset_specs(lambda spec: spec.replace_attributes(code_version="changed"))
    stale = dg.Definitions(assets=[changed, sweeps, known_lenses], resources=defs.resources)
    rerun = io.StringIO()
    Materializer(stale, instance, out=rerun).run(["sweeps"])
    assert "[1/2] sweep_files ok" in rerun.getvalue()
    with pytest.raises(MaterializeError, match="unknown asset 'nope'"):
        Materializer(stale, instance, out=io.StringIO()).run(["nope"])
    with pytest.raises(MaterializeError, match="invalid asset selection"):
        Materializer(stale, instance, out=io.StringIO()).run(["key:(("])


@dg.asset(key=["injection", "draws"], config_schema={"realisation": dg.Field(int, default_value=0)})
def draws(context):
    """A configurable asset (this module's postponed annotations rule out a Config class here)."""
    return dg.MaterializeResult(metadata={"realisation": context.op_execution_context.op_config["realisation"]})


def test_materialize_passes_run_config_to_the_assets_it_names(tmp_path, capsys):
    from dhs.main import main

    _write_sweep(tmp_path / "mirror", A, SweepBox(30, 35, -5, 0))
    defs = _survey_defs(tmp_path, Lake(str(tmp_path / "lake")))
    defs = dg.Definitions(assets=[draws, sweep_files, sweeps, known_lenses], resources=defs.resources)
    instance = dg.DagsterInstance.ephemeral()

    def realisation() -> int:
        return (
            instance.get_latest_materialization_event(dg.AssetKey(["injection", "draws"]))
            .asset_materialization.metadata["realisation"]
            .value
        )

    Materializer(defs, instance, out=io.StringIO()).run(
        ["draws", "known_lenses"], {"injection/draws": {"realisation": 3}}
    )
    assert realisation() == 3
    Materializer(defs, instance, out=io.StringIO()).run(["draws"])  # config is per command, as in the launchpad
    assert realisation() == 0
    with pytest.raises(MaterializeError, match="config for 'sweeps': not among the assets to materialize"):
        Materializer(defs, instance, out=io.StringIO()).run(["draws"], {"sweeps": {}})
    with pytest.raises(MaterializeError, match="config for 'draws' must be a JSON object of its fields, got 3"):
        Materializer(defs, instance, out=io.StringIO()).run(["draws"], {"draws": 3})
    with pytest.raises(MaterializeError, match="realisation"):  # Dagster's config check, named
        Materializer(defs, instance, out=io.StringIO()).run(["draws"], {"draws": {"realisation": "one"}})
    # the command line: ASSET=JSON, a malformed one refused before anything runs
    assert main(["materialize", "draws", "--config", "draws={realisation: 1}"]) == 2
    assert "error: --config 'draws={realisation: 1}'" in capsys.readouterr().err
    assert main(["materialize", "draws", "--config", "draws"]) == 2
    assert "expected ASSET=JSON" in capsys.readouterr().err


def test_a_killed_run_is_marked_failed_by_the_next_command(tmp_path):
    """A process that starts a run and dies with SIGKILL leaves it STARTED; reap_dead_runs (run by
    every `dhs materialize` and by dead_run_sensor) marks it failed; a live one is left alone."""
    home = tmp_path / "home"
    home.mkdir()
    script = (
        "import os, sys, time, dagster as dg\n"
        "@dg.asset\n"
        "def slow():\n"
        "    print('running', flush=True); time.sleep(120)\n"
        "with dg.DagsterInstance.from_config(sys.argv[1]) as instance:\n"
        "    dg.materialize([slow], instance=instance, tags={'dhs/host': sys.argv[2]})\n"
    )
    from lake_platform.lake import host_tag

    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(home), host_tag()],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    try:
        assert proc.stdout.readline().strip() == "running"
        with dg.DagsterInstance.from_config(str(home)) as instance:
            [run] = instance.get_runs()
            assert run.status == dg.DagsterRunStatus.STARTED and run.tags[HOST_TAG] == host_tag()
            assert reap_dead_runs(instance) == []  # its process is alive
            proc.kill()
            proc.wait(timeout=30)
            deadline = time.monotonic() + 10
            reaped = []
            while not reaped and time.monotonic() < deadline:
                reaped = reap_dead_runs(instance)
            assert reaped == [run.run_id]
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
            assert reap_dead_runs(instance) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_units_run_ranges_of_consecutive_partitions():
    order = ["a", "b", "c", "d", "e", "f"]
    todo = ["a", "b", "d", "e", "f"]  # c is up to date: a run covers a range, so it splits there
    assert Unit([], "x", None, 2).runs(todo, order) == [["a", "b"], ["d", "e"], ["f"]]
    assert Unit([], "x", None, None).runs(todo, order) == [["a", "b"], ["d", "e", "f"]]
    assert Unit([], "x", None, 1).runs(todo, order) == [[k] for k in todo]
    assert Unit([], "x", None, 1).runs([None], [None]) == [[None]]


def test_materialize_runs_several_sweep_files_per_run_and_publishes_them_together(tmp_path):
    """sweeps' multi-run backfill policy (DHS_PARTITIONS_PER_RUN, 128 by default): three files in one
    run, each partition audited and published; a bad file fails its run and none of the run's files
    is published."""
    C = "sweep-040m005-045p000.fits"
    for name, box in ((A, SweepBox(30, 35, -5, 0)), (B, SweepBox(35, 40, -5, 0)), (C, SweepBox(40, 45, -5, 0))):
        _write_sweep(tmp_path / "mirror", name, box)
    lake = Lake(str(tmp_path / "lake"))
    defs = _survey_defs(tmp_path, lake)
    instance = dg.DagsterInstance.ephemeral()
    out = io.StringIO()
    Materializer(defs, instance, out=out).run(["sweeps"])
    lines = out.getvalue().splitlines()
    assert any(line.startswith(f"[2/2] sweeps [{A}...{C}] ok in ") for line in lines)
    assert any(line.endswith("rows=60 in 3 partitions (20–20 each)") for line in lines)
    sweep_runs = [r for r in instance.get_runs() if r.asset_selection == {dg.AssetKey(["survey", "sweeps"])}]
    assert len(sweep_runs) == 1 and sweep_runs[0].tags["dagster/asset_partition_range_start"] == A
    assert sorted(p["sweep_file"] for p in lake.partitions("survey", "sweeps")) == [A, B, C]
    # each materialization shows the published columns only where they differ from the declared
    # ones (the definition shows those): these sweeps lack the DR10 model's optional columns
    latest = {
        k.path[-1]: instance.get_latest_materialization_event(k).asset_materialization.metadata
        for k in (dg.AssetKey(["survey", "sweep_files"]), dg.AssetKey(["survey", "sweeps"]))
    }
    assert "dagster/column_schema" not in latest["sweep_files"]
    published = lake.read_schema("survey", "sweeps", partition={"sweep_file": C}).names
    assert [c.name for c in latest["sweeps"]["dagster/column_schema"].schema.columns] == published
    assert len(published) < len(
        sweeps.metadata_by_key[dg.AssetKey(["survey", "sweeps"])]["dagster/column_schema"].schema.columns
    )
    # a run over a fresh lake where the third file is unreadable publishes none of the three
    (tmp_path / "mirror" / SWEEP_DIR / C).write_bytes(b"SIMPLE  = T" + b" " * 100)
    fresh = Lake(str(tmp_path / "fresh"))
    with pytest.raises(MaterializeError, match=C):
        Materializer(_survey_defs(tmp_path, fresh), dg.DagsterInstance.ephemeral(), out=io.StringIO()).run(["sweeps"])
    assert not fresh.exists("survey", "sweeps")
