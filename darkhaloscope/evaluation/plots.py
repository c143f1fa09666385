"""Evaluation figures as PNG bytes (matplotlib Agg, no pyplot state, byte-stable output).

Every function returns the bytes of a PNG. Figures are drawn on a bare ``Figure`` with the Agg
canvas under matplotlib's default style, and saved without the ``Software`` text chunk, so the
same inputs give the same bytes on the same matplotlib version, whatever the caller's rcParams.
"""

from __future__ import annotations

import io
from typing import Mapping, Sequence

import matplotlib
import matplotlib.style
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..errors import InputError
from ..imaging.cutout_io import asinh_rgb
from ..stats import roc_auc, roc_curve
from .thresholds import require_columns, valid_scores

_STYLE = [
    "default",
    {"font.size": 8, "figure.dpi": 100, "savefig.dpi": 100, "image.interpolation": "nearest", "hatch.linewidth": 0.6},
]


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _grid(selection: pa.Table, threshold_name: str):
    require_columns(
        selection,
        (
            "threshold_name",
            "theta_e_centre",
            "z_l_centre",
            "completeness",
            "ci68_lo",
            "ci68_hi",
            "n_valid",
            "sufficient",
        ),
        "selection function",
    )
    rows = selection.filter(pc.equal(selection.column("threshold_name"), threshold_name))
    if rows.num_rows == 0:
        names = sorted(set(selection.column("threshold_name").to_pylist()))
        raise InputError(f"selection function: no rows for threshold_name {threshold_name!r}; have {names}")
    d = {c: rows.column(c).to_pylist() for c in rows.column_names}
    tc = sorted(set(d["theta_e_centre"]))
    zc = sorted(set(d["z_l_centre"]))
    shape = (len(zc), len(tc))
    comp = np.full(shape, np.nan)
    half = np.full(shape, np.nan)
    nval = np.zeros(shape, dtype=np.int64)
    suff = np.ones(shape, dtype=bool)
    seen = np.zeros(shape, dtype=bool)
    for j in range(rows.num_rows):
        y, x = zc.index(d["z_l_centre"][j]), tc.index(d["theta_e_centre"][j])
        if seen[y, x]:
            raise InputError(f"selection function: cell θ_E={tc[x]}, z_l={zc[y]} repeats for {threshold_name!r}")
        seen[y, x] = True
        if d["completeness"][j] is not None:
            comp[y, x] = d["completeness"][j]
            half[y, x] = 0.5 * (d["ci68_hi"][j] - d["ci68_lo"][j])
        nval[y, x] = d["n_valid"][j]
        suff[y, x] = bool(d["sufficient"][j])
    return tc, zc, comp, half, nval, suff & seen


def selection_heatmap_png(selection: pa.Table, threshold_name: str) -> bytes:
    """Two-panel heatmap of C(θ_E, z_l) and its 68 % half-width for one threshold.

    Cells with ``sufficient = False`` are hatched; cells without valid injections are grey and
    marked ``n=0``. Values are printed in percent. θ_E in arcsec on x, z_l on y (one column/row
    per grid centre, so uneven grids keep equal-size cells).
    """
    tc, zc, comp, half, nval, suff = _grid(selection, threshold_name)
    with matplotlib.style.context(_STYLE):
        fig = Figure(figsize=(4.0 + 0.9 * len(tc), 1.2 + 0.45 * len(zc)), layout="constrained")
        axes = fig.subplots(1, 2)
        panels = (
            (axes[0], comp, f"completeness C(θ_E, z_l), {threshold_name}", "viridis", 1.0),
            (
                axes[1],
                half,
                "68% interval half-width",
                "magma_r",
                max(0.05, float(np.nanmax(half)) if np.any(np.isfinite(half)) else 0.05),
            ),
        )
        for ax, data, title, cmap, vmax in panels:
            cm = matplotlib.colormaps[cmap].with_extremes(bad="0.85")
            im = ax.imshow(np.ma.masked_invalid(data), origin="lower", cmap=cm, vmin=0.0, vmax=vmax, aspect="auto")
            fig.colorbar(im, ax=ax, shrink=0.9)
            ax.set_xticks(range(len(tc)), [f"{v:g}" for v in tc])
            ax.set_yticks(range(len(zc)), [f"{v:g}" for v in zc])
            ax.set_xlabel("θ_E (arcsec)")
            ax.set_ylabel("z_l")
            ax.set_title(title)
            for y in range(len(zc)):
                for x in range(len(tc)):
                    if nval[y, x] == 0:
                        ax.text(x, y, "n=0", ha="center", va="center", fontsize=6, color="0.3")
                        continue
                    r, g, b, _ = cm(min(max(data[y, x] / vmax, 0.0), 1.0))
                    ax.text(
                        x,
                        y,
                        f"{100 * data[y, x]:.1f}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white",
                    )
                    if not suff[y, x]:
                        ax.add_patch(
                            Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="///", edgecolor="red", linewidth=0)
                        )
        fig.suptitle("hatched: insufficient injections; grey: none valid", fontsize=7)
        return _png(fig)


