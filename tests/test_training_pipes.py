"""The standalone trainer script: runs under Dagster Pipes (reports materialization + data version) and without."""

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
SCRIPT = ROOT / "lens_assets" / "pipes" / "train_lens_finder.py"
CONFIG = {"arch": "bottleneck_resnet_tiny", "epochs": 2, "batch_size": 32, "lr": 0.01, "patience": 0, "device": "cpu",
          "hard_negative_prob": 0.2, "checkpoint_every_steps": 0}


@pytest.fixture(scope="module")
def training_set(tmp_path_factory):
    a = synthetic_arrays(160, 33, seed=4, arc_amplitude=4.0)
    n = len(a)
    ctrl = np.zeros((n, 3 * 33 * 33), np.float32)
    ctrl[a.control_index >= 0] = a.control.reshape(len(a.control), -1)
    storage = pa.array([c if i >= 0 else None for c, i in zip(ctrl, a.control_index)], pa.list_(pa.float32(), 3 * 33 * 33))
    t = pa.table({
        "object_id": pa.array(a.object_id), "label": pa.array(a.label, pa.int8()), "weight": pa.array(a.weight),
        "split": pa.array(a.split.astype(str)), "kind": pa.array(a.kind.astype(str)),
        "tier": pa.array([t or None for t in a.tier], pa.string()), "pool": pa.array([None] * n, pa.string()),
        "image": to_tensor_array(a.image),
        "control": pa.FixedShapeTensorArray.from_storage(to_tensor_array(a.image[:1]).type, storage),
        "theta_e_arcsec": pa.array(np.full(n, np.nan, np.float32)), "psfsize_r": pa.array(np.ones(n, np.float32)),
    })
    d = tmp_path_factory.mktemp("ts") / "training_set"
    d.mkdir()
    pq.write_table(t, d / "part-0.parquet")
    return d


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def test_under_dagster_pipes_reports_checkpoint(training_set, tmp_path):
    ctx = {
        "asset_keys": ["lens_finder"], "code_version_by_asset_key": None, "provenance_by_asset_key": None,
        "partition_key": None, "partition_key_range": None, "partition_time_window": None,
        "run_id": "test-run", "job_name": None, "retry_number": 0,
        "extras": {"training_set_uri": str(training_set), "out_dir": str(tmp_path / "ckpt"), "config": CONFIG},
    }
    (tmp_path / "ctx.json").write_text(json.dumps(ctx))
    env = _env()
    env[DAGSTER_PIPES_CONTEXT_ENV_VAR] = encode_env_var({"path": str(tmp_path / "ctx.json")})
    env[DAGSTER_PIPES_MESSAGES_ENV_VAR] = encode_env_var({"path": str(tmp_path / "messages.jsonl")})
    # run as a module, then confirm that the script never imported dagster itself
    code = ("import sys, runpy\n"
            "try:\n    runpy.run_module('lens_assets.pipes.train_lens_finder', run_name='__main__')\n"
            "except SystemExit as e:\n    rc = e.code\n"
            "print('DAGSTER_IMPORTED', any(m == 'dagster' or m.startswith('dagster.') for m in sys.modules), 'RC', rc)")
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "DAGSTER_IMPORTED False RC 0" in p.stdout, p.stderr[-3000:]
    msgs = [json.loads(line) for line in (tmp_path / "messages.jsonl").read_text().splitlines()]
    methods = [m["method"] for m in msgs]
    assert methods[0] == "opened" and methods[-1] == "closed" and "log" in methods
    mat = [m for m in msgs if m["method"] == "report_asset_materialization"]
    assert len(mat) == 1
    best = read_spec(tmp_path / "ckpt", "best")
    assert mat[0]["params"]["data_version"] == best.weights_sha256
    md = mat[0]["params"]["metadata"]
    assert md["dagster/uri"]["raw_value"] == str((tmp_path / "ckpt").resolve())
    assert md["val_auroc"]["raw_value"] > 0.5 and md["gates"]["type"] == "json"
    assert [g["name"] for g in md["gates"]["raw_value"]][0] == "core_lr_auc"
    assert best.data_versions["training_set"] == md["training_set_version"]["raw_value"]


def test_without_dagster_prints_json_and_resumes(training_set, tmp_path, capsys):
    sys.path.insert(0, str(ROOT))
    from lens_assets.pipes import train_lens_finder as tlf

    args = ["--training-set", str(training_set), "--out-dir", str(tmp_path / "c"), "--config", json.dumps({**CONFIG, "epochs": 1})]
    assert tlf.main(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["finished"] and out["data_version"] == read_spec(tmp_path / "c", "best").weights_sha256
    assert out["training_set_version"] == tlf.dataset_version(str(training_set))
    assert (tmp_path / "c" / "gates.json").is_file()
    # a second call on the finished folder resumes (nothing left to train) and reports the same checkpoint
    assert tlf.main(args) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["data_version"] == out["data_version"]
    with pytest.raises(InputError, match="unknown keys"):
        tlf.main(["--training-set", str(training_set), "--out-dir", str(tmp_path / "d"), "--config", '{"epoch": 1}'])
    with pytest.raises(InputError, match="out_dir"):
        tlf.run({"training_set_uri": str(training_set)})
