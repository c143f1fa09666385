"""cutout_scores, injection_scores and thresholds through dg.materialize: scores partitioned like
their inputs, unscorable rows kept as such, thresholds from held-out negatives only."""

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from darkhaloscope.evaluation.scoring import CUTOUT_META, INJECTION_META
from darkhaloscope.stamps import to_tensor_array
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lens_assets.evaluation import cutout_scores, injection_scores, thresholds
from lens_assets.shared.partitions import injection_batches, sweep_partitions
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
    m = 6
    inj = {name: pa.array(np.full(m, 1.0)) for name in INJECTION_META}
    inj.update(
        injection_id=pa.array(np.arange(1000, 1000 + m), pa.int64()),  # int64, as the injection bank writes it
        host_z_source=pa.array(["spec", "phot"] * (m // 2)),
        sigma_v_source=pa.array(["measured", "relation"] * (m // 2)),
        host_object_id=pa.array(np.arange(m), pa.int64()),
        success=pa.array([True, True, False, True, False, True]),
        failure_reason=pa.array(["", "", "host_invvar_r_empty", "", "unphysical", ""]),
        image=to_tensor_array(_stamps(m, 2)),
        control=to_tensor_array(_stamps(m, 3)),
    )
    lake.write_table("injection", "injection_bank", pa.table(inj), partition={"injection_batch": "batch-00000"})
    return lake


def test_failed_injections_and_bad_stamps_are_unscorable_and_thresholds_use_held_out_negatives(tmp_path):
    lake = _lake(tmp_path)
    resource = LakeResource(uri=lake.uri)
    resources = {
        "lake": resource,
        "io_manager": LakeIOManager(uri=resource.uri),
        "compute": ComputeResource(device="cpu", profile="demo"),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(sweep_partitions.name, [SWEEP])
    instance.add_dynamic_partitions(injection_batches.name, ["batch-00000"])
    scored = run_assets([cutout_scores.key], resources, instance, partition_key=SWEEP)
    assert {e.check_name: e.passed for e in scored.get_asset_check_evaluations()} == {"cutout_scores_contract": True}
    assert run_assets([injection_scores.key], resources, instance, partition_key="batch-00000").success
    assert run_assets([thresholds.key], resources, instance).success

    both = lake.read_table("evaluation", "injection_scores", partition={"injection_batch": "batch-00000"})
    inj = both.filter(pc.equal(both.column("kind"), "injection")).sort_by("injection_id")
    assert inj.schema.field("score").type == pa.float64()
    assert inj.column("valid").to_pylist() == [True, True, False, True, False, True]
    assert [
        r for r, ok in zip(inj.column("invalid_reason").to_pylist(), inj.column("valid").to_pylist()) if not ok
    ] == ["injection_failed"] * 2
    assert inj.column("score").null_count == 2
    controls = both.filter(pc.equal(both.column("kind"), "control"))
    assert controls.num_rows == 6 and all(
        controls.column("valid").to_pylist()
    )  # a failed render's host is still a valid control

    cut = lake.read_table("evaluation", "cutout_scores", partition={"sweep_file": SWEEP}).sort_by("object_id")
    assert cut.column("valid").to_pylist() == [True] * len(NEGATIVES) + [False]
    assert cut.column("score").null_count == 1  # never scored as zero

    thr = lake.read_table("evaluation", "thresholds")
    assert set(thr.column("n_valid_negatives").to_pylist()) == {HELD_OUT}
