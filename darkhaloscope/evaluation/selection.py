"""The selection function C(θ_E, z_l) and its marginals from scored injections.

Counting rules (each keeps failed renders, unscorable rows or sparse cells from silently biasing
the completeness):

* An injection that failed to render (``success`` false) or could not be scored (``valid`` false,
  score null or NaN) is **excluded from the denominator** and counted in ``n_failed``.
* ``completeness = n_detected / n_valid`` with detection ``score > threshold``; null when
  ``n_valid = 0``. C is the proposal's (the population the injections were drawn from,
  ``population = 'proposal'``); ``evaluation.populations`` reweights it to others.
* Intervals are host-clustered and carry the threshold's own uncertainty. A host carries many
  injections, in one cell and across cells (the plan draws a cell's hosts with replacement, weighted
  by how well their σ_v fits the cell), and a host that hides faint arcs hides all of them. The
  injections of one host correlate by the intraclass correlation ρ, measured per threshold on every
  cell at once (:func:`darkhaloscope.stats.intraclass_correlation`, the beta-binomial's ρ), which
  gives each row its clustered effective number of trials, defined at k = 0 and k = n too
  (:func:`darkhaloscope.stats.clustered_effective_size`). The threshold is itself an estimate (its
  bootstrap 68 % interval over the negatives, ``thresholds``): C is recomputed at
  THRESHOLD_QUANTILES points of that distribution and its spread added
  (:func:`darkhaloscope.stats.inflated_trials`). ``n_effective`` is the resulting number of trials,
  and the intervals are Jeffreys intervals on it. A fixed score cut has no threshold uncertainty.
* A cell with ``n_valid < min_count`` keeps its completeness but is flagged ``sufficient = False``.
* Coarser bins are built by **adding counts**, never by averaging sub-bin completeness (an average
  gives a near-empty sub-bin the weight of a full one and can be off by a factor of several).

Units: θ_E in arcsec, z_l dimensionless, PSF FWHM in arcsec, magnitudes AB, arc S/N dimensionless.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from ..constants import depth_mag_from_psfdepth
from ..errors import InputError
from ..stats import clustered_effective_size, inflated_trials, intraclass_correlation, jeffreys_interval
from .thresholds import require_columns, threshold_quantiles, usable_thresholds, valid_scores

#: Columns :func:`marginal_completeness` may bin by.
MARGINAL_COLUMNS = (
    "theta_e_arcsec",
    "z_l",
    "psf_fwhm_r",
    "depth_mag_r",
    "src_mag_r",
    "lens_mag_z",
    "lensed_mag_r",
    "arc_snr",
)

#: Minimum valid injections for a cell to count as sufficient: at 10, a completeness near 0.5 still
#: has a Jeffreys 68 % interval of about ±0.15.
DEFAULT_MIN_COUNT = 10

_COUNT_FIELDS = [
    ("n_injected", pa.int64()),
    ("n_failed", pa.int64()),  # render failures + unscorable; excluded from n_valid
    ("n_render_failed", pa.int64()),
    ("n_valid", pa.int64()),
    ("n_effective", pa.float64()),  # host-clustered, threshold-inflated effective trials of the intervals
    ("n_detected", pa.int64()),
    ("completeness", pa.float64()),
    ("ci68_lo", pa.float64()),
    ("ci68_hi", pa.float64()),
    ("ci95_lo", pa.float64()),
    ("ci95_hi", pa.float64()),
    ("sufficient", pa.bool_()),
    ("mean_score", pa.float64()),
    ("mean_arc_snr", pa.float64()),
]

#: Long-table schema of :func:`selection_function`.
SELECTION_SCHEMA = pa.schema(
    [
        ("population", pa.string()),
        ("threshold_name", pa.string()),
        ("threshold", pa.float64()),
        ("theta_e_centre", pa.float64()),
        ("theta_e_lo", pa.float64()),
        ("theta_e_hi", pa.float64()),
        ("z_l_centre", pa.float64()),
        ("z_l_lo", pa.float64()),
        ("z_l_hi", pa.float64()),
    ]
    + _COUNT_FIELDS
)

#: Schema of :func:`marginal_completeness`.
MARGINAL_SCHEMA = pa.schema(
    [
        ("threshold_name", pa.string()),
        ("threshold", pa.float64()),
        ("by", pa.string()),
        ("bin", pa.string()),
        ("bin_lo", pa.float64()),
        ("bin_hi", pa.float64()),
        ("bin_centre", pa.float64()),
    ]
    + _COUNT_FIELDS
)


def proportion_columns(k, n, min_count: int, n_effective=None) -> dict[str, np.ndarray | list]:
    """Proportion k/n with Jeffreys 68 %/95 % intervals and the sufficiency flag.

    n_effective: the number of independent trials the n are worth (n / design effect, <= n;
    None: n), the intervals then being those of k n_effective / n successes in n_effective trials.
    Returns columns ``completeness`` (None where n = 0), ``ci68_lo/hi``, ``ci95_lo/hi`` (None
    where n = 0) and ``sufficient`` (n >= min_count), as Python lists ready for pyarrow.
    """
    k = np.asarray(k, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    k_eff, n_eff = k, n
    if n_effective is not None:
        n_eff = np.minimum(np.asarray(n_effective, dtype=np.float64), n)
        with np.errstate(invalid="ignore", divide="ignore"):
            k_eff = np.where(n > 0, k * n_eff / np.maximum(n, 1), 0.0)
    lo68, hi68 = jeffreys_interval(k_eff, n_eff, 0.68)
    lo95, hi95 = jeffreys_interval(k_eff, n_eff, 0.95)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(n > 0, k / np.maximum(n, 1), np.nan)
    return {
        "completeness": _nullable(frac),
        "ci68_lo": _nullable(lo68),
        "ci68_hi": _nullable(hi68),
        "ci95_lo": _nullable(lo95),
        "ci95_hi": _nullable(hi95),
        "sufficient": (n >= int(min_count)).tolist(),
    }


def _nullable(x: np.ndarray) -> list:
    """Float array as a list with None where NaN (Parquet null rather than a NaN value)."""
    x = np.atleast_1d(np.asarray(x, dtype=np.float64))
    return [None if not np.isfinite(v) else float(v) for v in x]


def _column_f64(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


def _check_increasing(arr, name: str, min_len: int) -> np.ndarray:
    a = np.asarray(arr, dtype=np.float64).ravel()
    if a.size < min_len or not np.all(np.isfinite(a)) or np.any(np.diff(a) <= 0):
        raise InputError(f"{name} must be >= {min_len} finite, strictly increasing values; got {a.tolist()}")
    return a


def _axis(values: np.ndarray, edges, centres, column: str):
    """Bin ``values`` on one grid axis: (index per row, lo, hi, centre per bin).

    With ``edges`` the bins are [e_i, e_i+1) and the last one closed; a value outside raises.
    With ``centres`` each value goes to the nearest centre (the injection bank is built on these
    centres, so this only absorbs float round-off); bin limits are the midpoints, outermost ±inf.
    """
    if (edges is None) == (centres is None):
        raise InputError(f"{column}: give exactly one of edges or centres")
    if not np.all(np.isfinite(values)):
        raise InputError(f"column {column!r} has {int(np.sum(~np.isfinite(values)))} null/non-finite value(s)")
    if edges is not None:
        e = _check_increasing(edges, f"{column} edges", 2)
        idx = np.searchsorted(e, values, side="right") - 1
        idx = np.where(values == e[-1], e.size - 2, idx)
        bad = (idx < 0) | (idx > e.size - 2)
        if np.any(bad):
            raise InputError(
                f"column {column!r}: {int(bad.sum())} value(s) outside edges [{e[0]}, {e[-1]}], "
                f"e.g. {values[bad][:5].tolist()}"
            )
        return idx, e[:-1], e[1:], 0.5 * (e[:-1] + e[1:])
    c = _check_increasing(centres, f"{column} centres", 1)
    mids = 0.5 * (c[:-1] + c[1:])
    idx = np.searchsorted(mids, values, side="right")
    lo = np.r_[-np.inf, mids]
    hi = np.r_[mids, np.inf]
    return idx, lo, hi, c


def _injection_arrays(injection_scores: pa.Table) -> dict[str, np.ndarray]:
    """Score, usable mask, render-failure mask, arc S/N and host (an int per distinct
    ``host_object_id``; each row its own where the column is absent) of the injections, with guards."""
    what = "injection scores"
    require_columns(injection_scores, ("injection_id", "success", "score", "valid"), what)
    score, usable = valid_scores(injection_scores, what)
    succ_col = injection_scores.column("success")
    if succ_col.null_count:
        raise InputError(f"{what}: column 'success' has {succ_col.null_count} null value(s)")
    success = np.asarray(succ_col.to_numpy(zero_copy_only=False), dtype=bool)
    # A failed render cannot carry a real score: a score here would come from a stand-in image
    # (e.g. all zeros), not from the injection.
    bad = ~success & usable
    if np.any(bad):
        ids = np.asarray(injection_scores.column("injection_id").to_pylist(), dtype=object)[bad]
        raise InputError(
            f"{what}: {int(bad.sum())} injection(s) with success=false carry a valid score, "
            f"injection_id {ids[:10].tolist()}"
        )
    if "arc_snr" in injection_scores.column_names:
        arc = _column_f64(injection_scores, "arc_snr")
    else:
        arc = np.full(score.shape, np.nan)
    if "host_object_id" in injection_scores.column_names:
        host_col = injection_scores.column("host_object_id")
        if host_col.null_count:
            raise InputError(f"{what}: column 'host_object_id' has {host_col.null_count} null value(s)")
        _, host = np.unique(np.asarray(host_col.to_pylist()), return_inverse=True)
    else:
        host = np.arange(score.size)
    return {"score": score, "usable": usable, "render_failed": ~success, "arc_snr": arc, "host": host}


def cell_estimates(
    cell: np.ndarray,
    n_cells: int,
    weights: np.ndarray,
    detected: np.ndarray,
    host: np.ndarray,
    rho: float,
    variants: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Weighted completeness per cell and what its intervals rest on.

    ``cell`` (N,) in [0, n_cells); ``weights`` (N,) >= 0 (1 for the proposal, importance weights
    for a population, 0 for rows that do not count); ``detected`` (N,) bool; ``host`` (N,) cluster
    ids; ``rho`` the intraclass correlation of the hosts; ``variants`` (K, N) bool, detection at
    K points of the threshold's uncertainty (None: a fixed cut). Returns (n_cells,) arrays:
    ``sum_w``, ``completeness`` (NaN where sum_w = 0), ``n_eff`` (Kish), ``n_eff_clustered``,
    ``var_threshold`` (variance of C over the variants), ``n_effective`` (trials of the intervals),
    ``ci68_lo/hi``, ``ci95_lo/hi``."""
    w = np.asarray(weights, dtype=np.float64)
    sw = np.bincount(cell, weights=w, minlength=n_cells)
    sd = np.bincount(cell, weights=w * detected, minlength=n_cells)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(sw > 0, sd / sw, np.nan)
    kish, clustered = clustered_effective_size(w, host, cell, n_cells, rho)
    var_thr = np.zeros(n_cells)
    if variants is not None and len(variants) > 1:
        with np.errstate(invalid="ignore", divide="ignore"):
            cv = np.stack([np.bincount(cell, weights=w * v, minlength=n_cells) for v in variants]) / sw
        filled = sw > 0  # an empty cell has no C in any variant
        var_thr[filled] = np.var(cv[:, filled], axis=0)
    cf = np.nan_to_num(c)
    n_eff = inflated_trials(cf, clustered, var_thr)
    lo68, hi68 = jeffreys_interval(cf * n_eff, n_eff, 0.68)
    lo95, hi95 = jeffreys_interval(cf * n_eff, n_eff, 0.95)
    return {
        "sum_w": sw,
        "completeness": c,
        "n_eff": kish,
        "n_eff_clustered": clustered,
        "var_threshold": var_thr,
        "n_effective": n_eff,
        "ci68_lo": lo68,
        "ci68_hi": hi68,
        "ci95_lo": lo95,
        "ci95_hi": hi95,
    }


