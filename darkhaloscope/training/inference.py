"""Scoring stamps with a trained lens finder: streaming, bounded memory, unusable stamps never scored.

A stamp with a non-finite pixel or an all-zero band (a failed or off-footprint cutout) gets score NaN
and a reason, never the score of a zero image (a zero array scored after a failed load would enter
the thresholds and the selection function as a confident non-lens).

A checkpoint with ``dihedral_views`` k > 1 is scored as the mean of its logits over k of the stamp's
flips and rotations (a subgroup of the dihedral group, ``preprocess.DIHEDRAL_SUBGROUPS``). A lens
has no preferred orientation on the sky, and training draws one orientation per sample, so one
view's score carries orientation noise; the mean is exactly invariant under the subgroup. It costs
k forward passes per stamp (what each k buys and costs: BENCHMARKS.md, *Scores averaged over the
stamp and its 180° rotation*).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch

from ..constants import BANDS
from ..errors import InputError
from .preprocess import DIHEDRAL_SUBGROUPS, PreprocessSpec, dihedral_view, preprocess

#: Scoring batch per device: on a CPU large batches of 101-px activations are memory-bound
#: (BENCHMARKS.md, summary table, row *scoring, compact model*); a GPU wants large batches.
SCORE_BATCH = {"cpu": 16, "cuda": 512}


def resolve_device(requested: str | None = None) -> torch.device:
    """Torch device for 'auto' | 'cpu' | 'cuda[:k]' (the caller's choice: DHS_DEVICE, passed down by
    the Dagster layer, or a config); 'auto' (or None) picks CUDA when present."""
    req = str(requested or "auto").strip().lower() or "auto"
    if req == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if req == "cpu":
        return torch.device("cpu")
    if req.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(f"device {req!r} requested (DHS_DEVICE or config) but CUDA is not available")
        return torch.device(req)
    raise InputError(f"unknown device {req!r}; expected 'auto', 'cpu' or 'cuda'")


def validate_stamps(images) -> tuple[np.ndarray, np.ndarray]:
    """(N, 3, H, W) stamps -> (valid (N,) bool, reason (N,) str).

    reason is '' for valid rows, else ';'-joined 'nonfinite_<band>' / 'zero_<band>' tokens.
    """
    x = images.detach().cpu().numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
    if x.ndim != 4:
        raise InputError(f"stamps must have shape (N, bands, H, W), got {x.shape}")
    n, c = x.shape[:2]
    flat = x.reshape(n, c, -1)
    nonfinite = ~np.isfinite(flat).all(axis=-1)
    zero = ~np.any(flat != 0, axis=-1)
    bands = BANDS if c == len(BANDS) else tuple(str(i) for i in range(c))
    reason = np.full(n, "", dtype=object)
    bad = nonfinite | zero
    for i in np.flatnonzero(bad.any(axis=1)):
        toks = [f"nonfinite_{bands[b]}" for b in np.flatnonzero(nonfinite[i])]
        toks += [f"zero_{bands[b]}" for b in np.flatnonzero(zero[i])]
        reason[i] = ";".join(toks)
    return ~bad.any(axis=1), reason


def _batches(images, batch_size: int) -> Iterable:
    if isinstance(images, (np.ndarray, torch.Tensor)):
        if images.ndim != 4:
            raise InputError(f"stamps must have shape (N, bands, H, W), got {tuple(images.shape)}")
        for i in range(0, images.shape[0], batch_size):
            yield images[i : i + batch_size]
    else:
        yield from images


def stamp_logits(
    model: torch.nn.Module,
    spec,
    images,
    device: str | torch.device | None = None,
    batch_size: int = 256,
    input_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    amp: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uncalibrated lens logits for stamps, streamed in batches (arguments as :func:`score_stamps`).

    Returns (logits (N,) float64, NaN where invalid; valid (N,) bool; reason (N,) str).
    """
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    logits, _, valid, reason = _forward(model, spec, images, dev, batch_size, input_transform, amp, members=False)
    return logits, valid, reason


