"""The training loop: AdamW, warm-up + cosine per step, clipping, bf16 on CUDA, budgets in epochs,
early stopping on a smoothed validation AUROC, temperature calibration, atomic checkpoints and
exact resume.

Budgets are epochs (and the steps they hold), never wall-clock time, so the same inputs give the
same weights bytes on any machine load. ``max_minutes`` only limits one call: the run then saves
'last' and a later call with the same inputs resumes it to the same final weights.

Resume is the default: calling :func:`train` again with the same ``out_dir`` continues from
checkpoint ``last`` — model, optimizer, the step counter (which is the whole LR-schedule state),
epoch and position inside it, best metric and history. Every random draw is a function of (seed,
epoch, sample) or (seed, global step), never of process state, so a resumed run ends with exactly
the weights of an uninterrupted one on the same device and thread count.

Run folders: :func:`run_key` is a stable hash of what determines the trained weights (the identity
fields of the config, the preprocessing spec, the input data versions); a caller that trains in
``<root>/<run_key>/`` therefore resumes only a run with the same inputs and starts any other run
afresh. When a run is complete the caller records that with :func:`mark_run_complete`
(``complete.json``, written atomically); :func:`read_run_complete` lets a later call reuse the
run's 'best' instead of training again. The finished 'best' spec carries the full validation
metrics (``metrics['validation']``, as in ``metrics.json``), the calibration summary
(``metrics['calibration']``) and the fitted temperature.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import InputError
from ..stats import roc_auc
from .calibration import calibration_summary, fit_temperature
from .checkpoint import (
    CheckpointSpec,
    atomic_write_bytes,
    has_checkpoint,
    load_checkpoint,
    load_training_state,
    read_spec,
    save_checkpoint,
    write_spec,
)
from .data import TrainingArrays
from .dataset import AugmentedStampDataset, batches_for_plan, collate_prebatched, fits_preprocessed, seed_int
from .inference import PreprocessedStamps, calibrated_probability, resolve_device, stamp_logits
from .metrics import evaluate_scores, json_safe, plot_training_curves, validation_breakdown
from .models import ARCHITECTURES, build_model
from .preprocess import DIHEDRAL_SUBGROUPS, PreprocessSpec


@dataclass(frozen=True)
class TrainConfig:
    """Training hyper-parameters (JSON round-trippable).

    arch, arch_args: the architecture and its own arguments (e.g. ``{"widths": [24, 48, 96]}``).
    warmup_epochs: linear warm-up length in epochs of steps (may be fractional); the LR then follows a
    cosine from ``lr`` to ``lr * min_lr_frac`` at the last step. patience: epochs without an
    improvement of the smoothed validation AUROC before stopping (0 disables); val_smoothing: weight
    a of the previous value in that exponential moving average, s = a s' + (1 - a) AUROC (0: none).
    The best checkpoint is the epoch of highest (unsmoothed) validation AUROC. core_dropout:
    probability of zeroing the r < core_dropout_radius px core of a training input;
    core_dropout_spares_inner_arcs: never zero it on an injection whose arc reaches into that core
    (θ_E short of the core radius plus one PSF FWHM, ``arc_clears_core``), which would leave a
    positive without its evidence.
    hard_negative_prob: per-epoch probability of emitting the labelled hard negative of each
    injection. dihedral_views: the published checkpoint is calibrated and scored on the mean
    logit over that many of the stamp's flips and rotations (1, 2, 4 or 8; ``inference``); the
    best epoch is still chosen on one view, that many times cheaper per epoch. device: 'auto'
    (CUDA if present), 'cpu' or 'cuda'. num_workers: DataLoader worker processes,
    at most as many as the CPUs the process may use (more only contend for them; a sample does not
    depend on the worker that makes it). amp: bf16 autocast (CUDA only).
    max_minutes: wall-clock limit of one call (the run stays resumable; it never decides the
    weights). checkpoint_every_steps: also save 'last' every K steps inside an
    epoch (0: only at epoch ends).
    """

    arch: str = "bottleneck_resnet"
    arch_args: dict = field(default_factory=dict)
    epochs: int = 30
    batch_size: int = 64
    lr: float = 5e-4
    weight_decay: float = 1e-4
    warmup_epochs: float = 1.0
    min_lr_frac: float = 0.0
    grad_clip: float = 1.0
    patience: int = 10
    val_smoothing: float = 0.0
    seed: int = 0
    core_dropout: float = 0.0
    core_dropout_radius: float = 5.0
    core_dropout_spares_inner_arcs: bool = False
    hard_negative_prob: float = 0.0
    dihedral_views: int = 1
    device: str = "auto"
    num_workers: int = 0
    amp: bool = True
    max_minutes: float | None = None
    checkpoint_every_steps: int = 200
    val_batch_size: int = 256

    def __post_init__(self) -> None:
        if self.arch not in ARCHITECTURES:
            raise InputError(f"TrainConfig.arch {self.arch!r} unknown; known: {list(ARCHITECTURES)}")
        for name in ("epochs", "batch_size", "val_batch_size"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("patience", "num_workers", "checkpoint_every_steps"):
            if int(getattr(self, name)) < 0:
                raise InputError(f"TrainConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not (self.lr > 0 and self.weight_decay >= 0 and self.warmup_epochs >= 0 and self.grad_clip >= 0):
            raise InputError(f"TrainConfig: lr must be > 0 and weight_decay, warmup_epochs, grad_clip >= 0 ({self})")
        if not 0.0 <= self.val_smoothing < 1.0:
            raise InputError(f"TrainConfig.val_smoothing must be in [0, 1), got {self.val_smoothing}")
        if self.dihedral_views not in DIHEDRAL_SUBGROUPS:
            raise InputError(
                f"TrainConfig.dihedral_views must be one of {sorted(DIHEDRAL_SUBGROUPS)}, got {self.dihedral_views}"
            )
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise InputError(f"TrainConfig.max_minutes must be positive or None, got {self.max_minutes}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise InputError(f"train config has unknown keys {sorted(unknown)}; known: {sorted(known)}")
        return cls(**d)


#: Config fields that change the trained weights or the published checkpoint's scores
#: (``dihedral_views``); a resume refuses a 'last' written with other values.
_IDENTITY_FIELDS = (
    "arch",
    "arch_args",
    "epochs",
    "batch_size",
    "lr",
    "weight_decay",
    "warmup_epochs",
    "min_lr_frac",
    "grad_clip",
    "patience",
    "val_smoothing",
    "seed",
    "core_dropout",
    "core_dropout_radius",
    "core_dropout_spares_inner_arcs",
    "hard_negative_prob",
    "amp",
    "dihedral_views",
)


def run_key(config: TrainConfig, spec: PreprocessSpec, data_versions: dict) -> str:
    """16 hex digits naming a training run: sha256 of the config's identity fields, the preprocessing
    spec and the data versions (numbers compared by value: 1 and 1.0 give one key). ``max_minutes``
    limits one call only, so it does not name the run."""

    def norm(v):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    ident = {k: norm(getattr(config, k)) for k in _IDENTITY_FIELDS}
    blob = json.dumps(
        {
            "config": ident,
            "preprocess": spec.to_dict(),
            "data_versions": {str(k): str(v) for k, v in data_versions.items()},
        },
        sort_keys=True,
        allow_nan=False,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


#: Marker of a complete run in its folder (see :func:`mark_run_complete`).
RUN_COMPLETE = "complete.json"


@dataclass
class TrainResult:
    """Outcome of :func:`train`. ``best`` is the spec of checkpoint 'best' (None if no epoch finished)."""

    out_dir: str
    finished: bool
    stopped_reason: str
    resumed: bool
    epochs_run: int
    global_step: int
    best_epoch: int
    best_val_auroc: float
    history: list = field(default_factory=list)
    val_metrics: dict = field(default_factory=dict)
    best: CheckpointSpec | None = None
    curves_png: str | None = None
    device: str = "cpu"

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "best"}
        d["best_checkpoint"] = (
            None
            if self.best is None
            else {
                "name": self.best.name,
                "weights_sha256": self.best.weights_sha256,
                "epoch": self.best.epoch,
                "param_count": self.best.param_count,
                "architecture": self.best.architecture,
                "temperature": self.best.temperature,
            }
        )
        return json_safe(d)


def mark_run_complete(run_dir: str | os.PathLike, result: TrainResult, **extra) -> dict:
    """Record that the run in ``run_dir`` is complete: writes ``complete.json`` atomically (the
    result without its history, plus ``extra``) and returns it."""
    if result.best is None or not result.finished:
        raise InputError(f"run {run_dir} has not finished with a 'best' checkpoint; it cannot be marked complete")
    d = {k: v for k, v in result.to_dict().items() if k != "history"}
    d.update(**json_safe(extra))
    atomic_write_bytes(Path(run_dir) / RUN_COMPLETE, json.dumps(d, indent=1, sort_keys=True).encode("utf-8"))
    return d


def read_run_complete(run_dir: str | os.PathLike) -> dict | None:
    """The completion record of the run in ``run_dir``, or None when the run is not complete.

    Raises InputError when the record does not match the run's 'best' checkpoint (edited by hand)."""
    path = Path(run_dir) / RUN_COMPLETE
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text("utf-8"))
        sha = d["best_checkpoint"]["weights_sha256"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise InputError(
            f"{path} is not a run completion record ({exc}); delete {run_dir} to train that run again"
        ) from exc
    if not has_checkpoint(run_dir, "best") or read_spec(run_dir, "best").weights_sha256 != sha:
        raise InputError(
            f"{path} names best weights {sha[:16]}… that {run_dir} does not hold; delete {run_dir} to train that run "
            "again"
        )
    return d


def lr_at(step: int, total_steps: int, warmup_steps: int, base_lr: float, min_lr_frac: float = 0.0) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warm-up to ``base_lr`` over
    ``warmup_steps`` steps, then cosine decay to ``base_lr * min_lr_frac`` at the last step."""
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    span = max(total_steps - warmup_steps - 1, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    return base_lr * (min_lr_frac + (1.0 - min_lr_frac) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


#: Torch's intra-op threads while training on a CPU. A fixed number, not the machine's cores: the
#: convolutions' weight gradients (and the stream's reductions) are summed in per-thread blocks, so
#: another thread count trains other weights (docs/results.md, "Reproducibility").
CPU_TRAINING_THREADS = 2


@contextlib.contextmanager
def _deterministic(device: torch.device):
    prev = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_bench = torch.backends.cudnn.benchmark
    prev_threads = torch.get_num_threads()
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    else:
        torch.set_num_threads(CPU_TRAINING_THREADS)
    # warn_only: a few CUDA kernels have no deterministic variant; on a CPU the same thread count and
    # instruction set give the same weights
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev, warn_only=prev_warn)
        torch.backends.cudnn.benchmark = prev_bench
        torch.set_num_threads(prev_threads)


def _check_resume(out_dir: Path, config: TrainConfig, spec: PreprocessSpec, data_versions: dict) -> CheckpointSpec:
    last = read_spec(out_dir, "last")
    where = out_dir / "last.json"
    old = last.train_config
    diffs = {k: (old.get(k), getattr(config, k)) for k in _IDENTITY_FIELDS if old.get(k) != getattr(config, k)}
    if diffs:
        raise InputError(f"{where} was written by a run with another config {diffs}; use a new out_dir to start over")
    if last.preprocess != spec:
        raise InputError(f"{where} was trained with preprocessing {last.preprocess}, not {spec}; use a new out_dir")
    if last.data_versions != dict(data_versions):
        raise InputError(
            f"{where} was trained on data versions {last.data_versions}, not {dict(data_versions)}; use a new out_dir"
        )
    return last


def _fresh_state() -> dict:
    return {
        "epoch": 0,
        "step_in_epoch": 0,
        "global_step": 0,
        "best_auroc": None,
        "best_epoch": -1,
        "smoothed": None,
        "best_smoothed": None,
        "epochs_since_improve": 0,
        "history": [],
        "finished": False,
        "stopped_reason": "",
        "loss_sum": 0.0,
        "loss_batches": 0,
    }


class _Run:
    """One call of :func:`train`: the model, optimizer, dataset, schedule and resumable state."""

    def __init__(
        self,
        train_arrays,
        val_arrays,
        config: TrainConfig,
        out: Path,
        spec: PreprocessSpec,
        data_versions: dict,
        progress_cb,
    ):
        self.config, self.out, self.spec, self.val, self.progress_cb = config, out, spec, val_arrays, progress_cb
        self.source = train_arrays.source
        self.device = resolve_device(config.device)
        self.amp = bool(config.amp and self.device.type == "cuda")
        self.t_start = time.monotonic()
        in_ch = spec.out_channels(train_arrays.image.shape[1])
        torch.manual_seed(seed_int(config.seed, "init"))
        self.model = build_model(config.arch, in_ch, **config.arch_args).to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.ds = AugmentedStampDataset(
            train_arrays,
            spec,
            config.seed,
            augment=True,
            core_dropout_prob=config.core_dropout,
            core_dropout_radius=config.core_dropout_radius,
            core_dropout_spares_inner_arcs=config.core_dropout_spares_inner_arcs,
            hard_negative_prob=config.hard_negative_prob,
            device=self.device,
        )
        # the validation stamps are the same every epoch: preprocessed once while they fit the bound
        # the training rows have (the logits are the same bytes either way)
        self.val_inputs = (
            PreprocessedStamps(val_arrays.image, spec, self.device, config.val_batch_size)
            if fits_preprocessed(val_arrays.image, spec)
            else val_arrays.image
        )
        steps = [len(batches_for_plan(self.ds.epoch_plan(e), e, config.batch_size)) for e in range(config.epochs)]
        self.total_steps = int(sum(steps))
        self.warmup_steps = int(round(config.warmup_epochs * steps[0]))
        self.st = _fresh_state()
        self.resumed = has_checkpoint(out, "last")
        if self.resumed:
            _check_resume(out, config, spec, data_versions)
            self.st = dict(load_training_state(out, "last", self.model, self.opt).training_state)
        self.common = dict(
            architecture=config.arch,
            arch_args=dict(config.arch_args),
            in_channels=in_ch,
            preprocess=spec,
            train_config=config.to_dict(),
            data_versions=dict(data_versions),
        )

    def over_budget(self) -> bool:
        c = self.config
        return c.max_minutes is not None and (time.monotonic() - self.t_start) > 60.0 * c.max_minutes

    def save_last(self) -> None:
        st = self.st
        save_checkpoint(
            self.out,
            "last",
            self.model,
            optimizer=self.opt,
            epoch=st["epoch"],
            global_step=st["global_step"],
            training_state=st,
            metrics={"best_val_auroc": st["best_auroc"]},
            **self.common,
        )

    def notify(self, event: dict) -> None:
        if self.progress_cb is not None:
            self.progress_cb(event)

    def step(self, x, y, w, epoch: int, b: int) -> float:
        """One optimizer step on batch (x, y, w); returns the learning rate used."""
        c, st = self.config, self.st
        lr = lr_at(st["global_step"], self.total_steps, self.warmup_steps, c.lr, c.min_lr_frac)
        for g in self.opt.param_groups:
            g["lr"] = lr
        # any stochastic layer draws from a generator keyed on the step, so resume is exact
        torch.manual_seed(seed_int(c.seed, "step", st["global_step"]))
        x, y, w = (t.to(self.device, non_blocking=True) for t in (x, y, w))
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.amp):
            logits = self.model(x)
        per = F.binary_cross_entropy_with_logits(logits.float(), y, reduction="none")
        loss = (per * w).sum() / w.sum().clamp_min(1e-12)
        if not torch.isfinite(loss):
            raise InputError(
                f"training loss became {loss.item()} at epoch {epoch} step {b}: check the stamps of {self.source}"
            )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if c.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)
        self.opt.step()
        st["global_step"] += 1
        st["step_in_epoch"] = b + 1
        st["loss_sum"] += float(loss.detach())
        st["loss_batches"] += 1
        return lr

    def loader(self, batches: list) -> torch.utils.data.DataLoader:
        """The epoch dataset's batches ``batches`` (lists of (epoch, virtual index) keys, as
        ``batches_for_plan`` makes them) in order, made by the config's worker processes."""
        return torch.utils.data.DataLoader(
            self.ds,
            batch_sampler=batches,
            collate_fn=collate_prebatched,
            num_workers=min(self.config.num_workers, _usable_cpus()),
            pin_memory=self.device.type == "cuda",
        )

    def train_epoch(self, epoch: int) -> bool:
        """Run the rest of ``epoch``; False when the call's time limit stopped it mid-epoch."""
        c, st = self.config, self.st
        batches = batches_for_plan(self.ds.epoch_plan(epoch), epoch, c.batch_size)
        self.ds.prepare_epoch(epoch)  # render the epoch's injections before DataLoader workers fork
        start = st["step_in_epoch"]
        self.model.train()
        for b, (x, y, w) in enumerate(self.loader(batches[start:]), start=start):
            lr = self.step(x, y, w, epoch, b)
            if b + 1 == len(batches):
                return True  # the epoch-end checkpoint follows validation
            timed_out = self.over_budget()
            if timed_out or (c.checkpoint_every_steps and (b + 1) % c.checkpoint_every_steps == 0):
                self.save_last()
                self.notify(
                    {
                        "event": "step",
                        "epoch": epoch,
                        "step_in_epoch": b + 1,
                        "global_step": st["global_step"],
                        "lr": lr,
                    }
                )
            if timed_out:
                return False
        return True

    def end_epoch(self, epoch: int, seconds: float) -> None:
        """Validate, record history, keep the best epoch and decide early stopping."""
        c, st = self.config, self.st
        logits, ok, _ = stamp_logits(
            self.model, self.spec, self.val_inputs, self.device, c.val_batch_size, amp=self.amp
        )
        auroc = roc_auc(logits[ok], self.val.label[ok])
        smoothed = auroc if st["smoothed"] is None else c.val_smoothing * st["smoothed"] + (1 - c.val_smoothing) * auroc
        improved = st["best_auroc"] is None or auroc > st["best_auroc"]
        row = {
            "epoch": epoch,
            "train_loss": st["loss_sum"] / max(st["loss_batches"], 1),
            "val_auroc": auroc,
            "val_auroc_smoothed": smoothed,
            "lr": self.opt.param_groups[0]["lr"],
            "steps": st["step_in_epoch"],
            "seconds": seconds,
            "improved": bool(improved),
        }
        st["history"] = st["history"] + [row]
        st.update(epoch=epoch + 1, step_in_epoch=0, loss_sum=0.0, loss_batches=0, smoothed=smoothed)
        if improved:
            st.update(best_auroc=auroc, best_epoch=epoch)
            save_checkpoint(
                self.out,
                "best",
                self.model,
                epoch=epoch + 1,
                global_step=st["global_step"],
                training_state={"history": st["history"]},
                metrics={"val_auroc": auroc},
                **self.common,
            )
        if st["best_smoothed"] is None or smoothed > st["best_smoothed"]:
            st.update(best_smoothed=smoothed, epochs_since_improve=0)
        else:
            st["epochs_since_improve"] += 1
        if c.patience and st["epochs_since_improve"] >= c.patience:
            st.update(finished=True, stopped_reason="early_stopping")
        elif st["epoch"] >= c.epochs:
            st.update(finished=True, stopped_reason="max_epochs")
        self.save_last()
        self.notify({"event": "epoch", **row, "best_val_auroc": st["best_auroc"], "best_epoch": st["best_epoch"]})

    def result(self) -> TrainResult:
        st = self.st
        return TrainResult(
            out_dir=str(self.out),
            finished=bool(st["finished"]),
            stopped_reason=st["stopped_reason"],
            resumed=self.resumed,
            epochs_run=int(st["epoch"]),
            global_step=int(st["global_step"]),
            best_epoch=int(st["best_epoch"]),
            best_val_auroc=float("nan") if st["best_auroc"] is None else float(st["best_auroc"]),
            history=list(st["history"]),
            device=str(self.device),
        )


