"""Training profiles: the one place that sizes the lens finder's training per profile.

* ``demo`` learns on 2 CPU cores in about 3 minutes: the early-downsampling ``strided_resnet`` on
  the central 49 px (arcs of θ_E ≤ 3″ reach r ≈ 16 px), host-subtracted residual channels, a g − α z
  colour-difference channel (an arc inside the PSF, which the residual removes with the host, keeps
  its blue colour there), the stamp's antisymmetric part about the host's light centre (the host
  cancels with its ellipticity and off-centre light, an arc stays; the non-lenses that scored like
  lenses score lower, so the completeness at the 1e-2 FPR threshold rises) and an asinh stretch,
  the azimuthally shuffled arcs of 5 % of the injections added as labelled negatives (hard
  negatives: with the colour channel alone the finder accepts blue light without an arc's shape),
  fresh injections into every host each epoch rendered
  in the central 57 px, half of them accepted at arc S/N ≥ 3 and half at S/N ≥ 10 (the faint half
  ranks the S/N 2–10 arcs higher, the bright half keeps the bright arcs' completeness, which
  training on S/N ≥ 3 alone loses; validation stays at S/N ≥ 10), the r < 5 px core of the input
  zeroed in 30 % of the rows (so no decision rests on the host's core alone: the masked-core gate)
  but never on an injection whose arc reaches into that core (it would be a positive without its
  evidence), a fixed number of epochs (the budget is in epochs, never wall-clock), the score the
  mean logit of the stamp and its 180° rotation (2 of the 8 flips and rotations: nearly all of the
  8's gain in recall and completeness, for 8–12 % less throughput of the CPU search where the 8
  cost 56 %; BENCHMARKS.md).
* ``full`` is sized for a GPU: Paper IV's compact shielded bottleneck ResNet on full 101 px stamps
  and the strided ResNet as the second member of the stacked ensemble (one hidden layer of 300
  nodes over the two members' probabilities, Paper IV), each member's logit averaged over the
  same 2 views before the meta-learner.

The choices are the measured ablations in BENCHMARKS.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InputError
from ..lensing.stream import StreamSpec
from .loop import TrainConfig
from .preprocess import PreprocessSpec


@dataclass(frozen=True)
class TrainingProfile:
    """Preprocessing and injection stream (recorded with the training set) and the members trained
    on it; with more than one member, a stacked ensemble of them is fitted on the validation set."""

    preprocess: PreprocessSpec
    stream: StreamSpec
    members: tuple[TrainConfig, ...]
    ensemble_hidden: int = 300
    injection_host_types: tuple[str, ...] = field(default=("DEV", "SER", "REX", "EXP"))


PROFILES = {
    "demo": TrainingProfile(
        preprocess=PreprocessSpec(
            crop=49, residual="append", stretch="asinh", softening=3.0, colour_difference=True, antisymmetric=True
        ),
        stream=StreamSpec(
            injections_per_host=1, val_injections_per_host=2, min_arc_snr=10.0, faint_fraction=0.5, window=57
        ),
        members=(
            TrainConfig(
                arch="strided_resnet",
                epochs=28,
                batch_size=64,
                lr=3e-3,
                warmup_epochs=0.5,
                patience=0,
                val_smoothing=0.5,
                hard_negative_prob=0.05,
                core_dropout=0.3,
                core_dropout_spares_inner_arcs=True,
                dihedral_views=2,
                num_workers=0,
                checkpoint_every_steps=0,
            ),
        ),
    ),
    "full": TrainingProfile(
        preprocess=PreprocessSpec(
            residual="append", stretch="asinh", softening=3.0, colour_difference=True, antisymmetric=True
        ),
        stream=StreamSpec(
            injections_per_host=1,
            val_injections_per_host=1,
            min_arc_snr=10.0,
            faint_fraction=0.5,
            window=65,
            render_chunk=1024,
        ),
        members=(
            TrainConfig(
                arch="bottleneck_resnet",
                epochs=60,
                batch_size=512,
                lr=1e-3,
                patience=10,
                val_smoothing=0.5,
                hard_negative_prob=0.1,
                core_dropout=0.3,
                core_dropout_spares_inner_arcs=True,
                dihedral_views=2,
                num_workers=8,
            ),
            TrainConfig(
                arch="strided_resnet",
                epochs=60,
                batch_size=512,
                lr=3e-3,
                patience=10,
                val_smoothing=0.5,
                hard_negative_prob=0.1,
                core_dropout=0.3,
                core_dropout_spares_inner_arcs=True,
                dihedral_views=2,
                num_workers=8,
            ),
        ),
    ),
}


def training_profile(name: str) -> TrainingProfile:
    """The profile ``name`` ('demo' or 'full')."""
    if name not in PROFILES:
        raise InputError(f"unknown training profile {name!r}; known: {sorted(PROFILES)}")
    return PROFILES[name]