def _preprocessed_batches(images, spec: PreprocessSpec, dev: torch.device, batch_size: int) -> Iterable:
    """(valid (n,), reason (n,), network input of the valid rows or None) per batch of ``batch_size`` stamps."""
    for batch in _batches(images, batch_size):
        ok, reason = validate_stamps(batch)
        x = None
        if ok.any():
            sel = np.flatnonzero(ok)
            xb = batch[torch.from_numpy(sel)] if isinstance(batch, torch.Tensor) else np.asarray(batch)[sel]
            x = preprocess(torch.as_tensor(xb).to(dev, non_blocking=True), spec)
        yield ok, reason, x


class PreprocessedStamps:
    """Stamps preprocessed once, for a caller that scores the same stamps many times (the training
    loop's validation set, every epoch): pass it as the ``images`` of :func:`stamp_logits` with the
    same spec and ``batch_size``. It holds the batches that call would preprocess, so the logits are
    the same bytes; the memory is the network input's, (N, C, H', W') float32 on ``device`` (scoring
    on another device copies each batch there)."""

    def __init__(self, images, spec: PreprocessSpec, device: torch.device, batch_size: int = 256):
        self.spec, self.batch_size = spec, int(batch_size)
        self.batches = list(_preprocessed_batches(images, spec, device, self.batch_size))


def _view_logits(net: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, views: int) -> torch.Tensor:
    """Mean of net(view) in float32 over ``views`` dihedral views of x (module docstring)."""
    if views == 1:
        return net(x).float()
    return torch.stack([net(dihedral_view(x, c)).float() for c in DIHEDRAL_SUBGROUPS[views]]).mean(dim=0)


