"""Model architectures: parameter counts (Paper IV shielded ResNet 194,433; ResNet-18 11.2M) and shapes."""

import pytest
import torch
from safetensors.torch import load_file

from darkhaloscope.errors import InputError
from darkhaloscope.training.checkpoint import load_checkpoint, save_checkpoint
from darkhaloscope.training.models import build_model, count_parameters
from darkhaloscope.training.preprocess import PreprocessSpec

torch.set_num_threads(1)


def test_bottleneck_resnet_size_matches_paper_iv():
    n = count_parameters(build_model("bottleneck_resnet", 3))
    assert abs(n - 194_433) / 194_433 < 0.25


def test_resnet18_small_stamp_variant():
    m = build_model("resnet18", 3)
    assert abs(count_parameters(m) - 11.2e6) / 11.2e6 < 0.05
    stem = m.stem[0]
    assert stem.kernel_size == (3, 3) and stem.stride == (1, 1)
    assert not any(isinstance(x, torch.nn.MaxPool2d) for x in m.modules())


@pytest.mark.parametrize("arch", ["bottleneck_resnet", "bottleneck_resnet_tiny", "resnet18"])
@pytest.mark.parametrize("in_ch", [3, 6])
def test_single_logit_any_size(arch, in_ch):
    m = build_model(arch, in_ch).eval()
    with torch.no_grad():
        for s in (21, 33):
            assert m(torch.randn(2, in_ch, s, s)).shape == (2,)


def test_unknown_arch_and_bad_channels():
    with pytest.raises(InputError, match="unknown architecture"):
        build_model("vgg16", 3)
    with pytest.raises(InputError, match="in_channels"):
        build_model("resnet18", 0)


@pytest.mark.parametrize("arch", ["strided_resnet", "bottleneck_resnet_tiny"])
def test_channels_last_compute_layout_stays_out_of_checkpoints(arch, tmp_path):
    # build_model runs the convolutions channels-last (a speed choice): a checkpoint must still hold
    # plain tensors, and a model loaded from it must run channels-last and give the same logits.
    torch.manual_seed(0)
    m = build_model(arch, 6).eval()
    convs = [t for t in m.state_dict().values() if t.ndim == 4 and t.shape[-1] > 1]
    assert convs and all(t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous() for t in convs)
    save_checkpoint(
        tmp_path, "best", m, architecture=arch, in_channels=6, preprocess=PreprocessSpec(crop=49, residual="append")
    )
    state = load_file(next(tmp_path.glob("best-*.safetensors")))
    assert all(t.is_contiguous() for t in state.values())
    loaded, _ = load_checkpoint(tmp_path, "best")
    assert all(
        t.is_contiguous(memory_format=torch.channels_last)
        for t in loaded.state_dict().values()
        if t.ndim == 4 and t.shape[-1] > 1
    )
    x = torch.randn(4, 6, 49, 49)
    with torch.no_grad():
        assert torch.equal(m(x), loaded.eval()(x))
