"""The code location: every table an asset, checks inside their asset's step, pools, sensors, a
quiet load, and the instance settings the UI and the daemon use."""

import os
import pathlib
import subprocess
import sys

import dagster as dg
import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
EXPECTED_ASSETS = {
    "survey/sweep_files",
    "survey/sweeps",
    "survey/photo_z",
    "survey/spectra",
    "survey/known_lenses",
    "catalog/negatives",
    "catalog/selection_funnel",
    "catalog/positives",
    "catalog/training_catalog",
    "catalog/training_strata",
    "imaging/cutouts",
    "imaging/cutout_validation",
    "injection/injection_plan",
    "injection/injection_bank",
    "training/training_set",
    "training/lens_finder",
    "evaluation/cutout_scores",
    "evaluation/injection_scores",
    "evaluation/thresholds",
    "evaluation/selection_function",
    "evaluation/selection_marginals",
    "evaluation/selection_model",
    "evaluation/selection_calibration",
    "evaluation/selection_populations",
    "evaluation/selection_closure",
    "evaluation/lens_forecast",
    "evaluation/real_lens_recall",
    "evaluation/real_lens_validation",
    "evaluation/fpr_by_confuser",
    "evaluation/realism_probe",
    "evaluation/realism_ablation",
    "evaluation/evaluation_report",
    "search/search_targets",
    "search/search_scores",
    "search/search_stamps",
    "search/candidates",
    "search/candidate_gallery",
    "search/visual_grades",
    "ops/alerts",
}
#: Assets that put tensors on the compute device (CUDA when present): one at a time (pool "gpu").
GPU_ASSETS = {
    "injection/injection_bank",
    "training/lens_finder",
    "evaluation/cutout_scores",
    "evaluation/injection_scores",
    "evaluation/realism_probe",
    "evaluation/realism_ablation",
    "search/search_scores",
    "search/search_stamps",
}


def test_every_table_is_an_asset_with_its_checks_in_its_own_step():
    from definitions import defs

    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in defs.resolve_all_asset_keys()} == EXPECTED_ASSETS
    # standalone checks would each cost a step (a subprocess in the UI): only the external alerts table has one
    standalone = {ck.asset_key.to_user_string() for c in defs.asset_checks or [] for ck in c.check_keys}
    assert standalone == {"ops/alerts"}
    for key in graph.materializable_asset_keys:
        if key.path[0] == "training":
            continue  # the training stage wires its gates itself
        ad = graph.assets_def_for_key(key)
        checks = {ck.name for ck in ad.check_keys if ck.asset_key == key}
        assert checks, f"{key.to_user_string()} has no check in its step"
        assert any(c.endswith("_contract") for c in checks) or key.path[-1] == "injection_bank", (key, checks)
    negatives = graph.get(dg.AssetKey(["catalog", "negatives"]))
    assert negatives.partitions_def == graph.get(dg.AssetKey(["survey", "sweeps"])).partitions_def


def test_gpu_pool_and_spark_pool():
    from definitions import defs

    graph = defs.resolve_asset_graph()
    pools = {k.to_user_string(): graph.get(k).pools for k in graph.materializable_asset_keys}
    for name in GPU_ASSETS:
        assert pools[name] == {"gpu"}, name
    for name in ("catalog/negatives", "catalog/positives", "catalog/training_catalog"):
        assert pools[name] == {"spark"}, name


def test_the_search_holds_the_pool_of_its_launch():
    """search_scores holds the gpu pool for the local and Pipes launches and the spark pool for the
    Spark launch: the code location's default launch (the compute resource, DHS_SEARCH_LAUNCH)."""
    from definitions import build_defs
    from resources import ComputeResource, build_resources

    for launch, pool in (("local", "gpu"), ("pipes", "gpu"), ("spark", "spark")):
        defs = build_defs({**build_resources(), "compute": ComputeResource(search_launch=launch)})
        graph = defs.resolve_asset_graph()
        for name in ("search/search_scores", "search/search_stamps"):
            assert graph.get(dg.AssetKey.from_user_string(name)).pools == {pool}, (launch, name)


