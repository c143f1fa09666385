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


def write_tiny_training_set(lake) -> None:
    """A training set of 120 rows of 33×33 pixels with bright arcs (``training.data.synthetic_arrays``)."""
    import pyarrow as pa

    from darkhaloscope.stamps import to_tensor_array
    from darkhaloscope.training.data import synthetic_arrays

    a = synthetic_arrays(120, 33, seed=21, arc_amplitude=4.0)
    lake.write_table(
        "training",
        "training_set",
        pa.table(
            {
                "object_id": a.object_id,
                "label": pa.array(a.label, pa.int8()),
                "weight": a.weight,
                "split": a.split.astype(str),
                "kind": a.kind.astype(str),
                "tier": pa.array([t or None for t in a.tier], pa.string()),
                "image": to_tensor_array(a.image),
            }
        ),
    )


def use_tiny_training_profile(monkeypatch, repo_root) -> None:
    """The lens finder's training profile made one tiny member for one epoch (the demo's preprocessing
    and stream), its trainer on one thread with ``repo_root`` importable."""
    import os

    from darkhaloscope.training.loop import TrainConfig
    from darkhaloscope.training.profiles import TrainingProfile, training_profile
    from lens_assets import training as training_assets

    demo = training_profile("demo")
    member = TrainConfig(
        arch="bottleneck_resnet_tiny", epochs=1, batch_size=32, lr=1e-2, patience=0, checkpoint_every_steps=0
    )
    monkeypatch.setattr(
        training_assets, "training_profile", lambda name: TrainingProfile(demo.preprocess, demo.stream, (member,))
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", str(repo_root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
