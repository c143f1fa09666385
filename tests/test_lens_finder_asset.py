"""The lens_finder asset writes, audits, then publishes: a run whose blocking gates pass is published
(checkpoint where the score assets read it, registry row); a run whose blocking gate fails leaves
the published checkpoint and the registry byte for byte, keeps its run folder and fails the step."""

import hashlib
from pathlib import Path

import dagster as dg
import pytest

from darkhaloscope.training.gates import GATES
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lens_assets import training as training_assets
from resources import ComputeResource, LakeResource
from tests.support.tiny_finder import use_tiny_training_profile, write_tiny_training_set

ROOT = Path(__file__).resolve().parents[1]


def _snapshot(folder: Path) -> dict:
    """sha256 of every file under ``folder`` by its relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture()
def tiny_profile(monkeypatch):
    use_tiny_training_profile(monkeypatch, ROOT)


def _materialize(lake: Lake, core_threshold: float):
    return dg.materialize(
        [training_assets.lens_finder],
        resources={
            "lake": LakeResource(uri=lake.uri),
            "io_manager": LakeIOManager(uri=lake.uri),
            "compute": ComputeResource(device="cpu", profile="demo"),
            "pipes_subprocess_client": dg.PipesSubprocessClient(cwd=str(ROOT)),
        },
        run_config={"ops": {"training__lens_finder": {"config": {"core_threshold": core_threshold}}}},
        raise_on_error=False,
    )


def test_publishes_only_after_the_blocking_gates_pass(tmp_path, tiny_profile):
    lake = Lake(str(tmp_path / "lake"))
    write_tiny_training_set(lake)
    ok = _materialize(lake, 0.99)
    assert ok.success
    shown = ok.asset_materializations_for_node("training__lens_finder")[0].metadata
    # the UI shows the gates as a table and the training curve as an image
    gates = shown["gates"]
    assert isinstance(gates, dg.TableMetadataValue) and [r.data["name"] for r in gates.records] == list(GATES)
    assert shown["training_curves"].value.startswith("![training curves](data:image/png;base64,")
    ckpt = Path(lake.files_path("training", "lens_finder", {"artifact": "checkpoint"}))
    published = _snapshot(ckpt)
    assert "best.json" in published and "gates.json" in published
    registry = lake.read_table("training", "lens_finder")
    assert registry.num_rows == 1 and registry.column("checkpoint_uri")[0].as_py() == str(ckpt.resolve())
    table = {
        **_snapshot(Path(lake.table_path("training", "lens_finder"))),
        **_snapshot(Path(lake.files_path("training", "lens_finder"))),
    }
    # the table's folder holds only Parquet; the checkpoint is in the files folder beside it
    assert set(table) == {"part-0.parquet", *(f"artifact=checkpoint/{name}" for name in published)}

    # the same run audited again with a threshold nothing passes: refused, nothing published
    bad = _materialize(lake, 0.0)
    assert not bad.success
    assert {
        **_snapshot(Path(lake.table_path("training", "lens_finder"))),
        **_snapshot(Path(lake.files_path("training", "lens_finder"))),
    } == table  # checkpoint and registry, byte for byte
    runs = list((Path(lake.inflight().files_path("training", "lens_finder_runs")) / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "complete.json").is_file() and (runs[0] / "gates.json").is_file()
    checks = {e.check_name: e.passed for e in bad.get_asset_check_evaluations()}
    assert checks["core_lr_auc"] is False
