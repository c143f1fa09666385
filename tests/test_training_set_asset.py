"""The training set: assembled by the library from cutout rows (splits, tier weights, class ratio,
injection hosts with their inverse variance, the recorded preprocessing and injection-stream specs,
no rendered injection), and through dg.materialize as the asset calls it."""

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.lake import Lake
from darkhaloscope.lensing.bank import HOST_COLUMNS
from darkhaloscope.stamps import from_tensor_column, to_tensor_array
from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.profiles import training_profile
from darkhaloscope.training.training_set import assemble_training_set, recorded_specs, training_rows
from lens_assets.training import training_set
from resources import ComputeResource, LakeResource

SWEEP = "sweep-030m005-035p000.fits"


def _cutouts():
    # 4 positives (A, B in train; A in val; A in test) and 20 negatives spread over the splits
    split = ["train", "train", "val", "test"] + ["train"] * 10 + ["val"] * 6 + ["test"] * 4
    n = len(split)
    rng = np.random.default_rng(3)
    psf = np.full(n, 1.2)
    psf[5] = 0.0  # a negative without an r-band PSF size cannot host injections
    return pa.table({
        "object_id": pa.array(np.arange(1, n + 1), pa.int64()),
        "label": pa.array([1] * 4 + [0] * 20, pa.int8()), "split": split,
        "tier": ["A", "B", "A", "A"] + [None] * 20, "pool": ["positive"] * 4 + ["N1"] * 20,
        "psfsize_r": pa.array(psf, pa.float32()), "quality_ok": [True] * n, "in_training_catalog": [True] * n,
        "ra": np.linspace(30, 31, n), "dec": np.zeros(n), "type": ["DEV", "SER", "REX", "EXP"] * 6,
        "psfsize_g": np.full(n, 1.3), "psfsize_z": np.full(n, 1.1), "psfdepth_g": np.full(n, 2e3),
        "psfdepth_r": np.full(n, 1e3), "psfdepth_z": np.full(n, 2e2), "dx_pix": np.zeros(n, np.float32),
        "dy_pix": np.zeros(n, np.float32),
        "image": to_tensor_array(rng.normal(0, 0.02, (n, 3, 101, 101)).astype(np.float32)),
        "invvar": to_tensor_array(np.full((n, 3, 101, 101), 2500.0, np.float32)),
    })


def test_assembled_training_set_holds_catalog_rows_and_injection_hosts():
    cut = _cutouts()
    rows = training_rows(cut.drop(["image", "invvar"]))
    keep = np.isin(cut.column("object_id").to_numpy(), rows.column("object_id").to_numpy())
    images, invvar = from_tensor_column(cut.column("image"))[keep], from_tensor_column(cut.column("invvar"))[keep]
    prof = training_profile("demo")
    t = assemble_training_set(rows, images, invvar, preprocess=prof.preprocess, stream=prof.stream,
                              tier_weights={"A": 1.0, "B": 0.5}, negatives_per_positive=3)
    assert set(t.column("split").to_pylist()) == {"train", "val"}  # the test split stays untouched
    rows_ = {r["object_id"]: r for r in t.select(["object_id", "label", "weight", "split"]).to_pylist()}
    assert rows_[1]["weight"] == 1.0 and rows_[2]["weight"] == 0.5  # tier A, tier B
    per_split = {s: (sum(r["label"] for r in rows_.values() if r["split"] == s), sum(1 - r["label"] for r in rows_.values() if r["split"] == s))
                 for s in ("train", "val")}
    assert per_split == {"train": (2, 6), "val": (1, 3)}  # at most 3 negatives per positive in each split
    assert set(HOST_COLUMNS) <= set(t.column_names) and "control" not in t.column_names  # no rendered injection
    assert recorded_specs(t.schema) == (prof.preprocess, prof.stream)
    a = load_training_set(t)
    hosts = a.object_id[a.host_index >= 0]
    negatives = set(a.object_id[a.label == 0].tolist())
    assert set(hosts.tolist()) == negatives - {6}  # every negative with a PSF size hosts injections
    assert a.invvar.shape == (len(hosts), 3, 101, 101) and a.stream == prof.stream and a.host_columns.num_rows == len(hosts)
    assert a.host_columns.column("object_id").to_pylist() == hosts.tolist()
    assert a.meta["preprocess_spec"] == prof.preprocess.to_dict()
    with pytest.raises(InputError, match="host injections"):
        assemble_training_set(rows, images, invvar, preprocess=prof.preprocess, stream=prof.stream, host_types=("PSF",))


def test_training_set_asset_records_the_profile(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("imaging", "cutouts", _cutouts(), partition={"sweep_file": SWEEP})
    result = dg.materialize(
        [training_set],
        resources={"lake": LakeResource(uri=lake.uri), "compute": ComputeResource(device="cpu", profile="demo")},
        run_config={"ops": {"training__training_set": {"config": {"negatives_per_positive": 3}}}},
    )
    assert result.success
    t = lake.read_table("training", "training_set")
    prof = training_profile("demo")
    assert recorded_specs(lake.read_schema("training", "training_set")) == (prof.preprocess, prof.stream)
    n_hosts = int(t.column("invvar").is_valid().to_numpy(zero_copy_only=False).sum())
    assert t.num_rows == 12 and n_hosts in (8, 9)
    md = result.asset_materializations_for_node("training__training_set")[0].metadata
    assert md["counts"].value["train/injection_host"] + md["counts"].value["val/injection_host"] == n_hosts
    assert md["injection_stream"].value["min_arc_snr"] == prof.stream.min_arc_snr
