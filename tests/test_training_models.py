"""Model architectures: parameter counts (Paper IV shielded ResNet 194,433; ResNet-18 11.2M) and shapes."""

import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.training.models import build_model, count_parameters

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
