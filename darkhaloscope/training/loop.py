"""The training loop: AdamW, warm-up + cosine per step, clipping, bf16 on CUDA, early stopping on
validation AUROC, atomic checkpoints and exact resume.

Resume is the default (lesson 59: a killed run lost 8 epochs): calling :func:`train` again with the
same ``out_dir`` continues from checkpoint ``last`` — model, optimizer, the step counter (which is the
whole LR-schedule state), epoch and position inside it, best metric and history. Every random draw is
a function of (seed, epoch, sample) or (seed, global step), never of process state, so a resumed run
ends with exactly the weights of an uninterrupted one on the same device and thread count.

Run folders: :func:`run_key` is a stable hash of what determines the trained weights (the identity
fields of the config, the preprocessing spec, the input data versions); a caller that trains in
``<root>/<run_key>/`` therefore resumes only a run with the same inputs and starts any other run
afresh. When a run is complete (finished, or ended by a fixed time budget) the caller records that
with :func:`mark_run_complete` (``complete.json``, written atomically); :func:`read_run_complete`
lets a later call reuse the run's 'best' instead of training again. When a call ends (finished or
at its time limit) the 'best' spec carries the full validation metrics (``metrics['validation']``,
as in ``metrics.json``).
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
from .checkpoint import (
    CheckpointSpec, atomic_write_bytes, has_checkpoint, load_checkpoint, load_training_state, read_spec, save_checkpoint,
    write_spec,
)
from .data import AugmentedStampDataset, TrainingArrays, batches_for_plan, collate_prebatched, seed_int
from .inference import resolve_device, score_stamps
from .metrics import evaluate_scores, json_safe, plot_training_curves
from .models import ARCHITECTURES, build_model
from .preprocess import PreprocessSpec


@dataclass(frozen=True)
class TrainConfig:
    """Training hyper-parameters (JSON round-trippable).

    warmup_epochs: linear warm-up length in epochs of steps (may be fractional); the LR then follows a
    cosine from ``lr`` to ``lr * min_lr_frac`` at the last step. patience: epochs without a validation
    AUROC improvement before stopping (0 disables). core_dropout: probability of zeroing the r <
    core_dropout_radius px core of a training input. hard_negative_prob: per-epoch probability of
    emitting the labelled hard negative of each injected positive with a control. device: 'auto'
    (DHS_DEVICE, then CUDA if present), 'cpu' or 'cuda'. amp: bf16 autocast (CUDA only).
    max_minutes: wall-clock budget of one call; the run then saves 'last' and can be resumed.
    checkpoint_every_steps: also save 'last' every K steps inside an epoch (0: only at epoch ends).
    """

    arch: str = "bottleneck_resnet"
    epochs: int = 30
    batch_size: int = 64
    lr: float = 5e-4
    weight_decay: float = 1e-4
    warmup_epochs: float = 1.0
    min_lr_frac: float = 0.0
    grad_clip: float = 1.0
    patience: int = 10
    seed: int = 0
    core_dropout: float = 0.0
    core_dropout_radius: float = 5.0
    hard_negative_prob: float = 0.0
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


#: Config fields that change the trained weights; a resume refuses a 'last' written with other values.
_IDENTITY_FIELDS = (
    "arch", "epochs", "batch_size", "lr", "weight_decay", "warmup_epochs", "min_lr_frac", "grad_clip",
    "seed", "core_dropout", "core_dropout_radius", "hard_negative_prob", "amp",
)


def run_key(config: TrainConfig, spec: PreprocessSpec, data_versions: dict, *, budget_is_final: bool = False) -> str:
    """16 hex digits naming a training run: sha256 of the config's identity fields, the preprocessing
    spec and the data versions (numbers compared by value: 1 and 1.0 give one key).

    budget_is_final: the run ends for good at ``max_minutes`` (a fixed time budget), so the budget
    shapes the weights and joins the key; otherwise ``max_minutes`` only limits one call, and a
    call with another budget resumes the same run.
    """
    def norm(v):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    ident = {k: norm(getattr(config, k)) for k in _IDENTITY_FIELDS}
    if budget_is_final and config.max_minutes is not None:
        ident["max_minutes"] = norm(config.max_minutes)
    blob = json.dumps({"config": ident, "preprocess": spec.to_dict(), "data_versions": {str(k): str(v) for k, v in data_versions.items()}},
                      sort_keys=True, allow_nan=False)
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
        d["best_checkpoint"] = None if self.best is None else {
            "name": self.best.name, "weights_sha256": self.best.weights_sha256, "epoch": self.best.epoch,
            "param_count": self.best.param_count, "architecture": self.best.architecture,
        }
        return json_safe(d)


def mark_run_complete(run_dir: str | os.PathLike, result: TrainResult, final_by: str, **extra) -> dict:
    """Record that the run in ``run_dir`` is complete (``final_by``: 'finished' or 'time_budget'):
    writes ``complete.json`` atomically (the result without its history, plus ``extra``) and returns it."""
    if result.best is None:
        raise InputError(f"run {run_dir} has no 'best' checkpoint; it cannot be marked complete")
    d = {k: v for k, v in result.to_dict().items() if k != "history"}
    d.update(final_by=final_by, **json_safe(extra))
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
        raise InputError(f"{path} is not a run completion record ({exc}); delete {run_dir} to train that run again") from exc
    if not has_checkpoint(run_dir, "best") or read_spec(run_dir, "best").weights_sha256 != sha:
        raise InputError(f"{path} names best weights {sha[:16]}… that {run_dir} does not hold; delete {run_dir} to train that run again")
    return d


def lr_at(step: int, total_steps: int, warmup_steps: int, base_lr: float, min_lr_frac: float = 0.0) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warm-up to ``base_lr`` over
    ``warmup_steps`` steps, then cosine decay to ``base_lr * min_lr_frac`` at the last step."""
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    span = max(total_steps - warmup_steps - 1, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    return base_lr * (min_lr_frac + (1.0 - min_lr_frac) * 0.5 * (1.0 + math.cos(math.pi * progress)))


@contextlib.contextmanager
def _deterministic(device: torch.device):
    prev = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_bench = torch.backends.cudnn.benchmark
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # warn_only: a few CUDA kernels have no deterministic variant; CPU training is exactly reproducible
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev, warn_only=prev_warn)
        torch.backends.cudnn.benchmark = prev_bench


