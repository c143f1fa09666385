"""Source populations of the embedded mock survey: positions, magnitudes, Tractor types, colours, shapes.

Units: magnitudes AB (dereddened, i.e. before Milky Way extinction); SHAPE_R in arcsec (Tractor's
half-light radius along the major axis); ellipticities are Tractor's SHAPE_E1/E2,
|e| = (1 − q)/(1 + q) with q the axis ratio.

Targets. The DR10 description (legacysurvey.org/dr10/description) counts the primary sources by
TYPE as PSF 48 %, REX 40 %, EXP 8 %, DEV 3 %, SER 2 % and DUP 0.01 %. The mock draws a
magnitude-limited catalog (z ≤ 23.3) whose type mix depends on magnitude — bright sources are more
often DEV/SER/EXP, faint ones PSF/REX — and whose average over the z-band counts is close to those
fractions. Colours, sizes and ellipticities are the mock's own choices: red early types, bluer
discs, bluer faint compact galaxies, sizes shrinking with magnitude. Every number below is a named
constant; the draws happen in a fixed order from one generator per chunk, so a given seed always
gives the same catalog.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from darkhaloscope.survey.sweeps import SweepBox

#: Tractor TYPE strings (the sweep's ``TYPE`` is 3 characters) indexed by the type codes below.
TYPE_NAMES = np.array([b"PSF", b"REX", b"EXP", b"DEV", b"SER", b"DUP"], dtype="S3")
PSF, REX, EXP, DEV, SER, DUP = range(6)

#: z-band number counts dN/dm ∝ 10^(COUNTS_SLOPE · m) between Z_MAG_RANGE (AB), a mock choice
#: flatter than the Euclidean 0.6, as faint galaxy counts are.
COUNTS_SLOPE = 0.3
Z_MAG_RANGE = (15.5, 23.3)
#: z-magnitude edges (AB) of the three type-mix bins.
TYPE_MIX_EDGES = (20.0, 21.5)
#: Probabilities of PSF, REX, EXP, DEV, SER in each type-mix bin (bright, middle, faint).
TYPE_MIX = ((0.30, 0.25, 0.20, 0.15, 0.10), (0.40, 0.38, 0.12, 0.05, 0.05), (0.50, 0.44, 0.04, 0.01, 0.01))
#: Fraction of PSF-type sources that are stars (the rest are compact galaxies), per type-mix bin.
STAR_FRACTION = (0.8, 0.5, 0.25)
#: DUP rows: Gaia stars brighter than DUP_MAX_Z (AB) modelled by another source, at this rate.
DUP_RATE, DUP_MAX_Z = 1e-3, 20.0
#: Masking stars: z = Gaia G + STAR_Z_MINUS_G (AB, a typical G − z of field stars is +0.4).
STAR_Z_MINUS_G = -0.4

#: Colours (AB): (mean, sd) of g − r and r − z per population; stars' g − r is clipped to STAR_GR_CLIP
#: and their r − z follows STAR_RZ_PER_GR · (g − r) plus Gaussian scatter.
STAR_GR, STAR_GR_CLIP = (0.9, 0.4), (-0.3, 1.6)
EARLY_GR, DISC_GR, COMPACT_GR = (1.45, 0.25), (0.75, 0.3), (0.4, 0.3)
STAR_RZ_PER_GR, STAR_RZ_SCATTER = 0.5, 0.1
EARLY_RZ, DISC_RZ, COMPACT_RZ = (0.95, 0.2), (0.5, 0.25), (0.3, 0.3)
#: z − W1 (AB): stars, galaxies, early types and lenses; r − i = RI_PER_RZ · (r − z) + scatter.
STAR_ZW1, GALAXY_ZW1, EARLY_ZW1 = (-0.4, 0.3), (1.0, 0.5), (1.4, 0.3)
RI_PER_RZ, RI_SCATTER = 0.55, 0.05
#: W1 − W2 of stars and of the rest; W2 − W3 and W3 − W4 of every source (AB).
STAR_W1W2, OTHER_W1W2, MIDIR_STEP = (0.6, 0.1), (0.3, 0.3), (0.5, 0.8)

#: SHAPE_R (arcsec) at z = SIZE_PIVOT_MAG, per type; sizes scale as 10^(SIZE_PER_MAG · (z − pivot))
#: with a log-normal scatter of SIZE_LOG_SCATTER (natural log).
MEDIAN_SHAPE_R = {REX: 0.45, EXP: 0.8, DEV: 1.1, SER: 0.9}
SIZE_PIVOT_MAG, SIZE_PER_MAG, SIZE_LOG_SCATTER = 19.0, -0.15, 0.35
#: SHAPE_R ranges (arcsec) of REX and of the other galaxies; SGA galaxies are SGA_SHAPE_R in size.
REX_SHAPE_R_RANGE, GALAXY_SHAPE_R_RANGE, SGA_SHAPE_R = (0.1, 3.0), (0.2, 15.0), (8.0, 20.0)
#: Largest |e| per type; |e| = max · Beta(ELLIPTICITY_BETA) (REX is round by definition).
MAX_ELLIPTICITY = {EXP: 0.7, DEV: 0.4, SER: 0.6}
ELLIPTICITY_BETA = (1.5, 2.5)
#: SER indices: log-normal around SER_INDEX_MEDIAN (natural-log sd SER_INDEX_LOG_SCATTER), clipped
#: to Tractor's fitting range.
SER_INDEX_MEDIAN, SER_INDEX_LOG_SCATTER, SER_INDEX_RANGE = 2.5, 0.5, (0.5, 6.0)


@dataclass
class RowRoles:
    """What each row of a chunk is: a field source, a masker (star, SGA galaxy, cluster), or a known lens.

    masker_kind: -1 for non-maskers (see ``mock_masks``); masker_index / lens_index: the row's index
    into the block's maskers / the known lenses (0 where the role does not apply).
    """

    is_field: np.ndarray
    is_masker: np.ndarray
    is_lens: np.ndarray
    masker_kind: np.ndarray
    masker_index: np.ndarray
    lens_index: np.ndarray


@dataclass
class Population:
    """Intrinsic properties of a chunk's rows: type code, star/DUP flags, dereddened AB magnitudes
    per sweep band (G, R, I, Z, W1..W4), g − r, and the Tractor shape (SHAPE_R arcsec, e1, e2, SERSIC)."""

    typ: np.ndarray
    is_star: np.ndarray
    is_dup: np.ndarray
    true_mag: dict
    gr: np.ndarray
    shape_r: np.ndarray
    e1: np.ndarray
    e2: np.ndarray
    sersic: np.ndarray


def uniform_in_box(rng: np.random.Generator, box: SweepBox, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` positions (deg) uniform on the sphere inside ``box``."""
    ra = rng.uniform(box.ra_min, box.ra_max, n)
    s1, s2 = np.sin(np.radians(box.dec_min)), np.sin(np.radians(box.dec_max))
    dec = np.degrees(np.arcsin(rng.uniform(s1, s2, n)))
    return ra, np.clip(dec, box.dec_min, np.nextafter(box.dec_max, -np.inf))


