"""Benchmark: three-band 101x101 lensed-arc rendering (ss=4, Moffat PSF), batched torch engine vs a
lenstronomy ImageModel loop over the same systems (PIXEL kernel = the same Moffat kernel).

Prints one JSON line: systems/s for each, the speed ratio, and accuracy versus lenstronomy
(max |pixel difference| / peak, relative flux difference, relative mu difference).
Usage: python benchmarks/bench_injection.py [--n 512] [--n-ref 24] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch

from darkhaloscope.lensing.render import RenderConfig, lenstronomy_reference, render_lensed_sources
from darkhaloscope.lensing.sie import LensBatch, ellipticity_from_phi_q
from darkhaloscope.lensing.source import SourceBatch, band_fluxes
from darkhaloscope.psf import kernel_radius_pix, psf_kernels
from darkhaloscope.seeding import rng_for


def _systems(n: int):
    rng = rng_for("bench_injection", n)
    te = rng.uniform(0.5, 3.0, n)
    le1, le2 = (t.numpy() for t in ellipticity_from_phi_q(torch.tensor(rng.uniform(0, math.pi, n)),
                                                          torch.tensor(rng.uniform(0.5, 1.0, n))))
    se1, se2 = (t.numpy() for t in ellipticity_from_phi_q(torch.tensor(rng.uniform(0, math.pi, n)),
                                                          torch.tensor(rng.uniform(0.3, 1.0, n))))
    beta = te * np.sqrt(rng.uniform(0.1**2, 0.4**2, n))
    ang = rng.uniform(0, 2 * math.pi, n)
    lens = dict(theta_e=te, e1=le1, e2=le2, center_x=np.zeros(n), center_y=np.zeros(n),
                gamma1=rng.normal(0, 0.04, n).clip(-0.1, 0.1), gamma2=rng.normal(0, 0.04, n).clip(-0.1, 0.1))
    src = dict(r_sersic=rng.uniform(0.15, 0.5, n), n_sersic=rng.uniform(0.5, 2.0, n), e1=se1, e2=se2,
               center_x=beta * np.cos(ang), center_y=beta * np.sin(ang))
    flux = band_fluxes(rng.uniform(22, 26, n), rng.normal(0.3, 0.25, n), rng.normal(0.3, 0.25, n))
    fwhm = np.stack([rng.uniform(0.9, 1.8, n)] * 3, axis=1) * np.array([1.05, 1.0, 0.94])
    return lens, src, flux, fwhm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--n-ref", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=128)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = RenderConfig(psf_profile="moffat", supersample=4)
    lens_np, src_np, flux, fwhm = _systems(args.n)

    def engine(sl, dtype=torch.float32):
        lens = LensBatch.from_arrays(dtype=dtype, **{k: v[sl] for k, v in lens_np.items()})
        src = SourceBatch.from_arrays(flux=flux[sl], dtype=dtype, **{k: v[sl] for k, v in src_np.items()})
        return render_lensed_sources(lens, src, torch.as_tensor(fwhm[sl], dtype=dtype), cfg)

    engine(slice(0, 8))  # warm-up (allocator, FFT plans)
    t0 = time.perf_counter()
    results = [engine(slice(s, min(args.n, s + args.chunk))) for s in range(0, args.n, args.chunk)]
    t_engine = time.perf_counter() - t0
    arcs = torch.cat([r.arc for r in results])
    mus = torch.cat([r.magnification for r in results])

    # lenstronomy loop, timed for the image only: one ImageModel per band (its own PIXEL kernel),
    # the same supersampling; mu (two more lenstronomy renders) is computed untimed for accuracy.
    kernels = {}
    for i in range(args.n_ref):
        for b in range(3):
            r = kernel_radius_pix(fwhm[i, b])
            kernels[i, b] = psf_kernels(torch.tensor([fwhm[i, b]], dtype=torch.float64), r, profile="moffat")[0].numpy()
    t0 = time.perf_counter()
    for i in range(args.n_ref):
        lp = {k: float(v[i]) for k, v in lens_np.items()}
        sp = {k: float(v[i]) for k, v in src_np.items()}
        for b in range(3):
            lenstronomy_reference(lp, sp, float(fwhm[i, b]), float(flux[i, b]), cfg, psf_kernel=kernels[i, b],
                                  with_mu=False)
    t_lt = time.perf_counter() - t0
    errs, ferrs, merrs = [], [], []
    for i in range(args.n_ref):
        lp = {k: float(v[i]) for k, v in lens_np.items()}
        sp = {k: float(v[i]) for k, v in src_np.items()}
        for b in range(3):
            ref, mu_ref = lenstronomy_reference(lp, sp, float(fwhm[i, b]), float(flux[i, b]), cfg,
                                                psf_kernel=kernels[i, b])
            ours = arcs[i, b].double().numpy()
            errs.append(float(np.abs(ours - ref).max() / ref.max()))
            ferrs.append(abs(float(ours.sum() / ref.sum()) - 1.0))
            merrs.append(abs(float(mus[i]) / mu_ref - 1.0))
    eng_rate = args.n / t_engine
    lt_rate = args.n_ref / t_lt
    print(json.dumps({
        "benchmark": "injection_render_3band_101px_ss4_moffat", "device": "cpu", "threads": args.threads,
        "n_systems": args.n, "chunk": args.chunk, "engine_systems_per_s": round(eng_rate, 2),
        "lenstronomy_systems_per_s": round(lt_rate, 3), "n_lenstronomy": args.n_ref,
        "speedup": round(eng_rate / lt_rate, 2), "max_pixel_err_over_peak": max(errs),
        "median_pixel_err_over_peak": float(np.median(errs)), "max_flux_rel_err": max(ferrs),
        "max_mu_rel_err": max(merrs), "mean_refined_pixels": float(torch.cat([r.n_refined for r in results]).float().mean()),
    }))


if __name__ == "__main__":
    main()
