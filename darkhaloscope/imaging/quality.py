"""Per-cutout quality metrics and the quality gate.

Input is a batch of stamps ``image`` (N, C, S, S) in nanomaggies per pixel (``[band, y, x]``,
target at pixel (S // 2, S // 2)), optionally ``invvar`` (same shape, 1/nanomaggy²) and the
coadd ``maskbits`` (N, S, S). Output is one pyarrow row per cutout. Everything is vectorised over
cutouts (loops run over bands and fixed-size row chunks only).

Why these metrics: a stamp with a few NaN pixels looks fine to a download-succeeded flag but turns
the training loss into NaN; a stamp with a missing band cannot be stacked into a (g, r, z) batch;
an all-zero stand-in for a failed load would be scored as if it were a real image. Radii are in
pixels (0.262″/px).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..constants import BANDS
from ..errors import InputError

#: DR10 MASKBITS bits for saturation in g, r, z (SATUR_G, SATUR_R, SATUR_Z in the Legacy Surveys
#: bitmask definitions).
SATUR_BITS = {"g": 2, "r": 3, "z": 4}

#: quality_flags bits: why a cutout failed the gate.
FLAG_CENTRAL_NONFINITE = 1
FLAG_CORE_NONFINITE = 2
FLAG_BAD_PIXELS = 4
FLAG_MISSING_BAND = 8

#: Robust sigma of a Gaussian from its median absolute deviation.
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class QualityConfig:
    """Geometry (pixels) and gate thresholds (fractions) of the per-cutout quality gate.

    central_box_frac: side of the central box as a fraction of the stamp side (0.5 -> inner 50%).
    core_radius_px: core aperture radius. annulus_frac: inner and outer annulus radius as fractions
    of the half-width (S - 1) / 2; "outer" is everything beyond the annulus.
    clip_sigma: a pixel is "clipped" when |x - median| > clip_sigma * 1.4826 * MAD (the robust
    normalisation's clip: if one class has more clipped pixels, the clip fraction is a shortcut).
    """

    central_box_frac: float = 0.5
    core_radius_px: float = 8.0
    annulus_frac: tuple[float, float] = (0.65, 0.9)
    clip_sigma: float = 10.0
    max_central_nonfinite_frac: float = 0.02
    max_core_nonfinite_frac: float = 0.001
    max_bad_pixel_frac: float = 0.02
    require_all_bands: bool = True
    chunk_rows: int = 256


def row_nanmedian(x: np.ndarray) -> np.ndarray:
    """Median of the finite values of each row of a 2-D array; NaN for rows without any.

    np.nanmedian falls back to a Python loop over rows for long rows. Here rows without gaps use
    np.median; rows with gaps are sorted with non-finite values pushed to the end and the middle of
    each row's finite prefix is taken.
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise InputError(f"row_nanmedian needs a 2-D array, got shape {x.shape}")
    finite = np.isfinite(x)
    k = finite.sum(axis=1)
    if x.shape[1] == 0:
        return np.full(x.shape[0], np.nan)
    out = np.full(x.shape[0], np.nan)
    full = k == x.shape[1]
    if full.any():
        out[full] = np.median(x[full].astype(np.float64), axis=1)  # partition-based, the common case
    part = ~full & (k > 0)
    if part.any():
        xp, kp = x[part], k[part]
        srt = np.sort(np.where(finite[part], xp, np.inf), axis=1)
        rows = np.arange(xp.shape[0])
        lo = srt[rows, (kp - 1) // 2].astype(np.float64)
        hi = srt[rows, kp // 2].astype(np.float64)
        out[part] = 0.5 * (lo + hi)
    return out


def _nanmax(x: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmax(x, axis=axis)


def _geometry(size: int, cfg: QualityConfig) -> dict[str, np.ndarray]:
    c = size // 2
    yy, xx = np.mgrid[:size, :size]
    r = np.hypot(yy - c, xx - c).ravel()
    half = (size - 1) / 2.0
    lo, hi = cfg.annulus_frac
    # Pixels whose centres lie in the central box (51 x 51 for S = 101 and 50 %).
    box_half = cfg.central_box_frac * size / 2.0
    central = ((np.abs(yy - c) <= box_half) & (np.abs(xx - c) <= box_half)).ravel()
    regions = {
        "central": central,
        "core": r <= cfg.core_radius_px,
        "annulus": (r >= lo * half) & (r <= hi * half),
        "outer": r > hi * half,
    }
    # The core must sit inside the annulus, or "core vs annulus" compares overlapping pixels.
    if not all(m.any() for m in regions.values()) or cfg.core_radius_px >= lo * half:
        raise InputError(f"stamp side {size} px is too small for the quality geometry {cfg}")
    regions["r"] = r
    return regions


def _check_inputs(image, invvar, maskbits, bands) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    image = np.asarray(image)
    if image.ndim != 4 or image.shape[1] != len(bands) or image.shape[2] != image.shape[3]:
        raise InputError(f"image must be (N, {len(bands)}, S, S) for bands {bands!r}, got shape {image.shape}")
    if image.dtype.kind != "f":
        raise InputError(f"image must be floating point nanomaggies, got dtype {image.dtype}")
    if invvar is not None:
        invvar = np.asarray(invvar)
        if invvar.shape != image.shape:
            raise InputError(f"invvar shape {invvar.shape} differs from image shape {image.shape}")
    if maskbits is not None:
        maskbits = np.asarray(maskbits)
        if maskbits.shape != (image.shape[0], image.shape[2], image.shape[3]) or maskbits.dtype.kind not in "iu":
            raise InputError(
                f"maskbits must be integer (N, S, S) = {(image.shape[0],) + image.shape[2:]}, "
                f"got {maskbits.dtype} {maskbits.shape}"
            )
    return image, invvar, maskbits


def _chunk_metrics(img, ivar, mbits, geo, cfg, bands) -> dict[str, np.ndarray]:
    n = img.shape[0]
    npix = img.shape[2] * img.shape[3]
    flat = img.reshape(n, len(bands), npix).astype(np.float32, copy=False)
    finite = np.isfinite(flat)
    vals = np.where(finite, flat, np.nan)
    ivar_ok = None
    if ivar is not None:
        iv = ivar.reshape(n, len(bands), npix)
        ivar_ok = np.isfinite(iv) & (iv > 0)
    out: dict[str, np.ndarray] = {}
    r = geo["r"]
    r_core = r[geo["core"]].mean()
    r_outer = r[geo["outer"]].mean()
    nonfinite = ~finite
    out["nonfinite_frac"] = nonfinite.mean(axis=(1, 2))
    out["central_nonfinite_frac"] = nonfinite[:, :, geo["central"]].mean(axis=(1, 2))
    out["core_nonfinite_frac"] = nonfinite[:, :, geo["core"]].mean(axis=(1, 2))
    bad = nonfinite | (flat == 0)
    if ivar_ok is not None:
        bad |= ~ivar_ok
    out["bad_pixel_frac"] = bad.any(axis=1).mean(axis=1)
    has_all = np.ones(n, dtype=bool)
    n_present = np.zeros(n, dtype=np.int8)
    for k, b in enumerate(bands):
        v = vals[:, k]
        good = finite[:, k] & (flat[:, k] != 0)
        if ivar_ok is not None:
            good &= ivar_ok[:, k]
        has = good.any(axis=1)
        has_all &= has
        n_present += has.astype(np.int8)
        out[f"has_{b}"] = has
        out[f"nonfinite_frac_{b}"] = nonfinite[:, k].mean(axis=1)
        out[f"zero_frac_{b}"] = (flat[:, k] == 0).mean(axis=1)
        core = row_nanmedian(v[:, geo["core"]])
        outer = row_nanmedian(v[:, geo["outer"]])
        out[f"core_brightness_{b}"] = core
        out[f"core_max_{b}"] = _nanmax(v[:, geo["core"]], axis=1)
        out[f"annulus_brightness_{b}"] = row_nanmedian(v[:, geo["annulus"]])
        out[f"outer_brightness_{b}"] = outer
        med = row_nanmedian(v)
        dev = np.abs(v - med[:, None])
        mad = row_nanmedian(dev)
        out[f"median_{b}"] = med
        out[f"mad_{b}"] = mad
        out[f"radial_gradient_{b}"] = (core - outer) / (r_outer - r_core)
        with np.errstate(invalid="ignore"):
            n_fin = finite[:, k].sum(axis=1)
            clipped = (dev > cfg.clip_sigma * MAD_TO_SIGMA * mad[:, None]).sum(axis=1)
            out[f"clip_frac_{b}"] = np.where((mad > 0) & (n_fin > 0), clipped / np.maximum(n_fin, 1), np.nan)
        if mbits is not None:
            sat = (mbits.reshape(n, npix) >> SATUR_BITS[b]) & 1 if b in SATUR_BITS else None
            out[f"saturated_frac_{b}"] = sat.mean(axis=1) if sat is not None else np.full(n, np.nan)
    out["n_bands_present"] = n_present
    flags = np.zeros(n, dtype=np.int32)
    flags |= np.where(out["central_nonfinite_frac"] > cfg.max_central_nonfinite_frac, FLAG_CENTRAL_NONFINITE, 0).astype(
        np.int32
    )
    flags |= np.where(out["core_nonfinite_frac"] > cfg.max_core_nonfinite_frac, FLAG_CORE_NONFINITE, 0).astype(np.int32)
    flags |= np.where(out["bad_pixel_frac"] > cfg.max_bad_pixel_frac, FLAG_BAD_PIXELS, 0).astype(np.int32)
    if cfg.require_all_bands:
        flags |= np.where(~has_all, FLAG_MISSING_BAND, 0).astype(np.int32)
    out["quality_flags"] = flags
    out["quality_ok"] = flags == 0
    return out


#: The per-band metrics (columns ``<metric>_<band>``) and the overall ones, in column order.
_PER_BAND_METRICS = (
    "has",
    "nonfinite_frac",
    "zero_frac",
    "core_brightness",
    "core_max",
    "annulus_brightness",
    "outer_brightness",
    "median",
    "mad",
    "radial_gradient",
    "clip_frac",
)
_OVERALL_METRICS = (
    "nonfinite_frac",
    "central_nonfinite_frac",
    "core_nonfinite_frac",
    "bad_pixel_frac",
    "n_bands_present",
    "quality_flags",
    "quality_ok",
)


def quality_metrics(
    image: np.ndarray,
    invvar: np.ndarray | None = None,
    maskbits: np.ndarray | None = None,
    config: QualityConfig = QualityConfig(),
    bands: str = "".join(BANDS),
) -> pa.Table:
    """Quality metrics table, one row per cutout, in input order.

    Columns (b in ``bands``): ``nonfinite_frac_b``, ``zero_frac_b`` (fractions of the band's
    pixels), ``has_b`` (any finite non-zero pixel with invvar > 0), ``core_brightness_b``,
    ``core_max_b``, ``annulus_brightness_b``, ``outer_brightness_b``, ``median_b`` (nanomaggies
    per pixel; medians except the max), ``mad_b`` (raw median absolute deviation, nanomaggies),
    ``radial_gradient_b`` ((core − outer) / (mean outer radius − mean core radius), nanomaggies
    per pixel), ``clip_frac_b``, ``saturated_frac_b`` (maskbits SATUR fraction; null without
    maskbits); then ``nonfinite_frac``, ``central_nonfinite_frac``, ``core_nonfinite_frac``
    (fractions of band-pixel values), ``bad_pixel_frac`` (fraction of pixels bad in any band:
    non-finite, exactly zero, or invvar <= 0), ``n_bands_present``, ``quality_flags`` (FLAG_* bits)
    and ``quality_ok``.
    """
    image, invvar, maskbits = _check_inputs(image, invvar, maskbits, bands)
    n, _, size, _ = image.shape
    geo = _geometry(size, config)
    step = max(int(config.chunk_rows), 1)
    starts = range(0, n, step) if n else [0]  # an empty batch still gives the columns
    parts = [
        _chunk_metrics(
            image[i : i + step],
            None if invvar is None else invvar[i : i + step],
            None if maskbits is None else maskbits[i : i + step],
            geo,
            config,
            bands,
        )
        for i in starts
    ]
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = [f"{m}_{b}" for m in _PER_BAND_METRICS for b in bands] + list(_OVERALL_METRICS)
    arrays, names = [], []
    for name in order:
        v = cols[name]
        arrays.append(pa.array(v.astype(np.float64) if v.dtype.kind == "f" else v))
        names.append(name)
    for b in bands:
        name = f"saturated_frac_{b}"
        arrays.append(pa.array(cols[name].astype(np.float64)) if name in cols else pa.nulls(n, pa.float64()))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def quality_summary(table: pa.Table) -> dict[str, float]:
    """Batch summary: n, pass fraction, and how many cutouts failed for each reason."""
    ok = table.column("quality_ok").to_numpy(zero_copy_only=False)
    flags = table.column("quality_flags").to_numpy(zero_copy_only=False)
    n = int(ok.size)
    return {
        "n": n,
        "quality_pass_frac": float(ok.mean()) if n else float("nan"),
        "n_central_nonfinite": int(np.count_nonzero(flags & FLAG_CENTRAL_NONFINITE)),
        "n_core_nonfinite": int(np.count_nonzero(flags & FLAG_CORE_NONFINITE)),
        "n_bad_pixels": int(np.count_nonzero(flags & FLAG_BAD_PIXELS)),
        "n_missing_band": int(np.count_nonzero(flags & FLAG_MISSING_BAND)),
    }
