"""Training profiles: the one place that sizes the lens finder's training per profile.

* ``demo`` is sized to train on 2 CPU cores within the ``lens_finder`` step's 3-minute budget: the
  early-downsampling ``strided_resnet`` on the central 49 px (arcs of θ_E ≤ 3″ reach r ≈ 16 px),
  host-subtracted residual channels, a g − α z colour-difference channel (an arc inside the PSF,
  which the residual removes with the host, keeps its blue colour there), the stamp's antisymmetric
  part about the host's light centre (the host cancels with its ellipticity and off-centre light,
  an arc stays, so non-lenses that look like lenses score lower and the operating threshold falls:
  BENCHMARKS.md, *The stamp's antisymmetric part*) and an asinh stretch, the azimuthally shuffled
  arcs of 5 % of the injections added as labelled negatives (hard negatives: with the colour channel
  alone the finder accepts blue light without an arc's shape; BENCHMARKS.md, *A colour-difference
  channel for the arcs the PSF merges with the core*), fresh injections into every host each epoch
  rendered in the central 57 px, half of them accepted at arc S/N ≥ 3 and half at S/N ≥ 10 (the
  faint half ranks the faint arcs higher, the bright half keeps the bright arcs' completeness,
  which training on S/N ≥ 3 alone loses; validation stays at S/N ≥ 10; BENCHMARKS.md, *Half the
  training arcs faint*), the r < 5 px core of the input zeroed in 30 % of the rows (so no decision
  rests on the host's core alone: the masked-core gate) but never on an injection whose arc reaches
  into that core (it would be a positive without its evidence), a fixed number of epochs (the
  budget is in epochs, never wall-clock), the score the mean logit of the stamp and its 180°
  rotation (2 of the 8 flips and rotations: nearly all of what the 8 gain, at a fraction of their
  cost to the CPU search; BENCHMARKS.md, *Scores averaged over the stamp and its 180° rotation*).
* ``full`` is sized for a GPU: Paper IV's compact shielded bottleneck ResNet on full 101 px stamps
  and the strided ResNet as the second member of the stacked ensemble (one hidden layer of 300
  nodes over the two members' probabilities, Paper IV), each member's logit averaged over the
  same 2 views before the meta-learner.

Each choice is an ablation in BENCHMARKS.md (*Lens finder recipe (demo profile): ablations* and
the sections after it), which gives what it measured.
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
