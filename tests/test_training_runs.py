"""Training runs and publication (write, audit, publish): one run folder per (config, preprocessing,
data version); new inputs train anew, an interrupted run resumes, a completed run is reused and
audited again; a run is published only when its blocking gates passed, and a failed audit leaves
the published checkpoint byte for byte and the run folder in place."""

import json
from pathlib import Path

import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.training import runs
from darkhaloscope.training.checkpoint import read_spec
from darkhaloscope.training.data import synthetic_arrays
from darkhaloscope.training.loop import TrainConfig
from darkhaloscope.training.preprocess import PreprocessSpec

torch.set_num_threads(1)
SPEC = PreprocessSpec()
CONFIG = TrainConfig(
    arch="bottleneck_resnet_tiny",
    epochs=1,
    batch_size=32,
    lr=0.01,
    patience=0,
    device="cpu",
    hard_negative_prob=0.2,
    checkpoint_every_steps=0,
)


@pytest.fixture(scope="module")
def data():
    a = synthetic_arrays(160, 33, seed=4, arc_amplitude=4.0)
    return a.split_rows("train"), a.split_rows("val")


@pytest.fixture(scope="module")
def other():
    a = synthetic_arrays(160, 33, seed=5, arc_amplitude=4.0)
    return a.split_rows("train"), a.split_rows("val")


def _train(data, out, config=CONFIG, version="v1", **kw):
    return runs.train_run(*data, config, SPEC, out, version, say=lambda m: None, **kw)


def _no_training(*a, **k):
    raise AssertionError("train() was called for a completed run")


def test_new_inputs_train_anew_completed_runs_are_reused_and_reaudited(data, other, tmp_path, monkeypatch):
    out = tmp_path / "ckpt"
    s1 = _train(data, out)
    assert s1["finished"] and not s1["reused"] and not s1["resumed"]
    run1 = Path(s1["run_dir"])
    assert run1.parent == out / "runs" and (run1 / "complete.json").is_file() and (run1 / "gates.json").is_file()
    assert not (out / "best.json").exists()  # training never publishes
    b1 = read_spec(run1, "best")
    assert s1["data_version"] == b1.weights_sha256 and b1.data_versions == {"training_set": "v1"}
    assert (
        s1["val_metrics"]["auroc"] == pytest.approx(b1.metrics["validation"]["auroc"])
        and s1["temperature"] == b1.temperature
    )
    # new data or another config: a new run from scratch
    s2 = _train(other, out, version="v2")
    s3 = _train(data, out, config=TrainConfig(**{**CONFIG.to_dict(), "lr": 5e-3}))
    assert len({s1["run_key"], s2["run_key"], s3["run_key"]}) == 3 and not s2["resumed"] and not s3["reused"]
    # the inputs of a completed run train nothing; the gates run again with the thresholds given now
    monkeypatch.setattr(runs, "train", _no_training)
    last = run1 / "last.json"
    mtime = last.stat().st_mtime_ns
    s4 = _train(data, out, gate_thresholds={"core_lr_auc": 0.99})
    assert s4["reused"] and s4["run_key"] == s1["run_key"] and s4["data_version"] == s1["data_version"]
    assert last.stat().st_mtime_ns == mtime and s4["gates"][0]["threshold"] == 0.99
    assert json.loads((run1 / "gates.json").read_text())[0]["threshold"] == 0.99


def test_interrupted_run_resumes_to_the_weights_of_an_uninterrupted_one(data, tmp_path):
    cfg = TrainConfig(**{**CONFIG.to_dict(), "epochs": 2})
    s1 = _train(data, tmp_path / "a", config=TrainConfig(**{**cfg.to_dict(), "max_minutes": 1e-6}))
    assert not s1["finished"] and s1["stopped_reason"] == "time_limit" and s1["global_step"] == 1
    s2 = _train(data, tmp_path / "a", config=cfg)  # another per-call limit: the same run
    assert s2["run_key"] == s1["run_key"] and s2["resumed"] and s2["finished"]
    ref = _train(data, tmp_path / "ref", config=cfg)
    assert s2["data_version"] == ref["data_version"] and s2["global_step"] == ref["global_step"]


def test_published_files_are_the_audited_best_in_commit_order(data, other, tmp_path):
    """What a completed, audited run publishes: the verified weights of 'best', its spec without the
    optimizer state, then the side files; an incomplete or unaudited run, or a corrupt tensor file,
    gives nothing. (Whether it is published is the gates' decision: tests/test_lens_finder_asset.py.)"""
    good = _train(data, tmp_path / "runs")
    files = runs.published_files(good["run_dir"])
    spec = read_spec(good["run_dir"], "best")
    assert [n for n, _ in files] == [
        spec.weights_file,
        "best.json",
        "metrics.json",
        "training_curves.png",
        "gates.json",
    ]
    published = json.loads(dict(files)["best.json"])
    assert published["weights_sha256"] == good["data_version"] and published["optimizer_file"] is None
    # a run whose blocking core gate fails (threshold 0: no AUROC is below it) still gives its files
    bad = _train(other, tmp_path / "runs", version="v2", gate_thresholds={"core_lr_auc": 0.0})
    assert bad["finished"] and not bad["blocking_gates_passed"] and runs.published_files(bad["run_dir"])
    (Path(bad["run_dir"]) / "gates.json").unlink()
    with pytest.raises(InputError, match="never audited"):
        runs.published_files(bad["run_dir"])
    with pytest.raises(InputError, match="not complete"):
        runs.published_files(tmp_path / "nowhere")
    (Path(good["run_dir"]) / spec.weights_file).write_bytes(b"garbage")
    with pytest.raises(InputError, match="fails its sha256"):
        runs.published_files(good["run_dir"])


def test_dataset_version_hashes_the_parquet_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "ts").mkdir()
    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "ts" / "part-0.parquet")
    v1 = runs.dataset_version(str(tmp_path / "ts"))
    assert v1 == runs.dataset_version(str(tmp_path / "ts")) and len(v1) == 64
    pq.write_table(pa.table({"a": [1, 3]}), tmp_path / "ts" / "part-0.parquet")
    assert runs.dataset_version(str(tmp_path / "ts")) != v1
    with pytest.raises(InputError, match="no Parquet"):
        runs.dataset_version(str(tmp_path / "empty"))
