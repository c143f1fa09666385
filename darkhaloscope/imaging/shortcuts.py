"""Shortcut scan: can a trivial per-cutout feature tell positives from negatives?

A training set can pass every image-quality gate and still let a core-only logistic regression
reach an AUC near 1: the PSF blurs injected arc flux into the lens core, so injected positives have
brighter cores than negatives. A finder that can separate classes by core brightness learns that
instead of arcs. This module computes about 25 simple image features per cutout (vectorised over
cutouts) and the ROC AUC of each against the labels with a bootstrap interval, flags the
separating ones and says whether a core-brightness feature separates the classes. Brightness
features use central apertures, not whole-stamp means, because sky dominates the mean of a
101-pixel stamp.

Flagging rule. The raw AUC is reported (above 0.5: the feature is larger in positives). A feature
may separate in either direction, so the flag uses the separation ``|AUC − 0.5| + 0.5`` and its
lower 68 % bound, computed from the AUC interval [lo, hi] as ``max(lo, 1 − hi, 0.5)`` (0.5 when the
interval straddles 0.5). Red: bound > 0.70; yellow: bound > 0.60; green otherwise; ``na`` when the
AUC cannot be measured (one class has no finite values).

Geometry (pixels, 0.262″/px, target at (S // 2, S // 2)): core apertures r <= 4, 8, 12; arc
annulus 4 < r <= 16; outer ring 16 < r <= 28; noise (MAD) from r > 16; edge frame 3 px wide.
"""

from __future__ import annotations

import warnings
from typing import Hashable

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..seeding import rng_for
from ..stats import auc_bootstrap_interval, roc_auc
from .quality import MAD_TO_SIGMA, SATUR_BITS, row_nanmedian

CORE_RADII_PX = (4, 8, 12)
ANNULUS_PX = (4.0, 16.0)
OUTER_PX = (16.0, 28.0)
EDGE_WIDTH_PX = 3
N_WEDGES = 8
CLIP_SIGMA = 10.0
RED_BOUND = 0.70
YELLOW_BOUND = 0.60

#: Features, in column order. Brightnesses are mean nanomaggies per pixel; colours AB mag.
FEATURE_NAMES = (
    "core_brightness_r4",
    "core_brightness_r8",
    "core_brightness_r12",
    "core_brightness_g8",
    "core_brightness_z8",
    "core_max_r",
    "annulus_brightness_g",
    "annulus_brightness_r",
    "annulus_brightness_z",
    "annulus_max_r",
    "annulus_std_r",
    "outer_brightness_r",
    "outer_std_r",
    "color_gr_core",
    "color_rz_core",
    "radial_gradient_r",
    "laplacian_energy_r",
    "azimuthal_asymmetry_r",
    "mad_g",
    "mad_r",
    "mad_z",
    "clip_frac_g",
    "clip_frac_r",
    "clip_frac_z",
    "edge_artifact_frac",
    "nonfinite_frac",
    "saturation_frac",
)
#: Features whose separation is a core-brightness shortcut (arc flux the PSF spreads into the core).
CORE_FEATURES = frozenset(
    {
        "core_brightness_r4",
        "core_brightness_r8",
        "core_brightness_r12",
        "core_brightness_g8",
        "core_brightness_z8",
        "core_max_r",
    }
)
#: Features that lensed arcs legitimately raise: separation there is expected physics.
EXPECTED_PHYSICS = frozenset(
    {
        "azimuthal_asymmetry_r",
        "annulus_brightness_g",
        "annulus_brightness_r",
        "annulus_brightness_z",
        "annulus_max_r",
        "annulus_std_r",
    }
)


def _geometry(size: int) -> dict[str, np.ndarray]:
    if size < 2 * OUTER_PX[1] + 1:
        raise InputError(f"shortcut features need stamps of at least {int(2 * OUTER_PX[1] + 1)} px, got {size}")
    c = size // 2
    yy, xx = np.mgrid[:size, :size]
    dy, dx = yy - c, xx - c
    r = np.hypot(dy, dx)
    annulus = (r > ANNULUS_PX[0]) & (r <= ANNULUS_PX[1])
    outer = (r > OUTER_PX[0]) & (r <= OUTER_PX[1])
    wedge = np.floor((np.arctan2(dy, dx) + np.pi) / (2 * np.pi / N_WEDGES)).astype(int) % N_WEDGES
    wedges = np.stack([(annulus & (wedge == k)).ravel() for k in range(N_WEDGES)], axis=1)
    edge = np.zeros((size, size), dtype=bool)
    edge[:EDGE_WIDTH_PX], edge[-EDGE_WIDTH_PX:], edge[:, :EDGE_WIDTH_PX], edge[:, -EDGE_WIDTH_PX:] = (
        True,
        True,
        True,
        True,
    )
    cores = np.stack([(r <= rc).ravel() for rc in CORE_RADII_PX], axis=1)
    return {
        "r": r.ravel(),
        "cores": cores,
        "annulus": annulus.ravel(),
        "outer": outer.ravel(),
        "noise": (r > OUTER_PX[0]).ravel(),
        "wedges": wedges,
        "edge": edge.ravel(),
        "lap_region": (r[1:-1, 1:-1] <= ANNULUS_PX[1]),
    }


