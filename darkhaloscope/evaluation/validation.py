"""Real-lens validation: the known lenses held out from training, detected against the number the
selection function predicts for them.

Two predictions per usable threshold, each in rows of its own ``method``:

- ``method = 'cell'``: each held-out lens with both θ_E and z_l is given the completeness of the
  grid cell of C(θ_E, z_l) that holds it (the nearest cell centre on the grid's product of bins). A
  lens outside the grid's outer edges, or in a cell the selection function marks insufficient (or
  that has no valid injection), is counted apart and never given a value. E = Σ_i C_i over the
  compared lenses, sd² = Σ_i C_i (1 − C_i) + Σ_cells (k_cell σ_cell)², σ_cell the half-width of the
  cell's 68 % interval (:func:`darkhaloscope.evaluation.closure.cell_expectation`). C is averaged
  over the injection proposal's sources, so this compares the lenses with the proposal's source
  population, not their own: a discovered sample of bright arcs is found more often than it
  predicts.
- ``method = 'per_lens'``, where the truth carries each lens's ψ (the mock: lens, source and the
  host's observing conditions, :data:`darkhaloscope.evaluation.detection.PARAMETERS`): E = Σ_i
  P_det(ψ_i), the detection model at each lens's own parameters, sd² from the model's host
  bootstrap and the binomial draw (:func:`darkhaloscope.evaluation.closure.per_lens_expectation`);
  a lens outside the model's validity range is counted apart (``n_outside_grid``), never
  extrapolated. On a real survey no known lens carries its source's ψ and there are no such rows.

The pull is (k − E) / sd, k the compared lenses detected.

On the mock the θ_E and z_l are the known lenses' truth; on a real survey z_l is lenscat's and θ_E,
which lenscat does not carry, comes from a table of measured radii by lenscat name
(:func:`read_theta_e_table`, :func:`lenscat_truth`).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from .closure import cell_expectation, per_lens_expectation
from .detection import DetectionModel, feature_values
from .recall import held_out_lenses, tier_groups
from .thresholds import require_columns, usable_thresholds

#: Schema of :func:`real_lens_validation`.
VALIDATION_SCHEMA = pa.schema(
    [
        ("threshold_name", pa.string()),
        ("threshold", pa.float64()),
        ("method", pa.string()),
        ("tier", pa.string()),
        ("n", pa.int64()),
        ("n_with_truth", pa.int64()),
        ("n_outside_grid", pa.int64()),
        ("n_insufficient_cell", pa.int64()),
        ("n_compared", pa.int64()),
        ("n_detected", pa.int64()),
        ("n_expected", pa.float64()),
        ("n_expected_sd", pa.float64()),
        ("pull", pa.float64()),
    ]
)

#: Prediction methods of :func:`real_lens_validation`, most specific first (the check gates on it).
METHODS = ("per_lens", "cell")

#: Columns of the selection function a lookup needs (``selection.SELECTION_SCHEMA``).
SELECTION_COLUMNS = (
    "threshold_name",
    "theta_e_lo",
    "theta_e_hi",
    "z_l_lo",
    "z_l_hi",
    "completeness",
    "ci68_lo",
    "ci68_hi",
    "sufficient",
)


def _floats(table: pa.Table, column: str, what: str) -> np.ndarray:
    """``column`` as float64, NaN where null; InputError naming it when it is not numeric."""
    col = table.column(column)
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type) or pa.types.is_null(col.type)):
        raise InputError(f"{what}: column {column!r} is {col.type}, not numeric")
    return np.asarray(pc.fill_null(col.cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False), np.float64)


def with_lens_truth(
    real_scores: pa.Table, truth: pa.Table, what: str = "lens truth", parameters: Sequence[str] = ()
) -> pa.Table:
    """``real_scores`` with ``theta_e_arcsec`` [arcsec], ``z_l`` and the ``parameters`` columns
    (e.g. the source's ψ, in ``truth``'s units) of each lens from ``truth``.

    ``truth``: ``object_id``, ``z_lens``, optionally ``theta_e_arcsec`` (lenscat has no Einstein
    radius: without the column every θ_E is null) and ``parameters``. A lens ``truth`` lacks gets
    nulls, never a value. Raises InputError naming the column when one is missing or not numeric,
    or when ``truth`` repeats an object id.
    """
    require_columns(truth, ("object_id", "z_lens", *parameters), what)
    ids = truth.column("object_id").to_pylist()
    if len(set(ids)) != len(ids):
        raise InputError(f"{what}: column 'object_id' repeats values")
    z = _floats(truth, "z_lens", what)
    te = _floats(truth, "theta_e_arcsec", what) if "theta_e_arcsec" in truth.column_names else np.full(z.size, np.nan)
    row = dict(zip(ids, range(len(ids))))
    idx = np.array([row.get(o, -1) for o in real_scores.column("object_id").to_pylist()], np.int64)
    known = idx >= 0

    def pick(values: np.ndarray) -> pa.Array:
        out = np.where(known, values[np.maximum(idx, 0)] if values.size else np.nan, np.nan)
        return pa.array(out, pa.float64(), mask=~np.isfinite(out))

    out = real_scores.append_column("theta_e_arcsec", pick(te)).append_column("z_l", pick(z))
    for column in parameters:
        out = out.append_column(column, pick(_floats(truth, column, what)))
    return out


def read_theta_e_table(path: str) -> pa.Table:
    """A table of measured Einstein radii of known lenses: ``name`` (the lenscat name) and
    ``theta_e_arcsec`` [arcsec], from a Parquet or CSV file (by its suffix).

    Raises InputError naming the file and the column when a column is missing, ``theta_e_arcsec``
    is not numeric, not finite or not positive, or a name is empty or repeated.
    """
    import os

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file (the Einstein-radius table of the known lenses)")
    try:
        table = pacsv.read_csv(path) if path.lower().endswith(".csv") else pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: cannot read the Einstein-radius table: {exc}") from exc
    require_columns(table, ("name", "theta_e_arcsec"), path)
    te = _floats(table, "theta_e_arcsec", path)
    bad = ~(np.isfinite(te) & (te > 0))
    if bad.any():
        raise InputError(
            f"{path}: column 'theta_e_arcsec' has {int(bad.sum())} value(s) not a positive number, "
            f"e.g. row {int(np.flatnonzero(bad)[0])}"
        )
    names = [str(n).strip() if n is not None else "" for n in table.column("name").to_pylist()]
    if "" in names:
        raise InputError(f"{path}: column 'name' is empty in row {names.index('')}")
    if len(set(names)) != len(names):
        raise InputError(f"{path}: column 'name' repeats values")
    return pa.table({"name": names, "theta_e_arcsec": pa.array(te, pa.float64())})


def lenscat_truth(positives: pa.Table, theta_e: pa.Table | None = None) -> pa.Table:
    """``object_id``, ``z_lens`` and ``theta_e_arcsec`` [arcsec] of the positives (the known lenses
    cross-matched to the survey): lenscat's redshift and, where ``theta_e``
    (:func:`read_theta_e_table`) names the lens, its Einstein radius; null otherwise."""
    require_columns(positives, ("object_id", "name", "z_lens"), "positives")
    radius = {}
    if theta_e is not None:
        radius = dict(zip(theta_e.column("name").to_pylist(), theta_e.column("theta_e_arcsec").to_pylist()))
    names = positives.column("name").to_pylist()
    return pa.table(
        {
            "object_id": positives.column("object_id"),
            "z_lens": positives.column("z_lens"),
            "theta_e_arcsec": pa.array([radius.get(n) for n in names], pa.float64()),
        }
    )


def _cells(selection: pa.Table, name: str) -> dict[str, np.ndarray]:
    """Edges, completeness, 68 % half-width and usability of the cells at threshold ``name``."""
    rows = selection.filter(pc.equal(selection.column("threshold_name"), name))
    if rows.num_rows == 0:
        raise InputError(f"selection function: no cell at threshold {name!r} (column 'threshold_name')")
    d = {c: _floats(rows, c, "selection function") for c in SELECTION_COLUMNS[1:-1]}
    sufficient = np.asarray(pc.fill_null(rows.column("sufficient"), False).to_numpy(zero_copy_only=False), bool)
    d["usable"] = sufficient & np.isfinite(d["completeness"])
    d["sd"] = np.nan_to_num(0.5 * (d["ci68_hi"] - d["ci68_lo"]))
    return d


def cell_index(theta_e: np.ndarray, z_l: np.ndarray, cells: dict[str, np.ndarray]) -> np.ndarray:
    """(N,) index of the cell holding each (θ_E [arcsec], z_l), −1 outside every cell (or NaN).

    A cell holds [lo, hi) in both axes; a value on the grid's outer upper edge belongs to the last
    cell, so the grid's closed extent is covered."""

    def inside(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        x = x[:, None]
        return (x >= lo) & ((x < hi) | ((x == hi) & (hi == hi.max())))

    hit = inside(theta_e, cells["theta_e_lo"], cells["theta_e_hi"]) & inside(z_l, cells["z_l_lo"], cells["z_l_hi"])
    return np.where(hit.any(axis=1), hit.argmax(axis=1), -1)


def _row(name: str, thr: float, method: str, label: str, counts: dict, k: int, e, sd) -> dict:
    return {
        "threshold_name": name,
        "threshold": thr,
        "method": method,
        "tier": label,
        **counts,
        "n_detected": k,
        "n_expected": e,
        "n_expected_sd": sd,
        "pull": (k - e) / sd if counts["n_compared"] and sd > 0 else None,
    }


def _tier_rows(name: str, thr: float, method: str, tier, masks: dict, passed: np.ndarray, expect) -> list[dict]:
    """The rows of one threshold and method, one per tier group: ``masks`` (N,) bool ``usable``,
    ``truth``, ``outside``, ``insufficient`` and ``compared`` lenses; ``passed`` their scores (−∞
    where unusable); ``expect(sel)`` the (E, sd) of the compared lenses ``sel``."""
    rows = []
    for label, group in tier_groups(tier):
        sel = group & masks["compared"]
        counts = {
            "n": int((group & masks["usable"]).sum()),
            "n_with_truth": int((group & masks["truth"]).sum()),
            "n_outside_grid": int((group & masks["outside"]).sum()),
            "n_insufficient_cell": int((group & masks["insufficient"]).sum()),
            "n_compared": int(sel.sum()),
        }
        e, sd = expect(sel) if sel.any() else (None, None)
        rows.append(_row(name, thr, method, label, counts, int((sel & (passed > thr)).sum()), e, sd))
    return rows


def real_lens_validation(
    lenses: pa.Table,
    thresholds: pa.Table,
    selection: pa.Table,
    training_object_ids: Iterable,
    split: str | None = "test",
    models: Mapping[str, DetectionModel] | None = None,
) -> pa.Table:
    """Held-out real lenses detected against the selection function's expectation, per method,
    tier ('A', 'B', 'all') and usable threshold (:data:`VALIDATION_SCHEMA`).

    Parameters
    ----------
    lenses : ``object_id``, ``tier``, ``split``, ``score``, ``valid`` and the truth
        ``theta_e_arcsec`` [arcsec] and ``z_l`` (null or NaN where unknown; :func:`with_lens_truth`);
        with ``models``, also the detection model's PARAMETERS.
    thresholds : table from :func:`thresholds_from_negatives`.
    selection : the ``selection_function`` table (:data:`SELECTION_COLUMNS`).
    training_object_ids : every object id the model saw in training (refused, named, if evaluated).
    split : evaluate only the rows of this split; None evaluates every row.
    models : {threshold name: detection model} (``detection.detection_models``): adds the
        ``per_lens`` rows of the thresholds it has a model for.

    ``n``: scorable lenses; ``n_with_truth``: of them, with the truth the method needs (θ_E and z_l;
    every parameter for ``per_lens``); ``n_outside_grid`` (outside the grid, or the model's validity
    range) and ``n_insufficient_cell``: of those, counted apart; ``n_compared``: the rest, of which
    ``n_detected`` score above the threshold. ``n_expected``, ``n_expected_sd`` and ``pull`` are
    null when no lens is compared (``pull`` also when the sd is 0).
    """
    what = "real-lens validation"
    require_columns(lenses, ("theta_e_arcsec", "z_l"), what)
    require_columns(selection, SELECTION_COLUMNS, "selection function")
    kept, tier, score, usable = held_out_lenses(lenses, training_object_ids, split, what)
    te, zl = _floats(kept, "theta_e_arcsec", what), _floats(kept, "z_l", what)
    for column, values in (("theta_e_arcsec", te), ("z_l", zl)):
        bad = values[np.isfinite(values) & (values < 0)]
        if bad.size:
            raise InputError(f"{what}: column {column!r} has negative value(s) {bad[:5].tolist()}")
    truth = usable & np.isfinite(te) & np.isfinite(zl)
    passed = np.where(usable, score, -np.inf)
    if models:
        with np.errstate(divide="ignore", invalid="ignore"):
            x = feature_values(kept)
        psi_known = usable & np.all(np.isfinite(x), axis=1)
    rows = []
    for name, thr in usable_thresholds(thresholds):
        cells = _cells(selection, name)
        cell = np.where(truth, cell_index(np.nan_to_num(te), np.nan_to_num(zl), cells), -1)
        outside = truth & (cell < 0)
        insufficient = truth & (cell >= 0) & ~cells["usable"][np.maximum(cell, 0)]
        masks = {"usable": usable, "truth": truth, "outside": outside, "insufficient": insufficient}
        masks["compared"] = truth & ~outside & ~insufficient
        rows += _tier_rows(
            name,
            thr,
            "cell",
            tier,
            masks,
            passed,
            lambda sel, c=cell, d=cells: cell_expectation(c[sel], d["completeness"], d["sd"]),
        )
        model = (models or {}).get(name)
        if model is None:
            continue
        in_range = psi_known & ~model.outside_support(x)  # a non-finite ψ is outside too
        p = np.zeros((len(model.estimators), kept.num_rows))
        if in_range.any():
            p[:, in_range] = model.probabilities(kept.filter(pa.array(in_range)))
        masks = {"usable": usable, "truth": psi_known, "outside": psi_known & ~in_range, "compared": in_range}
        masks["insufficient"] = np.zeros_like(in_range)
        rows += _tier_rows(name, thr, "per_lens", tier, masks, passed, lambda sel, p=p: per_lens_expectation(p[:, sel]))
    return pa.Table.from_pylist(rows, schema=VALIDATION_SCHEMA)


def largest_pull(table: pa.Table) -> tuple[float | None, str | None]:
    """(largest |pull|, method) over the rows of the most specific method a
    :func:`real_lens_validation` table holds (:data:`METHODS`: ``per_lens`` where the truth carried
    ψ, else ``cell``); (None, None) when no such row has a pull."""
    present = set(table.column("method").to_pylist())
    for method in METHODS:
        if method in present:
            rows = table.filter(pc.equal(table.column("method"), method))
            pulls = [abs(p) for p in rows.column("pull").to_pylist() if p is not None]
            return (max(pulls), method) if pulls else (None, method)
    return None, None