def area_deg2(box: SweepBox) -> float:
    """Solid angle of ``box`` in square degrees."""
    return (box.ra_max - box.ra_min) * np.degrees(np.sin(np.radians(box.dec_max)) - np.sin(np.radians(box.dec_min)))


def draw_population(rng: np.random.Generator, roles: RowRoles, masker_mag: np.ndarray, lens_draw: dict) -> Population:
    """The chunk's population; ``masker_mag``: each row's masker magnitude (Gaia G of stars, z of
    SGA galaxies and clusters); ``lens_draw``: the known lenses' light (``mock_lenses``)."""
    typ, is_star, is_dup, mag_z = _types_and_magnitudes(rng, roles, masker_mag, lens_draw)
    true_mag, gr = _colours(rng, typ, is_star, mag_z, roles, lens_draw)
    shape_r, e1, e2, sersic = _shapes(rng, typ, mag_z, roles, lens_draw)
    return Population(typ, is_star, is_dup, true_mag, gr, shape_r, e1, e2, sersic)


def _types_and_magnitudes(rng, roles: RowRoles, masker_mag, lens_draw):
    n = len(roles.is_field)
    a, (m1, m2) = COUNTS_SLOPE, Z_MAG_RANGE
    u = rng.uniform(size=n)
    mag_z = np.log10(u * (10 ** (a * m2) - 10 ** (a * m1)) + 10 ** (a * m1)) / a  # inverse CDF of the counts
    mix_bin = np.digitize(mag_z, TYPE_MIX_EDGES)
    cum = np.cumsum(np.array(TYPE_MIX)[mix_bin], axis=1)
    typ = np.minimum((rng.uniform(size=n)[:, None] > cum).sum(axis=1).astype(np.int64), SER)
    is_star = (typ == PSF) & (rng.uniform(size=n) < np.array(STAR_FRACTION)[mix_bin])
    # Maskers: stars are PSF at their Gaia G; SGA galaxies SER or DEV; globular clusters PSF-like blobs.
    is_masker, kind, mref = roles.is_masker, roles.masker_kind, roles.masker_index
    typ = np.where(is_masker & (kind <= 1), PSF, typ)
    is_star = np.where(is_masker, kind <= 1, is_star)
    typ = np.where(is_masker & (kind == 2), np.where(mref % 2 == 0, SER, DEV), typ)
    typ = np.where(is_masker & (kind == 3), PSF, typ)
    mag_z = np.where(is_masker, np.where(kind <= 1, masker_mag + STAR_Z_MINUS_G, masker_mag), mag_z)
    is_lens, lref = roles.is_lens, roles.lens_index
    typ = np.where(is_lens, np.array([SER, REX, DEV, EXP])[lens_draw["type_code"][lref].astype(int)], typ)
    is_star = is_star & ~is_lens
    mag_z = np.where(is_lens, lens_draw["mag_z"][lref], mag_z)
    is_dup = roles.is_field & is_star & (rng.uniform(size=n) < DUP_RATE) & (mag_z < DUP_MAX_Z)
    return np.where(is_dup, DUP, typ), is_star, is_dup, mag_z