def test_per_sweep_file_assets_run_several_files_per_run():
    from definitions import defs
    from resources.settings import setting

    graph = defs.resolve_asset_graph()
    per_run = int(setting("DHS_PARTITIONS_PER_RUN"))
    for name in (
        "survey/sweeps",
        "search/search_targets",
        "imaging/cutouts",
        "search/search_scores",
        "evaluation/cutout_scores",
    ):
        policy = graph.get(dg.AssetKey.from_user_string(name)).backfill_policy
        assert policy == dg.BackfillPolicy.multi_run(max_partitions_per_run=per_run), name
    assert (
        graph.get(dg.AssetKey.from_user_string("catalog/negatives")).backfill_policy == dg.BackfillPolicy.single_run()
    )


def test_a_runs_steps_execute_in_its_run_worker():
    """A run the daemon or the UI launches imports the definitions once, in its run worker: no step
    process imports them again (BENCHMARKS.md, *Orchestration overhead per partition*)."""
    from definitions import defs

    assert defs.resolve_implicit_global_asset_job_def().executor_def is dg.in_process_executor


def test_a_new_sweep_file_flows_to_the_candidates_by_automation():
    """The flow's assets carry their conditions and one automation sensor evaluates them; the
    training side carries none (retraining is a deliberate act)."""
    from definitions import defs
    from lens_assets.shared.automation import FLOW, NEW_PARTITION, UPSTREAM_UPDATED

    graph = defs.resolve_asset_graph()
    conditions = {k.to_user_string(): graph.get(k).automation_condition for k in graph.materializable_asset_keys}
    flow = {"/".join(t.key) for t in FLOW}
    assert {k for k, c in conditions.items() if c is not None} == flow
    for name in ("survey/sweeps", "catalog/negatives", "search/search_targets", "search/search_scores"):
        assert conditions[name] == NEW_PARTITION, name
    assert conditions["search/candidates"] == conditions["search/candidate_gallery"] == UPSTREAM_UPDATED
    (sensor,) = [s for s in defs.sensors if s.name == "survey_flow"]
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert set(sensor.asset_selection.resolve(graph)) == {dg.AssetKey.from_user_string(k) for k in flow}


def test_sensors_register_partitions_alert_and_reap_dead_runs():
    from definitions import defs

    assert {s.name for s in defs.sensors} >= {
        "alert_sensor",
        "sweep_file_sensor",
        "survey_flow",
        "injection_batch_sensor",
        "dead_run_sensor",
    }


def test_the_code_location_loads_without_warnings():
    """No preview, beta or deprecation warnings when the definitions load (the UI's and every
    step process's import)."""
    out = subprocess.run(
        [sys.executable, "-W", "always", "-c", "import definitions"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Warning" not in out.stderr, out.stderr[-3000:]


def test_instance_settings_retry_only_crashed_runs_and_open_the_ui_without_dialogs():
    cfg = yaml.safe_load((REPO / "dhs" / "dagster.yaml").read_text())
    assert cfg["run_retries"]["retry_on_asset_or_op_failure"] is False
    assert cfg["telemetry"]["enabled"] is False and cfg["nux"]["enabled"] is False


def test_workspace_points_at_definitions_and_ui_binds_loopback():
    assert "module_name: definitions" in (REPO / "workspace.yaml").read_text()
    assert "-h 127.0.0.1" in (REPO / "Makefile").read_text()


def test_code_location_loads_from_the_workspace_like_dagster_dev(tmp_path):
    dagster = pathlib.Path(sys.executable).with_name("dagster")
    env = dict(os.environ, DAGSTER_HOME=str(tmp_path))
    out = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", str(REPO / "workspace.yaml")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