#: An upper edge at least this many times max(|lower edge|, 1) stands for "no upper bound" (e.g.
#: the arc S/N bins' [50, 1e6]).
OPEN_EDGE_RATIO = 1e4


def bin_tick_labels(lo, hi) -> list[str]:
    """Tick labels ``'lo–hi'`` of bins with edges ``lo``, ``hi``; a last bin whose upper edge is a
    stand-in for infinity (:data:`OPEN_EDGE_RATIO`) reads ``'≥ lo'``."""
    labels = [f"{a:g}–{b:g}" for a, b in zip(lo, hi)]
    if labels and hi[-1] >= OPEN_EDGE_RATIO * max(abs(lo[-1]), 1.0):
        labels[-1] = f"≥ {lo[-1]:g}"
    return labels


def marginal_png(marginal: pa.Table, xlabel: str | None = None) -> bytes:
    """Completeness against one binned column, one curve per threshold, 68 % Jeffreys bars (on n_effective).

    Takes a table from :func:`marginal_completeness` (one ``by``). The bins sit at equal spacing,
    labelled by their edges (:func:`bin_tick_labels`): edges may span decades (arc S/N 0–2 to
    ≥ 50), which an axis in the column's units would crush into one point. Insufficient bins are
    drawn with open markers; the legend gives each threshold's overall completeness (the ``'all'``
    row).
    """
    require_columns(
        marginal,
        (
            "threshold_name",
            "by",
            "bin",
            "bin_lo",
            "bin_hi",
            "bin_centre",
            "completeness",
            "ci68_lo",
            "ci68_hi",
            "sufficient",
        ),
        "marginal completeness",
    )
    d = {c: marginal.column(c).to_pylist() for c in marginal.column_names}
    bys = sorted(set(d["by"]))
    if len(bys) != 1:
        raise InputError(f"marginal completeness: expected one 'by' column, got {bys}")
    names = list(dict.fromkeys(d["threshold_name"]))
    bins = sorted({(lo, hi) for lo, hi in zip(d["bin_lo"], d["bin_hi"]) if lo is not None and hi is not None})
    position = {b: i for i, b in enumerate(bins)}
    with matplotlib.style.context(_STYLE):
        fig = Figure(figsize=(5.0, 3.2), layout="constrained")
        ax = fig.subplots()
        for i, name in enumerate(names):
            rows = [j for j, n in enumerate(d["threshold_name"]) if n == name]
            pts = [j for j in rows if d["bin_centre"][j] is not None and d["completeness"][j] is not None]
            overall = [d["completeness"][j] for j in rows if d["bin"][j] == "all"]
            label = name if not overall or overall[0] is None else f"{name} (all: {100 * overall[0]:.2f}%)"
            x = np.array([position[(d["bin_lo"][j], d["bin_hi"][j])] for j in pts], dtype=float)
            y = np.array([d["completeness"][j] for j in pts], dtype=float)
            err = (
                np.array([[y[m] - d["ci68_lo"][j], d["ci68_hi"][j] - y[m]] for m, j in enumerate(pts)], dtype=float)
                .reshape(-1, 2)
                .T
            )
            color = f"C{i}"
            ax.errorbar(x, y, yerr=err, color=color, marker="none", capsize=2, lw=1, label=label)
            suff = np.array([bool(d["sufficient"][j]) for j in pts], dtype=bool)
            ax.plot(x[suff], y[suff], "o", color=color, ms=4)
            ax.plot(x[~suff], y[~suff], "o", mfc="white", mec=color, ms=4)
        ax.set_xticks(range(len(bins)), bin_tick_labels([b[0] for b in bins], [b[1] for b in bins]), fontsize=6)
        ax.set_xlabel(xlabel or bys[0])
        ax.set_ylabel("completeness")
        ax.set_ylim(0.0, 1.0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, title="open markers: insufficient", title_fontsize=6)
        return _png(fig)