def _forward(
    model, spec, images, dev: torch.device, batch_size: int, input_transform, amp: bool, members: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(logits (N,), member logits (N, M) when ``members`` and a stacked ensemble, else (N, 0), valid
    (N,), reason (N,)) streamed in batches. A stacked ensemble's members' logits are averaged over
    the views before its meta-learner, whether or not its members' logits are returned, so that
    calibration, the gates and the score assets see the same logits."""
    pspec = getattr(spec, "preprocess", spec)
    if not isinstance(pspec, PreprocessSpec):
        raise InputError(f"scoring needs a PreprocessSpec or CheckpointSpec, got {type(spec).__name__}")
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    views = int(getattr(spec, "dihedral_views", 1))
    if views not in DIHEDRAL_SUBGROUPS:
        raise InputError(
            f"dihedral_views of the checkpoint spec must be one of {sorted(DIHEDRAL_SUBGROUPS)}, got {views}"
        )
    if isinstance(images, PreprocessedStamps):
        if images.spec != pspec or images.batch_size != batch_size:
            raise InputError(
                f"stamps preprocessed with {images.spec} in batches of {images.batch_size} cannot be scored "
                f"with {pspec} in batches of {batch_size}"
            )
        batches = images.batches
    else:
        batches = _preprocessed_batches(images, pspec, dev, batch_size)
    model = model.to(dev).eval()
    stacked = hasattr(model, "member_logits")
    n_members = len(model.members) if members and stacked else 0
    logits, member, valids, reasons = [], [], [], []
    with torch.inference_mode():
        for ok, reason, x in batches:
            out = np.full(ok.shape[0], np.nan, dtype=np.float64)
            mout = np.full((ok.shape[0], n_members), np.nan, dtype=np.float64)
            if x is not None:
                sel = np.flatnonzero(ok)
                x = x.to(dev, non_blocking=True)
                if input_transform is not None:
                    x = input_transform(x)
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp and dev.type == "cuda"):
                    if stacked:  # one pass: the members' logits, then the meta-learner over them
                        z = _view_logits(model.member_logits, x, views)
                        if n_members:
                            mout[sel] = z.double().cpu().numpy()
                        out[sel] = model.meta(torch.sigmoid(z)).squeeze(-1).double().cpu().numpy()
                    else:
                        out[sel] = _view_logits(model, x, views).double().cpu().numpy()
            logits.append(out)
            member.append(mout)
            valids.append(ok)
            reasons.append(reason)
    if not logits:
        return np.zeros(0, np.float64), np.zeros((0, n_members)), np.zeros(0, bool), np.zeros(0, dtype=object)
    return np.concatenate(logits), np.concatenate(member), np.concatenate(valids), np.concatenate(reasons)


def calibrated_probability(logits, temperature: float = 1.0) -> np.ndarray:
    """sigmoid(logits / temperature) in float64: in float32 every logit above ~16.6 rounds to
    exactly 1.0, which would tie the most confident detections with each other and with a
    threshold at 1.0. NaN logits stay NaN."""
    if not (np.isfinite(temperature) and temperature > 0):
        raise InputError(f"temperature must be a positive finite number, got {temperature!r}")
    from scipy.special import expit

    return expit(np.asarray(logits, dtype=np.float64) / float(temperature))


def score_stamps(
    model: torch.nn.Module,
    spec,
    images,
    device: str | torch.device | None = None,
    batch_size: int = 256,
    input_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    amp: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lens probabilities for stamps, streamed in batches.

    model: a single-logit network (see models.build_model); spec: the checkpoint's CheckpointSpec
    (its preprocessing, its calibration temperature and its averaging over dihedral views are
    applied) or a bare PreprocessSpec (temperature 1, one view); images: (N, 3, H, W) nanomaggies
    as numpy/torch, or an iterable of such batches (only one batch is held at a time);
    input_transform: optional function applied to the preprocessed batch (gates use it to mask
    the core); amp: bf16 autocast, CUDA only.

    Returns (scores (N,) float64 in [0, 1], NaN where invalid; valid (N,) bool; reason (N,) str).
    """
    logits, ok, reason = stamp_logits(model, spec, images, device, batch_size, input_transform, amp)
    return calibrated_probability(logits, getattr(spec, "temperature", 1.0)), ok, reason


def score_with_members(
    model: torch.nn.Module,
    spec,
    images,
    device: str | torch.device | None = None,
    batch_size: int = 256,
    amp: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """:func:`score_stamps` plus, for a stacked ensemble, each member's own probability
    sigmoid(member logit) from the same forward pass, so the published ensemble and its members are
    compared on the same rows. Returns (scores, valid, reason, {member architecture: (N,) probabilities})."""
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    logits, member, valid, reason = _forward(model, spec, images, dev, batch_size, None, amp, members=True)
    names = list(getattr(spec, "arch_args", {}).get("members", []))[: member.shape[1]]
    # members of one architecture are told apart by their position
    keys = [n if names.count(n) == 1 else f"{n}_{i}" for i, n in enumerate(names)]
    members = {k: calibrated_probability(member[:, i]) for i, k in enumerate(keys)}
    return calibrated_probability(logits, getattr(spec, "temperature", 1.0)), valid, reason, members


def stamp_features(
    model: torch.nn.Module, spec, images, device: str | torch.device | None = None, batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The network's penultimate-layer features (``pooled_features``: the globally pooled features
    its linear head reads) for stamps, preprocessed with the checkpoint's spec as for scoring, in
    the stamps' own orientation (no dihedral averaging: a linear probe compares representations,
    not scores). Arguments as :func:`score_stamps`.

    Returns (features (N, D) float64, NaN rows where invalid; valid (N,) bool; reason (N,) str).
    """
    if not hasattr(model, "pooled_features"):
        raise InputError(f"{type(model).__name__} has no pooled_features (its penultimate layer)")
    pspec = getattr(spec, "preprocess", spec)
    if not isinstance(pspec, PreprocessSpec):
        raise InputError(f"feature extraction needs a PreprocessSpec or CheckpointSpec, got {type(spec).__name__}")
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    model = model.to(dev).eval()
    feats, valids, reasons, width = [], [], [], None
    with torch.inference_mode():
        for ok, reason, x in _preprocessed_batches(images, pspec, dev, int(batch_size)):
            f = None if x is None else model.pooled_features(x).double().cpu().numpy()
            width = width if f is None else f.shape[1]
            feats.append((ok, f))
            valids.append(ok)
            reasons.append(reason)
    if not valids:
        return np.zeros((0, 0)), np.zeros(0, bool), np.zeros(0, dtype=object)
    out = []
    for ok, f in feats:
        rows = np.full((ok.shape[0], width or 0), np.nan)
        if f is not None:
            rows[ok] = f
        out.append(rows)
    return np.concatenate(out), np.concatenate(valids), np.concatenate(reasons)
