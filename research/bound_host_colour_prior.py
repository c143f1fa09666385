"""What a prior on the host's colours would give a detector that fits the host: the known-shape
bound of ``research.ablate_host_fit`` with the host's g − r and r − z (and, in one row, its shape)
held to Gaussian priors.

``research.ablate_host_fit`` bounds a detector that knows each arc's shape and fits the host to the
stamp (one Sérsic shape for the three bands, a free flux per band): the part of the arc the refit
leaves sets its S/N. An unresolved arc is bluer than its host, and the free fluxes absorb it by
moving the host's colours. This script puts Gaussian priors on those colours, from held exactly
(σ = 0) to free, and prints the bound at each: the mean over the bank's pairs of
Φ(kept · S/N / √2), kept the share of the arc's S/N the refit leaves
(:func:`research.host_model.refit_share_kept`), S/N the bank's arc S/N. The priors include the
spread of the mock sky's early-type colours (its DEV and SER galaxies, the bank's hosts,
``mock_survey.populations.EARLY_GR`` / ``EARLY_RZ``), which is what a finder trained on that sky
could learn, with and without the spread of their shapes (:func:`mock_shape_sd`), and 0.05 mag, the
red sequence's intrinsic scatter at a known redshift (Bower, Lucey & Ellis 1992, MNRAS 254, 601),
which no single-epoch survey galaxy comes with.

A Fisher (linearised) bound with each prior centred on the host's fitted colours: a population
prior, centred on the population's mean, gives less.

    python -m research.bound_host_colour_prior --lake lakehouse [--pairs 0]

The host fits of a demo lake's pairs take minutes on 2 cores. Prints one JSON line. Results:
BENCHMARKS.md, *What the mock's priors on a host are worth to a detector that fits it*.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
from scipy.stats import norm

from darkhaloscope.stamps import from_tensor_column
from darkhaloscope.training.profiles import training_profile
from mock_survey.populations import (
    DEV,
    EARLY_GR,
    EARLY_RZ,
    ELLIPTICITY_BETA,
    MAX_ELLIPTICITY,
    SER,
    SER_INDEX_LOG_SCATTER,
    SIZE_LOG_SCATTER,
)
from research.common import THETA_E_EDGES_ARCSEC, band_sigma, bank_table, parse_lake_args
from research.host_model import N_SHAPE, fit_hosts, refit_share_kept

#: (name, (σ g − r, σ r − z) mag or None for free colours, whether the shape has the mock's priors too)
PRIORS = (
    ("held", (0.0, 0.0), False),
    ("0.02", (0.02, 0.02), False),
    ("red_sequence_0.05", (0.05, 0.05), False),
    ("0.10", (0.1, 0.1), False),
    ("mock_early_types", (EARLY_GR[1], EARLY_RZ[1]), False),
    ("free", None, False),
    ("mock_early_types_shape_too", (EARLY_GR[1], EARLY_RZ[1]), True),
)


def mock_shape_sd(host_type: np.ndarray) -> np.ndarray:
    """(N, N_SHAPE) standard deviations of the mock sky's priors on a DEV or SER host's shape parameters
    (x0, y0 px; ln R; ln n; e1; e2): the centre free; ln R the sizes' scatter at a fixed magnitude;
    ln n 0 for DEV (Tractor's de Vaucouleurs profile, n = 4) and the SER indices' log scatter; each
    ellipticity component the rms of |e| = e_max · Beta over √2. Centred on the host's own values,
    so an upper bound on what a finder could learn of them."""
    a, b = ELLIPTICITY_BETA
    e_rms = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)) + (a / (a + b)) ** 2)
    dev = host_type == "DEV"
    sd = np.full((len(host_type), N_SHAPE), np.inf)
    sd[:, 2] = SIZE_LOG_SCATTER
    sd[:, 3] = np.where(dev, 0.0, SER_INDEX_LOG_SCATTER)
    sd[:, 4] = sd[:, 5] = np.where(dev, MAX_ELLIPTICITY[DEV], MAX_ELLIPTICITY[SER]) * e_rms / math.sqrt(2)
    return sd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=0, help="evenly spaced pairs of the bank to use (0: all)")
    a, lake = parse_lake_args(ap)
    bank = bank_table(lake, ("theta_e_arcsec", "host_type", "psf_fwhm_g", "psf_fwhm_r", "psf_fwhm_z"))
    if a.pairs:
        bank = bank.take(np.linspace(0, bank.num_rows - 1, min(a.pairs, bank.num_rows)).astype(np.int64))
    inj, ctrl = (from_tensor_column(bank.column(c)) for c in ("image", "control"))
    snr, theta_e = bank.column("arc_snr").to_numpy(), bank.column("theta_e_arcsec").to_numpy()
    fwhm = np.stack([bank.column(f"psf_fwhm_{b}").to_numpy() for b in "grz"], 1).astype(np.float64)
    sigma = band_sigma(ctrl, training_profile("demo").preprocess)
    shape_sd = mock_shape_sd(bank.column("host_type").to_numpy(zero_copy_only=False))
    t0 = time.time()
    kept = {}
    for s in range(0, len(ctrl), 192):  # a chunk's columns: 192 × 7,203 px × 12 in float32, 66 MB
        fit = fit_hosts(ctrl[s : s + 192], fwhm[s : s + 192], sigma[s : s + 192].double().numpy(), columns=True)
        for name, sd, shaped in PRIORS:
            kept.setdefault(name, []).append(
                refit_share_kept(
                    inj[s : s + 192] - ctrl[s : s + 192],
                    fit,
                    sigma[s : s + 192],
                    sd,
                    shape_sd[s : s + 192] if shaped else None,
                )
            )
    bins = list(zip(THETA_E_EDGES_ARCSEC[:-1], THETA_E_EDGES_ARCSEC[1:]))
    out = {}
    for name, _, _ in PRIORS:
        k = np.concatenate(kept[name])
        out[name] = {
            "bound": round(float(norm.cdf(k * snr / math.sqrt(2)).mean()), 4),
            "sn_kept_median_by_theta_e": {
                f"{lo}-{hi}": round(float(np.median(k[(theta_e >= lo) & (theta_e < hi)])), 3) for lo, hi in bins
            },
        }
    print(
        json.dumps(
            {
                "pairs": int(len(ctrl)),
                "fit_s": round(time.time() - t0),
                "bound_host_known": round(float(norm.cdf(snr / math.sqrt(2)).mean()), 4),
                "colour_sd_mag": {name: sd for name, sd, _ in PRIORS},
                "host_fitted": out,
            }
        )
    )


if __name__ == "__main__":
    main()