def roc_inputs(positives: pa.Table, negatives: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(scores, labels) of the scorable rows: positives labelled 1, negatives 0."""
    ps, pu = valid_scores(positives, "ROC positives")
    ns, nu = valid_scores(negatives, "ROC negatives")
    scores = np.r_[ps[pu], ns[nu]]
    labels = np.r_[np.ones(int(pu.sum()), dtype=np.int8), np.zeros(int(nu.sum()), dtype=np.int8)]
    return scores, labels


def roc_png(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], fpr_marks: Sequence[float] = ()) -> bytes:
    """ROC curves on a log false-positive-rate axis.

    ``curves`` maps a label (e.g. 'injections vs controls', 'real lenses vs negatives') to
    (scores, labels) as from :func:`roc_inputs`; curves come from :func:`darkhaloscope.stats.roc_curve`,
    each labelled with its AUC (:func:`darkhaloscope.stats.roc_auc`) and its counts.
    The axis starts at half of 1/n_neg (FPR = 0 cannot be drawn on a log axis); ``fpr_marks``
    draws dashed verticals at target false-positive rates.
    """
    if not curves:
        raise InputError("roc_png: no curves given")
    with matplotlib.style.context(_STYLE):
        fig = Figure(figsize=(4.6, 3.4), layout="constrained")
        ax = fig.subplots()
        floor = 1.0
        for i, (label, (scores, labels)) in enumerate(curves.items()):
            y = np.asarray(labels)
            n_neg = int(np.sum(y == 0))
            if n_neg == 0 or int(np.sum(y == 1)) == 0:
                raise InputError(
                    f"roc_png: curve {label!r} needs positives and negatives (has {int(np.sum(y == 1))} and {n_neg})"
                )
            fpr, tpr, _ = roc_curve(scores, y)
            lo = 0.5 / n_neg
            floor = min(floor, lo)
            # step through the first non-zero FPR from the floor, so the low-FPR TPR stays visible
            ax.step(
                np.maximum(fpr, lo),
                tpr,
                where="post",
                color=f"C{i}",
                lw=1.2,
                label=f"{label} (AUC {roc_auc(scores, y):.3f}, n+={int(np.sum(y == 1))}, n−={n_neg})",
            )
        for f in fpr_marks:
            ax.axvline(f, color="0.5", ls="--", lw=0.7)
        ax.set_xscale("log")
        ax.set_xlim(floor, 1.0)
        ax.set_ylim(0.0, 1.01)
        ax.set_xlabel("false-positive rate")
        ax.set_ylabel("true-positive rate")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, loc="lower right")
        return _png(fig)


def mosaic_png(
    stamps: np.ndarray, captions: Sequence[str] | None = None, ncols: int = 6, title: str | None = None
) -> bytes:
    """Grid of asinh colour images of ``[n, 3, y, x]`` g, r, z stamps (nanomaggies).

    ``captions`` (one per stamp, e.g. the score) are printed under each image.
    """
    a = np.asarray(stamps)
    if a.ndim != 4 or a.shape[0] == 0:
        raise InputError(f"mosaic: expected [n, 3, y, x] stamps with n >= 1, got shape {a.shape}")
    if captions is not None and len(captions) != a.shape[0]:
        raise InputError(f"mosaic: {len(captions)} captions for {a.shape[0]} stamps")
    rgb = asinh_rgb(a)
    n = a.shape[0]
    ncols = max(1, min(int(ncols), n))
    nrows = -(-n // ncols)
    with matplotlib.style.context(_STYLE):
        fig = Figure(figsize=(1.3 * ncols, 1.45 * nrows + (0.3 if title else 0.0)), layout="constrained")
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        for i, ax in enumerate(axes):
            ax.set_axis_off()
            if i >= n:
                continue
            ax.imshow(rgb[i], origin="lower")
            if captions is not None:
                ax.set_title(str(captions[i]), fontsize=6)
        if title:
            fig.suptitle(title, fontsize=8)
        return _png(fig)


def reliability_png(calibration: Mapping) -> bytes:
    """Reliability diagram of the lens finder's validation scores before and after temperature
    scaling: observed fraction of positives against mean predicted probability per bin (marker
    area ~ rows), with the diagonal of perfect calibration.

    ``calibration``: the summary of :func:`darkhaloscope.training.calibration.calibration_summary`
    (``reliability_before``/``reliability_after`` bins, ``ece_before``/``ece_after``, ``temperature``).
    """
    missing = [
        k
        for k in ("reliability_before", "reliability_after", "ece_before", "ece_after", "temperature")
        if k not in calibration
    ]
    if missing:
        raise InputError(f"reliability_png: calibration summary lacks {missing}")
    with matplotlib.style.context(_STYLE):
        fig = Figure(figsize=(3.8, 3.4), layout="constrained")
        ax = fig.subplots()
        ax.plot([0, 1], [0, 1], color="0.5", ls="--", lw=0.8)
        for i, (key, ece, label) in enumerate(
            (
                ("reliability_before", "ece_before", "uncalibrated (T = 1)"),
                ("reliability_after", "ece_after", f"T = {calibration['temperature']:.3g}"),
            )
        ):
            bins = calibration[key]
            x = [b["mean_probability"] for b in bins]
            y = [b["fraction_positive"] for b in bins]
            n = np.asarray([b["n"] for b in bins], dtype=np.float64)
            ax.plot(x, y, "-", color=f"C{i}", lw=1.0)
            ax.scatter(
                x, y, s=8 + 60 * n / max(n.max(), 1.0), color=f"C{i}", label=f"{label}: ECE {calibration[ece]:.3f}"
            )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("mean predicted probability")
        ax.set_ylabel("fraction of positives")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
        return _png(fig)


def ablation_png(ablation: pa.Table) -> bytes:
    """Two panels per arm of the realism ablation (:mod:`ablation`): ΔC against the baseline arm with
    its 1σ error bar, and recall of the truth lenses at the threshold and the realism probe's AUROC
    (both dimensionless, 0–1)."""
    require_columns(ablation, ("arm", "delta_c", "delta_c_sd", "recall_truth", "probe_auroc"), "realism_ablation")
    arms = ablation.column("arm").to_pylist()
    x = np.arange(len(arms))

    def values(name):
        return np.asarray([np.nan if v is None else v for v in ablation.column(name).to_pylist()], float)

    with matplotlib.style.context(_STYLE):
        fig = Figure(figsize=(7.0, 3.0), layout="constrained")
        ax_c, ax_r = fig.subplots(1, 2)
        ax_c.errorbar(x, values("delta_c"), yerr=values("delta_c_sd"), fmt="o", capsize=3)
        ax_c.axhline(0.0, color="0.5", ls="--", lw=0.8)
        ax_c.set_ylabel("ΔC vs baseline (±1σ)")
        ax_r.plot(x, values("recall_truth"), "o", label="recall of truth lenses")
        ax_r.plot(x, values("probe_auroc"), "s", label="realism probe AUROC")
        ax_r.set_ylim(0, 1)
        ax_r.legend(loc="lower right")
        for ax in (ax_c, ax_r):
            ax.set_xticks(x, arms, rotation=30, ha="right")
        return _png(fig)
