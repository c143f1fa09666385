"""Training loop: learns a real signal, reproducible, resumes exactly after a crash (epoch end and mid-epoch)."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from darkhaloscope.errors import InputError
from darkhaloscope.training.checkpoint import read_spec
from darkhaloscope.training.data import synthetic_arrays
from darkhaloscope.training.loop import TrainConfig, lr_at, mark_run_complete, read_run_complete, run_key, train
from darkhaloscope.training.preprocess import PreprocessSpec

torch.set_num_threads(1)

SPEC = PreprocessSpec()
VERSIONS = {"training_set": "synthetic-v1"}


class Crash(RuntimeError):
    pass


@pytest.fixture(scope="module")
def data():
    a = synthetic_arrays(240, 33, seed=3, arc_amplitude=4.0)
    return a.split_rows("train"), a.split_rows("val")


def _cfg(**kw):
    base = dict(
        arch="bottleneck_resnet_tiny",
        epochs=4,
        batch_size=32,
        lr=1e-2,
        warmup_epochs=0.5,
        patience=0,
        seed=7,
        hard_negative_prob=0.2,
        core_dropout=0.2,
        checkpoint_every_steps=2,
        device="cpu",
    )
    base.update(kw)
    return TrainConfig(**base)


def _weights(d, name="last"):
    spec = read_spec(d, name)
    return load_file(str(d / spec.weights_file))


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    d = tmp_path_factory.mktemp("ref")
    res = train(*data, _cfg(), d, SPEC, VERSIONS)
    return d, res


def test_learns_signal_and_writes_artifacts(reference):
    d, res = reference
    assert res.finished and res.stopped_reason == "max_epochs" and res.epochs_run == 4
    assert res.best_val_auroc > 0.9  # arcs on noise are easy; chance is 0.5
    assert res.val_metrics["auroc"] == pytest.approx(res.best_val_auroc)
    assert (d / "training_curves.png").stat().st_size > 1000 and (d / "metrics.json").is_file()
    best = read_spec(d, "best")
    assert best.epoch == res.best_epoch + 1 and best.preprocess == SPEC and best.data_versions == VERSIONS
    # the full validation metrics of the best weights are in its spec, not only in metrics.json
    v = best.metrics["validation"]
    assert v["auroc"] == pytest.approx(res.val_metrics["auroc"]) and best.metrics["val_auroc"] == pytest.approx(
        res.best_val_auroc
    )
    assert {"average_precision", "tpr_at_fpr_1e-2", "tpr_at_fpr_1e-3", "tpr_at_fpr_1e-4", "recall_at_0.5"} <= set(v)
    assert res.best == best
    # calibrated on the validation split: the temperature is in the spec, scoring applies it
    cal = best.metrics["calibration"]
    assert best.temperature == pytest.approx(cal["temperature"]) and best.temperature != 1.0
    # (temperature scaling minimises the log-loss; the binned ECE may move either way by a little)
    assert cal["ece_after"] <= cal["ece_before"] + 0.02 and v["ece_15"] == pytest.approx(cal["ece_after"])


def test_dihedral_views_are_calibrated_on_the_averaged_logits(data, tmp_path):
    from darkhaloscope.training.calibration import fit_temperature
    from darkhaloscope.training.checkpoint import load_checkpoint
    from darkhaloscope.training.inference import stamp_logits

    res = train(*data, _cfg(epochs=1, dihedral_views=4), tmp_path, SPEC, VERSIONS)
    model, best = load_checkpoint(tmp_path, "best")
    assert best.dihedral_views == res.best.dihedral_views == 4 and best.metrics["calibration"]["dihedral_views"] == 4
    val = data[1]
    averaged = stamp_logits(model, best, val.image)[0]
    single = stamp_logits(model, SPEC, val.image)[0]
    assert not np.allclose(averaged, single, atol=1e-3)
    assert best.temperature == pytest.approx(fit_temperature(averaged, val.label, val.weight), rel=1e-9)


def test_same_seed_same_weights_other_seed_differs(data, reference, tmp_path):
    d, _ = reference
    # loader workers fetch the batches: same weights (augmentation keys do not depend on the worker)
    train(*data, _cfg(num_workers=2), tmp_path / "again", SPEC, VERSIONS)
    assert _same(_weights(d), _weights(tmp_path / "again"))
    train(*data, _cfg(seed=8, epochs=1), tmp_path / "other", SPEC, VERSIONS)
    train(*data, _cfg(epochs=1), tmp_path / "one", SPEC, VERSIONS)
    assert not _same(_weights(tmp_path / "other"), _weights(tmp_path / "one"))


@pytest.mark.parametrize("crash_on", ["epoch", "step"])
def test_resume_after_crash_gives_identical_weights(data, reference, tmp_path, crash_on):
    d, ref = reference
    seen = []

    def crash(ev):
        seen.append(ev)
        if ev["event"] == crash_on and (crash_on == "step" or ev["epoch"] == 0):
            raise Crash("killed")

    with pytest.raises(Crash):
        train(*data, _cfg(), tmp_path, SPEC, VERSIONS, progress_cb=crash)
    st = read_spec(tmp_path, "last").training_state
    if crash_on == "epoch":
        assert st["epoch"] == 1 and st["step_in_epoch"] == 0
    else:
        assert st["epoch"] == 0 and st["step_in_epoch"] == 2  # mid-epoch checkpoint every 2 steps
    res = train(*data, _cfg(), tmp_path, SPEC, VERSIONS)
    assert res.resumed and res.finished
    assert _same(_weights(d), _weights(tmp_path))
    assert _same(_weights(d, "best"), _weights(tmp_path, "best"))
    assert [h["val_auroc"] for h in res.history] == [h["val_auroc"] for h in ref.history]
    # the optimizer state is restored too: the moments after the run match the uninterrupted run
    o1 = load_file(str(d / read_spec(d, "last").optimizer_file))
    o2 = load_file(str(tmp_path / read_spec(tmp_path, "last").optimizer_file))
    assert _same(o1, o2)


def test_resume_refuses_other_config_or_data(data, reference, tmp_path):
    d, _ = reference
    import shutil

    shutil.copytree(d, tmp_path / "run")
    with pytest.raises(InputError, match="another config"):
        train(*data, _cfg(lr=5e-3), tmp_path / "run", SPEC, VERSIONS)
    with pytest.raises(InputError, match="data versions"):
        train(*data, _cfg(), tmp_path / "run", SPEC, {"training_set": "other"})
    with pytest.raises(InputError, match="preprocessing"):
        train(*data, _cfg(), tmp_path / "run", PreprocessSpec(clip=5.0), VERSIONS)


def test_early_stopping_and_time_limit(data, tmp_path):
    tr, va = data
    # learning rate so small nothing improves after the first epoch -> stops after `patience` more
    res = train(tr, va, _cfg(lr=1e-9, epochs=6, patience=2, warmup_epochs=0), tmp_path / "es", SPEC, VERSIONS)
    assert res.finished and res.stopped_reason == "early_stopping" and res.epochs_run < 6
    res = train(tr, va, _cfg(max_minutes=1e-6), tmp_path / "tl", SPEC, VERSIONS)
    assert not res.finished and res.stopped_reason == "time_limit" and res.global_step == 1
    assert read_spec(tmp_path / "tl", "last").training_state["step_in_epoch"] == 1


def test_lr_schedule_warmup_then_cosine():
    lrs = np.array([lr_at(s, 100, 10, 1.0) for s in range(100)])
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert np.all(np.diff(lrs[:10]) > 0) and np.all(np.diff(lrs[10:]) <= 0)
    assert lrs[-1] == pytest.approx(0.0, abs=1e-12)


def test_bad_inputs_raise(data, tmp_path):
    tr, va = data
    with pytest.raises(InputError, match="arch"):
        TrainConfig(arch="vgg")
    with pytest.raises(InputError, match="unknown keys"):
        TrainConfig.from_dict({"epochz": 3})
    with pytest.raises(InputError, match="dihedral_views"):
        TrainConfig(dihedral_views=3)
    with pytest.raises(InputError, match="both labels"):
        train(tr, va.subset(va.label == 1), _cfg(), tmp_path, SPEC, VERSIONS)


def test_run_key_names_what_shapes_the_weights():
    k = run_key(_cfg(), SPEC, VERSIONS)
    assert k == run_key(_cfg(), SPEC, dict(VERSIONS)) and len(k) == 16
    assert k == run_key(_cfg(lr=0.01, epochs=4), SPEC, VERSIONS)  # 1e-2 is 0.01
    assert k == run_key(_cfg(device="cuda", num_workers=3, checkpoint_every_steps=9, val_batch_size=7), SPEC, VERSIONS)
    others = {
        run_key(_cfg(lr=5e-3), SPEC, VERSIONS),
        run_key(_cfg(seed=8), SPEC, VERSIONS),
        run_key(_cfg(arch="bottleneck_resnet"), SPEC, VERSIONS),
        run_key(_cfg(), PreprocessSpec(clip=5.0), VERSIONS),
        run_key(_cfg(), SPEC, {"training_set": "synthetic-v2"}),
        run_key(_cfg(dihedral_views=4), SPEC, VERSIONS),
    }
    assert len(others) == 6 and k not in others
    # a per-call time limit never decides the weights, so it does not name the run
    assert run_key(_cfg(max_minutes=3.0), SPEC, VERSIONS) == run_key(_cfg(max_minutes=2.0), SPEC, VERSIONS) == k


def test_completion_record_round_trip_and_mismatch(reference, tmp_path):
    import shutil

    d, res = reference
    run = tmp_path / "run"
    shutil.copytree(d, run)
    assert read_run_complete(run) is None
    rec = mark_run_complete(run, res, run_key="abc")
    assert read_run_complete(run) == rec and rec["stopped_reason"] == "max_epochs" and rec["run_key"] == "abc"
    assert rec["best_checkpoint"]["weights_sha256"] == read_spec(run, "best").weights_sha256
    (run / "complete.json").write_text(json.dumps(dict(rec, best_checkpoint={"weights_sha256": "0" * 64})))
    with pytest.raises(InputError, match="does not hold"):
        read_run_complete(run)
