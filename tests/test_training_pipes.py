"""The standalone trainer script: runs under Dagster Pipes (reports materialization + data version) and without;
one run folder per (config, preprocessing, data version): new inputs train anew, an interrupted run resumes,
a completed run is reused, and only a completed run's 'best' is published."""

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
from darkhaloscope.training.checkpoint import read_spec, tensor_files_of
from darkhaloscope.training.data import synthetic_arrays
from tests.support.s3_server import fresh_bucket

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "lens_assets" / "pipes" / "train_lens_finder.py"
CONFIG = {"arch": "bottleneck_resnet_tiny", "epochs": 2, "batch_size": 32, "lr": 0.01, "patience": 0, "device": "cpu",
          "hard_negative_prob": 0.2, "checkpoint_every_steps": 0}


def _write_training_set(folder: Path, seed: int) -> Path:
    a = synthetic_arrays(160, 33, seed=seed, arc_amplitude=4.0)
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
    folder.mkdir(parents=True)
    pq.write_table(t, folder / "part-0.parquet")
    return folder


@pytest.fixture(scope="module")
def training_set(tmp_path_factory):
    return _write_training_set(tmp_path_factory.mktemp("ts") / "training_set", seed=4)


@pytest.fixture(scope="module")
def other_training_set(tmp_path_factory):
    """The same kind of data, other stamps: a re-materialized training set."""
    return _write_training_set(tmp_path_factory.mktemp("ts2") / "training_set", seed=5)


@pytest.fixture(scope="module")
def tlf():
    sys.path.insert(0, str(ROOT))
    from lens_assets.pipes import train_lens_finder

    return train_lens_finder


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


