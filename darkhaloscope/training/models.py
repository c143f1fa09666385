"""Lens-finder networks (plain torch, no torchvision): single-logit binary classifiers.

* ``bottleneck_resnet`` — a compact pre-activation bottleneck ResNet in the style of the shielded
  ResNet of Huang et al. / Paper IV (194,433 parameters there; about 200k here): a 5x5 stem, four
  stages of bottleneck blocks, and a 1x1 "shield" convolution after each stage that narrows the
  channels passed on. Small on purpose: with ~10^3 real lenses an 11M-parameter ResNet-18
  overfits, and the shields raised Paper II's validation AUC from 0.992 to 0.997 at 60k parameters
  (Paper II: Huang et al. 2021, ApJ 909, 27; Paper IV: Inchausti et al. 2025).
* ``strided_resnet`` — a small residual network that downsamples in its first layer (5x5 stride-2
  stem, then basic blocks at 16-32-64 channels, strides 1-2-2; about 80k parameters): a quarter of
  the stem's activations, so it learns on a CPU in minutes. Arcs (PSF FWHM 4-6 px) survive a
  stride-2 stem. The demo profile's finder.
* ``resnet18`` — ResNet-18 adapted to 101 px stamps: 3x3 stride-1 stem and no max-pool, so the
  arcs (a few pixels wide) are not thrown away in the first layer.

* ``stacked_ensemble`` — members combined by Paper IV's meta-learner (:class:`StackedEnsemble`).

Input (N, C, H, W) float32 preprocessed stamps of any size; output (N,) logits. Convolutions run
in channels-last memory layout (weights from :func:`build_model`, inputs converted in ``forward``):
on a CPU that makes a training step of either ResNet faster than the default layout (BENCHMARKS.md,
*The demo profile now: 28 epochs, channels-last convolutions, 10 hidden lenses per realisation*),
and it is the layout bf16 convolutions want on a GPU. Checkpoints store contiguous tensors, so the
layout never reaches a file.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import InputError


class _PreActBottleneck(nn.Module):
    """Pre-activation bottleneck: BN-ReLU-1x1 -> BN-ReLU-3x3(stride) -> BN-ReLU-1x1, identity or 1x1 skip."""

    def __init__(self, c_in: int, c_mid: int, c_out: int, stride: int = 1):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(c_in)
        self.conv1 = nn.Conv2d(c_in, c_mid, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_mid)
        self.conv2 = nn.Conv2d(c_mid, c_mid, 3, stride=stride, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_mid)
        self.conv3 = nn.Conv2d(c_mid, c_out, 1, bias=False)
        self.skip = None
        if stride != 1 or c_in != c_out:
            self.skip = nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = torch.relu(self.bn1(x))
        out = self.conv1(pre)
        out = self.conv2(torch.relu(self.bn2(out)))
        out = self.conv3(torch.relu(self.bn3(out)))
        return out + (x if self.skip is None else self.skip(pre))


class BottleneckResNet(nn.Module):
    """Compact shielded bottleneck ResNet (~200k parameters at the defaults, for 3 input bands).

    stages: (bottleneck width, block output channels, blocks, first stride) per stage;
    shields: channels after the 1x1 shield closing each stage.
    """

    def __init__(
        self,
        in_channels: int = 3,
        stem_channels: int = 32,
        stages: tuple[tuple[int, int, int, int], ...] = (
            (16, 64, 2, 1),
            (24, 96, 2, 2),
            (32, 128, 2, 2),
            (48, 192, 2, 2),
        ),
        shields: tuple[int, ...] = (32, 48, 64, 96),
        dropout: float = 0.0,
    ):
        super().__init__()
        if len(stages) != len(shields):
            raise InputError("BottleneckResNet needs one shield width per stage")
        layers: list[nn.Module] = [nn.Conv2d(in_channels, stem_channels, 5, padding=2, bias=False)]
        c = stem_channels
        for (mid, out, blocks, stride), shield in zip(stages, shields):
            for b in range(blocks):
                layers.append(_PreActBottleneck(c, mid, out, stride if b == 0 else 1))
                c = out
            # the shield: BN-ReLU-1x1 that narrows the representation handed to the next stage
            layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, shield, 1, bias=False)]
            c = shield
        layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.head = nn.Linear(c, 1)

    def pooled_features(self, x: torch.Tensor) -> torch.Tensor:
        """The penultimate layer: globally average-pooled features (N, D) the head reads."""
        return self.features(x.contiguous(memory_format=torch.channels_last)).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.pooled_features(x))).squeeze(-1)


class _BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


class _PooledResNet(nn.Module):
    """stem -> residual layers -> global average pooling -> linear head: (N, C, H, W) -> (N,) logits."""

    stem: nn.Module
    layers: nn.Module
    head: nn.Module

    def pooled_features(self, x: torch.Tensor) -> torch.Tensor:
        """The penultimate layer: globally average-pooled features (N, D) the head reads."""
        return self.layers(self.stem(x.contiguous(memory_format=torch.channels_last))).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pooled_features(x)).squeeze(-1)


class ResNet18Small(_PooledResNet):
    """ResNet-18 (basic blocks [2, 2, 2, 2], widths 64-512) with a 3x3 stride-1 stem and no max-pool."""

    def __init__(self, in_channels: int = 3, widths: tuple[int, int, int, int] = (64, 128, 256, 512)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        blocks: list[nn.Module] = []
        c = widths[0]
        for i, wd in enumerate(widths):
            blocks.append(_BasicBlock(c, wd, 1 if i == 0 else 2))
            blocks.append(_BasicBlock(wd, wd, 1))
            c = wd
        self.layers = nn.Sequential(*blocks)
        self.head = nn.Linear(c, 1)


class StridedResNet(_PooledResNet):
    """5x5 stride-2 stem, then one basic block per width (strides 1, 2, 2 by default), global
    average pooling and a linear head: (N, C, H, W) -> (N,) logits."""

    def __init__(
        self, in_channels: int = 3, widths: tuple[int, ...] = (16, 32, 64), strides: tuple[int, ...] = (1, 2, 2)
    ):
        super().__init__()
        if len(widths) != len(strides):
            raise InputError("StridedResNet needs one stride per width")
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 5, stride=2, padding=2, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        blocks, c = [], widths[0]
        for wd, st in zip(widths, strides):
            blocks.append(_BasicBlock(c, wd, st))
            c = wd
        self.layers = nn.Sequential(*blocks)
        self.head = nn.Linear(c, 1)


def _tiny_bottleneck_resnet(in_channels: int = 3) -> BottleneckResNet:
    """The same shielded bottleneck design at ~6k parameters, for tests and small CPU runs."""
    return BottleneckResNet(
        in_channels=in_channels,
        stem_channels=8,
        stages=((8, 16, 1, 1), (8, 24, 1, 2), (12, 32, 1, 2)),
        shields=(12, 16, 24),
    )


class StackedEnsemble(nn.Module):
    """Members' probabilities combined by a meta-learner with one hidden layer (Paper IV: "a simple
    one-layer neural network with 300 nodes" over the two networks' probabilities).

    members: architecture names (each built with ``in_channels``); the output is the meta-learner's
    logit. ``member_logits`` gives the members' own logits (N, M) for fitting and comparison.
    """

    def __init__(
        self,
        in_channels: int = 3,
        members: tuple[str, ...] = ("bottleneck_resnet", "strided_resnet"),
        hidden: int = 300,
    ):
        super().__init__()
        if len(members) < 2 or "stacked_ensemble" in members:
            raise InputError(f"a stacked ensemble needs at least two single-network members, got {list(members)}")
        self.members = nn.ModuleList([build_model(a, in_channels) for a in members])
        self.meta = nn.Sequential(
            nn.Linear(len(members), int(hidden)), nn.ReLU(inplace=True), nn.Linear(int(hidden), 1)
        )

    def member_logits(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([m(x) for m in self.members], dim=1)

    def pooled_features(self, x: torch.Tensor) -> torch.Tensor:
        """The members' penultimate layers side by side (N, sum of their D): the meta-learner reads
        only the members' logits, so the members' pooled features are the representation."""
        return torch.cat([m.pooled_features(x) for m in self.members], dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.meta(torch.sigmoid(self.member_logits(x))).squeeze(-1)


_ARCHS = {
    "bottleneck_resnet": BottleneckResNet,
    "bottleneck_resnet_tiny": _tiny_bottleneck_resnet,
    "resnet18": ResNet18Small,
    "strided_resnet": StridedResNet,
    "stacked_ensemble": StackedEnsemble,
}
ARCHITECTURES = tuple(_ARCHS)


def build_model(arch: str, in_channels: int, **arch_args) -> nn.Module:
    """A freshly initialised single-logit model of architecture ``arch`` for ``in_channels`` channels
    (``arch_args``: the architecture's own arguments, e.g. a stacked ensemble's members).

    Initialisation draws from torch's global RNG; callers seed it (see loop.train).
    """
    if arch not in _ARCHS:
        raise InputError(f"unknown architecture {arch!r}; known: {list(_ARCHS)}")
    if int(in_channels) != in_channels or in_channels < 1:
        raise InputError(f"in_channels must be a positive integer, got {in_channels!r}")
    return _ARCHS[arch](in_channels=int(in_channels), **arch_args).to(memory_format=torch.channels_last)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (BatchNorm running statistics excluded)."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))
