"""Shortcut gates: tests that the data and the model do not separate lenses by something other than arcs.

The gates, their thresholds and whether they block publication are defined once, in :data:`GATES`
(the lens_finder asset's checks and the trainer read them from here). Each gate returns
``{name, value, threshold, passed, blocking, ...details}``.

* ``core_lr_auc`` — logistic regression on the central r < 5 px pixels of the preprocessed stamps
  of the validation set's rows whose core holds no lensed light (negatives, and injections whose
  arc clears the core: :func:`arcs_outside_core`, the rows of ``core_masked_drop``), AUROC from
  5-fold stratified cross-validation (fit and score on different folds: a gate fitted and scored
  on the same rows measures memorisation). A high value means the classes differ in the core by
  something other than an arc: the hosts, or preprocessing that carries light from outside the
  core into it. An arc inside the core is the evidence itself (a finder of unresolved arcs must
  see it there), so the value over all rows is recorded beside it (``auroc_all_rows``), not gated.
  Passes below 0.65; blocking.
* ``core_lookalike_auroc`` — whether the model scores a galaxy up for looking like a real lens's
  host rather than for an arc. On the catalog rows (real positives and negatives; all rows when
  the set has no real positive), a logistic regression on the hosts' core (:func:`host_core`),
  5-fold cross-validated, rates each negative by how much its host looks like a lens's; the gate
  is the model's AUROC of the n highest-rated negatives (the look-alikes: as many as there are
  real positives, at most half the negatives) against the other negatives. The regression alone
  (``lr_auroc``, recorded, not gated) separates the classes whatever the model: the lenses' hosts
  are massive early types, the negatives of every type — a population difference, not a shortcut.
  A model that learnt the lenses' hosts (brightness, colour) scores the look-alikes up; one that
  finds arcs does not (they have none). Passes below 0.65; WARN.
* ``real_lens_shuffle_auroc`` — whether the model finds the real lenses by more than their hosts
  and their light at each radius: its AUROC of the real positives (all positives when the set has
  none) against themselves with their antisymmetric part shuffled within rings (``hard_negative``
  with the :func:`point_symmetric_part` as the control: the same host, the same flux and colour at
  every radius, half of an arc left as a symmetric pair, no arc's shape in the rest). A logistic
  regression on the radial profile separates the classes by the hosts and by the arcs' flux at
  their radii, the evidence; a model that reads only those scores a lens and its shuffle alike.
  Passes above 0.70; WARN.
* ``core_masked_drop`` — AUROC of the model minus its AUROC when the r < 5 px core of its input is
  zeroed; passes below 0.10; blocking.
* ``hard_negative_auroc`` — the model's AUROC separating injections from their azimuthally shuffled
  hard negatives ``control + shuffle(image - control)`` (same flux at the same radii, no tangential
  shape); passes above 0.70: the model must see the arc's shape, not only its flux.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..seeding import rng_for, stable_hash64
from ..stats import roc_auc
from .data import TrainingArrays
from .dataset import SHUFFLE_BIN_PX, hard_negative
from .inference import score_stamps
from .preprocess import PreprocessSpec, arc_clears_core, core_mask, preprocess_in_batches, radial_profile


@dataclass(frozen=True)
class Gate:
    """A gate's definition: threshold, whether it blocks publication, and the side that passes."""

    name: str
    threshold: float
    blocking: bool
    passes_above: bool
    description: str


#: Every gate, in the order they run: the one place their thresholds and blocking flags live.
GATES = {
    g.name: g
    for g in (
        Gate(
            "core_lr_auc",
            0.65,
            True,
            False,
            "cross-validated AUROC of a logistic regression on the r < 5 px core of the validation set, "
            "on negatives and injections whose arcs lie outside that core",
        ),
        # the thresholds of these two: BENCHMARKS.md, "The catalog gates: what the lenses' hosts are, not a shortcut"
        Gate(
            "core_lookalike_auroc",
            0.65,
            False,
            False,
            "the model's AUROC of the negatives whose hosts' cores a "
            "logistic regression takes for the real lenses' against the other negatives: a model that learnt the "
            "hosts scores them up",
        ),
        Gate(
            "real_lens_shuffle_auroc",
            0.70,
            False,
            True,
            "the model's AUROC of the real lenses against themselves "
            "with their antisymmetric part shuffled within rings (same host, same flux at every radius, no arc shape)",
        ),
        Gate(
            "core_masked_drop",
            0.10,
            True,
            False,
            "the model's AUROC drop when the r < 5 px core of its input is zeroed, "
            "on negatives and injections whose arcs lie outside that core",
        ),
        Gate(
            "hard_negative_auroc",
            0.70,
            False,
            True,
            "the model's AUROC of injections against their azimuthally shuffled arcs, "
            "on the arcs the PSF resolves (θ_E at least its FWHM)",
        ),
    )
}
BLOCKING_GATES = frozenset(n for n, g in GATES.items() if g.blocking)


