"""Does the engine render compact sources' flux? The bank's magnification (rendered arc flux over
source flux) against lenstronomy's point-source magnification of the same lens (the lens-equation
solver's images, Σ|μ_i|), for sources inside 0.7 θ_E, by the source's minor-axis half-light radius
√q R_e. A point-like source has the two equal; their spread at a size is the render's sampling noise
there (larger sources are not point-like: their ratio measures the source's extent).

    python -m research.compact_source_render --lake closure/seed-0/lakehouse [--per-bin 40]

Prints one JSON line per size bin: the number of rows, the median and 10 / 90 % quantiles of the ratio
and the share below 0.8.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import table_registry as T
from lake_platform.lake import Lake

#: Bins of √q R_e [arcsec].
MINOR_AXIS_EDGES = (0.0, 0.02, 0.04, 0.08, 0.2, 2.0)
COLUMNS = (
    "theta_e_arcsec", "lens_e1", "lens_e2", "lens_center_x_arcsec", "lens_center_y_arcsec", "shear_g1",
    "shear_g2", "src_x_arcsec", "src_y_arcsec", "src_r_sersic_arcsec", "src_q", "src_beta_frac",
    "magnification", "success",
)  # fmt: skip


def point_magnification(row: dict) -> float:
    """Σ|μ| of the images lenstronomy's solver finds for the row's SIE + shear and source centre."""
    from lenstronomy.LensModel.lens_model import LensModel
    from lenstronomy.LensModel.Solver.lens_equation_solver import LensEquationSolver

    lm = LensModel(["SIE", "SHEAR"])
    cx, cy = row["lens_center_x_arcsec"], row["lens_center_y_arcsec"]
    kw = [
        {"theta_E": row["theta_e_arcsec"], "e1": row["lens_e1"], "e2": row["lens_e2"], "center_x": cx, "center_y": cy},
        {"gamma1": row["shear_g1"], "gamma2": row["shear_g2"]},
    ]
    x, y = LensEquationSolver(lm).image_position_from_source(row["src_x_arcsec"] + cx, row["src_y_arcsec"] + cy, kw)
    return float(np.abs(lm.magnification(x, y, kw)).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", required=True, help="a lake with an injection bank (read only)")
    ap.add_argument("--per-bin", type=int, default=40, help="rows drawn per size bin")
    a = ap.parse_args()
    bank = Lake(a.lake).table(*T.INJECTION_BANK.key).read(columns=list(COLUMNS)).to_pydict()
    minor = np.asarray(bank["src_r_sersic_arcsec"]) * np.sqrt(np.asarray(bank["src_q"]))
    inside = (np.asarray(bank["src_beta_frac"]) < 0.7) & np.asarray(bank["success"])
    rng = np.random.default_rng(0)
    for lo, hi in zip(MINOR_AXIS_EDGES[:-1], MINOR_AXIS_EDGES[1:]):
        idx = np.flatnonzero(inside & (minor >= lo) & (minor < hi))
        idx = rng.choice(idx, min(a.per_bin, idx.size), replace=False)
        point = [point_magnification({k: bank[k][i] for k in COLUMNS}) for i in idx]
        ratio = np.asarray(bank["magnification"], np.float64)[idx] / np.asarray(point)
        q10, q50, q90 = np.percentile(ratio, [10, 50, 90]) if ratio.size else (np.nan,) * 3
        row = {"minor_axis_arcsec": [lo, hi], "n": int(ratio.size), "median": round(float(q50), 3)}
        row |= {"q10": round(float(q10), 3), "q90": round(float(q90), 3)}
        row["below_0.8"] = round(float(np.mean(ratio < 0.8)), 2)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