def finalize_best(
    out: Path,
    val: TrainingArrays,
    seed: int,
    device,
    batch_size: int = 256,
    amp: bool = False,
    dihedral_views: int = 1,
    stamps=None,
) -> tuple[CheckpointSpec, dict]:
    """Calibrate checkpoint 'best' of ``out`` on the validation arrays (temperature scaling) and
    attach the full validation metrics: rewrites its spec (same tensors) with ``dihedral_views``,
    ``temperature`` and ``metrics['validation']`` / ``metrics['calibration']``; writes
    ``metrics.json``. The temperature is fitted on the logits scoring will produce, so on the
    view-averaged ones when ``dihedral_views`` > 1. ``stamps``: the validation stamps already
    preprocessed in batches of ``batch_size`` (the run's ``PreprocessedStamps``; the same logits),
    else ``val.image``."""
    model, spec = load_checkpoint(out, "best", device=device)
    spec = replace(spec, dihedral_views=int(dihedral_views))
    logits, ok, _ = stamp_logits(
        model, spec, val.image if stamps is None else stamps, device=device, batch_size=batch_size, amp=amp
    )
    z, y, w = logits[ok], val.label[ok], val.weight[ok]
    temperature = fit_temperature(z, y, w)
    # the calibration says which logits it was fitted on (the report shows it)
    calibration = {**calibration_summary(z, y, temperature), "dihedral_views": spec.dihedral_views}
    probs = calibrated_probability(z, temperature)
    metrics = evaluate_scores(probs, y, tiers=val.tier[ok], seed=(seed, "val"))
    metrics.update(validation_breakdown(probs, val.subset(ok)))
    metrics["n_invalid"] = int((~ok).sum())
    metrics["ece_15_uncalibrated"] = calibration["ece_before"]
    spec = write_spec(
        out,
        replace(
            spec,
            temperature=temperature,
            metrics={**spec.metrics, "validation": json_safe(metrics), "calibration": json_safe(calibration)},
        ),
    )
    atomic_write_bytes(out / "metrics.json", json.dumps(json_safe(metrics), indent=1, sort_keys=True).encode("utf-8"))
    return spec, metrics


