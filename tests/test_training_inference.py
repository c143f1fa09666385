"""Scoring: bounded streaming, unusable stamps are NaN with a reason, never scored as zeros; a
checkpoint that averages over a group of the stamp's flips and rotations scores them all alike."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.training.checkpoint import CheckpointSpec
from darkhaloscope.training.inference import (
    PreprocessedStamps,
    resolve_device,
    score_stamps,
    stamp_logits,
    validate_stamps,
)
from darkhaloscope.training.models import build_model
from darkhaloscope.training.preprocess import PreprocessSpec

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model("bottleneck_resnet_tiny", 3).eval()


def test_invalid_rows_are_nan_with_reason(model):
    x = np.random.default_rng(0).normal(1, 0.1, (6, 3, 33, 33)).astype(np.float32)
    x[1, 0, 3, 3] = np.nan
    x[2, 2] = 0.0
    x[4, 1, 0, 0] = np.inf
    scores, ok, reason = score_stamps(model, PreprocessSpec(), x, device="cpu", batch_size=4)
    assert scores.dtype == np.float64 and ok.tolist() == [True, False, False, True, False, True]
    assert np.isnan(scores[~ok]).all() and np.all((scores[ok] > 0) & (scores[ok] < 1))
    assert reason[1] == "nonfinite_g" and reason[2] == "zero_z" and reason[4] == "nonfinite_r" and reason[0] == ""
    v, r = validate_stamps(x)
    assert v.tolist() == ok.tolist()


def test_streaming_iterator_equals_array_and_batch_size_independent(model):
    x = np.random.default_rng(1).normal(1, 0.1, (10, 3, 33, 33)).astype(np.float32)
    a, _, _ = score_stamps(model, PreprocessSpec(), x, device="cpu", batch_size=10)
    b, _, _ = score_stamps(model, PreprocessSpec(), (x[i : i + 3] for i in range(0, 10, 3)), device="cpu")
    c, _, _ = score_stamps(model, PreprocessSpec(), torch.from_numpy(x), device="cpu", batch_size=1)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


def test_stamps_preprocessed_once_score_to_the_same_bytes(model):
    """The training loop preprocesses its validation stamps once and scores them every epoch: the
    same logits, invalid rows included, as preprocessing them at each call; another spec or batch
    size is refused."""
    x = np.random.default_rng(4).normal(1, 0.1, (9, 3, 33, 33)).astype(np.float32)
    x[2, 1, 5, 5] = np.nan
    x[7, 0] = 0.0
    spec = PreprocessSpec(residual="append", stretch="asinh", colour_difference=True, antisymmetric=True)
    net = build_model("strided_resnet", spec.out_channels(3)).eval()
    once = PreprocessedStamps(x, spec, torch.device("cpu"), batch_size=4)
    for _ in range(2):
        a, ok_a, reason_a = stamp_logits(net, spec, once, device="cpu", batch_size=4)
        b, ok_b, reason_b = stamp_logits(net, spec, x, device="cpu", batch_size=4)
        assert np.array_equal(a, b, equal_nan=True) and np.array_equal(ok_a, ok_b) and list(reason_a) == list(reason_b)
    assert ok_a.tolist().count(False) == 2
    with pytest.raises(InputError, match="batches of 4"):
        stamp_logits(net, spec, once, device="cpu", batch_size=8)
    with pytest.raises(InputError, match="cannot be scored"):
        stamp_logits(model, PreprocessSpec(), once, device="cpu", batch_size=4)


def test_device_resolution(monkeypatch):
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == resolve_device(None).type == resolve_device(" Auto ").type == auto
    assert resolve_device("cpu").type == "cpu"
    # the device is the caller's: the environment's DHS_DEVICE reaches the library only through it
    monkeypatch.setenv("DHS_DEVICE", "tpu")
    assert resolve_device("auto").type == auto
    with pytest.raises(InputError, match="tpu"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="CUDA"):
            resolve_device("cuda")


def _views(x: np.ndarray) -> list[np.ndarray]:
    """The 8 flips and 90° rotations of (N, C, H, W) stamps in the library's code order (code c:
    mirrored if c & 4, then rotated c & 3 times), by numpy (independent of the library's)."""
    return [
        np.ascontiguousarray(np.rot90(np.flip(x, -1) if f else x, k, axes=(-2, -1))) for f in (0, 1) for k in range(4)
    ]


@pytest.mark.parametrize("views", [2, 4, 8])
def test_dihedral_views_average_their_subgroup_and_score_it_alike(model, views):
    x = np.random.default_rng(2).normal(1, 0.1, (5, 3, 33, 33)).astype(np.float32)
    x[:, :, 10:14, 20:23] += 2.0  # an off-centre blob, so the views differ
    spec = CheckpointSpec(
        name="best",
        architecture="bottleneck_resnet_tiny",
        in_channels=3,
        preprocess=PreprocessSpec(),
        param_count=0,
        param_shapes={},
        weights_file="x",
        weights_sha256="0",
        dihedral_views=views,
    )
    group = {2: (0, 2), 4: (0, 2, 4, 6), 8: tuple(range(8))}[views]  # 180° rotation; and the axis mirrors; all
    averaged = stamp_logits(model, spec, x, device="cpu")[0]
    singles = [stamp_logits(model, PreprocessSpec(), v, device="cpu")[0] for v in _views(x)]
    np.testing.assert_allclose(averaged, np.mean([singles[c] for c in group], axis=0), rtol=0, atol=1e-6)
    assert np.ptp(singles, axis=0).min() > 1e-4  # one view alone depends on the orientation
    for c in group:
        np.testing.assert_allclose(
            stamp_logits(model, spec, _views(x)[c], device="cpu")[0], averaged, rtol=0, atol=1e-6
        )
    with pytest.raises(InputError, match="dihedral_views"):
        stamp_logits(model, replace(spec, dihedral_views=3), x, device="cpu")
