"""The research scripts on a materialized demo lake agree with the pipeline: the view-averaging
ablation, which rescores the lake's stamps itself, agrees with the evaluation assets on its
published row, and the recipe-ablation harness without overrides trains the published model again
(so each ablation row in BENCHMARKS.md differs from the published recipe by its one change only).

    DHS_RESEARCH_LAKE=<lake> python -m pytest research/tests

Without ``DHS_RESEARCH_LAKE`` the demo is built first in a temporary folder (``dhs demo``, tens of
minutes on 2 cores). The scripts only read the lake.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from darkhaloscope.training.profiles import training_profile
from dhs.demo_summary import lake_headline
from lake_platform.lake import Lake

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory) -> str:
    """Root of a materialized demo lake: ``DHS_RESEARCH_LAKE``, or one built here."""
    given = os.environ.get("DHS_RESEARCH_LAKE")
    if given:
        return given
    root = tmp_path_factory.mktemp("demo")
    env = {
        **os.environ,
        "DHS_LAKE": str(root / "lakehouse"),
        "DAGSTER_HOME": str(root / "dagster_home"),
        "DHS_MOCK_DIR": str(root / "mock"),
        "DHS_PROFILE": "demo",
    }
    (root / "dagster_home").mkdir()
    run = subprocess.run([sys.executable, "-m", "dhs.main", "demo"], cwd=root, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return env["DHS_LAKE"]


def script(lake: str, name: str, *args: str) -> list[dict]:
    """The JSON lines ``python -m research.<name> --lake <lake> ARGS`` prints (run from the repository
    root)."""
    out = subprocess.run(
        [sys.executable, "-m", f"research.{name}", "--lake", lake, *args], cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.mark.slow
def test_the_view_ablation_agrees_with_the_evaluation_assets(demo_lake):
    head = lake_headline(Lake(demo_lake))
    views = str(training_profile("demo").members[0].dihedral_views)
    [published] = script(demo_lake, "ablate_dihedral_views", "--views", views)
    assert published["published"], published
    assert published["recall_test_known_lenses"] == head["recall_test_known_lenses"]
    for key in ("val_auroc", "test_auroc_injections_vs_controls", "test_auroc_real_vs_negatives"):
        assert abs(published[key] - head[key]) <= 2e-3, (key, published[key], head[key])
    for k, (c, rows) in published["completeness_by_arc_snr"].items():
        head_c, head_rows = head["completeness_by_arc_snr"][k]
        assert rows == head_rows and abs(c - head_c) <= 0.02, (k, published, head)


@pytest.mark.slow
def test_the_ablation_harness_trains_the_published_model_again(demo_lake):
    # the tolerances allow for scoring in other batch sizes than the evaluation assets
    head = lake_headline(Lake(demo_lake))
    [again] = script(demo_lake, "ablate_lens_finder", "--name", "demo")
    assert again["best_epoch"] == head["best_epoch"], (again, head)
    assert abs(again["threshold_fpr_1e-2"] - head["threshold_value"]) <= 1e-6, (again, head)
    assert again["gates"].keys() == head["gates"].keys(), (again, head)
    assert all(abs(again["gates"][name] - value) <= 1e-3 for name, (value, _) in head["gates"].items()), (again, head)
