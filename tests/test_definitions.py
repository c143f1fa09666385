"""The code location loads, and every stage's assets and checks are in it."""

import dagster as dg

EXPECTED_ASSETS = {
    "survey/sweep_files", "survey/sweeps", "survey/known_lenses",
    "catalog/negatives", "catalog/positives", "catalog/training_catalog",
    "imaging/cutouts", "imaging/cutout_validation",
    "injection/injection_plan", "injection/injection_bank",
    "training/training_set", "training/lens_finder",
    "evaluation/cutout_scores", "evaluation/injection_scores", "evaluation/thresholds", "evaluation/selection_function",
    "evaluation/real_lens_recall", "evaluation/evaluation_report",
}


def test_definitions_load_with_every_asset_and_check():
    from definitions import defs

    dg.Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_all_asset_keys()}
    assert EXPECTED_ASSETS <= keys
    graph = defs.resolve_asset_graph()
    checked = {ck.asset_key.to_user_string() for ck in graph.asset_check_keys}
    for asset in ("survey/sweeps", "survey/known_lenses", "catalog/negatives", "catalog/positives", "catalog/training_catalog",
                  "imaging/cutouts", "imaging/cutout_validation", "injection/injection_bank", "training/lens_finder"):
        assert asset in checked, f"{asset} has no asset check"
    assert "alert_sensor" in {s.name for s in defs.sensors}


def test_library_never_imports_dagster():
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent / "darkhaloscope"
    offenders = [str(p) for p in root.rglob("*.py") if "import dagster" in p.read_text() or "from dagster" in p.read_text()]
    assert offenders == []


def test_workspace_points_at_definitions_and_ui_binds_loopback():
    import pathlib

    repo = pathlib.Path(__file__).resolve().parent.parent
    assert "module_name: definitions" in (repo / "workspace.yaml").read_text()
    assert "-h 127.0.0.1" in (repo / "Makefile").read_text()


def test_code_location_loads_from_the_workspace_like_dagster_dev(tmp_path):
    import os
    import pathlib
    import subprocess
    import sys

    repo = pathlib.Path(__file__).resolve().parent.parent
    dagster = pathlib.Path(sys.executable).with_name("dagster")
    env = dict(os.environ, DAGSTER_HOME=str(tmp_path))
    out = subprocess.run([str(dagster), "definitions", "validate", "-w", str(repo / "workspace.yaml")], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
