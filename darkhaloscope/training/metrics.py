"""Validation metrics of a lens finder and the training-curve figure.

AUROC alone is uninformative at the 0.99 level (at a survey's 1 lens in 10^4 galaxies the operating
point sits at FPR 1e-3 or below, where AUROCs of 0.99 and 0.999 differ by orders of magnitude), so the low-FPR operating
points, average
precision, calibration and per-tier recall are always reported next to it. A TPR at an FPR finer
than 1/n_negatives cannot be measured and is reported as NaN rather than as the TPR at FPR = 0.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..errors import InputError
from ..seeding import rng_for
from ..stats import auc_bootstrap_interval, average_precision, roc_auc, tpr_at_fpr

FPR_TARGETS = (1e-2, 1e-3, 1e-4)


def expected_calibration_error(probs, labels, n_bins: int = 15) -> float:
    """ECE over ``n_bins`` equal-mass bins: sum_b (n_b / N) |mean(p)_b - mean(y)_b|. Probabilities in [0, 1].

    Bins are consecutive runs of N/n_bins ranks; tied probabilities are never split across bins.
    """
    p = np.asarray(probs, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    if p.size == 0:
        return float("nan")
    if p.shape != y.shape:
        raise InputError(f"probabilities ({p.shape}) and labels ({y.shape}) differ in length")
    order = np.argsort(p, kind="mergesort")
    ps, ys = p[order], y[order]
    # equal-mass bins by rank, but tied probabilities share the bin of their first rank: otherwise the
    # (arbitrary) order of labels inside a tie would be read as miscalibration
    first = np.searchsorted(ps, ps, side="left")
    b = first * min(n_bins, p.size) // p.size
    counts = np.bincount(b)
    nz = counts > 0
    gap = np.abs(np.bincount(b, ps)[nz] - np.bincount(b, ys)[nz])
    return float(gap.sum() / p.size)


def _fmt_fpr(f: float) -> str:
    return f"{f:.0e}".replace("-0", "-")


def evaluate_scores(
    probs,
    labels,
    tiers=None,
    threshold: float = 0.5,
    n_boot: int = 200,
    seed: object = 0,
) -> dict:
    """Metrics of probabilities ``probs`` (N,) against 0/1 ``labels`` on one split.

    tiers: optional (N,) str tier of each positive ('A', 'B', '' for none); recall at ``threshold``
    is reported per tier. Returns a flat JSON-able dict: n, n_pos, n_neg, auroc (+ 68 % bootstrap
    interval), average_precision, tpr_at_fpr_1e-2/1e-3/1e-4, ece_15, recall_at_0.5 (all and per tier),
    fpr_at_0.5.
    """
    p = np.asarray(probs, dtype=np.float64).ravel()
    y = np.asarray(labels).astype(np.int8).ravel()
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    out: dict = {"n": int(y.size), "n_pos": n_pos, "n_neg": n_neg}
    out["auroc"] = roc_auc(p, y)
    if n_pos and n_neg and n_boot:
        lo, hi = auc_bootstrap_interval(p, y, rng_for(seed, "auroc_bootstrap"), n_boot=n_boot)
        out["auroc_lo68"], out["auroc_hi68"] = lo, hi
    out["average_precision"] = average_precision(p, y) if n_pos else float("nan")
    for f in FPR_TARGETS:
        resolvable = n_neg > 0 and n_pos > 0 and f * n_neg >= 1.0
        out[f"tpr_at_fpr_{_fmt_fpr(f)}"] = tpr_at_fpr(p, y, f) if resolvable else float("nan")
    out["ece_15"] = expected_calibration_error(p, y, 15)
    pred = p >= threshold
    key = f"{threshold:g}"
    out[f"recall_at_{key}"] = float(pred[y == 1].mean()) if n_pos else float("nan")
    out[f"fpr_at_{key}"] = float(pred[y == 0].mean()) if n_neg else float("nan")
    if tiers is not None:
        t = np.asarray(tiers, dtype=object).ravel()
        for tier in sorted({str(v) for v in t[y == 1] if v not in (None, "")}):
            m = (y == 1) & (t == tier)
            out[f"recall_at_{key}_tier_{tier}"] = float(pred[m].mean())
            out[f"n_pos_tier_{tier}"] = int(m.sum())
    return {k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in out.items()}


def json_safe(d):
    """Replace NaN/inf floats by None, recursively (strict JSON consumers such as Dagster metadata)."""
    if isinstance(d, dict):
        return {k: json_safe(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [json_safe(v) for v in d]
    if isinstance(d, float) and not math.isfinite(d):
        return None
    return d


def plot_training_curves(history: list[dict], path: str | os.PathLike) -> str:
    """PNG of per-epoch train loss, validation AUROC and learning rate; returns the path.

    history: one dict per epoch with keys epoch, train_loss, val_auroc, lr (as TrainResult.history).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        raise InputError("training history is empty: nothing to plot")
    ep = [h["epoch"] for h in history]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    axes[0].plot(ep, [h["train_loss"] for h in history], "o-")
    axes[0].set(xlabel="epoch", ylabel="train loss (weighted BCE)")
    axes[1].plot(ep, [h["val_auroc"] for h in history], "o-", color="C1")
    axes[1].set(xlabel="epoch", ylabel="validation AUROC")
    axes[2].plot(ep, [h["lr"] for h in history], "o-", color="C2")
    axes[2].set(xlabel="epoch", ylabel="learning rate (end of epoch)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return str(path)


#: Arc S/N bins [edges] of the validation completeness: the selection function's own bins above 10
#: (the stream's ``min_arc_snr``; the first bin holds the slots that kept a fainter try).
VAL_SNR_EDGES = (0.0, 10.0, 20.0, 50.0, float("inf"))


def validation_breakdown(probs, val) -> dict:
    """Metrics of the validation set by population: AUROC of the injections and of the real
    positives against the catalog negatives (which are the injections' hosts, i.e. their paired
    controls), and the completeness of injections by arc S/N at the score exceeded by 1 % of the
    catalog negatives.

    probs: (N,) calibrated probabilities of ``val`` (TrainingArrays, kinds as in training.data)."""
    p = np.asarray(probs, dtype=np.float64)
    k = np.asarray(val.kind)
    inj, real, neg = (k == "injected_positive"), (k == "real_positive"), (k == "negative")
    out: dict = {}
    for name, pos, negs in (("injections_vs_negatives", inj, neg), ("real_vs_negatives", real, neg)):
        if pos.any() and negs.any():
            out[f"auroc_{name}"] = roc_auc(np.r_[p[pos], p[negs]], np.r_[np.ones(pos.sum()), np.zeros(negs.sum())])
    if inj.any() and neg.sum() >= 100:
        thr = float(np.quantile(p[neg], 0.99, method="higher"))
        snr = np.asarray(val.arc_snr, dtype=np.float64)
        for lo, hi in zip(VAL_SNR_EDGES[:-1], VAL_SNR_EDGES[1:]):
            m = inj & (snr >= lo) & (snr < hi)
            if m.any():
                out[f"completeness_fpr_1e-2_snr_{lo:g}_{hi:g}"] = float((p[m] > thr).mean())
    return out
