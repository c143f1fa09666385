"""Masks of the embedded mock survey: bright stars, medium stars, large galaxies and globular clusters.

MASKBITS, ANYMASK/ALLMASK and the DR10 rule that forces sources inside BRIGHT, GALAXY and CLUSTER
masks to TYPE PSF follow the DR10 bitmask page (legacysurvey.org/dr10/bitmasks) and the DR10
description. The maskers themselves are mock draws per sweep block:

- BRIGHT: Tycho/Gaia stars, G 7–13, mask radius 40″ · 10^(−0.12 (G − 11)) (the shape of the
  legacypipe radius–magnitude relation), with SATUR/ALLMASK bits in the inner quarter;
- MEDIUM: Gaia stars G 13–16, and the outer ring out to twice the BRIGHT radius;
- GALAXY: SGA-like large galaxies (z 13.5–16.5, radius 20–60″); CLUSTER: globular clusters (60–120″).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from darkhaloscope.seeding import rng_for
from darkhaloscope.sky import unit_vectors
from darkhaloscope.survey import sweep_model as sm
from darkhaloscope.survey.sweeps import SweepBox, sweep_filename

from .populations import DUP, PSF, RowRoles, area_deg2, uniform_in_box

#: MASKBITS values (DR10 bitmask page).
MB = {
    "BRIGHT": 0x2,
    "SATUR_G": 0x4,
    "SATUR_R": 0x8,
    "SATUR_Z": 0x10,
    "ALLMASK_G": 0x20,
    "ALLMASK_R": 0x40,
    "ALLMASK_Z": 0x80,
    "WISEM1": 0x100,
    "WISEM2": 0x200,
    "MEDIUM": 0x800,
    "GALAXY": 0x1000,
    "CLUSTER": 0x2000,
    "SATUR_I": 0x4000,
    "ALLMASK_I": 0x8000,
    "SUB_BLOB": 0x10000,
}
#: ANYMASK/ALLMASK bits (DR10 bitmask page): BADPIX, SATUR, CR, BLEED.
PIX_BADPIX, PIX_SATUR, PIX_CR, PIX_BLEED = 0x1, 0x2, 0x10, 0x40
#: Masker kinds, in the order of the ``mask_hits`` keys.
BRIGHT_STAR, MEDIUM_STAR, SGA_GALAXY, GLOBULAR_CLUSTER = range(4)
#: Maskers per square degree, per kind.
MASKER_DENSITY_PER_DEG2 = (2.0, 15.0, 0.4, 0.02)
#: Magnitude ranges per kind (Gaia G for stars, z for galaxies and clusters, AB).
MASKER_MAG_RANGE = ((7.0, 13.0), (13.0, 16.0), (13.5, 16.5), (14.0, 16.0))
#: BRIGHT radius (arcsec) at G = BRIGHT_RADIUS_PIVOT_G and its slope in dex per magnitude.
BRIGHT_RADIUS_ARCSEC, BRIGHT_RADIUS_PIVOT_G, BRIGHT_RADIUS_SLOPE = 40.0, 11.0, -0.12
#: Mask radii (arcsec) of SGA galaxies and globular clusters.
SGA_RADIUS_RANGE, CLUSTER_RADIUS_RANGE = (20.0, 60.0), (60.0, 120.0)
#: Saturated core of a bright star, as a fraction of its BRIGHT radius; WISE masks reach further.
SATURATED_CORE, WISEM1_BRIGHT, WISEM1_MEDIUM = 0.25, 1.5, 0.75
#: Rates of SUB_BLOB sources, of bad pixels (ALLMASK BADPIX) and of cosmic rays (ANYMASK CR).
SUB_BLOB_RATE, BADPIX_RATE, CR_RATE = 0.002, 0.001, 0.01


@dataclass
class Maskers:
    """The masking sources of one block: positions (deg), kind, magnitude, mask radius (arcsec)."""

    ra: np.ndarray
    dec: np.ndarray
    kind: np.ndarray
    mag: np.ndarray
    radius: np.ndarray


@dataclass
class MaskColumns:
    """MASKBITS (int64 before the cast to the sweep's int32), ANYMASK/ALLMASK per optical band, and
    the masks a source lies in (in_bright, in_medium, in_galaxy, in_cluster, saturated core)."""

    maskbits: np.ndarray
    anymask: dict
    allmask: dict
    in_bright: np.ndarray
    in_medium: np.ndarray
    in_galaxy: np.ndarray
    in_cluster: np.ndarray
    core: np.ndarray


def draw_maskers(box: SweepBox, seed: int) -> Maskers:
    """The maskers of one 5°×5° block, drawn from its own seed."""
    rng = rng_for("mock-maskers", seed, sweep_filename(box))
    area = area_deg2(box)
    counts = [rng.poisson(density * area) for density in MASKER_DENSITY_PER_DEG2]
    ra, dec = uniform_in_box(rng, box, sum(counts))
    kind = np.repeat(np.arange(4), counts)
    mag = np.concatenate([rng.uniform(lo, hi, c) for (lo, hi), c in zip(MASKER_MAG_RANGE, counts)])
    r_bright = BRIGHT_RADIUS_ARCSEC * 10 ** (BRIGHT_RADIUS_SLOPE * (mag - BRIGHT_RADIUS_PIVOT_G))
    radius = np.select(
        [kind == BRIGHT_STAR, kind == MEDIUM_STAR, kind == SGA_GALAXY, kind == GLOBULAR_CLUSTER],
        [
            r_bright,
            2 * r_bright,
            rng.uniform(*SGA_RADIUS_RANGE, len(mag)),
            rng.uniform(*CLUSTER_RADIUS_RANGE, len(mag)),
        ],
    )
    return Maskers(ra, dec, kind, mag, radius)


def mask_hits(ra, dec, m: Maskers) -> dict[int, np.ndarray]:
    """For each masker kind: per-source distance / radius of the nearest masker (inf if none)."""
    v = unit_vectors(ra, dec)
    out = {}
    for k in range(4):
        sel = np.flatnonzero(m.kind == k)
        if sel.size == 0:
            out[k] = np.full(len(ra), np.inf)
            continue
        tree = cKDTree(unit_vectors(m.ra[sel], m.dec[sel]))
        nn = min(3, sel.size)
        d, idx = tree.query(v, k=nn)
        d, idx = d.reshape(len(ra), nn), idx.reshape(len(ra), nn)
        sep = np.degrees(2 * np.arcsin(np.clip(d / 2, 0, 1))) * 3600.0
        out[k] = (sep / m.radius[sel][idx]).min(axis=1)
    return out


def mask_columns(rng: np.random.Generator, hits: dict, nobs: dict) -> MaskColumns:
    """MASKBITS and ANYMASK/ALLMASK from the masker distances ``hits`` (``mask_hits``); ``nobs`` per band."""
    n = len(hits[BRIGHT_STAR])
    in_bright = hits[BRIGHT_STAR] < 1.0
    in_medium = (hits[BRIGHT_STAR] < 2.0) | (hits[MEDIUM_STAR] < 1.0)
    in_galaxy, in_cluster = hits[SGA_GALAXY] < 1.0, hits[GLOBULAR_CLUSTER] < 1.0
    core = hits[BRIGHT_STAR] < SATURATED_CORE
    maskbits = np.zeros(n, dtype=np.int64)
    maskbits |= np.where(in_bright, MB["BRIGHT"], 0)
    maskbits |= np.where(in_medium, MB["MEDIUM"], 0)
    maskbits |= np.where(in_galaxy, MB["GALAXY"], 0)
    maskbits |= np.where(in_cluster, MB["CLUSTER"], 0)
    maskbits |= np.where(core, MB["SATUR_G"] | MB["SATUR_R"] | MB["SATUR_Z"] | MB["SATUR_I"], 0)
    maskbits |= np.where((hits[BRIGHT_STAR] < WISEM1_BRIGHT) | (hits[MEDIUM_STAR] < WISEM1_MEDIUM), MB["WISEM1"], 0)
    maskbits |= np.where(hits[BRIGHT_STAR] < 1.0, MB["WISEM2"], 0)
    maskbits |= np.where(rng.uniform(size=n) < SUB_BLOB_RATE, MB["SUB_BLOB"], 0)
    # ALLMASK/ANYMASK per band: saturated and bleed pixels near bright stars, rare bad pixels elsewhere.
    anymask, allmask = {}, {}
    for b in sm.DR10_OPTICAL:
        rare = rng.uniform(size=n)
        allm = np.where(core, PIX_SATUR | PIX_BLEED, 0) | np.where(rare < BADPIX_RATE, PIX_BADPIX, 0)
        anym = allm | np.where(rare < CR_RATE, PIX_CR, 0) | np.where(in_bright, PIX_SATUR, 0)
        allm = np.where(nobs[b] > 0, allm, 0)
        anym = np.where(nobs[b] > 0, anym, 0)
        allmask[b], anymask[b] = allm.astype(np.int16), anym.astype(np.int16)
        maskbits |= np.where(allm != 0, MB[f"ALLMASK_{b}"], 0)
    return MaskColumns(maskbits, anymask, allmask, in_bright, in_medium, in_galaxy, in_cluster, core)


def forced_point_sources(masks: MaskColumns, roles: RowRoles, typ: np.ndarray) -> np.ndarray:
    """Rows DR10 refits as PSF: inside BRIGHT, GALAXY or CLUSTER, except the SGA galaxies themselves
    (and, in the mock, the known lenses, so the lens galaxies keep their type)."""
    sga = roles.is_masker & (roles.masker_kind == SGA_GALAXY)
    inside = masks.in_bright | masks.in_galaxy | masks.in_cluster
    return inside & ~roles.is_lens & ~sga & (typ != DUP) & (typ != PSF)
