"""Score thresholds set by the false-positive rate on valid negatives.

A threshold ``t`` detects a stamp when ``score > t`` (strict). For a target false-positive rate
``f`` over ``n_valid`` scorable negatives, at most ``k = floor(f * n_valid)`` negatives may lie
above ``t``; ``t`` is therefore the (k+1)-th highest valid negative score. The rank comes from
``n_valid``, never from the total row count: unscorable rows (null/NaN score, ``valid`` false)
are counted and excluded; ranking on the total count would place the threshold too low whenever
some negatives could not be scored, and the realised false-positive rate would exceed ``f``.

When ``f * n_valid < 1`` no negative may exceed the threshold, so the negatives cannot tell a
threshold at ``f`` from one at any smaller rate: the row is marked ``resolvable = False`` and its
threshold left null instead of inventing a number.

Scores are the classifier's output in whatever units it emits (probabilities or logits); the
functions only compare them.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..seeding import rng_for
from ..stats import bootstrap_interval

#: Columns of the table returned by :func:`thresholds_from_negatives`.
THRESHOLD_SCHEMA = pa.schema(
    [
        ("name", pa.string()),
        ("kind", pa.string()),  # 'fpr' | 'top_percentile' | 'fixed'
        ("target", pa.float64()),  # target false-positive fraction; null for 'fixed'
        ("threshold", pa.float64()),  # detect when score > threshold; null when not resolvable
        ("n_total_negatives", pa.int64()),
        ("n_valid_negatives", pa.int64()),
        ("n_above", pa.int64()),
        ("achieved_fpr", pa.float64()),
        ("threshold_ci68_lo", pa.float64()),
        ("threshold_ci68_hi", pa.float64()),
        ("resolvable", pa.bool_()),
        ("note", pa.string()),
        # negatives among them that host a lens no catalog lists (the mock's hidden lenses; 0 by
        # construction, catalog.reserve); null on a survey whose unknown lenses are unknown
        ("n_hidden_in_negatives", pa.int64()),
    ]
)


def require_columns(table: pa.Table, columns: Iterable[str], what: str) -> None:
    """Raise InputError naming every column of ``columns`` missing from ``table``."""
    if not isinstance(table, pa.Table):
        raise InputError(f"{what}: expected a pyarrow.Table, got {type(table).__name__}")
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise InputError(f"{what}: missing column(s) {missing}; has {table.column_names}")


def valid_scores(table: pa.Table, what: str, column: str = "score") -> tuple[np.ndarray, np.ndarray]:
    """(scores of ``column`` as float64 with NaN where unusable, boolean mask of usable rows).

    A row is usable when ``valid`` is true and the score is non-null and finite. A null ``valid``
    is ambiguous and raises InputError. This is the single definition of "scorable" used by
    thresholds, the selection function, recall, the ROC curves and the model comparison (whose
    ``column`` may be an ensemble member's score).
    """
    require_columns(table, (column, "valid"), what)
    valid_col = table.column("valid")
    if valid_col.null_count:
        raise InputError(f"{what}: column 'valid' has {valid_col.null_count} null value(s)")
    flag = np.asarray(valid_col.to_numpy(zero_copy_only=False), dtype=bool)
    score = np.asarray(table.column(column).cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    usable = flag & np.isfinite(score)
    return np.where(usable, score, np.nan), usable


def format_fraction(x: float) -> str:
    """Compact label of a fraction: 1e-3 -> '1e-3', 0.05 -> '5e-2'."""
    mant, exp = f"{x:.3e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def order_statistic_threshold(sorted_desc: np.ndarray, target: float) -> tuple[float, int]:
    """(threshold, k) with ``k = floor(target * n)`` allowed false positives.

    ``sorted_desc`` holds the valid negative scores sorted in descending order. The threshold is
    the (k+1)-th highest score, so at most k scores are strictly above it (fewer with ties).
    Requires ``k < n``.
    """
    n = sorted_desc.size
    # the epsilon keeps exact products such as 1e-3 * 200000 = 199.99999999999997 at 200
    k = int(math.floor(target * n + 1e-9))
    return float(sorted_desc[k]), k


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The (k+1)-th largest entry of ``values`` (0-based rank k from the top), O(n)."""
    pos = values.size - 1 - k
    return float(np.partition(values, pos)[pos])


def _threshold_specs(
    target_fprs: Sequence[float], top_percentiles: Sequence[float], fixed_scores: Sequence[float]
) -> list[tuple[str, str, float]]:
    """(name, kind, value) of every requested threshold, checked: value is the target
    false-positive fraction for 'fpr' and 'top_percentile' rows, the score cut for 'fixed' rows."""
    specs: list[tuple[str, str, float]] = []
    for f in target_fprs:
        if not (0.0 < float(f) < 1.0):
            raise InputError(f"target_fprs: {f!r} is not a fraction in (0, 1)")
        specs.append((f"fpr={format_fraction(float(f))}", "fpr", float(f)))
    for p in top_percentiles:
        if not (0.0 < float(p) < 100.0):
            raise InputError(f"top_percentiles: {p!r} is not a percentage in (0, 100)")
        specs.append((f"top={float(p):g}%", "top_percentile", float(p) / 100.0))
    for c in fixed_scores:
        if not math.isfinite(float(c)):
            raise InputError(f"fixed_scores: {c!r} is not finite")
        specs.append((f"score>{float(c):g}", "fixed", float(c)))
    names = [sp[0] for sp in specs]
    if len(set(names)) != len(names):
        raise InputError(f"threshold names repeat: {names}")
    return specs


def _rate_threshold(target: float, vals: np.ndarray, sorted_desc: np.ndarray, rng, n_boot: int):
    """(threshold, ci68 lo, ci68 hi, resolvable, note) at false-positive fraction ``target`` over
    the valid negative scores ``vals`` (``sorted_desc``: the same, sorted descending); the
    threshold and its interval are None when ``target * n_valid < 1``."""
    n_valid = int(vals.size)
    if not (n_valid > 0 and target * n_valid >= 1.0):
        note = (
            f"not resolvable: target {format_fraction(target)} x {n_valid} valid negatives "
            f"< 1; needs >= {math.ceil(1.0 / target)} valid negatives"
        )
        return None, None, None, False, note
    thr, k = order_statistic_threshold(sorted_desc, target)
    lo, hi = bootstrap_interval(lambda idx: _kth_largest(vals[idx], k), n_valid, rng, n_boot=n_boot)
    return thr, lo, hi, True, ""


def thresholds_from_negatives(
    neg_scores: pa.Table,
    target_fprs: Sequence[float] = (1e-2, 1e-3, 1e-4),
    top_percentiles: Sequence[float] = (0.01,),
    fixed_scores: Sequence[float] = (),
    n_boot: int = 200,
    seed_key: Sequence[object] = ("evaluation", "thresholds"),
    n_hidden_in_negatives: int | None = None,
) -> pa.Table:
    """Thresholds at target false-positive rates measured on valid negatives.

    Parameters
    ----------
    neg_scores : table with ``score`` (float, null when unscorable) and ``valid`` (bool).
    target_fprs : false-positive fractions (dimensionless, 0 < f < 1); rows named ``'fpr=1e-3'``.
    top_percentiles : the same in percent of the negatives (Paper IV cut the top 0.01 percentile);
        rows named ``'top=0.01%'`` with ``target = p / 100``.
    fixed_scores : fixed score cuts (e.g. p > 0.5); rows named ``'score>0.5'`` with their
        achieved false-positive rate.
    n_boot : bootstrap resamples of the negatives for the 68 % interval of each threshold.
    seed_key : keys for :func:`darkhaloscope.seeding.rng_for`; each row adds its own name.
    n_hidden_in_negatives : how many of the negatives host a lens no catalog lists (the mock's
        hidden lenses), recorded on every row (None: unknown, as on a real survey).

    Returns
    -------
    pyarrow.Table with :data:`THRESHOLD_SCHEMA`: the threshold (score units), the count of valid
    negatives strictly above it, the achieved false-positive fraction, a bootstrap 68 % interval
    of the threshold, and ``resolvable`` (``target * n_valid >= 1``).
    """
    s, usable = valid_scores(neg_scores, "negative scores")
    n_total = int(s.size)
    vals = s[usable]
    n_valid = int(vals.size)
    sorted_desc = np.sort(vals)[::-1]

    rows: dict[str, list] = {f.name: [] for f in THRESHOLD_SCHEMA}
    for name, kind, value in _threshold_specs(target_fprs, top_percentiles, fixed_scores):
        rng = rng_for(*seed_key, name)
        if kind == "fixed":
            thr, note = value, ""
            lo = hi = value  # a fixed cut has no sampling uncertainty
            resolvable = n_valid > 0
            if not resolvable:
                note = "no valid negatives: false-positive rate unknown"
        else:
            thr, lo, hi, resolvable, note = _rate_threshold(value, vals, sorted_desc, rng, n_boot)
        if thr is None or n_valid == 0:
            n_above, achieved = None, None
        else:
            n_above = int(np.count_nonzero(vals > thr))
            achieved = n_above / n_valid
        for key, v in zip(
            rows,
            (
                name,
                kind,
                None if kind == "fixed" else value,
                thr,
                n_total,
                n_valid,
                n_above,
                achieved,
                lo,
                hi,
                resolvable,
                note,
                n_hidden_in_negatives,
            ),
        ):
            rows[key].append(v)
    return pa.Table.from_pydict(rows, schema=THRESHOLD_SCHEMA)


def threshold_quantiles(thresholds: pa.Table, k: int = 21) -> dict[str, np.ndarray]:
    """{name: (k,) score cuts} at the (j + ½)/k quantiles of each usable threshold's sampling
    distribution, a two-piece normal with the bootstrap 68 % interval (``threshold_ci68_lo/hi``)
    as ± 1σ on either side; a fixed cut (or a row without an interval) is its own single point."""
    from scipy.special import ndtri

    require_columns(thresholds, ("name", "threshold"), "thresholds")
    z = ndtri((np.arange(k) + 0.5) / k)
    d = thresholds.to_pydict()
    lo = d.get("threshold_ci68_lo", [None] * thresholds.num_rows)
    hi = d.get("threshold_ci68_hi", [None] * thresholds.num_rows)
    out = {}
    for name, thr, a, b in zip(d["name"], d["threshold"], lo, hi):
        if thr is None:
            continue
        if a is None or b is None or not (b > a):
            out[str(name)] = np.array([float(thr)])
            continue
        out[str(name)] = np.where(z < 0, thr + z * (thr - a), thr + z * (b - thr))
    return out


def usable_thresholds(thresholds: pa.Table) -> list[tuple[str, float]]:
    """[(name, threshold)] of the rows with a threshold; unresolvable rows are left out.

    Unresolvable rows stay visible in the thresholds table itself (``resolvable``, ``note``);
    there is no score to count detections against, so downstream tables carry no row for them.
    """
    require_columns(thresholds, ("name", "threshold"), "thresholds")
    names = thresholds.column("name").to_pylist()
    values = thresholds.column("threshold").to_pylist()
    if len(set(names)) != len(names):
        raise InputError(f"thresholds: column 'name' repeats values: {names}")
    out = [(str(n), float(v)) for n, v in zip(names, values) if v is not None]
    if not out:
        raise InputError(f"thresholds: no row has a threshold (names {names})")
    return out


def threshold_value(thresholds: pa.Table, name: str) -> float:
    """The score cut of the usable threshold ``name``; InputError listing the usable names otherwise."""
    usable = dict(usable_thresholds(thresholds))
    if name not in usable:
        raise InputError(f"no usable threshold named {name!r}; usable thresholds: {list(usable)}")
    return usable[name]