def train(
    train_arrays: TrainingArrays,
    val_arrays: TrainingArrays,
    config: TrainConfig,
    out_dir: str | os.PathLike,
    spec: PreprocessSpec,
    data_versions: dict,
    progress_cb: Callable[[dict], None] | None = None,
) -> TrainResult:
    """Train (or resume training) a lens finder; checkpoints 'last' and 'best' go to ``out_dir``.

    train_arrays: the train split (with injection hosts and a stream spec, fresh injections are
    rendered every epoch); val_arrays: the validation set (``data.validation_arrays``), which picks
    the best epoch and calibrates it. data_versions: content hashes of the inputs, stored in every
    checkpoint and checked on resume. progress_cb gets a dict per epoch ({'event': 'epoch', ...})
    and per mid-epoch checkpoint ({'event': 'step', ...}); an exception it raises aborts training
    (the checkpoints already written stay valid). When training finishes, 'best' is calibrated and
    carries the validation metrics (:func:`finalize_best`); ``training_curves.png`` is written.
    """
    if len(train_arrays) < 2:
        raise InputError(f"training split of {train_arrays.source} has {len(train_arrays)} rows; need at least 2")
    if len(np.unique(val_arrays.label)) < 2:
        raise InputError(f"validation split of {val_arrays.source} needs both labels to compute AUROC")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with _deterministic(resolve_device(config.device)):
        run = _Run(train_arrays, val_arrays, config, out, spec, data_versions, progress_cb)
        st = run.st
        while not st["finished"]:
            epoch = st["epoch"]
            if epoch >= config.epochs:
                st.update(finished=True, stopped_reason=st["stopped_reason"] or "max_epochs")
                break
            t_epoch = time.monotonic()
            if not run.train_epoch(epoch):
                st["stopped_reason"] = "time_limit"
                break
            run.end_epoch(epoch, time.monotonic() - t_epoch)
            if not st["finished"] and run.over_budget():
                st["stopped_reason"] = "time_limit"
                run.save_last()
                break
        if st["finished"]:
            run.save_last()
        result = run.result()
        if st["finished"] and has_checkpoint(out, "best"):
            result.best, result.val_metrics = finalize_best(
                out,
                val_arrays,
                config.seed,
                run.device,
                config.val_batch_size,
                run.amp,
                config.dihedral_views,
                run.val_inputs,
            )
            result.curves_png = plot_training_curves(st["history"], out / "training_curves.png")
    return result
