"""Lens-finder training: preprocessing, models, data, training loop, checkpoints, metrics, gates, scoring.

Plain torch and numpy; never imports dagster (the Pipes entry script is lens_assets/pipes/train_lens_finder.py).
"""

from .checkpoint import CheckpointSpec, load_checkpoint, read_spec, save_checkpoint
from .data import TrainingArrays, load_training_set, make_arrays, synthetic_arrays
from .dataset import AugmentedStampDataset
from .gates import (
    core_lookalike_gate,
    core_lr_gate,
    core_masked_drop_gate,
    hard_negative_gate,
    real_lens_shuffle_gate,
    run_gates,
)
from .inference import resolve_device, score_stamps, validate_stamps
from .loop import TrainConfig, TrainResult, train
from .metrics import evaluate_scores, plot_training_curves
from .models import ARCHITECTURES, build_model, count_parameters
from .preprocess import PreprocessSpec, preprocess

__all__ = [
    "ARCHITECTURES",
    "AugmentedStampDataset",
    "CheckpointSpec",
    "PreprocessSpec",
    "TrainConfig",
    "TrainResult",
    "TrainingArrays",
    "build_model",
    "core_lookalike_gate",
    "core_lr_gate",
    "core_masked_drop_gate",
    "count_parameters",
    "evaluate_scores",
    "hard_negative_gate",
    "load_checkpoint",
    "load_training_set",
    "make_arrays",
    "plot_training_curves",
    "preprocess",
    "read_spec",
    "real_lens_shuffle_gate",
    "resolve_device",
    "run_gates",
    "save_checkpoint",
    "score_stamps",
    "synthetic_arrays",
    "train",
    "validate_stamps",
]
