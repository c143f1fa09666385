"""training_set through dg.materialize: splits, tier weights, class ratio and the recorded preprocessing spec."""

import dagster as dg
import numpy as np
import pyarrow as pa

from darkhaloscope.lake import Lake
from darkhaloscope.stamps import to_tensor_array
from lens_assets.training import preprocess_spec, recorded_preprocess_spec, training_set
from resources import ComputeResource, LakeResource

SWEEP = "sweep-030m005-035p000.fits"


def test_training_set_keeps_train_val_weights_tiers_caps_negatives_and_records_its_spec(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    # 4 positives (A, B in train; A in val; A in test) and 20 negatives spread over the splits
    split = ["train", "train", "val", "test"] + ["train"] * 10 + ["val"] * 6 + ["test"] * 4
    n = len(split)
    label = [1] * 4 + [0] * 20
    cut = pa.table({
        "object_id": pa.array(np.arange(1, n + 1), pa.int64()),
        "label": pa.array(label, pa.int8()),
        "split": split,
        "tier": ["A", "B", "A", "A"] + [None] * 20,
        "pool": ["positive"] * 4 + ["N1"] * 20,
        "psfsize_r": pa.array(np.full(n, 1.2), pa.float32()),
        "quality_ok": [True] * n,
        "in_training_catalog": [True] * n,
        "image": to_tensor_array(np.random.default_rng(3).normal(0, 0.02, (n, 3, 101, 101)).astype(np.float32)),
    })
    lake.write_table("imaging", "cutouts", cut, partition={"sweep_file": SWEEP})
    result = dg.materialize(
        [training_set],
        resources={"lake": LakeResource(uri=lake.uri), "compute": ComputeResource(device="cpu", profile="demo")},
        run_config={"ops": {"training__training_set": {"config": {"injected_positives": -1, "negatives_per_positive": 3}}}},
    )
    assert result.success
    t = lake.read_table("training", "training_set")
    assert set(t.column("split").to_pylist()) == {"train", "val"}  # the test split stays untouched
    rows = {r["object_id"]: r for r in t.select(["object_id", "label", "weight", "split"]).to_pylist()}
    assert rows[1]["weight"] == 1.0 and rows[2]["weight"] == 0.5  # tier A, tier B
    per_split = {s: (sum(r["label"] for r in rows.values() if r["split"] == s), sum(1 - r["label"] for r in rows.values() if r["split"] == s)) for s in ("train", "val")}
    assert per_split == {"train": (2, 6), "val": (1, 3)}  # at most 3 negatives per positive in each split
    assert recorded_preprocess_spec(lake) == preprocess_spec("demo")