def _masked_means(vals: np.ndarray, finite: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Means of finite values over each mask column: (N, P) x (P, K) -> (N, K), NaN where empty."""
    m = masks.astype(np.float64)
    num = np.where(finite, vals, 0.0) @ m
    den = finite.astype(np.float64) @ m
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        # All-NaN regions give NaN features by design; feature_aucs drops those rows per feature.
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*a, **k)


def _colour(f1: np.ndarray, f2: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((f1 > 0) & (f2 > 0), -2.5 * np.log10(f1 / f2), np.nan)


def shortcut_features(image: np.ndarray, maskbits: np.ndarray | None = None, chunk_rows: int = 256) -> pa.Table:
    """Feature table (columns FEATURE_NAMES, float64, one row per cutout) for grz stamps.

    image: (N, 3, S, S) nanomaggies per pixel, bands g, r, z, S >= 57. maskbits: optional
    (N, S, S) DR10 coadd maskbits; without it ``saturation_frac`` is null. Brightness features are
    mean nanomaggies per pixel over finite pixels, colours are AB magnitudes of the core fluxes (NaN
    when a flux is not positive), ``radial_gradient_r`` is in nanomaggies per pixel per pixel of
    radius, ``laplacian_energy_r`` the mean squared 5-point Laplacian (nanomaggies²) for r <= 16,
    ``azimuthal_asymmetry_r`` the std of 8 wedge means of the annulus in units of the robust noise,
    ``mad_*`` the raw median absolute deviation (nanomaggies) for r > 16, fractions in [0, 1].
    """
    image = np.asarray(image)
    if image.ndim != 4 or image.shape[1] != 3 or image.shape[2] != image.shape[3] or image.dtype.kind != "f":
        raise InputError(f"image must be floating (N, 3, S, S) grz stamps, got {image.dtype} {image.shape}")
    n, _, size, _ = image.shape
    if maskbits is not None:
        maskbits = np.asarray(maskbits)
        if maskbits.shape != (n, size, size) or maskbits.dtype.kind not in "iu":
            raise InputError(
                f"maskbits must be integer (N, S, S) = {(n, size, size)}, got {maskbits.dtype} {maskbits.shape}"
            )
    geo = _geometry(size)
    step = max(int(chunk_rows), 1)
    # Fixed-size row chunks bound the float64 working copies (about 60 MB per 256 stamps of 101 px).
    parts = [
        _features_chunk(image[i : i + step], None if maskbits is None else maskbits[i : i + step], geo)
        for i in range(0, n, step)
    ] or [_features_chunk(image[:0], None if maskbits is None else maskbits[:0], geo)]
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    arrays = [pa.array(cols[k]) if k in cols else pa.nulls(n, pa.float64()) for k in FEATURE_NAMES]
    return pa.Table.from_arrays(arrays, names=list(FEATURE_NAMES))


def _features_chunk(image: np.ndarray, maskbits: np.ndarray | None, geo: dict) -> dict[str, np.ndarray]:
    n, _, size, _ = image.shape
    flat = image.reshape(n, 3, size * size).astype(np.float64)
    finite = np.isfinite(flat)
    vals = np.where(finite, flat, np.nan)
    f: dict[str, np.ndarray] = {}

    regions = np.concatenate([geo["cores"], geo["annulus"][:, None], geo["outer"][:, None]], axis=1)
    means = [_masked_means(flat[:, b], finite[:, b], regions) for b in range(3)]  # (N, 5) each: r4, r8, r12, ann, out
    g, r, z = means
    f["core_brightness_r4"], f["core_brightness_r8"], f["core_brightness_r12"] = r[:, 0], r[:, 1], r[:, 2]
    f["core_brightness_g8"], f["core_brightness_z8"] = g[:, 1], z[:, 1]
    f["core_max_r"] = _quiet(np.nanmax, vals[:, 1][:, geo["cores"][:, 1]], axis=1)
    f["annulus_brightness_g"], f["annulus_brightness_r"], f["annulus_brightness_z"] = g[:, 3], r[:, 3], z[:, 3]
    ann_r = vals[:, 1][:, geo["annulus"]]
    f["annulus_max_r"] = _quiet(np.nanmax, ann_r, axis=1)
    f["annulus_std_r"] = _quiet(np.nanstd, ann_r, axis=1)
    f["outer_brightness_r"] = r[:, 4]
    f["outer_std_r"] = _quiet(np.nanstd, vals[:, 1][:, geo["outer"]], axis=1)
    f["color_gr_core"] = _colour(g[:, 1], r[:, 1])
    f["color_rz_core"] = _colour(r[:, 1], z[:, 1])
    rad = geo["r"]
    dr = rad[geo["outer"]].mean() - rad[geo["cores"][:, 1]].mean()
    f["radial_gradient_r"] = (r[:, 1] - r[:, 4]) / dr

    img_r = vals[:, 1].reshape(n, size, size)
    lap = 4 * img_r[:, 1:-1, 1:-1] - img_r[:, :-2, 1:-1] - img_r[:, 2:, 1:-1] - img_r[:, 1:-1, :-2] - img_r[:, 1:-1, 2:]
    ok = np.isfinite(lap) & geo["lap_region"]
    n_ok = ok.sum(axis=(1, 2))
    energy = (np.where(ok, lap, 0.0) ** 2).sum(axis=(1, 2))
    f["laplacian_energy_r"] = np.where(n_ok > 0, energy / np.maximum(n_ok, 1), np.nan)

    mads = []
    for b, name in enumerate("grz"):
        v = vals[:, b]
        noise = v[:, geo["noise"]]
        med_noise = row_nanmedian(noise)
        mad = row_nanmedian(np.abs(noise - med_noise[:, None]))
        mads.append(mad)
        f[f"mad_{name}"] = mad
        med = row_nanmedian(v)
        n_fin = finite[:, b].sum(axis=1)
        with np.errstate(invalid="ignore"):
            clipped = (np.abs(v - med[:, None]) > CLIP_SIGMA * MAD_TO_SIGMA * mad[:, None]).sum(axis=1)
            f[f"clip_frac_{name}"] = np.where((mad > 0) & (n_fin > 0), clipped / np.maximum(n_fin, 1), np.nan)
    wedge_means = _masked_means(flat[:, 1], finite[:, 1], geo["wedges"])
    with np.errstate(invalid="ignore", divide="ignore"):
        f["azimuthal_asymmetry_r"] = np.where(
            mads[1] > 0, np.std(wedge_means, axis=1) / (MAD_TO_SIGMA * mads[1]), np.nan
        )

    bad = (~finite | (flat == 0)).any(axis=1)
    f["edge_artifact_frac"] = bad[:, geo["edge"]].mean(axis=1)
    f["nonfinite_frac"] = (~finite).mean(axis=(1, 2))
    if maskbits is not None:
        satbits = sum(1 << SATUR_BITS[b] for b in "grz")
        f["saturation_frac"] = ((maskbits.reshape(n, size * size) & satbits) != 0).mean(axis=1)
    return {k: np.asarray(v, dtype=np.float64) for k, v in f.items()}


def separation_lower_bound(auc_lo: float, auc_hi: float) -> float:
    """Lower bound of |AUC − 0.5| + 0.5 from an AUC interval: max(lo, 1 − hi, 0.5); NaN if unknown."""
    if not (np.isfinite(auc_lo) and np.isfinite(auc_hi)):
        return float("nan")
    return float(max(auc_lo, 1.0 - auc_hi, 0.5))


def flag_for(bound: float) -> str:
    """'red' (> 0.70), 'yellow' (> 0.60), 'green', or 'na' for an unmeasurable separation bound."""
    if not np.isfinite(bound):
        return "na"
    return "red" if bound > RED_BOUND else "yellow" if bound > YELLOW_BOUND else "green"


def feature_aucs(
    features: pa.Table,
    labels,
    n_boot: int = 200,
    seed_key: Hashable = "shortcut-scan",
    level: float = 0.68,
    feature_names: tuple[str, ...] | None = None,
) -> pa.Table:
    """AUC of each feature for labels (1 = positive), with a bootstrap interval and a flag.

    Rows with a non-finite or null feature value are left out of that feature only (``n_pos``,
    ``n_neg`` count what was used). The bootstrap resamples rows ``n_boot`` times with a generator
    from ``rng_for(seed_key, 'feature-auc', feature)``, so results do not depend on feature order.
    Columns: feature, n_pos, n_neg, auc, auc_lo, auc_hi, separation_lo, flag, expected_physics,
    core_feature.
    """
    y = np.asarray(labels)
    if y.ndim != 1 or y.size != features.num_rows:
        raise InputError(f"labels have shape {y.shape}, expected ({features.num_rows},)")
    if not np.all((y == 0) | (y == 1)):
        raise InputError("labels must be 0 or 1")
    names = (
        feature_names if feature_names is not None else tuple(c for c in FEATURE_NAMES if c in features.column_names)
    )
    missing = [c for c in names if c not in features.column_names]
    if missing:
        raise InputError(f"feature table lacks columns {missing}")
    rows: dict[str, list] = {k: [] for k in _AUC_SCHEMA.names}
    for name in names:
        for k, v in _feature_auc(name, features.column(name), y, n_boot, seed_key, level).items():
            rows[k].append(v)
    return pa.Table.from_pydict(rows, schema=_AUC_SCHEMA)


#: The columns of :func:`feature_aucs`.
_AUC_SCHEMA = pa.schema(
    [
        ("feature", pa.string()),
        ("n_pos", pa.int64()),
        ("n_neg", pa.int64()),
        ("auc", pa.float64()),
        ("auc_lo", pa.float64()),
        ("auc_hi", pa.float64()),
        ("separation_lo", pa.float64()),
        ("flag", pa.string()),
        ("expected_physics", pa.bool_()),
        ("core_feature", pa.bool_()),
    ]
)


def _feature_auc(name: str, col, y: np.ndarray, n_boot: int, seed_key: Hashable, level: float) -> dict:
    """One row of :func:`feature_aucs`: the AUC of the feature ``name`` (values ``col``) for ``y``."""
    if not pa.types.is_floating(col.type) and not pa.types.is_integer(col.type) and not pa.types.is_null(col.type):
        raise InputError(f"feature column {name!r} is {col.type}, not numeric")
    x = col.to_numpy(zero_copy_only=False).astype(np.float64) if len(col) else np.zeros(0)
    keep = np.isfinite(x)
    s, yy = x[keep], y[keep].astype(np.int8)
    n_pos, n_neg = int(yy.sum()), int(yy.size - yy.sum())
    if n_pos and n_neg:
        auc = roc_auc(s, yy)
        lo, hi = auc_bootstrap_interval(s, yy, rng_for(seed_key, "feature-auc", name), n_boot=n_boot, level=level)
    else:
        auc = lo = hi = float("nan")
    bound = separation_lower_bound(lo, hi)
    return {
        "feature": name,
        "n_pos": n_pos,
        "n_neg": n_neg,
        "auc": auc,
        "auc_lo": lo,
        "auc_hi": hi,
        "separation_lo": bound,
        "flag": flag_for(bound),
        "expected_physics": name in EXPECTED_PHYSICS,
        "core_feature": name in CORE_FEATURES,
    }


def core_shortcut_failed(auc_table: pa.Table) -> bool:
    """True when any core-brightness feature is flagged red."""
    feats = auc_table.column("feature").to_pylist()
    flags = auc_table.column("flag").to_pylist()
    return any(f in CORE_FEATURES and fl == "red" for f, fl in zip(feats, flags))


def shortcut_gate(auc_table: pa.Table, min_annulus_auc: float = 0.55, max_yellow: int = 3) -> dict:
    """The shortcut gate: no red core feature, annulus_brightness_r AUC > min_annulus_auc, and at most
    ``max_yellow`` yellow-or-red flags outside the expected-physics whitelist and the core features."""
    d = {k: auc_table.column(k).to_pylist() for k in ("feature", "auc", "flag", "expected_physics", "core_feature")}
    by_name = dict(zip(d["feature"], d["auc"]))
    if "annulus_brightness_r" not in by_name:
        raise InputError("shortcut gate needs the annulus_brightness_r row")
    unexpected = [
        f
        for f, fl, ex, co in zip(d["feature"], d["flag"], d["expected_physics"], d["core_feature"])
        if fl in ("yellow", "red") and not ex and not co
    ]
    core_failed = core_shortcut_failed(auc_table)
    annulus_auc = by_name["annulus_brightness_r"]
    annulus_ok = bool(np.isfinite(annulus_auc) and annulus_auc > min_annulus_auc)
    return {
        "core_shortcut_failed": core_failed,
        "annulus_auc": float(annulus_auc),
        "annulus_ok": annulus_ok,
        "flagged_unexpected": unexpected,
        "passed": (not core_failed) and annulus_ok and len(unexpected) <= max_yellow,
    }


def core_brightness_ratio(features: pa.Table, labels, feature: str = "core_brightness_r8") -> float:
    """Mean of ``feature`` over positives divided by its mean over negatives (dimensionless; ideally
    0.95–1.05: positives whose cores are brighter than the negatives' carry the core-brightness
    shortcut)."""
    y = np.asarray(labels)
    if feature not in features.column_names:
        raise InputError(f"feature table lacks column {feature!r}")
    x = features.column(feature).to_numpy(zero_copy_only=False).astype(np.float64)
    if y.shape != x.shape:
        raise InputError(f"labels have shape {y.shape}, expected {x.shape}")
    keep = np.isfinite(x)
    pos, neg = x[keep & (y == 1)], x[keep & (y == 0)]
    if pos.size == 0 or neg.size == 0 or neg.mean() == 0:
        return float("nan")
    return float(pos.mean() / neg.mean())