def _colours(rng, typ, is_star, mag_z, roles: RowRoles, lens_draw):
    """Dereddened AB magnitudes in every sweep band, and g − r."""
    n = len(typ)
    early, disc = (typ == DEV) | (typ == SER), (typ == EXP) | (typ == REX)
    gr = np.select(
        [is_star, early, disc],
        [np.clip(rng.normal(*STAR_GR, n), *STAR_GR_CLIP), rng.normal(*EARLY_GR, n), rng.normal(*DISC_GR, n)],
        rng.normal(*COMPACT_GR, n),
    )
    rz = np.select(
        [is_star, early, disc],
        [STAR_RZ_PER_GR * gr + rng.normal(0.0, STAR_RZ_SCATTER, n), rng.normal(*EARLY_RZ, n), rng.normal(*DISC_RZ, n)],
        rng.normal(*COMPACT_RZ, n),
    )
    is_lens, lref = roles.is_lens, roles.lens_index
    gr = np.where(is_lens, lens_draw["lens_gr"][lref], gr)
    rz = np.where(is_lens, lens_draw["lens_rz"][lref], rz)
    zw1 = np.where(is_star, rng.normal(*STAR_ZW1, n), rng.normal(*GALAXY_ZW1, n))
    zw1 = np.where(is_lens | early, rng.normal(*EARLY_ZW1, n), zw1)
    ri = RI_PER_RZ * rz + rng.normal(0, RI_SCATTER, n)
    true_mag = {"Z": mag_z, "R": mag_z + rz, "G": mag_z + rz + gr, "I": mag_z + rz - ri, "W1": mag_z - zw1}
    true_mag["W2"] = true_mag["W1"] + np.where(is_star, rng.normal(*STAR_W1W2, n), rng.normal(*OTHER_W1W2, n))
    true_mag["W3"] = true_mag["W2"] + rng.normal(*MIDIR_STEP, n)
    true_mag["W4"] = true_mag["W3"] + rng.normal(*MIDIR_STEP, n)
    return true_mag, gr


def _shapes(rng, typ, mag_z, roles: RowRoles, lens_draw):
    """Tractor SHAPE_R (arcsec), SHAPE_E1, SHAPE_E2 and SERSIC; point sources have 0 size and index."""
    n = len(typ)
    size_scale = 10 ** (SIZE_PER_MAG * (mag_z - SIZE_PIVOT_MAG))
    med = np.select([typ == t for t in MEDIAN_SHAPE_R], list(MEDIAN_SHAPE_R.values()), 0.0)
    shape_r = med * size_scale * np.exp(rng.normal(0, SIZE_LOG_SCATTER, n))
    shape_r = np.where(typ == REX, np.clip(shape_r, *REX_SHAPE_R_RANGE), np.clip(shape_r, *GALAXY_SHAPE_R_RANGE))
    shape_r = np.where(roles.is_masker & (roles.masker_kind == 2), rng.uniform(*SGA_SHAPE_R, n), shape_r)
    is_lens, lref = roles.is_lens, roles.lens_index
    shape_r = np.where(is_lens, lens_draw["shape_r"][lref], shape_r)
    shape_r = np.where((typ == PSF) | (typ == DUP), 0.0, shape_r)
    emax = np.select([typ == t for t in MAX_ELLIPTICITY], list(MAX_ELLIPTICITY.values()), 0.0)
    e = emax * rng.beta(*ELLIPTICITY_BETA, n)
    phi = rng.uniform(0, np.pi, n)
    e1, e2 = e * np.cos(2 * phi), e * np.sin(2 * phi)
    lens_round = is_lens & (typ == REX)
    e1 = np.where(is_lens, np.where(lens_round, 0.0, lens_draw["shape_e1"][lref]), e1)
    e2 = np.where(is_lens, np.where(lens_round, 0.0, lens_draw["shape_e2"][lref]), e2)
    ser_index = np.clip(np.exp(rng.normal(np.log(SER_INDEX_MEDIAN), SER_INDEX_LOG_SCATTER, n)), *SER_INDEX_RANGE)
    sersic = np.select([typ == REX, typ == EXP, typ == DEV, typ == SER], [1.0, 1.0, 4.0, ser_index], 0.0)
    sersic = np.where(is_lens, lens_draw["sersic"][lref], sersic)
    return shape_r, e1, e2, sersic