def _over_budget(config: TrainConfig, t_start: float) -> bool:
    return config.max_minutes is not None and (time.monotonic() - t_start) > 60.0 * config.max_minutes


def _val_auroc(model, spec, val: TrainingArrays, device, batch_size, amp) -> tuple[float, np.ndarray, np.ndarray]:
    probs, ok, _ = score_stamps(model, spec, val.image, device=device, batch_size=batch_size, amp=amp)
    return roc_auc(probs[ok], val.label[ok]), probs, ok


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
        raise InputError(f"{where} was trained on data versions {last.data_versions}, not {dict(data_versions)}; use a new out_dir")
    return last


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

    train_arrays / val_arrays: the train and val splits (see data.load_training_set). data_versions:
    content hashes of the inputs, stored in every checkpoint and checked on resume. progress_cb gets a
    dict per epoch ({'event': 'epoch', ...}) and per mid-epoch checkpoint ({'event': 'step', ...});
    an exception it raises aborts training (the checkpoints already written stay valid).
    Also writes ``metrics.json`` (final validation metrics of 'best', also stored in the 'best' spec
    as ``metrics['validation']``) and ``training_curves.png``.
    """
    if len(train_arrays) < 2:
        raise InputError(f"training split of {train_arrays.source} has {len(train_arrays)} rows; need at least 2")
    if len(np.unique(val_arrays.label)) < 2:
        raise InputError(f"validation split of {val_arrays.source} needs both labels to compute AUROC")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(config.device)
    amp = bool(config.amp and device.type == "cuda")
    in_ch = spec.out_channels(train_arrays.image.shape[1])
    t_start = time.monotonic()

    with _deterministic(device):
        torch.manual_seed(seed_int(config.seed, "init"))
        model = build_model(config.arch, in_ch).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        ds = AugmentedStampDataset(
            train_arrays, spec, config.seed, augment=True, core_dropout_prob=config.core_dropout,
            core_dropout_radius=config.core_dropout_radius, hard_negative_prob=config.hard_negative_prob,
        )
        steps_per_epoch = [len(batches_for_plan(ds.epoch_plan(e), e, config.batch_size)) for e in range(config.epochs)]
        total_steps = int(sum(steps_per_epoch))
        warmup_steps = int(round(config.warmup_epochs * steps_per_epoch[0]))
        st = {
            "epoch": 0, "step_in_epoch": 0, "global_step": 0, "best_auroc": None, "best_epoch": -1,
            "epochs_since_improve": 0, "history": [], "finished": False, "stopped_reason": "",
            "loss_sum": 0.0, "loss_batches": 0,
        }
        resumed = has_checkpoint(out, "last")
        if resumed:
            _check_resume(out, config, spec, data_versions)
            st = dict(load_training_state(out, "last", model, opt).training_state)
        common = dict(architecture=config.arch, in_channels=in_ch, preprocess=spec, train_config=config.to_dict(), data_versions=dict(data_versions))

        def save_last() -> None:
            save_checkpoint(out, "last", model, optimizer=opt, epoch=st["epoch"], global_step=st["global_step"],
                            training_state=st, metrics={"best_val_auroc": st["best_auroc"]}, **common)

        while not st["finished"]:
            epoch = st["epoch"]
            if epoch >= config.epochs:
                st.update(finished=True, stopped_reason=st["stopped_reason"] or "max_epochs")
                break
            t_epoch = time.monotonic()
            batches = batches_for_plan(ds.epoch_plan(epoch), epoch, config.batch_size)
            start = st["step_in_epoch"]
            loader = torch.utils.data.DataLoader(
                ds, batch_sampler=batches[start:], collate_fn=collate_prebatched,
                num_workers=config.num_workers, pin_memory=device.type == "cuda",
            )
            model.train()
            timed_out = False
            for b, (x, y, w) in enumerate(loader, start=start):
                lr = lr_at(st["global_step"], total_steps, warmup_steps, config.lr, config.min_lr_frac)
                for g in opt.param_groups:
                    g["lr"] = lr
                # any stochastic layer draws from a generator keyed on the step, so resume is exact
                torch.manual_seed(seed_int(config.seed, "step", st["global_step"]))
                x, y, w = (t.to(device, non_blocking=True) for t in (x, y, w))
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                    logits = model(x)
                per = F.binary_cross_entropy_with_logits(logits.float(), y, reduction="none")
                loss = (per * w).sum() / w.sum().clamp_min(1e-12)
                if not torch.isfinite(loss):
                    raise InputError(f"training loss became {loss.item()} at epoch {epoch} step {b}: check the stamps of {train_arrays.source}")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if config.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                opt.step()
                st["global_step"] += 1
                st["step_in_epoch"] = b + 1
                st["loss_sum"] += float(loss.detach())
                st["loss_batches"] += 1
                if b + 1 == len(batches):
                    break  # the epoch-end checkpoint follows validation
                timed_out = _over_budget(config, t_start)
                k = config.checkpoint_every_steps
                if timed_out or (k and (b + 1) % k == 0):
                    save_last()
                    if progress_cb is not None:
                        progress_cb({"event": "step", "epoch": epoch, "step_in_epoch": b + 1, "global_step": st["global_step"], "lr": lr})
                if timed_out:
                    break
            del loader
            if timed_out:
                st["stopped_reason"] = "time_limit"
                break

            auroc, _, _ = _val_auroc(model, spec, val_arrays, device, config.val_batch_size, amp)
            improved = st["best_auroc"] is None or auroc > st["best_auroc"]
            row = {
                "epoch": epoch, "train_loss": st["loss_sum"] / max(st["loss_batches"], 1), "val_auroc": auroc,
                "lr": opt.param_groups[0]["lr"], "steps": st["step_in_epoch"], "seconds": time.monotonic() - t_epoch,
                "improved": bool(improved),
            }
            st["history"] = st["history"] + [row]
            st.update(epoch=epoch + 1, step_in_epoch=0, loss_sum=0.0, loss_batches=0)
            if improved:
                st.update(best_auroc=auroc, best_epoch=epoch, epochs_since_improve=0)
                save_checkpoint(out, "best", model, epoch=epoch + 1, global_step=st["global_step"],
                                training_state={"history": st["history"]}, metrics={"val_auroc": auroc}, **common)
            else:
                st["epochs_since_improve"] += 1
            if config.patience and st["epochs_since_improve"] >= config.patience:
                st.update(finished=True, stopped_reason="early_stopping")
            elif st["epoch"] >= config.epochs:
                st.update(finished=True, stopped_reason="max_epochs")
            save_last()
            if progress_cb is not None:
                progress_cb({"event": "epoch", **row, "best_val_auroc": st["best_auroc"], "best_epoch": st["best_epoch"]})
            if not st["finished"] and _over_budget(config, t_start):
                st["stopped_reason"] = "time_limit"
                break

        if st["finished"]:
            save_last()
        result = TrainResult(
            out_dir=str(out), finished=bool(st["finished"]), stopped_reason=st["stopped_reason"], resumed=resumed,
            epochs_run=int(st["epoch"]), global_step=int(st["global_step"]), best_epoch=int(st["best_epoch"]),
            best_val_auroc=float("nan") if st["best_auroc"] is None else float(st["best_auroc"]),
            history=list(st["history"]), device=str(device),
        )
        # a time-limited run also reports its best epoch so far (a fixed-budget run may stop there)
        if (st["finished"] or st["stopped_reason"] == "time_limit") and has_checkpoint(out, "best"):
            best_model, best_spec = load_checkpoint(out, "best", device=device)
            probs, ok, _ = score_stamps(best_model, best_spec, val_arrays.image, device=device, batch_size=config.val_batch_size, amp=amp)
            result.val_metrics = evaluate_scores(probs[ok], val_arrays.label[ok], tiers=val_arrays.tier[ok], seed=(config.seed, "val"))
            result.val_metrics["n_invalid"] = int((~ok).sum())
            # the full validation metrics travel with the weights: same tensors, a new spec
            result.best = write_spec(out, replace(best_spec, metrics={**best_spec.metrics, "validation": json_safe(result.val_metrics)}))
            result.curves_png = plot_training_curves(st["history"], out / "training_curves.png")
            atomic_write_bytes(out / "metrics.json", json.dumps(json_safe(result.val_metrics), indent=1, sort_keys=True).encode("utf-8"))
    return result
