"""A tiny untrained lens finder published into a test lake, for the tests of the assets that score."""

from __future__ import annotations

import torch

from darkhaloscope.training.checkpoint import save_checkpoint
from darkhaloscope.training.models import build_model
from darkhaloscope.training.preprocess import PreprocessSpec
from lake_platform.lake import Lake


def publish_tiny_finder(lake: Lake) -> None:
    """Publish a seeded ``bottleneck_resnet_tiny`` (3 channels, 65 px crop) as ``lake``'s lens finder."""
    torch.manual_seed(0)
    save_checkpoint(
        lake.files_path("training", "lens_finder", {"artifact": "checkpoint"}),
        "best",
        build_model("bottleneck_resnet_tiny", 3),
        architecture="bottleneck_resnet_tiny",
        in_channels=3,
        preprocess=PreprocessSpec(crop=65),
    )
