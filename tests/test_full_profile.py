"""The full profile end to end on a small lake: the training set records the full profile's
preprocessing (101 px stamps) and injection stream, the lens_finder asset trains both members (the
shielded bottleneck ResNet and the strided ResNet) through the Pipes trainer with fresh injections
every epoch, stacks them with the meta-learner, audits and publishes, and the scoring code of the
score assets scores cutouts with the stacked ensemble (and the cutout_scores asset with what was
published). Shrunk only by the lens_finder config's ``epochs``; every other setting is the
profile's, the device the asset's default ('auto')."""

import os
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow.compute as pc
import pytest

from darkhaloscope.evaluation.comparison import MEMBER_SCORE_PREFIX
from darkhaloscope.evaluation.scoring import CUTOUT_META, score_batches
from darkhaloscope.training.checkpoint import load_checkpoint, read_spec
from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.models import count_parameters
from darkhaloscope.training.profiles import training_profile
from darkhaloscope.training.training_set import recorded_specs
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lens_assets.evaluation import cutout_scores
from lens_assets.shared.partitions import sweep_partitions
from lens_assets.training import lens_finder, training_set
from resources import ComputeResource, LakeResource, SurveyResource
from resources.imaging import ImagingResource
from tests.support.cutout_rows import cutouts_table
from tests.support.wap import run_assets

ROOT = Path(__file__).resolve().parents[1]
SWEEP = "sweep-030m005-035p000.fits"
MEMBERS = ("bottleneck_resnet", "strided_resnet")


def _small_lake(tmp_path) -> Lake:
    """Cutouts of one sweep file: the validation split holds enough real positives, hosts and (at a
    0.7″ PSF, which arcs of θ_E ≥ 2″ clear) injections outside the core for the gates' 5-fold fits."""
    lake = Lake(str(tmp_path / "lake"))
    cut = cutouts_table(
        positives=[("train", "A")] * 6 + [("val", "A")] * 6 + [("test", "A")] * 2,
        negatives=(("train", 24), ("val", 20), ("test", 4)),
        psfsize_r=0.7,
        no_psf=(),
    )
    lake.write_table("imaging", "cutouts", cut, partition={"sweep_file": SWEEP})
    return lake


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_full_profile_trains_both_members_stacks_them_and_scores(tmp_path, monkeypatch):
    monkeypatch.delenv("DHS_DEVICE", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    lake = _small_lake(tmp_path)
    resources = {
        "lake": LakeResource(uri=lake.uri),
        "io_manager": LakeIOManager(uri=lake.uri),
        "compute": ComputeResource(device="auto", profile="full"),
        "survey": SurveyResource(survey=str(tmp_path / "no-mirror")),
        "imaging": ImagingResource(),
        "pipes_subprocess_client": dg.PipesSubprocessClient(cwd=str(ROOT)),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(sweep_partitions.name, [SWEEP])
    result = run_assets(
        [training_set.key, lens_finder.key],
        resources,
        instance,
        raise_on_error=False,
        run_config={"ops": {"training__lens_finder": {"config": {"epochs": 1}}}},
    )
    # a blocking gate failing rejects the lens finder (the run fails, nothing is published); else it is published
    checks = result.get_asset_check_evaluations()
    blocked = [e.check_name for e in checks if not e.passed and e.severity == dg.AssetCheckSeverity.ERROR]
    assert {e.check_name for e in checks} >= {"core_lr_auc", "core_masked_drop"} and result.success == (not blocked)
    full = training_profile("full")
    assert recorded_specs(lake.read_schema("training", "training_set")) == (full.preprocess, full.stream)
    stamps = load_training_set(lake.read_table("training", "training_set")).image
    assert full.preprocess.crop is None and stamps.shape[-1] == 101  # the network sees the whole stamp

    runs = Path(lake.inflight().files_path("training", "lens_finder_runs")) / "runs"
    specs = {d: read_spec(d, "best") for d in runs.iterdir()}
    by_arch = {s.architecture: (d, s) for d, s in specs.items()}
    assert set(by_arch) == {*MEMBERS, "stacked_ensemble"}
    for arch, member in zip(MEMBERS, full.members):
        d, s = by_arch[arch]
        assert s.train_config == {**member.to_dict(), "epochs": 1}  # the profile's member, shrunk in epochs only
        assert s.epoch == 1 and s.dihedral_views == 2 and (d / "gates.json").is_file()
    model, ens = load_checkpoint(by_arch["stacked_ensemble"][0], "best")
    assert ens.arch_args == {"members": list(MEMBERS), "hidden": full.ensemble_hidden} and ens.dihedral_views == 2
    assert 150_000 < count_parameters(model.members[0]) < 250_000  # Paper IV's compact shielded ResNet (~200k)
    assert ens.temperature > 0 and "validation" in ens.metrics

    # the scoring code of the score assets, with the stacked ensemble: one score per member beside its own
    cutouts = lake.dataset("imaging", "cutouts")
    scored = list(score_batches(cutouts, CUTOUT_META, "image", "cutout", model, ens, "cpu"))
    assert sum(b.num_rows for b in scored) == cutouts.count_rows()
    for b in scored:
        assert pc.all(b.column("valid")).as_py()
        for name in ("score", *(MEMBER_SCORE_PREFIX + m for m in MEMBERS)):
            s = b.column(name).to_numpy()
            assert np.all((s >= 0) & (s <= 1)), name

    # the published model scores a sweep file's cutouts
    if not blocked:
        md = result.asset_materializations_for_node("training__lens_finder")[0].metadata
        choice = md["ensemble"].value
        assert set(choice["member_val_auroc"]) == set(MEMBERS) and choice["published"] in (*MEMBERS, "stacked_ensemble")
        assert run_assets([cutout_scores.key], resources, instance, partition_key=SWEEP).success
        table = lake.read_table("evaluation", "cutout_scores")
        assert table.num_rows == cutouts.count_rows() and pc.all(table.column("valid")).as_py()
        published = read_spec(lake.files_path("training", "lens_finder", {"artifact": "checkpoint"}), "best")
        assert published.architecture == choice["published"]
        assert (MEMBER_SCORE_PREFIX + MEMBERS[0] in table.column_names) == (choice["published"] == "stacked_ensemble")
    else:
        assert not lake.exists("training", "lens_finder")
