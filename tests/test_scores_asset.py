"""cutout_scores and thresholds through dg.materialize: scores partitioned like their input,
unscorable rows kept as such, thresholds from held-out negatives only (the injections' scores:
tests/test_injection_assets.py and tests/test_injection_scoring_fused.py)."""

import dagster as dg
import numpy as np
import pyarrow as pa

from darkhaloscope.evaluation.scoring import CUTOUT_META
from darkhaloscope.stamps import to_tensor_array
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lens_assets.evaluation import cutout_scores, thresholds
from lens_assets.shared.partitions import sweep_partitions
from resources import ComputeResource, LakeResource
from tests.support.tiny_finder import publish_tiny_finder
from tests.support.wap import run_assets

SWEEP = "sweep-030m005-035p000.fits"
# (split, in_training_catalog) of the negatives; held out = test split or never in the catalog
NEGATIVES = [("train", True), ("val", True), ("test", True), ("train", False), ("val", False)] * 8
HELD_OUT = sum(1 for split, seen in NEGATIVES if split == "test" or not seen)


def _stamps(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 0.02, (n, 3, 101, 101)).astype(np.float32)


def _lake(tmp_path) -> Lake:
    lake = Lake(str(tmp_path / "lake"))
    publish_tiny_finder(lake)
    n = len(NEGATIVES) + 1
    images = _stamps(n, 1)
    images[-1, 1, 50, 50] = np.nan  # an unscorable cutout (the positive)
    cut = {name: pa.nulls(n, pa.string()) for name in CUTOUT_META}
    cut.update(
        object_id=pa.array(np.arange(n), pa.int64()),
        label=pa.array([0] * (n - 1) + [1], pa.int8()),
        split=pa.array([s for s, _ in NEGATIVES] + ["test"]),
        in_training_catalog=pa.array([seen for _, seen in NEGATIVES] + [False]),
        psfsize_r=pa.array(np.full(n, 1.2), pa.float32()),
        psfdepth_r=pa.array(np.full(n, 1e3), pa.float32()),
        image=to_tensor_array(images),
    )
    lake.write_table("imaging", "cutouts", pa.table(cut), partition={"sweep_file": SWEEP})
    return lake


def test_bad_stamps_are_unscorable_and_thresholds_use_held_out_negatives(tmp_path):
    lake = _lake(tmp_path)
    resource = LakeResource(uri=lake.uri)
    resources = {
        "lake": resource,
        "io_manager": LakeIOManager(uri=resource.uri),
        "compute": ComputeResource(device="cpu", profile="demo"),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(sweep_partitions.name, [SWEEP])
    scored = run_assets([cutout_scores.key], resources, instance, partition_key=SWEEP)
    assert {e.check_name: e.passed for e in scored.get_asset_check_evaluations()} == {"cutout_scores_contract": True}
    assert run_assets([thresholds.key], resources, instance).success

    cut = lake.read_table("evaluation", "cutout_scores", partition={"sweep_file": SWEEP}).sort_by("object_id")
    assert cut.column("valid").to_pylist() == [True] * len(NEGATIVES) + [False]
    assert cut.column("score").null_count == 1  # never scored as zero

    thr = lake.read_table("evaluation", "thresholds")
    assert set(thr.column("n_valid_negatives").to_pylist()) == {HELD_OUT}
