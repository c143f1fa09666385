"""The closure test: does the selection function predict how many of the mock survey's hidden
lenses the search finds, the way a population study would use it?

Two predictions per threshold (every usable one, the fixed score cuts included), each against the
number the search recovered (the hidden lens's host scored above the threshold):

- ``method = 'per_lens'``: N_pred = Σ_i P_det(ψ_i), the detection model (``evaluation.detection``)
  at each hidden lens's own parameters — lens, source and observing conditions;
  sd² = var_bootstrap(Σ P) + Σ P (1 − P) (the model's host-bootstrap spread and the binomial draw);
- ``method = 'population'``: N_pred = Σ_i C(cell_i | λ_mock), the reweighted selection function
  (``evaluation.populations``) of the population the mock draws its hidden sources from (λ known
  in the mock) at each lens's (θ_E, z_l) cell — the selection term a population fit uses, times the
  number of lenses; sd² = Σ C (1 − C) + Σ_cells (n_c σ_c)², σ_c the cell's host-clustered sd.

Both compare at the realised threshold: the hidden lenses are selected by the same score cut, so
the threshold's sampling uncertainty, which C's published intervals carry, is not part of the
comparison. A hidden lens outside the detection model's validity range or in a cell whose N_eff is
below the floor is left out of both methods (counted): neither is extrapolated.

``pull`` = (n_recovered − n_predicted) / n_predicted_sd, and ``power_15pct`` = 0.15 n_predicted /
n_predicted_sd: the pull a 15 % bias of C would give, so a row whose power is below 2 cannot show
one at 2σ.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..constants import flux_to_mag
from ..errors import InputError
from .detection import DetectionModel, feature_values
from .populations import grid_edges

#: Relative bias of C the closure is sized to detect (its ``power_15pct``).
BIAS_SIZED_FOR = 0.15
METHODS = ("per_lens", "population")

CLOSURE_SCHEMA = pa.schema(
    [
        pa.field("threshold_name", pa.string(), nullable=False),
        pa.field("method", pa.string(), nullable=False),
        pa.field("bin", pa.string(), nullable=False, metadata={"description": "θ_E bin [lo, hi) or 'all'"}),
        pa.field("theta_e_lo", pa.float64()),
        pa.field("theta_e_hi", pa.float64()),
        pa.field("n_hidden", pa.int64(), nullable=False),
        pa.field("n_predicted", pa.float64(), nullable=False),
        pa.field("n_predicted_sd", pa.float64(), nullable=False),
        pa.field("n_recovered", pa.int64(), nullable=False),
        pa.field("pull", pa.float64(), metadata={"description": "(n_recovered - n_predicted) / n_predicted_sd"}),
        pa.field("power_15pct", pa.float64(), metadata={"description": "0.15 n_predicted / n_predicted_sd"}),
    ]
)


#: The detection model's parameters that :func:`with_host_parameters` reads from the host's sweep row.
HOST_PARAMETERS = ("lens_mag_z", "psf_fwhm_r", "psfdepth_r")


def with_host_parameters(hidden: pa.Table, sweeps: ds.Dataset) -> pa.Table:
    """``hidden`` (rows with ``object_id``) with their host's dereddened z magnitude (``lens_mag_z``),
    r-band PSF FWHM (``psf_fwhm_r``, arcsec) and depth (``psfdepth_r``, the sweeps' inverse variance)
    read from ``sweeps``: the detection model's lens and observing parameters."""
    ids = hidden.column("object_id")
    cols = ["object_id", "flux_z", "mw_transmission_z", "psfsize_r", "psfdepth_r"]
    rows = sweeps.to_table(columns=cols, filter=pc.field("object_id").isin(ids))
    order = pc.index_in(ids, rows.column("object_id")).to_numpy(zero_copy_only=False)

    def col(name):
        return np.asarray(rows.column(name).to_numpy(zero_copy_only=False), np.float64)[order]

    hidden = hidden.append_column("lens_mag_z", pa.array(flux_to_mag(col("flux_z") / col("mw_transmission_z"))))
    hidden = hidden.append_column("psf_fwhm_r", pa.array(col("psfsize_r")))
    return hidden.append_column("psfdepth_r", pa.array(col("psfdepth_r")))


def host_scores(hidden: pa.Table, search_scores: ds.Dataset) -> np.ndarray:
    """(N,) each hidden lens's host search score, NaN where the host was not validly scored."""
    ids = hidden.column("object_id")
    scored = search_scores.to_table(columns=["object_id", "score", "valid"], filter=pc.field("object_id").isin(ids))
    scored = scored.filter(scored.column("valid"))
    at = pc.index_in(ids, scored.column("object_id"))  # null where the host has no valid score
    return np.asarray(scored.column("score").take(at).to_numpy(zero_copy_only=False), dtype=np.float64)


def theta_e_edges(theta_e_values) -> np.ndarray:
    """Bin edges [arcsec] around the grid's θ_E centres (``populations.grid_edges``)."""
    return grid_edges(theta_e_values)


def cell_of(theta_e, z_l, theta_e_values, z_l_values) -> np.ndarray:
    """(N,) cell index (θ_E major) of lenses at (θ_E, z_l), −1 outside the grid's outer edges."""
    te_e, zl_e = grid_edges(theta_e_values), grid_edges(z_l_values)
    ti = np.searchsorted(te_e, np.asarray(theta_e, np.float64), side="right") - 1
    zi = np.searchsorted(zl_e, np.asarray(z_l, np.float64), side="right") - 1
    inside = (ti >= 0) & (ti < te_e.size - 1) & (zi >= 0) & (zi < zl_e.size - 1)
    return np.where(inside, ti * (zl_e.size - 1) + zi, -1)


def population_cells(c_table: pa.Table) -> dict[str, np.ndarray]:
    """(completeness, sd, sufficient) per cell (θ_E major) from ``kind = 'cell'`` rows of one
    population and threshold (``populations.selection_for_population``); sd from the 68 % interval."""
    import pyarrow.compute as pc

    cells = c_table.filter(pc.equal(c_table.column("kind"), "cell"))
    d = cells.to_pydict()
    c = np.array([np.nan if v is None else v for v in d["completeness"]], np.float64)
    lo = np.array([np.nan if v is None else v for v in d["ci68_lo"]], np.float64)
    hi = np.array([np.nan if v is None else v for v in d["ci68_hi"]], np.float64)
    return {"completeness": c, "sd": 0.5 * (hi - lo), "sufficient": np.asarray(d["sufficient"], bool)}


def usable_hidden(hidden: pa.Table, model: DetectionModel, cells: dict, cell: np.ndarray) -> dict[str, np.ndarray]:
    """Which hidden lenses both methods can predict: inside the detection model's validity range,
    inside the grid and in a sufficient cell. {"usable", "outside_model", "outside_grid",
    "insufficient_cell"} (N,) bool."""
    outside_model = model.outside_support(feature_values(hidden))
    outside_grid = cell < 0
    insufficient = np.zeros(cell.size, bool)
    insufficient[~outside_grid] = ~cells["sufficient"][cell[~outside_grid]]
    return {
        "usable": ~outside_model & ~outside_grid & ~insufficient,
        "outside_model": outside_model,
        "outside_grid": outside_grid,
        "insufficient_cell": insufficient & ~outside_grid,
    }


def per_lens_expectation(p: np.ndarray) -> tuple[float, float]:
    """(N_pred, sd) of the detections of lenses with P_det ``p`` (replicas, N), row 0 the central
    fit: N_pred = Σ p₀, sd² = var over the bootstrap replicas of Σ p + Σ p₀ (1 − p₀)."""
    central = p[0]
    boot = p[1:].sum(axis=1) if p.shape[0] > 1 else np.zeros(1)
    return float(central.sum()), float(np.sqrt(np.var(boot) + np.sum(central * (1 - central))))


def cell_expectation(cell: np.ndarray, completeness: np.ndarray, sd: np.ndarray) -> tuple[float, float]:
    """(N_pred, sd) of the detections of lenses in cells ``cell`` (indices into the cells'
    ``completeness`` C and its ``sd`` σ): N_pred = Σ C, sd² = Σ C (1 − C) + Σ_cells (n_c σ_c)² —
    a cell's uncertainty is shared by every lens in it."""
    c = completeness[cell]
    n_cell = np.bincount(cell, minlength=completeness.size)
    shared = float(np.sum((n_cell * np.nan_to_num(sd)) ** 2))
    return float(c.sum()), float(np.sqrt(np.sum(c * (1 - c)) + shared))


def _row(name, method, label, lo, hi, n, pred, sd, k) -> dict:
    return {
        "threshold_name": name,
        "method": method,
        "bin": label,
        "theta_e_lo": lo,
        "theta_e_hi": hi,
        "n_hidden": int(n),
        "n_predicted": float(pred),
        "n_predicted_sd": float(sd),
        "n_recovered": int(k),
        "pull": (k - pred) / sd if sd > 0 else None,
        "power_15pct": BIAS_SIZED_FOR * pred / sd if sd > 0 else None,
    }


def closure_table(
    model: DetectionModel, cells: dict, hidden: pa.Table, recovered: np.ndarray, theta_e_values, z_l_values
) -> pa.Table:
    """CLOSURE_SCHEMA rows of one threshold, both methods, per θ_E bin of the grid and 'all', over the
    hidden lenses :func:`usable_hidden` keeps. ``hidden``: the hidden lenses with the detection
    model's PARAMETERS; ``recovered``: whether each one's host scored above the model's threshold;
    ``cells``: :func:`population_cells` of the mock population at that threshold."""
    recovered = np.asarray(recovered, dtype=bool)
    if recovered.size != hidden.num_rows:
        raise InputError(f"{recovered.size} recovery flags for {hidden.num_rows} hidden lenses")
    te = np.asarray(hidden.column("theta_e_arcsec").to_numpy(zero_copy_only=False), np.float64)
    zl = np.asarray(hidden.column("z_l").to_numpy(zero_copy_only=False), np.float64)
    cell = cell_of(te, zl, theta_e_values, z_l_values)
    use = usable_hidden(hidden, model, cells, cell)["usable"]
    kept = hidden.filter(pa.array(use))
    p = model.probabilities(kept) if kept.num_rows else np.zeros((1, 0))
    c_cell, rec = cell[use], recovered[use]
    edges = theta_e_edges(theta_e_values)
    b = np.searchsorted(edges, te[use], side="right") - 1
    groups = [(f"[{edges[i]:g}, {edges[i + 1]:g})", edges[i], edges[i + 1], b == i) for i in range(edges.size - 1)]
    groups.append(("all", None, None, np.ones(b.size, bool)))
    rows = []
    for label, lo, hi, sel in groups:
        n, k = int(sel.sum()), int(rec[sel].sum())
        central, sd = per_lens_expectation(p[:, sel])
        rows.append(_row(model.threshold_name, "per_lens", label, lo, hi, n, central, sd, k))
        pred, sd_pop = cell_expectation(c_cell[sel], cells["completeness"], cells["sd"])
        rows.append(_row(model.threshold_name, "population", label, lo, hi, n, pred, sd_pop, k))
    return pa.Table.from_pylist(rows, schema=CLOSURE_SCHEMA)