#: Points of the threshold's sampling distribution C is recomputed at.
THRESHOLD_QUANTILES = 21


def _grid_cells(injection_scores: pa.Table) -> np.ndarray:
    """A cell id per injection from its (θ_E, z_l bin) (the grid it was planned on), or one cell
    when the columns are absent: the groups the intraclass correlation is pooled over."""
    names = [c for c in ("theta_e_arcsec", "z_l_bin") if c in injection_scores.column_names]
    if not names:
        return np.zeros(injection_scores.num_rows, np.int64)
    keys = np.stack([np.round(_column_f64(injection_scores, c), 6) for c in names], axis=1)
    return np.unique(keys, axis=0, return_inverse=True)[1].ravel()


def detection_rho(arr: dict, grid_cell: np.ndarray, thr: float) -> float:
    """The hosts' intraclass correlation of detection at score cut ``thr`` over the usable
    injections, pooled over the grid's cells."""
    usable = arr["usable"]
    detected = np.where(usable, arr["score"], -np.inf) > thr
    g = grid_cell[usable]
    return intraclass_correlation(detected[usable], arr["host"][usable], g, int(g.max(initial=0)) + 1)


def _count_cells(
    cell: np.ndarray,
    n_cells: int,
    arr: dict[str, np.ndarray],
    thr: float,
    variants: np.ndarray,
    rho: float,
    min_count: int,
) -> dict[str, list]:
    """Counts per cell (``cell`` in [0, n_cells) for every row) at one threshold (score units),
    intervals host-clustered (``rho``) and over the threshold's ``variants`` (score cuts)."""
    usable, score, arc = arr["usable"], arr["score"], arr["arc_snr"]

    def bc(w=None):
        return np.bincount(cell, weights=w, minlength=n_cells)

    n_inj = bc().astype(np.int64)
    n_valid = bc(usable.astype(np.float64)).astype(np.int64)
    n_render = bc(arr["render_failed"].astype(np.float64)).astype(np.int64)
    s = np.where(usable, score, -np.inf)
    detected = usable & (s > thr)
    n_det = bc(detected.astype(np.float64)).astype(np.int64)
    est = cell_estimates(
        cell, n_cells, usable.astype(np.float64), detected, arr["host"], rho, s[None, :] > variants[:, None]
    )
    sum_score = bc(np.where(usable, score, 0.0))
    arc_ok = usable & np.isfinite(arc)
    n_arc = bc(arc_ok.astype(np.float64))
    sum_arc = bc(np.where(arc_ok, arc, 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_score = np.where(n_valid > 0, sum_score / np.maximum(n_valid, 1), np.nan)
        mean_arc = np.where(n_arc > 0, sum_arc / np.maximum(n_arc, 1), np.nan)
    empty = n_valid == 0
    out = {
        "n_injected": n_inj.tolist(),
        "n_failed": (n_inj - n_valid).tolist(),
        "n_render_failed": n_render.tolist(),
        "n_valid": n_valid.tolist(),
        "n_effective": est["n_effective"].tolist(),
        "n_detected": n_det.tolist(),
        "completeness": _nullable(est["completeness"]),
    }
    for k in ("ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi"):
        out[k] = _nullable(np.where(empty, np.nan, est[k]))
    out["sufficient"] = (n_valid >= int(min_count)).tolist()
    out["mean_score"] = _nullable(mean_score)
    out["mean_arc_snr"] = _nullable(mean_arc)
    return out


def selection_function(
    injection_scores: pa.Table,
    thresholds: pa.Table,
    theta_e_edges: Sequence[float] | None = None,
    theta_e_centres: Sequence[float] | None = None,
    z_l_centres: Sequence[float] | None = None,
    z_l_edges: Sequence[float] | None = None,
    min_count: int = DEFAULT_MIN_COUNT,
) -> pa.Table:
    """C(θ_E, z_l): one row per (threshold, θ_E cell, z_l cell), in that nesting order.

    Parameters
    ----------
    injection_scores : scored injection bank with ``injection_id``, ``theta_e_arcsec`` (arcsec),
        ``z_l``, ``success``, ``score``, ``valid`` and optionally ``arc_snr``.
    thresholds : table from :func:`thresholds_from_negatives` (unresolvable rows are skipped).
    theta_e_edges | theta_e_centres : the θ_E grid in arcsec (exactly one of the two).
    z_l_centres | z_l_edges : the lens-redshift grid (exactly one of the two).
    min_count : cells with fewer valid injections are flagged ``sufficient = False``.

    Returns a table with :data:`SELECTION_SCHEMA`; every cell of the grid appears, empty cells
    with ``n_valid = 0`` and null completeness.
    """
    require_columns(injection_scores, ("theta_e_arcsec", "z_l"), "injection scores")
    arr = _injection_arrays(injection_scores)
    ti, tlo, thi, tc = _axis(
        _column_f64(injection_scores, "theta_e_arcsec"), theta_e_edges, theta_e_centres, "theta_e_arcsec"
    )
    zi, zlo, zhi, zc = _axis(_column_f64(injection_scores, "z_l"), z_l_edges, z_l_centres, "z_l")
    nt, nz = tc.size, zc.size
    cell = ti * nz + zi
    grid_t = np.repeat(np.arange(nt), nz)
    grid_z = np.tile(np.arange(nz), nt)

    cols: dict[str, list] = {f.name: [] for f in SELECTION_SCHEMA}
    grid = _grid_cells(injection_scores)
    quantiles = threshold_quantiles(thresholds, THRESHOLD_QUANTILES)
    for name, thr in usable_thresholds(thresholds):
        rho = detection_rho(arr, grid, thr)
        counts = _count_cells(cell, nt * nz, arr, thr, quantiles[name], rho, min_count)
        cols["population"] += ["proposal"] * (nt * nz)
        cols["threshold_name"] += [name] * (nt * nz)
        cols["threshold"] += [thr] * (nt * nz)
        cols["theta_e_centre"] += tc[grid_t].tolist()
        cols["theta_e_lo"] += tlo[grid_t].tolist()
        cols["theta_e_hi"] += thi[grid_t].tolist()
        cols["z_l_centre"] += zc[grid_z].tolist()
        cols["z_l_lo"] += zlo[grid_z].tolist()
        cols["z_l_hi"] += zhi[grid_z].tolist()
        for k, v in counts.items():
            cols[k] += v
    return pa.Table.from_pydict(cols, schema=SELECTION_SCHEMA)


def _marginal_values(injection_scores: pa.Table, by: str) -> np.ndarray:
    if by not in MARGINAL_COLUMNS:
        raise InputError(f"marginal 'by' must be one of {MARGINAL_COLUMNS}, got {by!r}")
    if by in injection_scores.column_names:
        return _column_f64(injection_scores, by)
    if by == "depth_mag_r" and "psfdepth_r" in injection_scores.column_names:
        return depth_mag_from_psfdepth(_column_f64(injection_scores, "psfdepth_r"))
    raise InputError(f"injection scores: missing column {by!r}" + (" (or 'psfdepth_r')" if by == "depth_mag_r" else ""))


def _overall_counts(arr: dict, grid: np.ndarray, thr: float, quantiles, min_count: int) -> dict[str, list]:
    """The counts of every injection together at score cut ``thr``: one slot of :func:`_count_cells`."""
    rho = detection_rho(arr, grid, thr)
    return _count_cells(np.zeros(arr["score"].size, dtype=np.int64), 1, arr, thr, quantiles, rho, min_count)


def overall_completeness(
    injection_scores: pa.Table, thresholds: pa.Table, threshold_name: str, min_count: int = DEFAULT_MIN_COUNT
) -> dict:
    """The completeness of every injection together at the usable threshold ``threshold_name``, as
    the marginals' ``'all'`` row computes it (host-clustered, the threshold's uncertainty included):
    one row of :data:`MARGINAL_SCHEMA`'s count fields, as a dict."""
    arr = _injection_arrays(injection_scores)
    thr = dict(usable_thresholds(thresholds)).get(threshold_name)
    if thr is None:
        raise InputError(f"thresholds: no usable threshold {threshold_name!r}")
    quantiles = threshold_quantiles(thresholds, THRESHOLD_QUANTILES)[threshold_name]
    return {k: v[0] for k, v in _overall_counts(arr, _grid_cells(injection_scores), thr, quantiles, min_count).items()}


def marginal_completeness(
    injection_scores: pa.Table,
    thresholds: pa.Table,
    by: str,
    edges: Sequence[float],
    min_count: int = DEFAULT_MIN_COUNT,
) -> pa.Table:
    """Completeness in bins of one column, counts added over everything else.

    ``by`` is one of :data:`MARGINAL_COLUMNS` (``depth_mag_r`` is derived from ``psfdepth_r`` when
    absent). Bins are [e_i, e_i+1), the last closed. Per threshold the rows are: each bin
    (``bin = '[lo, hi)'``), then ``'unbinned'`` when some injections have a null value or one
    outside the edges (so totals always reconcile; failed renders usually have no arc S/N), then
    ``'all'`` with every injection — the headline completeness, from summed counts.
    """
    arr = _injection_arrays(injection_scores)
    e = _check_increasing(edges, f"{by} edges", 2)
    vals = _marginal_values(injection_scores, by)
    nb = e.size - 1
    idx = np.searchsorted(e, vals, side="right") - 1
    idx = np.where(vals == e[-1], nb - 1, idx)
    unbinned = ~np.isfinite(vals) | (idx < 0) | (idx >= nb)
    idx = np.where(unbinned, nb, idx)  # the 'unbinned' slot
    n_unbinned = int(unbinned.sum())

    labels = [f"[{e[i]:g}, {e[i + 1]:g}{']' if i == nb - 1 else ')'}" for i in range(nb)]
    lo = e[:-1].tolist()
    hi = e[1:].tolist()
    centre = (0.5 * (e[:-1] + e[1:])).tolist()
    if n_unbinned:
        labels.append("unbinned")
        lo, hi, centre = lo + [None], hi + [None], centre + [None]
    n_slots = nb + (1 if n_unbinned else 0)

    cols: dict[str, list] = {f.name: [] for f in MARGINAL_SCHEMA}
    grid = _grid_cells(injection_scores)
    quantiles = threshold_quantiles(thresholds, THRESHOLD_QUANTILES)
    for name, thr in usable_thresholds(thresholds):
        rho = detection_rho(arr, grid, thr)
        per_bin = _count_cells(idx, n_slots, arr, thr, quantiles[name], rho, min_count)
        overall = _overall_counts(arr, grid, thr, quantiles[name], min_count)
        n_rows = n_slots + 1
        cols["threshold_name"] += [name] * n_rows
        cols["threshold"] += [thr] * n_rows
        cols["by"] += [by] * n_rows
        cols["bin"] += labels + ["all"]
        cols["bin_lo"] += lo + [None]
        cols["bin_hi"] += hi + [None]
        cols["bin_centre"] += centre + [None]
        for k in per_bin:
            cols[k] += per_bin[k] + overall[k]
    return pa.Table.from_pydict(cols, schema=MARGINAL_SCHEMA)


def completeness_crossing(marginal: pa.Table, threshold_name: str, level: float = 0.5) -> float | None:
    """Where completeness first rises through ``level``, in the units of the binned column.

    E.g. θ_E,50 (arcsec), the Einstein radius at which half the injections are found, from a
    :func:`marginal_completeness` table binned by ``theta_e_arcsec``. Uses only sufficient bins
    with a completeness, in order of bin centre, and interpolates linearly between the two centres
    that bracket ``level``. Returns the first centre when it already reaches ``level``, and None
    when no bin does.
    """
    require_columns(marginal, ("threshold_name", "bin_centre", "completeness", "sufficient"), "marginal completeness")
    if not 0.0 < level < 1.0:
        raise InputError(f"level {level!r} is not a fraction in (0, 1)")
    pts = sorted(
        (r["bin_centre"], r["completeness"])
        for r in marginal.to_pylist()
        if r["threshold_name"] == threshold_name
        and r["bin_centre"] is not None
        and r["completeness"] is not None
        and r["sufficient"]
    )
    if not pts:
        names = sorted(set(marginal.column("threshold_name").to_pylist()))
        raise InputError(
            f"marginal completeness: no sufficient bins for threshold_name {threshold_name!r} (thresholds {names})"
        )
    if pts[0][1] >= level:
        return float(pts[0][0])
    for (x0, c0), (x1, c1) in zip(pts[:-1], pts[1:]):
        if c0 < level <= c1:
            return float(x0 + (level - c0) * (x1 - x0) / (c1 - c0))
    return None
