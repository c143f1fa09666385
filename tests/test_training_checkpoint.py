"""Checkpoints: safetensors + JSON round trip, no pickle ever, clear refusal of mismatches and tampering."""

import json
import pickle
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.training import checkpoint as ck
from darkhaloscope.training.models import build_model
from darkhaloscope.training.preprocess import PreprocessSpec

torch.set_num_threads(1)


def _save(folder, name="best", arch="bottleneck_resnet_tiny", spec=PreprocessSpec(), with_opt=False):
    torch.manual_seed(0)
    model = build_model(arch, spec.out_channels(3))
    opt = None
    if with_opt:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(torch.randn(4, spec.out_channels(3), 17, 17)).sum().backward()
        opt.step()
    s = ck.save_checkpoint(
        folder,
        name,
        model,
        architecture=arch,
        in_channels=spec.out_channels(3),
        preprocess=spec,
        train_config={"lr": 1e-3},
        metrics={"val_auroc": 0.9},
        data_versions={"ts": "abc"},
        epoch=3,
        optimizer=opt,
    )
    return model, opt, s


def test_round_trip_same_outputs_and_spec(tmp_path):
    spec = PreprocessSpec(residual="append", crop=21)
    model, _, saved = _save(tmp_path, spec=spec)
    loaded, s = ck.load_checkpoint(tmp_path, "best")
    x = torch.randn(3, 6, 21, 21)
    model.eval()
    assert torch.equal(model(x), loaded(x))
    assert s.preprocess == spec and s.in_channels == 6 and s.epoch == 3 and s.data_versions == {"ts": "abc"}
    assert s.weights_sha256 == ck.sha256_file(tmp_path / s.weights_file) == s.data_version
    assert not loaded.training
    # the same weights averaged over other views score differently, so they are another version
    averaged = {replace(s, dihedral_views=k).data_version for k in (2, 4, 8)}
    assert len(averaged) == 3 and s.data_version not in averaged
    assert (
        ck.CheckpointSpec.from_dict(replace(s, dihedral_views=2).to_dict()).data_version
        == replace(s, dihedral_views=2).data_version
    )


def test_optimizer_state_round_trip(tmp_path):
    model, opt, _ = _save(tmp_path, "last", with_opt=True)
    m2 = build_model("bottleneck_resnet_tiny", 3)
    o2 = torch.optim.AdamW(m2.parameters(), lr=5.0)
    ck.load_training_state(tmp_path, "last", m2, o2)
    a, b = opt.state_dict(), o2.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for pid in a["state"]:
        for k, v in a["state"][pid].items():
            assert torch.equal(v, b["state"][pid][k])


def test_rewrite_replaces_files_and_keeps_other_names(tmp_path):
    _save(tmp_path, "best")
    _save(tmp_path, "last", with_opt=True)
    torch.manual_seed(1)
    m = build_model("bottleneck_resnet_tiny", 3)
    ck.save_checkpoint(
        tmp_path, "best", m, architecture="bottleneck_resnet_tiny", in_channels=3, preprocess=PreprocessSpec()
    )
    names = sorted(p.name for p in tmp_path.iterdir())
    assert sum(n.startswith("best-") for n in names) == 1 and sum(n.startswith("last-") for n in names) == 2
    assert not any(n.endswith(".tmp") for n in names)


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, (f"touch {MARKER}",))


MARKER = None


def test_pickle_checkpoint_is_never_unpickled(tmp_path):
    global MARKER
    MARKER = tmp_path / "PWNED"
    payload = pickle.dumps(_Evil())
    # a classic pickled checkpoint next to nothing else: refused, not executed
    (tmp_path / "best.pt").write_bytes(payload)
    with pytest.raises(InputError, match="no checkpoint spec"):
        ck.load_checkpoint(tmp_path, "best")
    # a pickle disguised as the weights file of a valid-looking spec: refused by sha and by format
    _, _, s = _save(tmp_path / "c")
    wpath = tmp_path / "c" / s.weights_file
    wpath.write_bytes(payload)
    with pytest.raises(InputError, match="sha256"):
        ck.load_checkpoint(tmp_path / "c", "best")
    spec = json.loads((tmp_path / "c" / "best.json").read_text())
    spec["weights_sha256"] = ck.sha256_file(wpath)
    (tmp_path / "c" / "best.json").write_text(json.dumps(spec))
    with pytest.raises(InputError, match="not a valid safetensors"):
        ck.load_checkpoint(tmp_path / "c", "best")
    assert not MARKER.exists()


def test_library_never_uses_pickle_or_torch_load():
    src = Path(ck.__file__).parent
    for f in src.glob("*.py"):
        text = f.read_text()
        assert not re.search(r"torch\.load\(|import pickle|pickle\.load", text), f.name


def test_spec_model_mismatch_fails_clearly(tmp_path):
    _, _, s = _save(tmp_path)
    path = tmp_path / "best.json"
    spec = json.loads(path.read_text())
    bad = dict(spec, architecture="resnet18")
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="do not fit architecture 'resnet18'"):
        ck.load_checkpoint(tmp_path, "best")
    bad = dict(spec, in_channels=6)
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="in_channels 6 does not match"):
        ck.load_checkpoint(tmp_path, "best")
    bad = dict(spec, preprocess=dict(spec["preprocess"], residual="append"), in_channels=6)
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="do not fit"):
        ck.load_checkpoint(tmp_path, "best")
    bad = dict(spec, architecture="vgg")
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="unknown architecture"):
        ck.load_checkpoint(tmp_path, "best")
    bad = dict(spec, weights_file="../elsewhere.safetensors")
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="not a local"):
        ck.load_checkpoint(tmp_path, "best")
    path.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        ck.load_checkpoint(tmp_path, "best")
    path.write_text(json.dumps(dict(spec, format="other/9")))
    with pytest.raises(InputError, match="not a dhs-checkpoint"):
        ck.load_checkpoint(tmp_path, "best")


def test_half_written_checkpoint_is_not_picked_up(tmp_path):
    _save(tmp_path, "best")
    before = ck.read_spec(tmp_path, "best")
    # a crash after the tensors were written but before the spec: the old spec still loads
    torch.manual_seed(5)
    m = build_model("bottleneck_resnet_tiny", 3)
    ck._write_tensors(tmp_path, "best", m.state_dict())
    model, s = ck.load_checkpoint(tmp_path, "best")
    assert s.weights_sha256 == before.weights_sha256


def test_write_spec_needs_its_tensors_first(tmp_path):
    _, _, s = _save(tmp_path, "best")
    from dataclasses import replace

    s2 = ck.write_spec(tmp_path, replace(s, metrics={"val_auroc": 0.9, "validation": {"auroc": 0.91}}))
    assert ck.read_spec(tmp_path, "best").metrics["validation"] == {"auroc": 0.91} and s2.weights_file == s.weights_file
    assert (tmp_path / s.weights_file).is_file()
    with pytest.raises(InputError, match="missing"):
        ck.write_spec(tmp_path, replace(s, weights_file="best-0000000000000000.safetensors"))
    assert ck.read_spec(tmp_path, "best") == s2
