"""Independent checks of the catalog tables (the logic behind the Dagster asset checks).

Each check recomputes its answer with a different tool from the code it checks: the known-lens
exclusion with astropy's ``search_around_sky`` (not the KD-tree of cuts.py), the cuts with a
DuckDB SQL query (not numpy), and split disjointness from pixels recomputed from ra/dec (not the
stored ``healpix_128`` column: a check that reads the values that produced the split cannot see a
wrong pixel function, such as a per-object hash standing in for a HEALPix pixel).
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from .. import sky, sql
from ..constants import AB_ZEROPOINT, SPLIT_NSIDE
from ..errors import InputError
from .cuts import NegativeSelectionConfig


class ExclusionCheck:
    """Negatives closer than ``radius_arcsec`` to a known lens, found with astropy
    (``SkyCoord.search_around_sky``), independently of the selection's own index. The known lenses'
    SkyCoord is built once and searched around each table's negatives, so astropy keeps its KD-tree
    on it across the tables checked (one per sweep file)."""

    def __init__(self, known_lenses: pa.Table, radius_arcsec: float = NegativeSelectionConfig.exclusion_radius_arcsec):
        from astropy import units as u
        from astropy.coordinates import SkyCoord

        self.radius = radius_arcsec * u.arcsec
        self.lenses = SkyCoord(
            np.asarray(known_lenses.column("ra").to_numpy(zero_copy_only=False), float) * u.deg,
            np.asarray(known_lenses.column("dec").to_numpy(zero_copy_only=False), float) * u.deg,
        )
        self.names = (
            known_lenses.column("name").to_pylist()
            if "name" in known_lenses.column_names
            else list(range(known_lenses.num_rows))
        )

    def __call__(self, negatives: pa.Table) -> dict:
        """{"n_violations": rows of ``negatives`` within the radius, "examples": up to 10
        (object_id, lens name or index, separation in arcsec)}."""
        from astropy import units as u
        from astropy.coordinates import SkyCoord

        if negatives.num_rows == 0 or len(self.names) == 0:
            return {"n_violations": 0, "examples": []}
        neg = SkyCoord(negatives.column("ra").to_numpy() * u.deg, negatives.column("dec").to_numpy() * u.deg)
        # Returns (indices into the argument, indices into self, ...); the KD-tree is stored on self.
        i_neg, i_lens, sep, _ = self.lenses.search_around_sky(neg, self.radius)
        oid = negatives.column("object_id").to_numpy()
        ex = [
            (int(oid[a]), self.names[b], float(d.to_value(u.arcsec))) for a, b, d in list(zip(i_neg, i_lens, sep))[:10]
        ]
        return {"n_violations": int(len(np.unique(i_neg))), "examples": ex}


def verify_cuts_with_duckdb(
    negatives: pa.Table | str | os.PathLike, config: NegativeSelectionConfig = NegativeSelectionConfig()
) -> dict:
    """Re-check every cut in DuckDB SQL on a negatives table or Parquet file/glob.

    Returns {"n_rows": rows checked, "n_violating": rows failing any cut, and one count per cut}.
    Nulls count as violations.
    """
    src = "negatives_view"
    if not isinstance(negatives, pa.Table):
        src = "read_parquet(" + "'" + str(negatives).replace("'", "''") + "')"
    types = ", ".join("'" + t.replace("'", "''") + "'" for t in sorted(config.types))
    nobs = " OR ".join(f"coalesce(nobs_{b} < {int(config.min_nobs)}, true)" for b in config.nobs_bands)
    conds = {
        "dec_footprint": f"NOT coalesce(dec > {float(config.dec_min)!r} AND dec < {float(config.dec_max)!r}, false)",
        "type": f"NOT coalesce(trim(type) IN ({types}), false)",
        "maskbits": f"coalesce((maskbits & {int(config.maskbit_mask)}) <> 0, true)",
        "nobs": nobs,
        "zmag": f"NOT coalesce(flux_z > 0 AND {AB_ZEROPOINT!r} - 2.5 * log10(flux_z) < "
        f"{float(config.zmag_max)!r}, false)",
    }
    sums = ", ".join(f"sum(CASE WHEN {c} THEN 1 ELSE 0 END) AS {k}" for k, c in conds.items())
    anyc = " OR ".join(f"({c})" for c in conds.values())
    with sql.cursor() as con:
        if isinstance(negatives, pa.Table):
            con.register(src, negatives)
        row = con.execute(
            f"SELECT count(*) AS n, sum(CASE WHEN {anyc} THEN 1 ELSE 0 END) AS bad, {sums} FROM {src}"
        ).fetchone()
    out = {"n_rows": int(row[0]), "n_violating": int(row[1] or 0)}
    out.update({k: int(v or 0) for k, v in zip(conds, row[2:])})
    return out


def verify_split_disjoint(*tables: pa.Table, nside: int = SPLIT_NSIDE) -> dict:
    """Pixels (NESTED, recomputed from ra/dec with sky.healpix_nested) holding rows of two or more splits.

    Returns {"n_pixels": distinct pixels, "n_mixed_pixels": pixels in several splits, "mixed_pixels": up to 20}.
    """
    ras, decs, splits = [], [], []
    for i, t in enumerate(tables):
        for c in ("ra", "dec", "split"):
            if c not in t.column_names:
                raise InputError(f"table {i} passed to verify_split_disjoint has no column {c!r}")
        ras.append(t.column("ra").to_numpy())
        decs.append(t.column("dec").to_numpy())
        splits.append(np.asarray(t.column("split").to_pylist(), dtype=object))
    if not ras or sum(len(r) for r in ras) == 0:
        return {"n_pixels": 0, "n_mixed_pixels": 0, "mixed_pixels": []}
    pix = sky.healpix_nested(np.concatenate(ras), np.concatenate(decs), nside)
    _, code = np.unique(np.concatenate(splits).astype(str), return_inverse=True)
    pairs = np.unique(np.stack([pix, code.astype(np.int64)], axis=1), axis=0)
    upix, n_splits = np.unique(pairs[:, 0], return_counts=True)
    mixed = upix[n_splits > 1]
    return {"n_pixels": int(len(upix)), "n_mixed_pixels": int(len(mixed)), "mixed_pixels": [int(p) for p in mixed[:20]]}


def split_fraction_report(
    table: pa.Table,
    expected: tuple[tuple[str, float], ...] = sky.DEFAULT_SPLIT_FRACTIONS,
    n_sigma: float = 3.0,
    nside: int = SPLIT_NSIDE,
) -> dict:
    """Observed fraction of rows per split against ``expected``; a warning per split further than
    ``n_sigma`` standard deviations from its fraction.

    Whole HEALPix pixels (NESTED, ``nside``) are dealt to the splits by a hash of the pixel id, so the
    row fraction of a split with fraction f scatters by sqrt(f (1 − f) Σ n_j²) / N over pixels holding
    n_j of the N rows: a small area of few pixels is lumpy, a survey's thousands of pixels are not.
    A drift beyond that says the split assignment is broken, not that the sky is lumpy. A warning,
    not a failure. Returns {"n_rows", "n_pixels", "effective_pixels", "fractions": {split:
    {"observed", "expected", "n", "sd"}}, "warnings", "ok"}.
    """
    s = np.asarray(table.column("split").to_pylist(), dtype=object)
    n = len(s)
    if n:
        pix = sky.healpix_nested(table.column("ra").to_numpy(), table.column("dec").to_numpy(), nside)
        counts = np.unique(pix, return_counts=True)[1].astype(np.float64)
        n_pixels, effective = int(counts.size), float(n * n / np.sum(counts**2))
    else:
        n_pixels, effective = 0, 0.0
    fractions, warnings = {}, []
    for name, f in expected:
        obs = float((s == name).sum() / n) if n else 0.0
        sd = float(np.sqrt(f * (1.0 - f) / effective)) if n else 0.0
        fractions[name] = {"observed": obs, "expected": f, "n": int((s == name).sum()), "sd": sd}
        if abs(obs - f) > n_sigma * sd:
            warnings.append(
                f"split {name!r}: observed fraction {obs:.3f} vs expected {f:.3f} ± {sd:.3f} "
                f"({n_pixels} pixels, > {n_sigma:g} sd)"
            )
    unknown = sorted(set(s.tolist()) - {name for name, _ in expected})
    if unknown:
        warnings.append(f"unknown split values {unknown}")
    return {
        "n_rows": n,
        "n_pixels": n_pixels,
        "effective_pixels": effective,
        "fractions": fractions,
        "warnings": warnings,
        "ok": not warnings,
    }


def strata_coverage(positives: pa.Table, negatives: pa.Table) -> dict:
    """Every stratum of the eligible positives must have negatives.

    Returns {"strata": {stratum: {"n_positives", "n_negatives"}}, "missing": [strata without
    negatives], "ok": bool}. Positives with flags are restricted to the eligible ones first.
    """
    from .sampling import eligible_positives, stratum_keys

    pos = eligible_positives(positives) if "passes_negative_cuts" in positives.column_names else positives
    ps, pc_ = np.unique(stratum_keys(pos).astype(str), return_counts=True)
    ns, nc = np.unique(stratum_keys(negatives).astype(str), return_counts=True)
    neg = dict(zip(ns.tolist(), nc.tolist()))
    strata = {s: {"n_positives": int(c), "n_negatives": int(neg.get(s, 0))} for s, c in zip(ps.tolist(), pc_.tolist())}
    missing = [s for s, d in strata.items() if d["n_negatives"] == 0]
    return {"strata": strata, "missing": missing, "ok": not missing}
