"""Shortcut gates: tests that the data and the model do not separate lenses by something other than arcs.

Each gate returns ``{name, value, threshold, passed, blocking, ...details}``.

* ``core_lr_auc`` — logistic regression on the central r < 5 px pixels of the preprocessed stamps,
  AUROC from 5-fold stratified cross-validation (fit and score on different folds: the seed system's
  final gate fitted and scored on the same rows, seed_system §5 item 3). A high value means the
  classes differ in the core alone, where arc flux only arrives blurred by the PSF (lessons 66–68).
  Passes below the threshold (0.65, the Plan B contract).
* ``radial_profile_lr_auc`` — the same on the azimuthal-mean radial profile (bands × 1 px bins).
  Informational by default: a real ring at θ_E legitimately changes the radial profile.
* ``core_masked_drop`` — AUROC of the model minus its AUROC when the r < 5 px core of its input is
  zeroed; passes below 0.10.
* ``hard_negative_auroc`` — the model's AUROC separating injections from their azimuthally shuffled
  hard negatives ``control + shuffle(image - control)``; passes above 0.70.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import InputError
from ..seeding import rng_for, stable_hash64
from ..stats import roc_auc
from .data import SHUFFLE_BIN_PX, TrainingArrays, hard_negative
from .inference import score_stamps
from .preprocess import PreprocessSpec, core_mask, preprocess, radial_profile


def _gate(name: str, value: float, threshold: float, passed: bool, blocking: bool, **details) -> dict:
    return {"name": name, "value": float(value), "threshold": float(threshold), "passed": bool(passed), "blocking": bool(blocking), **details}


def _preprocessed(images, spec: PreprocessSpec, batch_size: int = 512) -> torch.Tensor:
    return torch.cat([preprocess(images[i : i + batch_size], spec) for i in range(0, len(images), batch_size)])


def cross_validated_lr_auc(features: np.ndarray, labels: np.ndarray, seed: object = 0, folds: int = 5) -> float:
    """AUROC of out-of-fold logistic-regression probabilities (standardised features, L2, stratified k-fold)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y = np.asarray(labels).astype(np.int8)
    counts = np.bincount(y, minlength=2)
    if counts.min() < folds:
        raise InputError(f"cross-validated gate needs at least {folds} samples of each class, got {counts.tolist()}")
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=stable_hash64(seed, "cv") % (2**32))
    clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
    p = cross_val_predict(clf, np.asarray(features, dtype=np.float64), y, cv=cv, method="predict_proba")[:, 1]
    return roc_auc(p, y)


def core_features(x: torch.Tensor, radius: float = 5.0) -> np.ndarray:
    """(N, C*K) pixels of preprocessed stamps inside r < radius px (K pixels per channel)."""
    m = torch.from_numpy(core_mask(x.shape[-2], x.shape[-1], radius)).to(x.device)
    return x[:, :, m].reshape(x.shape[0], -1).cpu().numpy()


def core_lr_gate(images, labels, spec: PreprocessSpec, radius: float = 5.0, threshold: float = 0.65,
                 blocking: bool = True, seed: object = 0, folds: int = 5) -> dict:
    """Core-only LR gate on raw stamps ``images`` (N, 3, H, W) nanomaggies preprocessed with ``spec``."""
    auc = cross_validated_lr_auc(core_features(_preprocessed(images, spec), radius), labels, (seed, "core"), folds)
    return _gate("core_lr_auc", auc, threshold, auc < threshold, blocking, radius_px=radius, folds=folds, n=int(len(labels)))


def radial_profile_lr_gate(images, labels, spec: PreprocessSpec, threshold: float = 0.65, blocking: bool = False,
                           seed: object = 0, folds: int = 5) -> dict:
    """Radial-profile LR gate: azimuthal-mean profile (channels x 1 px bins to the stamp edge)."""
    x = _preprocessed(images, spec)
    n_bins = x.shape[-1] // 2 + 1  # out to the stamp edge, not its corners
    feats = radial_profile(x, 1.0, "mean")[:, :, :n_bins].reshape(x.shape[0], -1).cpu().numpy()
    auc = cross_validated_lr_auc(feats, labels, (seed, "radial"), folds)
    return _gate("radial_profile_lr_auc", auc, threshold, auc < threshold, blocking, bins=n_bins, folds=folds, n=int(len(labels)))


def core_masked_drop_gate(model, spec, images, labels, radius: float = 5.0, threshold: float = 0.10,
                          blocking: bool = True, device=None, batch_size: int = 256) -> dict:
    """AUROC drop of ``model`` when the r < radius px core of its (preprocessed) input is zeroed."""
    full, ok, _ = score_stamps(model, spec, images, device=device, batch_size=batch_size)
    cm = None

    def mask_core(x: torch.Tensor) -> torch.Tensor:
        nonlocal cm
        if cm is None:
            cm = torch.from_numpy(core_mask(x.shape[-2], x.shape[-1], radius)).to(x.device)
        return x.masked_fill(cm, 0.0)

    masked, _, _ = score_stamps(model, spec, images, device=device, batch_size=batch_size, input_transform=mask_core)
    y = np.asarray(labels)[ok]
    a_full, a_masked = roc_auc(full[ok], y), roc_auc(masked[ok], y)
    drop = a_full - a_masked
    return _gate("core_masked_drop", drop, threshold, drop < threshold, blocking, auroc_full=a_full, auroc_core_masked=a_masked, radius_px=radius)


def hard_negative_gate(model, spec, arrays: TrainingArrays, threshold: float = 0.70, blocking: bool = False,
                       seed: object = 0, device=None, batch_size: int = 256, bin_px: float = SHUFFLE_BIN_PX) -> dict:
    """AUROC of ``model`` on injected positives (label 1) against their azimuthally shuffled hard negatives (label 0)."""
    rows = np.flatnonzero((arrays.control_index >= 0) & (arrays.label == 1))
    if rows.size < 2:
        return _gate("hard_negative_auroc", float("nan"), threshold, False, False,
                     skipped=f"only {rows.size} injected positives with a paired control in {arrays.source}")
    ctrl = arrays.controls_for(rows)
    hn = np.stack([hard_negative(arrays.image[r], ctrl[i], rng_for(seed, "gate_hn", int(arrays.object_id[r])), bin_px)
                   for i, r in enumerate(rows)])
    imgs = np.concatenate([arrays.image[rows], hn])
    y = np.r_[np.ones(rows.size, np.int8), np.zeros(rows.size, np.int8)]
    p, ok, _ = score_stamps(model, spec, imgs, device=device, batch_size=batch_size)
    auc = roc_auc(p[ok], y[ok])
    return _gate("hard_negative_auroc", auc, threshold, auc > threshold, blocking, n_pairs=int(rows.size))


def run_gates(model, spec, arrays: TrainingArrays, core_threshold: float = 0.65, seed: object = 0, device=None) -> list[dict]:
    """All four gates on one split (normally val). ``spec`` is the checkpoint's PreprocessSpec/CheckpointSpec."""
    pspec = getattr(spec, "preprocess", spec)
    return [
        core_lr_gate(arrays.image, arrays.label, pspec, threshold=core_threshold, seed=seed),
        radial_profile_lr_gate(arrays.image, arrays.label, pspec, seed=seed),
        core_masked_drop_gate(model, pspec, arrays.image, arrays.label, device=device),
        hard_negative_gate(model, pspec, arrays, seed=seed, device=device),
    ]