def _gate(name: str, value: float, threshold: float | None = None, **details) -> dict:
    g = GATES[name]
    t = g.threshold if threshold is None else float(threshold)
    ok = bool(np.isfinite(value)) and (value > t if g.passes_above else value < t)
    return {"name": name, "value": float(value), "threshold": t, "passed": ok, "blocking": g.blocking, **details}


def cross_validated_lr_probabilities(
    features: np.ndarray, labels: np.ndarray, seed: object = 0, folds: int = 5, groups=None
) -> np.ndarray:
    """Out-of-fold logistic-regression probabilities of label 1 (standardised features, L2, stratified
    k-fold): each row scored by a regression fitted on the other folds. ``groups`` ((n,) ids, e.g.
    the host of each injection): rows of one group stay in one fold (stratified group k-fold), so
    that no fold is scored on a group it was fitted on."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y = np.asarray(labels).astype(np.int8)
    counts = np.bincount(y, minlength=2)
    if counts.min() < folds:
        raise InputError(f"cross-validated gate needs at least {folds} samples of each class, got {counts.tolist()}")
    state = stable_hash64(seed, "cv") % (2**32)
    split = StratifiedKFold if groups is None else StratifiedGroupKFold
    cv = split(n_splits=folds, shuffle=True, random_state=state)
    clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
    x = np.asarray(features, dtype=np.float64)
    return cross_val_predict(clf, x, y, groups=groups, cv=cv, method="predict_proba")[:, 1]


def cross_validated_lr_auc(features: np.ndarray, labels: np.ndarray, seed: object = 0, folds: int = 5) -> float:
    """AUROC of :func:`cross_validated_lr_probabilities`."""
    return roc_auc(cross_validated_lr_probabilities(features, labels, seed, folds), np.asarray(labels).astype(np.int8))


def core_features(x: torch.Tensor, spec: PreprocessSpec, radius: float = 5.0) -> np.ndarray:
    """Pixels of stamps preprocessed with ``spec`` inside r < radius px, (N, F): all K core pixels of
    each channel, but of the antisymmetric channels only those before the centre pixel in raster
    order, since each of the others is the negative of its mirror image (duplicated features
    make the logistic regression ill-conditioned and slow to fit, for no information:
    BENCHMARKS.md, *The stamp's antisymmetric part*)."""
    n, _, h, w = x.shape
    m = core_mask(h, w, radius)
    first_half = m & (np.arange(h * w).reshape(h, w) < (h * w) // 2)
    anti = spec.antisymmetric_channels()
    parts = (
        x[:, : anti.start][:, :, torch.from_numpy(m).to(x.device)],
        x[:, anti][:, :, torch.from_numpy(first_half).to(x.device)],
    )
    return torch.cat([p.reshape(n, -1) for p in parts], dim=1).cpu().numpy()


def core_lr_gate(
    images,
    labels,
    spec: PreprocessSpec,
    radius: float = 5.0,
    threshold: float | None = None,
    seed: object = 0,
    folds: int = 5,
) -> dict:
    """Core-only LR gate on raw stamps ``images`` (N, 3, H, W) nanomaggies preprocessed with ``spec``."""
    auc = cross_validated_lr_auc(
        core_features(preprocess_in_batches(images, spec), spec, radius), labels, (seed, "core"), folds
    )
    return _gate("core_lr_auc", auc, threshold, radius_px=radius, folds=folds, n=int(len(labels)))


def point_symmetric_part(images: np.ndarray) -> np.ndarray:
    """``(I + R₁₈₀ I) / 2`` of raw stamps ``images`` (N, 3, H, W), R₁₈₀ the 180° rotation about the
    stamp's centre pixel (the target). A galaxy is point-symmetric about its centre, so its light is
    all here; an arc is not, so half of it is here (with its mirror image) and half in the rest, the
    antisymmetric part (which the preprocessing's antisymmetric channels carry). For Gaussian noise
    independent between pixels the two parts' noises are independent with half the variance each,
    so a pixel rebuilt from one part and another pixel's other part has a pixel's noise."""
    images = np.asarray(images, dtype=np.float32)
    return np.ascontiguousarray((images + images[..., ::-1, ::-1]) / 2)


def host_core(images, spec: PreprocessSpec, radius: float = 5.0) -> np.ndarray:
    """The hosts' core in raw stamps ``images`` (N, 3, H, W) nanomaggies: the azimuthal-median
    profile in 1 px rings inside r < ``radius`` px of their :func:`point_symmetric_part`
    preprocessed with ``spec``, (N, C x rings). The median over a ring leaves what covers less
    than half of it, so an arc's half that stays in the symmetric part barely moves it."""
    x = preprocess_in_batches(point_symmetric_part(images), spec)
    return radial_profile(x, 1.0, "median")[:, :, : int(np.ceil(radius))].reshape(x.shape[0], -1).cpu().numpy()


def core_lookalike_gate(
    model,
    spec,
    images,
    labels,
    threshold: float | None = None,
    seed: object = 0,
    folds: int = 5,
    device=None,
    batch_size: int = 256,
) -> dict:
    """``core_lookalike_auroc`` of ``model`` on raw stamps ``images`` (N, 3, H, W) nanomaggies with
    ``labels`` (real positives and negatives). ``spec``: the checkpoint's CheckpointSpec (the model
    scores as published) or a PreprocessSpec.

    A cross-validated logistic regression on :func:`host_core` rates each negative by how much its
    host looks like the positives'; the value is the model's AUROC of the n highest-rated negatives
    (n = the positives, at most half the negatives) against the other negatives. The regression's
    own AUROC is ``lr_auroc``."""
    y = np.asarray(labels).astype(np.int8)
    hosts = host_core(images, getattr(spec, "preprocess", spec))
    q = cross_validated_lr_probabilities(hosts, y, (seed, "lookalike"), folds)
    neg = np.flatnonzero(y == 0)
    n_look = min(int(y.sum()), neg.size // 2)
    lookalike = np.zeros(neg.size, np.int8)
    lookalike[np.argsort(-q[neg], kind="stable")[:n_look]] = 1
    s, ok, _ = score_stamps(model, spec, images[neg], device=device, batch_size=batch_size)
    return _gate(
        "core_lookalike_auroc",
        roc_auc(s[ok], lookalike[ok]),
        threshold,
        lr_auroc=roc_auc(q, y),
        n_lookalikes=n_look,
        n_negatives=int(neg.size),
        n=int(y.size),
        folds=folds,
    )


def real_lens_shuffle_gate(
    model,
    spec,
    arrays: TrainingArrays,
    threshold: float | None = None,
    seed: object = 0,
    device=None,
    batch_size: int = 256,
    bin_px: float = SHUFFLE_BIN_PX,
) -> dict:
    """``real_lens_shuffle_auroc`` of ``model`` on the positives of ``arrays`` (the catalog rows):
    each against ``hard_negative(stamp, point_symmetric_part(stamp))``, its antisymmetric part
    shuffled within ``bin_px`` rings (the same permutation in every band)."""
    rows = np.flatnonzero(arrays.label == 1)
    if rows.size < 2:
        return _gate(
            "real_lens_shuffle_auroc", float("nan"), threshold, skipped=f"only {rows.size} positives in {arrays.source}"
        )
    host = point_symmetric_part(arrays.image[rows])
    keys = [rng_for(seed, "gate_real_shuffle", int(arrays.object_id[r])) for r in rows]
    shuffled = np.stack([hard_negative(arrays.image[r], host[i], keys[i], bin_px) for i, r in enumerate(rows)])
    p, ok, _ = score_stamps(
        model, spec, np.concatenate([arrays.image[rows], shuffled]), device=device, batch_size=batch_size
    )
    y = np.r_[np.ones(rows.size, np.int8), np.zeros(rows.size, np.int8)]
    return _gate("real_lens_shuffle_auroc", roc_auc(p[ok], y[ok]), threshold, n_lenses=int(rows.size), bin_px=bin_px)


def core_masked_drop_gate(
    model, spec, images, labels, radius: float = 5.0, threshold: float | None = None, device=None, batch_size: int = 256
) -> dict:
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
    return _gate("core_masked_drop", drop, threshold, auroc_full=a_full, auroc_core_masked=a_masked, radius_px=radius)


def hard_negative_gate(
    model,
    spec,
    arrays: TrainingArrays,
    threshold: float | None = None,
    seed: object = 0,
    device=None,
    batch_size: int = 256,
    bin_px: float = SHUFFLE_BIN_PX,
) -> dict:
    """AUROC of ``model`` on injected positives (label 1) against their azimuthally shuffled hard
    negatives (label 0), over the pairs whose arc the PSF resolves (θ_E at least the host's r-band
    FWHM, ``arc_clears_core`` with radius 0; injections without a θ_E count as resolved); the AUROC
    over all pairs is in the result as ``auroc_all_pairs``.

    The shuffle keeps the arc's flux and colour at each radius and destroys its tangential shape.
    An arc inside the PSF's FWHM has little shape left to destroy, so a finder that finds such arcs
    (the completeness targets ask it to) scores them and their shuffles alike: over all pairs the
    gate would fall as the finder's recall of unresolved arcs rises, without any shortcut."""
    rows = np.flatnonzero((arrays.control_index >= 0) & (arrays.label == 1))
    if rows.size < 2:
        return _gate(
            "hard_negative_auroc",
            float("nan"),
            threshold,
            skipped=f"only {rows.size} injected positives with a paired control in {arrays.source}",
        )
    ctrl = arrays.controls_for(rows)
    hn = np.stack(
        [
            hard_negative(arrays.image[r], ctrl[i], rng_for(seed, "gate_hn", int(arrays.object_id[r])), bin_px)
            for i, r in enumerate(rows)
        ]
    )
    imgs = np.concatenate([arrays.image[rows], hn])
    y = np.r_[np.ones(rows.size, np.int8), np.zeros(rows.size, np.int8)]
    p, ok, _ = score_stamps(model, spec, imgs, device=device, batch_size=batch_size)
    te, fwhm = arrays.theta_e_arcsec[rows], arrays.psfsize_r[rows]
    resolved = np.isnan(te) | arc_clears_core(te, fwhm, radius=0.0)
    pairs = np.r_[resolved, resolved] & ok
    if resolved.sum() < 2:
        return _gate(
            "hard_negative_auroc",
            float("nan"),
            threshold,
            auroc_all_pairs=roc_auc(p[ok], y[ok]),
            n_pairs_all=int(rows.size),
            skipped=f"only {int(resolved.sum())} of {rows.size} injected positives have an arc the PSF resolves in "
            f"{arrays.source}",
        )
    return _gate(
        "hard_negative_auroc",
        roc_auc(p[pairs], y[pairs]),
        threshold,
        n_pairs=int(resolved.sum()),
        auroc_all_pairs=roc_auc(p[ok], y[ok]),
        n_pairs_all=int(rows.size),
    )


def arcs_outside_core(arrays: TrainingArrays, radius: float = 5.0) -> np.ndarray:
    """Rows on which masking the r < ``radius`` px core removes no lensed light: negatives, and
    injections whose Einstein radius exceeds the core radius by one PSF FWHM (arcsec, r band).

    Masking the core of a lens whose arc lies inside it removes the evidence itself, so an honest
    model loses AUROC there; a drop on these rows can only come from the host's core (a shortcut)."""
    injected = (arrays.kind == "injected_positive") & arc_clears_core(arrays.theta_e_arcsec, arrays.psfsize_r, radius)
    return (arrays.label == 0) | injected


def run_gates(
    model, spec, arrays: TrainingArrays, thresholds: dict | None = None, seed: object = 0, device=None
) -> list[dict]:
    """All gates of :data:`GATES` on the validation set ``arrays``, in order. ``spec``: the
    checkpoint's CheckpointSpec or PreprocessSpec; ``thresholds``: per-gate overrides by name."""
    t = dict(thresholds or {})
    unknown = set(t) - set(GATES)
    if unknown:
        raise InputError(f"unknown gate(s) {sorted(unknown)}; known: {list(GATES)}")
    pspec = getattr(spec, "preprocess", spec)
    catalog = np.isin(arrays.kind, ("real_positive", "negative"))
    cat = arrays.subset(catalog) if catalog.any() and np.unique(arrays.label[catalog]).size == 2 else arrays
    clear = arcs_outside_core(arrays)
    outside = arrays.subset(clear) if np.unique(arrays.label[clear]).size == 2 else arrays
    core = core_lr_gate(outside.image, outside.label, pspec, threshold=t.get("core_lr_auc"), seed=seed)
    core.update(
        auroc_all_rows=core_lr_gate(arrays.image, arrays.label, pspec, seed=seed)["value"], n_all=int(len(arrays.label))
    )
    return [
        core,
        core_lookalike_gate(
            model, spec, cat.image, cat.label, threshold=t.get("core_lookalike_auroc"), seed=seed, device=device
        ),
        real_lens_shuffle_gate(model, spec, cat, threshold=t.get("real_lens_shuffle_auroc"), seed=seed, device=device),
        core_masked_drop_gate(
            model, pspec, outside.image, outside.label, threshold=t.get("core_masked_drop"), device=device
        ),
        hard_negative_gate(model, pspec, arrays, threshold=t.get("hard_negative_auroc"), seed=seed, device=device),
    ]