def test_without_dagster_prints_json_and_reuses(tlf, training_set, tmp_path, capsys):
    args = ["--training-set", str(training_set), "--out-dir", str(tmp_path / "c"), "--config", json.dumps({**CONFIG, "epochs": 1})]
    assert tlf.main(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["finished"] and out["data_version"] == read_spec(tmp_path / "c", "best").weights_sha256
    assert out["training_set_version"] == tlf.dataset_version(str(training_set))
    assert (tmp_path / "c" / "gates.json").is_file()
    # a second call with the same inputs reuses the completed run and reports the same checkpoint
    assert tlf.main(args) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["data_version"] == out["data_version"] and again["reused"] and not out["reused"]
    with pytest.raises(InputError, match="unknown keys"):
        tlf.main(["--training-set", str(training_set), "--out-dir", str(tmp_path / "d"), "--config", '{"epoch": 1}'])
    with pytest.raises(InputError, match="out_dir"):
        tlf.run({"training_set_uri": str(training_set)})


def _run(tlf, ts, out, **kw):
    params = {"training_set_uri": str(ts), "out_dir": str(out), "config": {**CONFIG, "epochs": 1}}
    params.update(kw)
    return tlf.run(params)


def _published_tensors(out: Path) -> list[str]:
    return tensor_files_of("best", (p.name for p in out.iterdir()))


def _no_training(*a, **k):
    raise AssertionError("train() was called for a completed run")


def test_new_inputs_train_anew_and_completed_runs_are_reused(tlf, training_set, other_training_set, tmp_path, monkeypatch):
    out = tmp_path / "ckpt"
    s1 = _run(tlf, training_set, out)
    b1 = read_spec(out, "best")
    assert s1["finished"] and s1["final_by"] == "finished" and not s1["reused"] and not s1["resumed"]
    assert s1["data_version"] == b1.weights_sha256 and b1.data_versions == {"training_set": s1["training_set_version"]}
    assert (out / "runs" / s1["run_key"] / "complete.json").is_file()
    # the published best carries the full validation metrics (not only val_auroc)
    v = b1.metrics["validation"]
    assert v["auroc"] == pytest.approx(s1["val_metrics"]["auroc"]) and "tpr_at_fpr_1e-4" in v and "average_precision" in v
    assert {"metrics.json", "gates.json", "training_curves.png"} <= {p.name for p in out.iterdir()}

    # (a) a re-materialized training set trains a new model from scratch (the old layout refused: 'data versions')
    s2 = _run(tlf, other_training_set, out)
    b2 = read_spec(out, "best")
    assert s2["finished"] and not s2["resumed"] and not s2["reused"] and s2["run_key"] != s1["run_key"]
    assert b2.weights_sha256 != b1.weights_sha256 and b2.data_versions == {"training_set": s2["training_set_version"]}
    assert _published_tensors(out) == [b2.weights_file]  # one complete published version
    # ... and so does another config on the same data
    s3 = _run(tlf, training_set, out, config={**CONFIG, "epochs": 1, "lr": 5e-3})
    assert s3["run_key"] not in (s1["run_key"], s2["run_key"]) and not s3["resumed"] and not s3["reused"]
    assert read_spec(out, "best").train_config["lr"] == 5e-3

    # (b) the inputs of a completed run train nothing: its best is reused (gates re-run, new threshold applies)
    monkeypatch.setattr(tlf, "train", _no_training)
    last = out / "runs" / s1["run_key"] / "last.json"
    mtime = last.stat().st_mtime_ns
    s4 = _run(tlf, training_set, out, core_threshold=0.99)
    assert s4["reused"] and s4["run_key"] == s1["run_key"] and s4["data_version"] == s1["data_version"]
    assert s4["global_step"] == s1["global_step"] and last.stat().st_mtime_ns == mtime
    assert read_spec(out, "best").weights_sha256 == b1.weights_sha256 and _published_tensors(out) == [b1.weights_file]
    assert s4["gates"][0]["name"] == "core_lr_auc" and s4["gates"][0]["threshold"] == 0.99
    assert json.loads((out / "gates.json").read_text())[0]["threshold"] == 0.99


def test_time_limited_run_resumes_unless_its_budget_is_final(tlf, training_set, tmp_path, monkeypatch):
    out = tmp_path / "ckpt"
    cfg = {**CONFIG, "epochs": 2}
    # (c) stopped at its time limit (not final): nothing is published, and the next call resumes
    s1 = _run(tlf, training_set, out, config={**cfg, "max_minutes": 1e-6})
    assert not s1["finished"] and s1["stopped_reason"] == "time_limit" and s1["global_step"] == 1
    assert not (out / "best.json").exists() and not (out / "runs" / s1["run_key"] / "complete.json").exists()
    s2 = _run(tlf, training_set, out, config=cfg)  # another per-call budget: the same run
    assert s2["run_key"] == s1["run_key"] and s2["resumed"] and s2["finished"]
    # the resumed run ends with the weights of an uninterrupted one
    ref = _run(tlf, training_set, tmp_path / "ref", config=cfg)
    assert s2["data_version"] == ref["data_version"] and s2["global_step"] == ref["global_step"]

    # a fixed time budget (demo profile): each call stops at the budget and resumes until an epoch
    # gives a best; that run is then final, and later calls reuse it instead of training more
    budget = {**cfg, "max_minutes": 1e-6}
    calls = [_run(tlf, training_set, out, config=budget, time_budget_final=True) for _ in range(2)]
    while not calls[-1]["finished"]:
        assert calls[-1]["stopped_reason"] == "time_limit" and len(calls) < 20
        calls.append(_run(tlf, training_set, out, config=budget, time_budget_final=True))
    done = calls[-1]
    assert done["final_by"] == "time_budget" and done["run_key"] != s1["run_key"] and calls[1]["resumed"]
    assert read_spec(out, "best").weights_sha256 == done["data_version"]
    monkeypatch.setattr(tlf, "train", _no_training)
    again = _run(tlf, training_set, out, config=budget, time_budget_final=True)
    assert again["reused"] and again["data_version"] == done["data_version"] and again["global_step"] == done["global_step"]


def test_publishes_to_s3_without_run_folders(tlf, s3_server, training_set, other_training_set, tmp_path, monkeypatch):
    bucket = fresh_bucket(s3_server)
    monkeypatch.setenv("DHS_S3_ENDPOINT", s3_server.endpoint_url)
    uri = f"s3://{bucket}/training/lens_finder/artifact=checkpoint"
    client = s3_server.client()

    def listed():
        r = client.list_objects_v2(Bucket=bucket, Prefix="training/lens_finder/artifact=checkpoint/")
        # (not the folder marker object that create_dir leaves on S3)
        return sorted(o["Key"].rsplit("/", 1)[1] for o in r.get("Contents", []) if not o["Key"].endswith("/"))

    s1 = _run(tlf, training_set, tmp_path / "local", checkpoint_uri=uri)
    assert s1["checkpoint_uri"] == uri
    b1 = read_spec(tmp_path / "local", "best")
    assert listed() == sorted(["best.json", b1.weights_file, "gates.json", "metrics.json", "training_curves.png"])
    s2 = _run(tlf, other_training_set, tmp_path / "local", checkpoint_uri=uri)
    b2 = read_spec(tmp_path / "local", "best")
    assert s2["data_version"] == b2.weights_sha256 != b1.weights_sha256
    assert listed() == sorted(["best.json", b2.weights_file, "gates.json", "metrics.json", "training_curves.png"])
    spec = json.loads(client.get_object(Bucket=bucket, Key="training/lens_finder/artifact=checkpoint/best.json")["Body"].read())
    assert spec["weights_sha256"] == b2.weights_sha256


def test_core_threshold_is_asset_config():
    from lens_assets.training import LensFinderConfig, lens_finder

    assert LensFinderConfig().core_threshold == 0.65
    fields = lens_finder.op.config_schema.as_field().config_type.fields
    assert set(fields) == {"core_threshold"} and not fields["core_threshold"].is_required


def test_pipes_metadata_has_tail_and_tier_metrics(tlf, training_set, tmp_path):
    s = _run(tlf, training_set, tmp_path / "c")
    s["val_metrics"].update({"tpr_at_fpr_1e-4": 0.25, "recall_at_0.5_tier_A": 0.8, "recall_at_0.5_tier_B": 0.6})
    md = tlf._pipes_metadata(s)
    assert md["val_tpr_at_fpr_1e-4"] == 0.25 and md["val_recall_at_0.5_tier_A"] == 0.8 and md["val_recall_at_0.5_tier_B"] == 0.6
    assert md["val_auroc"] == s["val_metrics"]["auroc"] and md["run_key"] == s["run_key"]
