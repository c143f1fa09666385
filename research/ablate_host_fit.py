"""The lens finder on stamps less a fitted host (``research.host_model``: an elliptical Sérsic
convolved with the catalog's PSF, the model Tractor fits to DR10 and the mock sky draws).

Fits that model to the central ``FIT_SIZE`` px of every stamp and trains the demo recipe on the
residuals (``--preprocess`` over the profile's spec; default three residual channels, no colour or
antisymmetric channels, which need the host's light). The stream's arcs are projected off their
host's fitted tangent space, the linearised refit of host plus arc
(:func:`research.host_model.refit_change`); every other stamp (the catalog rows, the validation
injections, the test rows and the bank's injections) is fitted itself, as a survey would fit it.

It prints one JSON line: the fit's χ² per pixel, validation AUROC, the bank's AUROCs (injections
against controls, by arc S/N and θ_E, and with the bank's injections replaced by their linearised
refit, which is what training saw; the spread (sd) of the controls' logits; the bank's arcs in pure
noise against pure noise, whole and off the fitted host's tangent space), known lenses against
held-out negatives, the 1e-2 FPR operating point; and two bounds for a detector that knows each
arc's shape (the mean over the bank of Φ(S/N / √2), S/N the bank's arc S/N): with the host known,
and with only the part of the arc orthogonal to the fitted host's tangent space.

    python -m research.ablate_host_fit --lake lakehouse

The fits of a demo lake take minutes on 2 cores, then the training. Results: BENCHMARKS.md, *A host
fitted to the noise: the finder ranks the bank as before*. A diagnostic, not a pipeline step: the
mock's galaxies are exactly this model, so the fit is better than it would be on DR10's galaxies.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from dataclasses import replace

import numpy as np
import torch
from scipy.stats import norm

import table_registry as T
from darkhaloscope.evaluation.headline import auroc_of, completeness_by_snr
from darkhaloscope.stamps import from_tensor_column
from darkhaloscope.training.checkpoint import load_checkpoint
from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.dataset import AugmentedStampDataset
from darkhaloscope.training.gates import run_gates
from darkhaloscope.training.inference import score_stamps
from darkhaloscope.training.loop import train
from darkhaloscope.training.profiles import training_profile
from darkhaloscope.training.runs import split_for_training
from research.common import (
    S_N_EDGES,
    THETA_E_EDGES_ARCSEC,
    auroc_by,
    band_sigma,
    held_out_tables,
    noise_like,
    parse_lake_args,
    threshold_at,
)
from research.host_model import FIT_SIZE, fit_hosts, less_host, refit_change


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--preprocess",
        default='{"residual": "none", "colour_difference": false, "antisymmetric": false}',
        help="PreprocessSpec fields over the demo profile's (JSON)",
    )
    ap.add_argument("--member", default="{}", help="TrainConfig fields over the demo member (JSON)")
    ap.add_argument("--iters", type=int, default=8, help="Levenberg–Marquardt steps per stamp")
    a, lake = parse_lake_args(ap)
    profile = training_profile("demo")

    neg_t, real_t, bank = held_out_tables(
        lake, ("psfsize_g", "psfsize_r", "psfsize_z"), ("theta_e_arcsec", "psf_fwhm_g", "psf_fwhm_r", "psf_fwhm_z")
    )
    cut = lake.table(*T.CUTOUTS.key).read(columns=["object_id", "psfsize_g", "psfsize_r", "psfsize_z"])
    psf = {
        int(o): (g, r, z)
        for o, g, r, z in zip(*(cut.column(c).to_numpy() for c in ("object_id", "psfsize_g", "psfsize_r", "psfsize_z")))
    }
    g_r, z_r = (
        float(np.nanmedian(cut.column(f"psfsize_{b}").to_numpy() / cut.column("psfsize_r").to_numpy())) for b in "gz"
    )

    def fwhm_of(ids, psfsize_r=None):
        # the validation injections carry their host's r-band PSF only; g and z scale by the survey's median ratios
        return np.array(
            [
                psf[int(i)] if int(i) in psf else (psfsize_r[j] * g_r, psfsize_r[j], psfsize_r[j] * z_r)
                for j, i in enumerate(ids)
            ],
            np.float64,
        )

    def columns_fwhm(table, prefix):
        return np.stack([table.column(f"{prefix}_{b}").to_numpy() for b in "grz"], 1).astype(np.float64)

    fits: dict[str, float] = {}

    def fitted(name, x, fwhm, tangent=False):
        """The fit of stamps ``x``, with their per-band σ (N, 3) float32 as ``sigma``."""
        sigma = band_sigma(x, profile.preprocess)
        f = fit_hosts(x, fwhm, sigma.double().numpy(), a.iters, tangent)
        fits[name] = round(float(f["chi2"].median()), 3)
        return {**f, "sigma": sigma}

    t0 = time.time()
    arrays = load_training_set(lake.table(*T.TRAINING_SET.key).read())
    tr, va = split_for_training(arrays, "cpu")
    hosts = torch.from_numpy(tr.host_rows())
    fit_tr = fitted("train", tr.image, fwhm_of(tr.object_id), tangent=True)
    host_basis, host_sigma = fit_tr["tangent"][hosts], fit_tr["sigma"][hosts]
    tr = replace(tr, image=less_host(tr.image, fit_tr))
    va = replace(va, image=less_host(va.image, fitted("validation", va.image, fwhm_of(va.object_id, va.psfsize_r))))

    neg, real = (from_tensor_column(t.column("image")) for t in (neg_t, real_t))
    inj, ctrl = (from_tensor_column(bank.column(c)) for c in ("image", "control"))
    snr, theta_e = bank.column("arc_snr").to_numpy(), bank.column("theta_e_arcsec").to_numpy()
    fwhm_bank = columns_fwhm(bank, "psf_fwhm")
    fit_ctrl = fitted("controls", ctrl, fwhm_bank, tangent=True)
    sigma_ctrl = fit_ctrl["sigma"]
    lo = (ctrl.shape[-1] - FIT_SIZE) // 2
    arcs = (inj - ctrl)[:, :, lo : lo + FIT_SIZE, lo : lo + FIT_SIZE]
    arcs_left = refit_change(arcs, fit_ctrl["tangent"], sigma_ctrl)
    s_n = sigma_ctrl.numpy()[:, :, None, None]
    kept = np.linalg.norm((arcs_left / s_n).reshape(len(arcs), -1), axis=1) / np.linalg.norm(
        (arcs / s_n).reshape(len(arcs), -1), axis=1
    )
    ctrl_less = less_host(ctrl, fit_ctrl)
    inj_linearised = ctrl_less.copy()
    inj_linearised[:, :, lo : lo + FIT_SIZE, lo : lo + FIT_SIZE] += arcs_left
    # the same finder on the bank's arcs in pure noise of each control's σ against pure noise: the
    # arcs whole (the host known) and off the fitted host's tangent space (what any fit leaves)
    arcs_whole = inj - ctrl
    arcs_off = arcs_whole.copy()
    arcs_off[:, :, lo : lo + FIT_SIZE, lo : lo + FIT_SIZE] = arcs_left
    in_noise = noise_like(ctrl, profile.preprocess, "injections")
    test = {
        "negatives": less_host(neg, fitted("negatives", neg, columns_fwhm(neg_t, "psfsize"))),
        "known_lenses": less_host(real, fitted("known_lenses", real, columns_fwhm(real_t, "psfsize"))),
        "injections": less_host(inj, fitted("injections", inj, fwhm_bank)),
        "controls": ctrl_less,
        "linearised": inj_linearised,
        "whole_arcs_in_noise": arcs_whole + in_noise,
        "fitted_arcs_in_noise": arcs_off + in_noise,
        "noise": noise_like(ctrl, profile.preprocess, "controls"),
    }
    fit_s = time.time() - t0

    draw_epoch = AugmentedStampDataset.prepare_epoch
    projected = {"draw": None, "draws": 0}  # the last draw projected, held so that it is compared by identity

    def prepare_epoch(self, epoch):
        draw = draw_epoch(self, epoch)
        if draw is not None and draw is not projected["draw"]:
            k = torch.from_numpy(np.asarray(draw.host_row))
            draw.arcs[...] = refit_change(draw.arcs, host_basis[k], host_sigma[k])
            projected.update(draw=draw, draws=projected["draws"] + 1)
        return draw

    AugmentedStampDataset.prepare_epoch = prepare_epoch
    spec = replace(profile.preprocess, **json.loads(a.preprocess))
    cfg = replace(profile.members[0], device="cpu", **json.loads(a.member))
    with tempfile.TemporaryDirectory(prefix="dhs_host_fit_") as out:
        t1 = time.time()
        res = train(tr, va, cfg, out, spec, {"ablation": "host_fit"})
        wall = time.time() - t1
        model, ck = load_checkpoint(out, "best")
        gates = {g["name"]: round(float(g["value"]), 4) for g in run_gates(model, ck, va, device="cpu")}
        p = {k: score_stamps(model, ck, x)[0] for k, x in test.items()}
    thr = threshold_at(p["negatives"])

    def by(edges, values, scores, controls="controls"):
        return auroc_by(edges, values, scores, p[controls])

    print(
        json.dumps(
            {
                "name": "host_fit",
                "preprocess": json.loads(a.preprocess),
                "member": json.loads(a.member),
                "fit_chi2_median": fits,
                "fit_s": round(fit_s),
                "val_auroc": round(res.best_val_auroc, 4),
                "best_epoch": res.best_epoch,
                "gates": gates,
                "test_auroc_injections_vs_controls": auroc_of(p["injections"], p["controls"]),
                "auroc_by_arc_snr": by(S_N_EDGES, snr, p["injections"]),
                "auroc_by_theta_e_arcsec": by(THETA_E_EDGES_ARCSEC, theta_e, p["injections"]),
                "linearised_injections_vs_controls": auroc_of(p["linearised"], p["controls"]),
                "controls_logit_sd": round(
                    float(
                        np.std(
                            np.log(np.clip(p["controls"], 1e-12, 1 - 1e-12) / np.clip(1.0 - p["controls"], 1e-12, 1))
                        )
                    ),
                    3,
                ),
                **{
                    f"{k}_vs_noise": {
                        "all": auroc_of(p[k], p["noise"]),
                        "by_arc_snr": by(S_N_EDGES, snr, p[k], "noise"),
                        "by_theta_e_arcsec": by(THETA_E_EDGES_ARCSEC, theta_e, p[k], "noise"),
                    }
                    for k in ("whole_arcs_in_noise", "fitted_arcs_in_noise")
                },
                "test_auroc_real_vs_negatives": auroc_of(p["known_lenses"], p["negatives"]),
                "threshold_fpr_1e-2": float(thr),
                "recall_test_known_lenses": round(float((p["known_lenses"] > thr).mean()), 4),
                "completeness_by_arc_snr": {
                    k: c for k, (c, _) in completeness_by_snr(p["injections"], snr, thr, digits=4).items()
                },
                "arc_sn_kept_median_by_theta_e": {
                    f"{lo}-{hi}": round(float(np.median(kept[(theta_e >= lo) & (theta_e < hi)])), 3)
                    for lo, hi in zip(THETA_E_EDGES_ARCSEC[:-1], THETA_E_EDGES_ARCSEC[1:])
                },
                "bound_known_shape_host_known": round(float(norm.cdf(snr / math.sqrt(2)).mean()), 4),
                "bound_known_shape_host_fitted": round(float(norm.cdf(kept * snr / math.sqrt(2)).mean()), 4),
                "draws_projected": projected["draws"],
                "epochs": res.epochs_run,
                "s_per_epoch": round(wall / max(res.epochs_run, 1), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
