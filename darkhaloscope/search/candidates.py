"""The candidate catalog of a search: scored galaxies above a threshold, ranked, matched to the known
lenses, de-duplicated, with their rank percentile and the search's completeness at the threshold.

- Threshold: a row of the ``thresholds`` table that has a value (any name of
  :func:`evaluation.thresholds.usable_thresholds`), by default the strictest one (highest score);
  a galaxy is a candidate when its score is above it (``score > threshold``, as the thresholds
  are defined).
- One model: every score row must carry the same ``model_version`` (the lens finder's content
  hash); scores of two models are never ranked together.
- Known vs new: the nearest known lens (astropy ``match_to_catalog_sky``); ``known`` when it lies
  within ``known_radius_arcsec`` (the positives' cross-match radius, 1.5″).
- De-duplication: in rank order, a candidate within ``dedup_arcsec`` (3″) of a better-ranked kept
  one is dropped and counted on the kept one (``n_merged``): one lens often splits into several
  sweep sources (the arc is fitted as its own source).
- ``score_percentile``: percentage of all validly scored galaxies with a score <= the candidate's
  (the "weak" percentile of ``scipy.stats.percentileofscore``).
- Completeness: the fraction of valid injections scoring above the threshold, with its Jeffreys
  68 % interval, over the injection plan's θ_E, z_l and source priors (the selection function
  gives it per cell); null when no injection was scored.
"""

from __future__ import annotations

import astropy.units as u
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from astropy.coordinates import SkyCoord

from ..catalog.crossmatch import DEFAULT_MATCH_RADIUS_ARCSEC
from ..errors import InputError
from ..evaluation.selection import overall_completeness
from ..evaluation.thresholds import usable_thresholds

DEFAULT_DEDUP_ARCSEC = 3.0
#: Score columns a candidate keeps from its search_scores row.
SCORE_COLUMNS = (
    "object_id",
    "sweep_file",
    "brickname",
    "ra",
    "dec",
    "type",
    "mag_r",
    "shape_r",
    "split",
    "score",
    "model_version",
)
_F64 = pa.float64()
CANDIDATE_FIELDS = (
    pa.field("rank", pa.int64(), nullable=False),
    pa.field("score_percentile", _F64, nullable=False),
    pa.field("n_merged", pa.int64(), nullable=False),
    pa.field("known", pa.bool_(), nullable=False),
    pa.field("known_name", pa.string()),
    pa.field("known_separation_arcsec", _F64),
    pa.field("threshold_name", pa.string(), nullable=False),
    pa.field("threshold", _F64, nullable=False),
    pa.field("completeness", _F64),
    pa.field("completeness_ci68_lo", _F64),
    pa.field("completeness_ci68_hi", _F64),
    pa.field("n_injections", pa.int64(), nullable=False),
)


def choose_threshold(thresholds: pa.Table, name: str | None = None) -> tuple[str, float]:
    """(name, score threshold): ``name`` when given (it must have a value), else the strictest."""
    usable = usable_thresholds(thresholds)
    if name is None:
        return max(usable, key=lambda nv: nv[1])
    found = dict(usable)
    if name not in found:
        raise InputError(f"threshold {name!r} is not usable; thresholds with a value: {sorted(found)}")
    return name, found[name]


def single_model_version(scores: pa.Table) -> str:
    """The one ``model_version`` of score rows; InputError when they come from several models."""
    versions = pc.unique(scores.column("model_version")).to_pylist()
    if len(versions) != 1:
        raise InputError(
            f"search_scores mixes {len(versions)} model versions {sorted(map(str, versions))}: "
            "re-score every sweep file with the published lens finder"
        )
    return str(versions[0])


