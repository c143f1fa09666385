"""Discovery score of a survey-wide search on the mock survey: how many of the hidden lenses (lenses
painted into the mock sky that no catalog lists) the candidate list recovers, by arc S/N, and how
many candidates are neither a hidden nor a known lens (false candidates).

A hidden lens is recovered when a candidate lies within ``radius_arcsec`` of it; a candidate within
that radius of a hidden lens is a discovery, within it of a known lens a known lens, and otherwise
false. Matching uses astropy's great-circle separations (``SkyCoord.search_around_sky``).
"""

from __future__ import annotations

from dataclasses import dataclass

import astropy.units as u
import numpy as np
import pyarrow as pa
from astropy.coordinates import SkyCoord

from ..errors import InputError

#: Match radius (arcsec) between a candidate and a lens position.
DEFAULT_MATCH_RADIUS_ARCSEC = 1.5
#: Arc S/N bin edges (r band, lensing.render.arc_snr) of the recovery table.
DEFAULT_SNR_EDGES = (0.0, 2.0, 5.0, 10.0, 20.0, 50.0, np.inf)

RECOVERY_SCHEMA = pa.schema(
    [
        pa.field("snr_lo", pa.float64(), metadata={"description": "arc S/N bin lower edge (inclusive)"}),
        pa.field("snr_hi", pa.float64(), metadata={"description": "arc S/N bin upper edge (exclusive)"}),
        pa.field("n_hidden", pa.int64(), metadata={"description": "hidden lenses in the bin"}),
        pa.field("n_recovered", pa.int64(), metadata={"description": "of them, matched by a candidate"}),
        pa.field(
            "recovered_fraction", pa.float64(), metadata={"description": "n_recovered / n_hidden (null when empty)"}
        ),
    ]
)


@dataclass(frozen=True)
class DiscoveryReport:
    """Hidden-lens recovery of a candidate list.

    by_snr: RECOVERY_SCHEMA rows, one per arc S/N bin; hidden: the hidden-lens truth with
    ``recovered`` (bool), ``candidate_rank`` (best-ranked matching candidate, null if none) and
    ``separation_arcsec``; candidates: the candidates with ``match`` ('hidden', 'known' or 'false').
    """

    by_snr: pa.Table
    hidden: pa.Table
    candidates: pa.Table

    @property
    def n_candidates(self) -> int:
        return self.candidates.num_rows

    @property
    def n_recovered(self) -> int:
        return int(np.sum(self.hidden.column("recovered").to_numpy(zero_copy_only=False)))

    def count(self, match: str) -> int:
        """Candidates whose ``match`` is ``match`` ('hidden', 'known' or 'false')."""
        return int(np.sum(np.asarray(self.candidates.column("match").to_pylist(), dtype=object) == match))

    @property
    def n_false(self) -> int:
        return self.count("false")


def _coords(table: pa.Table, what: str) -> SkyCoord:
    for c in ("ra", "dec"):
        if c not in table.column_names:
            raise InputError(f"{what} table has no column {c!r}")
    ra = table.column("ra").to_numpy(zero_copy_only=False).astype(np.float64)
    dec = table.column("dec").to_numpy(zero_copy_only=False).astype(np.float64)
    bad = ~np.isfinite(ra) | ~np.isfinite(dec) | (np.abs(dec) > 90)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"{what} row {i}: invalid ra={ra[i]!r}, dec={dec[i]!r} (degrees)")
    return SkyCoord(ra * u.deg, dec * u.deg)


def _pairs(a: SkyCoord, b: SkyCoord, radius_arcsec: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(index into a, index into b, separation arcsec) of every pair within the radius."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    ia, ib, sep, _ = b.search_around_sky(a, radius_arcsec * u.arcsec)
    return np.asarray(ia, np.int64), np.asarray(ib, np.int64), sep.to_value(u.arcsec)


def hidden_lens_recovery(
    candidates: pa.Table,
    hidden_truth: pa.Table,
    known_lenses: pa.Table,
    radius_arcsec: float = DEFAULT_MATCH_RADIUS_ARCSEC,
    snr_edges=DEFAULT_SNR_EDGES,
) -> DiscoveryReport:
    """Score ``candidates`` (ra, dec [deg], rank; other columns kept) against the hidden-lens truth
    (ra, dec, arc_snr) and the known lenses (ra, dec): recovery by arc S/N bin (``snr_edges``,
    increasing; a lens outside them is in no bin) and the class of every candidate (module doc).
    A hidden lens matched by several candidates keeps the best-ranked one."""
    if not radius_arcsec > 0:
        raise InputError(f"match radius must be > 0 arcsec, got {radius_arcsec!r}")
    edges = np.asarray(snr_edges, dtype=np.float64)
    if edges.ndim != 1 or len(edges) < 2 or not np.all(np.diff(edges) > 0):
        raise InputError(f"arc S/N bin edges must increase, got {list(snr_edges)!r}")
    if "rank" not in candidates.column_names:
        raise InputError("candidates table has no column 'rank'")
    if "arc_snr" not in hidden_truth.column_names:
        raise InputError("hidden-lens truth has no column 'arc_snr'")
    cand, hid = _coords(candidates, "candidates"), _coords(hidden_truth, "hidden-lens truth")
    rank = candidates.column("rank").to_numpy(zero_copy_only=False).astype(np.float64)
    ic, ih, sep = _pairs(cand, hid, radius_arcsec)
    best_rank = np.full(len(hid), np.inf)
    best_sep = np.full(len(hid), np.nan)
    for c, h, s in zip(ic, ih, sep):
        if rank[c] < best_rank[h]:
            best_rank[h], best_sep[h] = rank[c], s
    recovered = np.isfinite(best_rank)
    kc, _, _ = _pairs(cand, _coords(known_lenses, "known lenses"), radius_arcsec)
    match = np.full(len(cand), "false", dtype=object)
    match[kc] = "known"
    match[ic] = "hidden"
    hidden = hidden_truth.append_column("recovered", pa.array(recovered))
    hidden = hidden.append_column(
        "candidate_rank", pa.array(np.where(recovered, best_rank, 0).astype(np.int64), mask=~recovered)
    )
    hidden = hidden.append_column("separation_arcsec", pa.array(best_sep, mask=~recovered))
    snr = hidden_truth.column("arc_snr").to_numpy(zero_copy_only=False).astype(np.float64)
    return DiscoveryReport(
        _by_snr(snr, recovered, edges), hidden, candidates.append_column("match", pa.array(match.tolist(), pa.string()))
    )


def _by_snr(snr: np.ndarray, recovered: np.ndarray, edges: np.ndarray) -> pa.Table:
    lo, hi = edges[:-1], edges[1:]
    n = np.array([np.sum((snr >= a) & (snr < b)) for a, b in zip(lo, hi)], dtype=np.int64)
    k = np.array([np.sum(recovered & (snr >= a) & (snr < b)) for a, b in zip(lo, hi)], dtype=np.int64)
    frac = pa.array(np.where(n > 0, k / np.maximum(n, 1), 0.0), mask=n == 0)
    return pa.table([pa.array(lo), pa.array(hi), pa.array(n), pa.array(k), frac], schema=RECOVERY_SCHEMA)
