"""Observing conditions and measured photometry of the embedded mock survey.

Conditions are smooth random fields over the sky (the same field for every file, so they are
continuous across sweep-file edges): NOBS per band, PSF FWHM (PSFSIZE, arcsec; g > r > i > z),
5σ depths that grow with NOBS and shrink with seeing, Galactic E(B−V) and the Milky Way
transmission. The measured fluxes (nanomaggies) are the dereddened true fluxes times
MW_TRANSMISSION plus Gaussian noise of the catalog's own FLUX_IVAR.

DR10 definitions used here (the DR10 catalog and description pages, legacysurvey.org/dr10):
PSFDEPTH and GALDEPTH in 1/nanomaggy², with the 5σ flux 5/√depth; GALDEPTH is the depth for a
round exponential galaxy of r_e = 0.45″; MW_TRANSMISSION = 10^(−0.4 · R · E(B−V)) with the
extinction coefficients R below.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from darkhaloscope.constants import mag_to_flux, psfdepth_from_depth_mag
from darkhaloscope.seeding import rng_for
from darkhaloscope.survey import sweep_model as sm

#: Extinction coefficients A/E(B−V) of DECam g, r, i, z and WISE W1–W4 (DR10 catalog page).
EXTINCTION = {"G": 3.214, "R": 2.165, "I": 1.592, "Z": 1.211, "W1": 0.184, "W2": 0.113, "W3": 0.0241, "W4": 0.00910}
#: 5σ point-source depth (AB) at 3 passes and at the reference seeing FWHM_REF (arcsec), per band;
#: they give median depths near g 24.5, r 23.9, z 23.0, the DR10 design depths.
DEPTH_3PASS = {"G": 24.2, "R": 23.6, "I": 23.1, "Z": 22.75}
FWHM_REF = {"G": 1.45, "R": 1.30, "I": 1.25, "Z": 1.20}
#: WISE 5σ depths (AB) used for FLUX_IVAR_W* and PSFDEPTH_W1/2.
WISE_DEPTH = {"W1": 20.5, "W2": 19.9, "W3": 16.7, "W4": 14.5}
#: z-band FWHM (arcsec) = Z_FWHM_BEST + Z_FWHM_SPAN · (seeing field in [0, 1]) + N(0, Z_FWHM_JITTER),
#: clipped to Z_FWHM_RANGE; the other bands are broader by the offsets below (r also by up to
#: R_FWHM_FIELD along its own field), g at most G_FWHM_MAX.
Z_FWHM_BEST, Z_FWHM_SPAN, Z_FWHM_JITTER, Z_FWHM_RANGE = 1.0, 0.45, 0.01, (0.95, 1.6)
I_FWHM_OFFSET, R_FWHM_OFFSET, R_FWHM_FIELD, G_FWHM_OFFSET, G_FWHM_MAX = 0.04, 0.10, 0.03, 0.12, 1.85
#: NOBS = rint(NOBS_MEDIAN + NOBS_FIELD · field + NOBS_TILING · tiling pattern), clipped to
#: [1, NOBS_MAX] (i: [0, NOBS_MAX], NOBS_I_OFFSET fewer, none where its coverage field < I_UNCOVERED).
NOBS_MEDIAN, NOBS_FIELD, NOBS_TILING, NOBS_MAX, NOBS_I_OFFSET, I_UNCOVERED = 5.0, 3.5, 1.2, 15, -0.5, -0.8
#: Period (deg) of the survey's tiling pattern in RA and Dec.
TILING_PERIOD_DEG = (1.1, 1.0)
#: Zero-point scatter of the depths (mag, times a smooth field in [−1, 1]).
DEPTH_ZP_FIELD = 0.05
#: GALDEPTH's galaxy: r_e (arcsec) and the FWHM of a Gaussian of similar size per arcsec of r_e; the
#: same factor sets how much FLUX_IVAR drops for an extended source of SHAPE_R.
GALDEPTH_RE, FWHM_PER_RE = 0.45, 1.8
#: E(B−V) = EBV_MEDIAN + EBV_FIELD · field: 0.013–0.037 mag, a high-Galactic-latitude field.
EBV_MEDIAN, EBV_FIELD = 0.025, 0.012
#: WISE: FLUX_IVAR varies by ± WISE_IVAR_FIELD along a field; NOBS_W* around WISE_NOBS (± WISE_NOBS_FIELD, sd WISE_NOBS_SCATTER).
WISE_IVAR_FIELD, WISE_NOBS, WISE_NOBS_FIELD, WISE_NOBS_SCATTER = 0.3, 150, 100, 5
#: Smooth fields: sums of SMOOTH_FIELD_WAVES plane waves of wavelengths SMOOTH_FIELD_WAVELENGTH_DEG.
SMOOTH_FIELD_WAVES, SMOOTH_FIELD_WAVELENGTH_DEG = 6, (0.7, 6.0)


@dataclass
class Conditions:
    """Per-row observing conditions, dicts keyed by sweep band (G, R, I, Z): fwhm (PSFSIZE, arcsec),
    nobs (int16), psfdepth and galdepth (1/nmgy²); ebv (mag); mw: MW_TRANSMISSION for every band."""

    fwhm: dict
    nobs: dict
    psfdepth: dict
    galdepth: dict
    ebv: np.ndarray
    mw: dict


def smooth_field(ra, dec, seed: int, key: str) -> np.ndarray:
    """A smooth random field in [−1, 1] over the sky (deg in), the same for every file."""
    rng = rng_for("mock-field", seed, key)
    k = SMOOTH_FIELD_WAVES
    wav = rng.uniform(*SMOOTH_FIELD_WAVELENGTH_DEG, k)
    ang = rng.uniform(0, np.pi, k)
    phase = rng.uniform(0, 2 * np.pi, k)
    amp = rng.uniform(0.5, 1.0, k)
    x = np.asarray(ra, dtype=np.float64) * np.cos(np.radians(np.asarray(dec, dtype=np.float64)))
    y = np.asarray(dec, dtype=np.float64)
    total = np.zeros_like(x)
    for w, a, p, m in zip(wav, ang, phase, amp):
        total += m * np.sin(2 * np.pi * (x * np.cos(a) + y * np.sin(a)) / w + p)
    # A sum of random-phase sinusoids has std sqrt(sum(amp^2)/2); scale to std 0.5 and clip.
    return np.clip(total / np.sqrt(0.5 * np.sum(amp**2)) * 0.5, -1.0, 1.0)


def observing_conditions(rng: np.random.Generator, ra, dec, seed: int) -> Conditions:
    """Conditions at each (ra, dec) (deg); ``rng`` draws the small per-source seeing jitter."""
    n = len(ra)
    tiling = np.sin(2 * np.pi * ra / TILING_PERIOD_DEG[0]) * np.sin(2 * np.pi * dec / TILING_PERIOD_DEG[1])
    seeing = (smooth_field(ra, dec, seed, "seeing") + 1) / 2
    fwhm = {"Z": np.clip(Z_FWHM_BEST + Z_FWHM_SPAN * seeing + rng.normal(0, Z_FWHM_JITTER, n), *Z_FWHM_RANGE)}
    fwhm["I"] = fwhm["Z"] + I_FWHM_OFFSET
    fwhm["R"] = fwhm["Z"] + R_FWHM_OFFSET + R_FWHM_FIELD * (smooth_field(ra, dec, seed, "seeing-r") + 1) / 2
    fwhm["G"] = np.clip(fwhm["R"] + G_FWHM_OFFSET, None, G_FWHM_MAX)
    nobs, psfdepth, galdepth = {}, {}, {}
    ebv = EBV_MEDIAN + EBV_FIELD * smooth_field(ra, dec, seed, "ebv")
    for b in sm.DR10_OPTICAL:
        f = smooth_field(ra, dec, seed, f"nobs-{b}")
        nb = np.rint(NOBS_MEDIAN + NOBS_FIELD * f + NOBS_TILING * tiling + (0.0 if b != "I" else NOBS_I_OFFSET))
        if b == "I":
            nb = np.where(smooth_field(ra, dec, seed, "i-coverage") < I_UNCOVERED, 0, nb)
        nobs[b] = np.clip(nb, 0 if b == "I" else 1, NOBS_MAX).astype(np.int16)
        # depth ∝ sqrt(NOBS) (1.25 log10 in magnitudes) and ∝ 1/FWHM for a point source
        m5 = DEPTH_3PASS[b] + 1.25 * np.log10(np.maximum(nobs[b], 1) / 3.0) - 2.5 * np.log10(fwhm[b] / FWHM_REF[b])
        m5 = m5 + DEPTH_ZP_FIELD * smooth_field(ra, dec, seed, f"zp-{b}")
        depth = psfdepth_from_depth_mag(m5)
        psfdepth[b] = np.where(nobs[b] > 0, depth, 0.0)
        galdepth[b] = psfdepth[b] * fwhm[b] ** 2 / (fwhm[b] ** 2 + (FWHM_PER_RE * GALDEPTH_RE) ** 2)
    mw = {b: 10 ** (-0.4 * EXTINCTION[b] * ebv) for b in EXTINCTION}
    return Conditions(fwhm, nobs, psfdepth, galdepth, ebv, mw)


def measured_photometry(
    rng: np.random.Generator, true_mag: dict, cond: Conditions, shape_r, is_dup, ra, dec, seed: int
) -> tuple[dict, dict]:
    """FLUX (nmgy) and FLUX_IVAR (1/nmgy²) per sweep band; DUP rows carry no optical or W1/W2 flux."""
    n = len(ra)
    flux, ivar = {}, {}
    for b in sm.DR10_OPTICAL:
        extended = cond.fwhm[b] ** 2 / (cond.fwhm[b] ** 2 + (FWHM_PER_RE * shape_r) ** 2)
        iv = np.where(is_dup, 0.0, cond.psfdepth[b] * extended)
        sig = np.where(iv > 0, 1 / np.sqrt(np.maximum(iv, 1e-30)), 0.0)
        f = mag_to_flux(true_mag[b]) * cond.mw[b] + sig * rng.standard_normal(n)
        flux[b] = np.where(iv > 0, f, 0.0)
        ivar[b] = iv
    for b in sm.WISE:
        sig5 = mag_to_flux(WISE_DEPTH[b]) / 5.0
        iv = np.full(n, 1.0 / sig5**2) * (1 + WISE_IVAR_FIELD * smooth_field(ra, dec, seed, f"wise-{b}"))
        flux[b] = mag_to_flux(true_mag[b]) * cond.mw[b] + rng.standard_normal(n) / np.sqrt(iv)
        ivar[b] = iv
        if b in ("W1", "W2"):
            flux[b] = np.where(is_dup, 0.0, flux[b])
    return flux, ivar


def wise_nobs(rng: np.random.Generator, ra, dec, seed: int) -> dict:
    """NOBS_W1..W4 (int16): WISE's many epochs, varying smoothly over the sky."""
    n = len(ra)
    return {
        b: np.rint(
            WISE_NOBS + WISE_NOBS_FIELD * smooth_field(ra, dec, seed, f"nobs-{b}") + rng.normal(0, WISE_NOBS_SCATTER, n)
        ).astype(np.int16)
        for b in sm.WISE
    }
