"""Benchmark: the engine's supersampling on sources of the selection proposal (``priors.proposal('broad')``:
half-light radius log-uniform 0.03–1.0″, axis ratio 0.2–1, n 0.5–4, position out to 1.2 θ_E).

Each rule renders the same systems (float32, the bank's dtype) and is compared, system by system, with
the engine at a fixed 64 × 64 supersampling in float64 (converged well below the errors printed):
- ``fixed-4``: 4 × 4 sub-pixels on every row (``subpixels_per_feature=0``, the former default);
- ``feature-1``, ``feature-2``: the row's supersampling set so that 1 or 2 sub-pixels span its
  narrowest feature (``render.row_supersample``; 2 is the default), between 4 and 32;
- ``fixed-16``, ``fixed-32``: a uniform factor for every row, the way to buy the same accuracy
  without a per-row factor.
For each: seconds, the time relative to ``fixed-4``, the share of rows whose factor rose above 4, and
|μ/μ_ref − 1| (median, 90 % quantile, maximum) over all rows and over the rows with a source inside
θ_E, plus the smallest μ there (a source inside θ_E is multiply imaged: μ > 1).
Prints one JSON line per rule.

``--truth T``: the mock's truth renderer (lenstronomy, ``mock_survey.truth_render``) on ``--per-model``
rows per source model of a truth table T (``<mock>/truth/hidden_lens_truth.parquet``): the lensed
flux fraction at the former fixed 3 × 3 and at the row's ``supersampling_factor`` against a fixed
24 × 24, with the seconds of each.

Usage: python -m benchmarks.bench_supersampling [--n 400] [--threads 1] [--truth T --per-model 25]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch

from darkhaloscope.lensing.priors import proposal
from darkhaloscope.lensing.render import RenderConfig, render_lensed_sources, row_supersample
from darkhaloscope.lensing.sie import LensBatch, ellipticity_from_phi_q
from darkhaloscope.lensing.source import SourceBatch
from darkhaloscope.seeding import rng_for

RULES = {
    "fixed-4": RenderConfig(subpixels_per_feature=0.0),
    "feature-1": RenderConfig(subpixels_per_feature=1.0),
    "feature-2": RenderConfig(subpixels_per_feature=2.0),
    "fixed-16": RenderConfig(supersample=16, subpixels_per_feature=0.0),
    "fixed-32": RenderConfig(supersample=32, subpixels_per_feature=0.0),
}
REFERENCE = RenderConfig(supersample=64, max_supersample=64, subpixels_per_feature=0.0)


def proposal_systems(n: int, dtype):
    """(LensBatch, SourceBatch of unit flux, PSF FWHM (n, 3) [arcsec], β/θ_E) of n proposal draws."""
    q = proposal("broad")
    seeds = np.arange(n, dtype=np.uint64)
    rng = rng_for("bench_supersampling", n)
    te = rng.uniform(0.5, 3.0, n)
    le1, le2 = ellipticity_from_phi_q(torch.tensor(rng.uniform(0, math.pi, n)), torch.tensor(rng.uniform(0.5, 1, n)))
    se1, se2 = ellipticity_from_phi_q(torch.tensor(q.draw("src_phi_rad", seeds)), torch.tensor(q.draw("src_q", seeds)))
    beta = q.draw("src_beta_frac", seeds)
    ang = q.draw("src_beta_angle_rad", seeds)
    lens = LensBatch.from_arrays(
        theta_e=te,
        e1=le1.numpy(),
        e2=le2.numpy(),
        gamma1=q.draw("shear_g1", seeds),
        gamma2=q.draw("shear_g2", seeds),
        dtype=dtype,
    )
    src = SourceBatch.from_arrays(
        flux=np.ones((n, 3)),
        r_sersic=q.draw("src_r_sersic_arcsec", seeds),
        n_sersic=q.draw("src_n_sersic", seeds),
        e1=se1.numpy(),
        e2=se2.numpy(),
        center_x=beta * te * np.cos(ang),
        center_y=beta * te * np.sin(ang),
        dtype=dtype,
    )
    fwhm = torch.as_tensor(np.stack([rng.uniform(0.9, 1.8, n)] * 3, axis=1), dtype=dtype)
    return lens, src, fwhm, beta


def truth_renderer(path: str, per_model: int) -> None:
    """One JSON line per source model of the truth table at ``path`` (module docstring)."""
    import pyarrow.parquet as pq

    from mock_survey import truth_render as tr

    rows = pq.read_table(path).to_pylist()
    rng = np.random.default_rng(0)

    def fluxes(batch, factor):
        t0 = time.perf_counter()
        out = []
        for r in batch:
            _, _, names, kws = tr.lenstronomy_system(r)
            ss = factor(names, kws, r["src_r_sersic_arcsec"])
            out.append((ss, tr.render_unconvolved(r, tr.render_size(r), supersampling=ss).sum()))
        return np.array(out), time.perf_counter() - t0

    for model in tr.SOURCE_MODEL_MIX:
        pool = [r for r in rows if r["source_model"] == model]
        batch = [pool[i] for i in rng.choice(len(pool), min(per_model, len(pool)), replace=False)]
        ref, _ = fluxes(batch, lambda *_: 24)
        row = {"truth_source_model": model, "n": len(batch)}
        for name, factor in (("fixed-3", lambda *_: tr.SUPERSAMPLING), ("feature-2", tr.supersampling_factor)):
            got, dt = fluxes(batch, factor)
            err = np.abs(got[:, 1] / ref[:, 1] - 1.0)
            q50, q90 = np.percentile(err, [50, 90])
            row[name] = {"seconds": round(dt, 2), "median_ss": float(np.median(got[:, 0]))}
            row[name] |= {
                "median": round(float(q50), 4),
                "q90": round(float(q90), 4),
                "max": round(float(err.max()), 3),
            }
        print(json.dumps(row))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--truth", help="a truth table of the mock, to benchmark its renderer instead")
    ap.add_argument("--per-model", type=int, default=25)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.truth:
        truth_renderer(a.truth, a.per_model)
        return
    lens64, src64, fwhm64, beta = proposal_systems(a.n, torch.float64)
    mu_ref = render_lensed_sources(lens64, src64, fwhm64, REFERENCE).magnification.numpy()
    lens, src, fwhm, _ = proposal_systems(a.n, torch.float32)
    inside = beta < 1.0
    base = None
    for name, cfg in RULES.items():
        render_lensed_sources(lens, src, fwhm, cfg)  # warm-up
        t0 = time.perf_counter()
        mu = render_lensed_sources(lens, src, fwhm, cfg).magnification.double().numpy()
        dt = time.perf_counter() - t0
        base = dt if base is None else base
        err = np.abs(mu / mu_ref - 1.0)
        row = {
            "rule": name,
            "n": a.n,
            "threads": a.threads,
            "seconds": round(dt, 3),
            "time_vs_fixed_4": round(dt / base, 2),
        }
        row["raised_share"] = round(float(np.mean(row_supersample(src, cfg).numpy() > 4)), 3)
        for label, sel in (("all", np.ones_like(inside)), ("inside", inside)):
            q50, q90 = np.percentile(err[sel], [50, 90])
            row[label] = {
                "median": round(float(q50), 4),
                "q90": round(float(q90), 4),
                "max": round(float(err[sel].max()), 3),
            }
        row["min_mu_inside"] = round(float(mu[inside].min()), 3)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