def score_percentiles(all_scores: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Percent of ``all_scores`` that are <= each of ``scores`` (0..100)."""
    ref = np.sort(np.asarray(all_scores, dtype=np.float64))
    if ref.size == 0:
        raise InputError("no validly scored galaxy to rank candidates against")
    return 100.0 * np.searchsorted(ref, np.asarray(scores, dtype=np.float64), side="right") / ref.size


def deduplicate(ra: np.ndarray, dec: np.ndarray, radius_arcsec: float) -> tuple[np.ndarray, np.ndarray]:
    """(kept mask, merged count per row) of positions given best first: a row within ``radius_arcsec``
    of a better kept row is dropped and counted on that row."""
    n = len(ra)
    keep, merged = np.ones(n, bool), np.zeros(n, np.int64)
    if n < 2 or radius_arcsec <= 0:
        return keep, merged
    c = SkyCoord(np.asarray(ra) * u.deg, np.asarray(dec) * u.deg)
    i, j, _, _ = c.search_around_sky(c, radius_arcsec * u.arcsec)
    neighbours: dict[int, list[int]] = {}
    for a, b in zip(i.tolist(), j.tolist()):
        if a < b:
            neighbours.setdefault(a, []).append(b)
    for a in range(n):
        if not keep[a]:
            continue
        for b in neighbours.get(a, ()):
            if keep[b]:
                keep[b] = False
                merged[a] += 1
    return keep, merged


def nearest_known(ra: np.ndarray, dec: np.ndarray, known_lenses: pa.Table) -> tuple[list, np.ndarray]:
    """(name, separation arcsec) of the nearest known lens to each position (None, NaN without any)."""
    if known_lenses.num_rows == 0 or len(ra) == 0:
        return [None] * len(ra), np.full(len(ra), np.nan)
    cand = SkyCoord(np.asarray(ra) * u.deg, np.asarray(dec) * u.deg)
    known = SkyCoord(
        known_lenses.column("ra").to_numpy(zero_copy_only=False) * u.deg,
        known_lenses.column("dec").to_numpy(zero_copy_only=False) * u.deg,
    )
    idx, sep, _ = cand.match_to_catalog_sky(known)
    names = known_lenses.column("name").to_pylist()
    return [names[k] for k in np.atleast_1d(idx)], np.atleast_1d(sep.to_value(u.arcsec))


def injection_completeness(
    injections: pa.Table | None, thresholds: pa.Table, threshold_name: str
) -> tuple[float | None, float | None, float | None, int]:
    """(completeness, 68 % low, 68 % high, n valid injections) at the threshold ``threshold_name``:
    the selection function's overall marginal (``evaluation.selection.overall_completeness``: a
    host's injections share their outcome, the threshold's uncertainty included)."""
    if injections is None or injections.num_rows == 0:
        return None, None, None, 0
    row = overall_completeness(injections, thresholds, threshold_name)
    return row["completeness"], row["ci68_lo"], row["ci68_hi"], int(row["n_valid"])


def build_candidates(
    scores: pa.Table,
    thresholds: pa.Table,
    known_lenses: pa.Table,
    injections: pa.Table | None = None,
    threshold_name: str | None = None,
    dedup_arcsec: float = DEFAULT_DEDUP_ARCSEC,
    known_radius_arcsec: float = DEFAULT_MATCH_RADIUS_ARCSEC,
) -> pa.Table:
    """The candidate table (module doc) from ``scores`` (search_scores rows: SCORE_COLUMNS and
    ``valid``), ``thresholds``, ``known_lenses`` (name, ra, dec) and the ``injections`` of
    injection_scores (score, valid; None: no completeness)."""
    missing = [c for c in (*SCORE_COLUMNS, "valid") if c not in scores.column_names]
    if missing:
        raise InputError(f"search_scores has no column(s) {missing}")
    if scores.num_rows == 0:
        raise InputError("search_scores is empty: nothing was searched")
    single_model_version(scores)
    name, value = choose_threshold(thresholds, threshold_name)
    valid = scores.filter(pc.fill_null(scores.column("valid"), False))
    above = valid.filter(pc.greater(valid.column("score"), value))
    above = above.select(list(SCORE_COLUMNS)).sort_by([("score", "descending"), ("object_id", "ascending")])
    keep, merged = deduplicate(above.column("ra").to_numpy(), above.column("dec").to_numpy(), dedup_arcsec)
    cand = above.filter(pa.array(keep))
    n = cand.num_rows
    ra, dec = cand.column("ra").to_numpy(), cand.column("dec").to_numpy()
    names, sep = nearest_known(ra, dec, known_lenses)
    is_known = np.nan_to_num(sep, nan=np.inf) <= known_radius_arcsec
    comp, lo, hi, n_inj = injection_completeness(injections, thresholds, name)
    extra = {
        "rank": pa.array(np.arange(1, n + 1), pa.int64()),
        "score_percentile": pa.array(
            score_percentiles(valid.column("score").to_numpy(), cand.column("score").to_numpy()), _F64
        ),
        "n_merged": pa.array(merged[keep], pa.int64()),
        "known": pa.array(is_known),
        "known_name": pa.array(names, pa.string()),
        "known_separation_arcsec": pa.array(sep, _F64, mask=np.isnan(sep)),
        "threshold_name": pa.array([name] * n, pa.string()),
        "threshold": pa.array([value] * n, _F64),
        "completeness": pa.array([comp] * n, _F64),
        "completeness_ci68_lo": pa.array([lo] * n, _F64),
        "completeness_ci68_hi": pa.array([hi] * n, _F64),
        "n_injections": pa.array([n_inj] * n, pa.int64()),
    }
    out = cand
    for f in CANDIDATE_FIELDS:
        out = out.append_column(f, extra[f.name])
    return out.select(["rank", *SCORE_COLUMNS, *(f.name for f in CANDIDATE_FIELDS[1:])])
