"""The standalone trainer script: runs under Dagster Pipes (reports the gates as checks and the trained
run with its data version, never importing dagster) and without (prints one JSON object); it trains
and audits but never publishes (tests/test_training_runs.py covers run folders and publication)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR, DAGSTER_PIPES_MESSAGES_ENV_VAR, encode_env_var

from darkhaloscope.errors import InputError
from darkhaloscope.stamps import to_tensor_array
from darkhaloscope.training.checkpoint import read_spec
from darkhaloscope.training.data import synthetic_arrays

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
CONFIG = {
    "arch": "bottleneck_resnet_tiny",
    "epochs": 1,
    "batch_size": 32,
    "lr": 0.01,
    "patience": 0,
    "device": "cpu",
    "hard_negative_prob": 0.2,
    "checkpoint_every_steps": 0,
}


def _write_training_set(folder: Path, seed: int) -> Path:
    a = synthetic_arrays(160, 33, seed=seed, arc_amplitude=4.0)
    n = len(a)
    ctrl = np.zeros((n, 3 * 33 * 33), np.float32)
    ctrl[a.control_index >= 0] = a.control.reshape(len(a.control), -1)
    storage = pa.array(
        [c if i >= 0 else None for c, i in zip(ctrl, a.control_index)], pa.list_(pa.float32(), 3 * 33 * 33)
    )
    t = pa.table(
        {
            "object_id": pa.array(a.object_id),
            "label": pa.array(a.label, pa.int8()),
            "weight": pa.array(a.weight),
            "split": pa.array(a.split.astype(str)),
            "kind": pa.array(a.kind.astype(str)),
            "tier": pa.array([t or None for t in a.tier], pa.string()),
            "pool": pa.array([None] * n, pa.string()),
            "image": to_tensor_array(a.image),
            "control": pa.FixedShapeTensorArray.from_storage(to_tensor_array(a.image[:1]).type, storage),
            "theta_e_arcsec": pa.array(np.full(n, np.nan, np.float32)),
            "psfsize_r": pa.array(np.ones(n, np.float32)),
        }
    )
    folder.mkdir(parents=True)
    pq.write_table(t, folder / "part-0.parquet")
    return folder


@pytest.fixture(scope="module")
def training_set(tmp_path_factory):
    return _write_training_set(tmp_path_factory.mktemp("ts") / "training_set", seed=4)


@pytest.fixture(scope="module")
def tlf():
    from lens_assets.pipes import train_lens_finder

    return train_lens_finder


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def test_under_dagster_pipes_reports_checks_and_the_run_but_publishes_nothing(training_set, tmp_path):
    ctx = {
        "asset_keys": ["lens_finder"],
        "code_version_by_asset_key": None,
        "provenance_by_asset_key": None,
        "partition_key": None,
        "partition_key_range": None,
        "partition_time_window": None,
        "run_id": "test-run",
        "job_name": None,
        "retry_number": 0,
        "extras": {
            "training_set_uri": str(training_set),
            "out_dir": str(tmp_path / "ckpt"),
            "members": [CONFIG],
            "report_checks": True,
        },
    }
    (tmp_path / "ctx.json").write_text(json.dumps(ctx))
    env = _env()
    env[DAGSTER_PIPES_CONTEXT_ENV_VAR] = encode_env_var({"path": str(tmp_path / "ctx.json")})
    env[DAGSTER_PIPES_MESSAGES_ENV_VAR] = encode_env_var({"path": str(tmp_path / "messages.jsonl")})
    # run as a module, then confirm that the script never imported dagster itself
    code = (
        "import sys, runpy\n"
        "try:\n    runpy.run_module('lens_assets.pipes.train_lens_finder', run_name='__main__')\n"
        "except SystemExit as e:\n    rc = e.code\n"
        "print('DAGSTER_IMPORTED', any(m == 'dagster' or m.startswith('dagster.') for m in sys.modules), 'RC', rc)"
    )
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "DAGSTER_IMPORTED False RC 0" in p.stdout, p.stderr[-3000:]
    msgs = [json.loads(line) for line in (tmp_path / "messages.jsonl").read_text().splitlines()]
    methods = [m["method"] for m in msgs]
    assert methods[0] == "opened" and methods[-1] == "closed" and "log" in methods
    checks = [m["params"] for m in msgs if m["method"] == "report_asset_check"]
    assert [c["check_name"] for c in checks] == [
        "core_lr_auc",
        "core_lookalike_auroc",
        "real_lens_shuffle_auroc",
        "core_masked_drop",
        "hard_negative_auroc",
    ]
    mat = [m for m in msgs if m["method"] == "report_asset_materialization"]
    assert len(mat) == 1
    md = mat[0]["params"]["metadata"]
    run_dir = Path(md["run_dir"]["raw_value"])
    best = read_spec(run_dir, "best")
    assert mat[0]["params"]["data_version"] == best.weights_sha256 and run_dir.parent == tmp_path / "ckpt" / "runs"
    assert (
        md["val_auroc"]["raw_value"] > 0.5
        and md["gates"]["type"] == "json"
        and md["temperature"]["raw_value"] == best.temperature
    )
    assert best.data_versions["training_set"] == md["training_set_version"]["raw_value"]
    assert not (tmp_path / "ckpt" / "best.json").exists()  # the asset publishes, after the audit


def test_without_dagster_prints_json_and_reuses(tlf, training_set, tmp_path, capsys):
    args = ["--training-set", str(training_set), "--out-dir", str(tmp_path / "c"), "--members", json.dumps([CONFIG])]
    assert tlf.main(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["finished"] and out["data_version"] == read_spec(out["run_dir"], "best").weights_sha256
    assert out["training_set_version"] == tlf.dataset_version(str(training_set))
    assert (Path(out["run_dir"]) / "gates.json").is_file()
    # a second call with the same inputs reuses the completed run and reports the same checkpoint
    assert tlf.main(args) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["data_version"] == out["data_version"] and again["reused"] and not out["reused"]
    with pytest.raises(InputError, match="unknown keys"):
        tlf.main(["--training-set", str(training_set), "--out-dir", str(tmp_path / "d"), "--members", '[{"epoch": 1}]'])
    with pytest.raises(InputError, match="out_dir"):
        tlf.run({"training_set_uri": str(training_set)})
    with pytest.raises(InputError, match="at least one member"):
        tlf.run({"training_set_uri": str(training_set), "out_dir": str(tmp_path / "e")})


def test_core_threshold_is_asset_config_from_the_gate_registry():
    from darkhaloscope.training.gates import GATES
    from lens_assets.training import LensFinderConfig, lens_finder

    assert LensFinderConfig().core_threshold == GATES["core_lr_auc"].threshold == 0.65
    fields = lens_finder.op.config_schema.as_field().config_type.fields
    assert set(fields) == {"core_threshold", "epochs"} and not any(f.is_required for f in fields.values())
    assert LensFinderConfig().epochs == 0  # the profile's own epochs
    specs = {s.name: s.blocking for s in lens_finder.check_specs}
    assert specs == {name: g.blocking for name, g in GATES.items()}


def test_pipes_metadata_has_tail_tier_and_population_metrics(tlf, training_set, tmp_path):
    s = tlf.run({"training_set_uri": str(training_set), "out_dir": str(tmp_path / "c"), "members": [CONFIG]})
    s["val_metrics"].update({"tpr_at_fpr_1e-4": 0.25, "recall_at_0.5_tier_A": 0.8, "recall_at_0.5_tier_B": 0.6})
    md = tlf.pipes_metadata(s)
    assert (
        md["val_tpr_at_fpr_1e-4"] == 0.25
        and md["val_recall_at_0.5_tier_A"] == 0.8
        and md["val_recall_at_0.5_tier_B"] == 0.6
    )
    assert (
        md["val_auroc"] == s["val_metrics"]["auroc"] and md["run_key"] == s["run_key"] and md["run_dir"] == s["run_dir"]
    )
    assert md["calibration"]["raw_value"]["temperature"] == s["temperature"]
