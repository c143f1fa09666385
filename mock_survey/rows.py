"""Rows of the embedded mock survey's sweep files, in the DR10 sweep data model (``sweep_model``).

A block (one 5°×5° sweep file) is planned first — every row's position and role (field source,
masker, known lens), sorted into brick order with DR10 (RELEASE, BRICKID, OBJID) keys — then filled
chunk by chunk: populations (``mock_populations``), conditions and photometry
(``mock_conditions``), masks (``mock_masks``), and the columns derived from them (fit quality,
reference catalogs, Gaia astrometry). Each chunk draws from its own generator keyed by
(seed, file, chunk), in a fixed order, so the bytes depend only on the configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from darkhaloscope.errors import InputError
from darkhaloscope.seeding import rng_for
from darkhaloscope.sky import chord_for_arcsec, unit_vectors
from darkhaloscope.survey import sweep_model as sm
from darkhaloscope.survey.sweeps import SweepBox, sweep_filename

from .conditions import Conditions, measured_photometry, observing_conditions, wise_nobs
from .masks import BRIGHT_STAR, MB, SGA_GALAXY, MaskColumns, Maskers, forced_point_sources, mask_columns, mask_hits
from .populations import DUP, PSF, SER, TYPE_NAMES, Population, RowRoles, draw_population, uniform_in_box

#: Side of a DR10 sweep block (deg).
BLOCK_DEG = 5
#: OBJIDs of one brick in one block occupy [slot · OBJID_SLOT, (slot + 1) · OBJID_SLOT).
OBJID_SLOT = 1 << 18
#: Field sources are kept farther than this (arcsec) from a known lens, so its row is the only match.
LENS_CLEARANCE_ARCSEC = 4.0
#: Row roles in a block plan.
FIELD, MASKER, KNOWN_LENS = 0, 1, 2
#: DR10.1 reprocessed some bricks (the sub-blob fix) and gave them RELEASE 10002; the mock marks
#: every RELEASE_10002_EVERY-th BRICKID so.
RELEASE_10002_EVERY = 17
#: Gaia G − r of a source ≈ GAIA_G_OFFSET + GAIA_G_PER_GR · (g − r); Gaia sees stars to G = GAIA_G_LIMIT;
#: Tycho-2 holds the stars brighter than TYCHO_G_LIMIT.
GAIA_G_OFFSET, GAIA_G_PER_GR, GAIA_G_LIMIT, TYCHO_G_LIMIT = -0.1, -0.15, 20.8, 11.0
#: DCHISQ column of each type code: DR10 orders DCHISQ as PSF, REX, DEV, EXP, SER (DR10 catalog page).
DCHISQ_COLUMN = np.array([0, 1, 3, 2, 4])  # PSF, REX, EXP, DEV, SER
#: FWHM of a Gaussian per sigma (2 sqrt(2 ln 2)), rounded as the mock's astrometry and fibre flux use it.
FWHM_PER_SIGMA = 2.355
#: DESI fibre: 1.5″ diameter (radius 0.75″); FIBERFLUX is the flux inside it for the source's size.
FIBRE_RADIUS_ARCSEC = 0.75


@dataclass
class BlockPlan:
    """Every row of one block in brick order: position (deg), role, index into maskers (role
    MASKER) or known lenses (role KNOWN_LENS) else −1, and the DR10 key columns."""

    box: SweepBox
    ra: np.ndarray
    dec: np.ndarray
    role: np.ndarray
    ref: np.ndarray
    brickid: np.ndarray
    brickname: np.ndarray
    objid: np.ndarray
    release: np.ndarray


def plan_block(
    box: SweepBox, n_rows: int, chunk_rows: int, seed: int, maskers: Maskers, lens_ra, lens_dec
) -> BlockPlan:
    """Positions of the ``n_rows`` rows of the block (field sources, ``maskers`` and the known lenses
    inside the box), sorted into brick order with per-brick OBJIDs."""
    lens_idx = np.flatnonzero(box.contains(lens_ra, lens_dec))
    n_field = n_rows - len(maskers.ra) - len(lens_idx)
    if n_field < 0:
        raise InputError(
            f"n_rows_per_file={n_rows} is smaller than the {len(maskers.ra) + len(lens_idx)} fixed rows of block {box}"
        )
    parts = [
        uniform_in_box(rng_for("mock-positions", seed, sweep_filename(box), c), box, min(chunk_rows, n_field - start))
        for c, start in enumerate(range(0, n_field, chunk_rows))
    ]
    fra = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
    fdec = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
    if len(lens_idx):
        fra, fdec = _clear_lenses(box, seed, fra, fdec, lens_ra[lens_idx], lens_dec[lens_idx])
    ra = np.concatenate([fra, maskers.ra, lens_ra[lens_idx]])
    dec = np.concatenate([fdec, maskers.dec, lens_dec[lens_idx]])
    role = np.concatenate(
        [
            np.full(len(fra), FIELD, np.int8),
            np.full(len(maskers.ra), MASKER, np.int8),
            np.full(len(lens_idx), KNOWN_LENS, np.int8),
        ]
    )
    ref = np.concatenate([np.full(len(fra), -1), np.arange(len(maskers.ra)), lens_idx]).astype(np.int64)
    brickid, brickname, _, _ = sm.bricks_for(ra, dec)
    order = np.lexsort((ra, brickid))
    ra, dec, role, ref, brickid, brickname = (x[order] for x in (ra, dec, role, ref, brickid, brickname))
    first = np.r_[0, np.flatnonzero(np.diff(brickid)) + 1]
    rank = np.arange(len(brickid)) - np.repeat(first, np.diff(np.r_[first, len(brickid)]))
    # Bricks straddle block edges, so OBJID must also be unique across the (up to 2x2) blocks
    # sharing a brick: blocks next to each other differ in RA or Dec parity, which picks the slot.
    slot = (int(box.ra_min) // BLOCK_DEG % 2) * 2 + (int(np.floor(box.dec_min)) // BLOCK_DEG % 2)
    if rank.size and rank.max() >= OBJID_SLOT:
        raise InputError(f"block {box}: {int(rank.max()) + 1} rows in one brick exceed the mock's OBJID range")
    objid = (rank + slot * OBJID_SLOT).astype(np.int32)
    release = np.where(brickid % RELEASE_10002_EVERY == 0, 10002, 10000).astype(np.int16)
    return BlockPlan(box, ra, dec, role, ref, brickid, brickname, objid, release)


def _clear_lenses(box: SweepBox, seed: int, fra, fdec, lens_ra, lens_dec):
    """Redraw field sources that fall within LENS_CLEARANCE_ARCSEC of a known lens (drop any left after 20 tries)."""
    tree = cKDTree(unit_vectors(lens_ra, lens_dec))
    d, _ = tree.query(unit_vectors(fra, fdec), k=1)
    near = d < chord_for_arcsec(LENS_CLEARANCE_ARCSEC)
    if near.any():
        r = rng_for("mock-positions-redraw", seed, sweep_filename(box))
        for _ in range(20):
            fra[near], fdec[near] = uniform_in_box(r, box, int(near.sum()))
            d, _ = tree.query(unit_vectors(fra, fdec), k=1)
            near = d < chord_for_arcsec(LENS_CLEARANCE_ARCSEC)
            if not near.any():
                break
        fra, fdec = fra[~near], fdec[~near]
    return fra, fdec


def fill_rows(
    out: np.ndarray, plan: BlockPlan, sl: slice, maskers: Maskers, lens_draw: dict, seed: int, chunk: int
) -> None:
    """Fill ``out`` (DR10_SWEEP_DTYPE rows) for the plan's rows ``sl``, from the chunk's own generator."""
    rng = rng_for("mock-rows", seed, sweep_filename(plan.box), chunk)
    ra, dec = plan.ra[sl], plan.dec[sl]
    roles = _roles(plan, sl, maskers)
    masker_mag = maskers.mag[roles.masker_index]
    pop = draw_population(rng, roles, masker_mag, lens_draw)
    cond = observing_conditions(rng, ra, dec, seed)
    flux, ivar = measured_photometry(rng, pop.true_mag, cond, pop.shape_r, pop.is_dup, ra, dec, seed)
    masks = mask_columns(rng, mask_hits(ra, dec, maskers), cond.nobs)
    forced = forced_point_sources(masks, roles, pop.typ)
    pop = _refit_as_points(pop, forced)
    refs = _reference_catalogs(rng, pop, roles, masker_mag, forced, masks)
    quality = _fit_quality(pop, cond, flux, ivar)
    _write_catalog_columns(out, plan, sl, pop, cond, flux, ivar, masks, refs, quality)
    _write_fit_columns(rng, out, ra, dec, seed, cond, flux, masks, quality)
    _write_gaia_columns(rng, out, pop, refs)


def _roles(plan: BlockPlan, sl: slice, maskers: Maskers) -> RowRoles:
    role, ref = plan.role[sl], plan.ref[sl]
    is_masker, is_lens = role == MASKER, role == KNOWN_LENS
    masker_index = np.where(is_masker, ref, 0)
    masker_kind = np.where(is_masker, maskers.kind[masker_index], -1)
    return RowRoles(role == FIELD, is_masker, is_lens, masker_kind, masker_index, np.where(is_lens, ref, 0))


def _refit_as_points(pop: Population, forced: np.ndarray) -> Population:
    """The population after DR10's forced PSF fits: no size, shape or index for ``forced`` rows."""
    zero = lambda a: np.where(forced, 0.0, a)  # noqa: E731
    return Population(
        np.where(forced, PSF, pop.typ),
        pop.is_star,
        pop.is_dup,
        pop.true_mag,
        pop.gr,
        zero(pop.shape_r),
        zero(pop.e1),
        zero(pop.e2),
        zero(pop.sersic),
    )


def _fit_quality(pop: Population, cond: Conditions, flux: dict, ivar: dict) -> dict:
    """DCHISQ (χ² improvement of each model over no source, the fitted type's the largest), S/N,
    astrometric sigma (deg) and fibre-flux fraction."""
    n = len(pop.typ)
    snr2 = sum((flux[b] ** 2) * ivar[b] for b in ("G", "R", "Z"))
    ext = np.clip(pop.shape_r / cond.fwhm["R"], 0, 1) * 0.3
    dch = np.stack(
        [snr2 * (1 - ext), snr2 * (1 - ext / 3), snr2 * (1 - 0.02), snr2 * (1 - 0.02), snr2 * (1 - 0.01)], axis=1
    )
    best = DCHISQ_COLUMN[np.where(pop.typ == DUP, PSF, pop.typ)]
    dch[np.arange(n), best] = snr2 * (1 + 0.002)
    dch = np.where((pop.typ == DUP)[:, None], 0.0, dch)
    snr = np.sqrt(np.maximum(snr2, 1.0))
    pos_sig = np.sqrt((cond.fwhm["R"] / FWHM_PER_SIGMA) ** 2 + pop.shape_r**2) / snr / 3600.0
    sig_fib = cond.fwhm["R"] / FWHM_PER_SIGMA
    fibfrac = (1 - np.exp(-0.5 * (FIBRE_RADIUS_ARCSEC / sig_fib) ** 2)) / (1 + (pop.shape_r / 0.6) ** 1.2)
    return {"snr2": snr2, "snr": snr, "dchisq": dch, "pos_sig": pos_sig, "fibfrac": fibfrac}


def _reference_catalogs(rng, pop: Population, roles: RowRoles, masker_mag, forced, masks: MaskColumns) -> dict:
    """REF_CAT (Gaia G3, Tycho-2 T2, SGA L3), REF_ID, FITBITS and the Gaia G magnitude."""
    n = len(pop.typ)
    gaia_g = pop.true_mag["R"] + GAIA_G_OFFSET + GAIA_G_PER_GR * pop.gr
    is_gaia = (pop.is_star | pop.is_dup) & (gaia_g < GAIA_G_LIMIT)
    is_tycho = roles.is_masker & (roles.masker_kind == BRIGHT_STAR) & (masker_mag < TYCHO_G_LIMIT)
    is_sga = roles.is_masker & (roles.masker_kind == SGA_GALAXY)
    ref_cat = np.zeros(n, dtype="S2")
    ref_cat = np.where(is_gaia, b"G3", ref_cat)
    ref_cat = np.where(is_tycho, b"T2", ref_cat)
    ref_cat = np.where(is_sga, b"L3", ref_cat)
    ref_id = np.where(is_gaia | is_tycho | is_sga, (rng.integers(1, 2**62, n)), -1).astype(np.int64)
    # FITBITS: FORCED_POINTSOURCE, HIT_SERSIC_LIMIT, BRIGHT, MEDIUM, GAIA, TYCHO2, LARGEGALAXY, GAIA_POINTSOURCE
    fitbits = np.zeros(n, dtype=np.int64)
    fitbits |= np.where(forced, 0x1, 0)
    fitbits |= np.where(pop.typ == SER, np.where(pop.sersic >= 6.0, 0x8, 0), 0)
    fitbits |= np.where(masks.in_bright, 0x20, 0) | np.where(masks.in_medium & ~masks.in_bright, 0x40, 0)
    fitbits |= np.where(is_gaia, 0x80 | 0x1000, 0) | np.where(is_tycho, 0x100, 0)
    fitbits |= np.where(is_sga, 0x200, 0)
    return {
        "gaia_g": gaia_g,
        "is_gaia": is_gaia,
        "is_tycho": is_tycho,
        "ref_cat": ref_cat,
        "ref_id": ref_id,
        "fitbits": fitbits,
    }


def _unwise_tile(ra, dec) -> np.ndarray:
    """unWISE-like coadd tile names (1.5625° tiles, ``<AAAa>[pm]<BBB>`` of the centre) for WISE_COADD_ID."""
    size = 1.5625
    dec_c = np.round(np.asarray(dec) / size) * size
    ncol = np.maximum(1, np.round(360 * np.cos(np.radians(dec_c)) / size)).astype(np.int64)
    ra_c = (np.floor(np.mod(ra, 360) / 360 * ncol) + 0.5) * 360 / ncol
    ra_part = sm._digits(np.floor(np.asarray(ra_c) * 10 + 1e-6).astype(np.int64) % 10000, 4)
    dec_part = sm._digits(np.floor(np.abs(dec_c) * 10 + 1e-6).astype(np.int64) % 1000, 3)
    sign = np.where(np.asarray(dec_c) >= 0, ord("p"), ord("m")).astype(np.uint8)[:, None]
    return np.ascontiguousarray(np.concatenate([ra_part, sign, dec_part], axis=1)).view("S8").ravel()


def _write_catalog_columns(
    out,
    plan: BlockPlan,
    sl: slice,
    pop: Population,
    cond: Conditions,
    flux,
    ivar,
    masks: MaskColumns,
    refs: dict,
    quality: dict,
) -> None:
    """The columns that need no further draws: keys, positions, type, photometry, depths, shapes, masks."""
    dec = plan.dec[sl]
    out["RELEASE"], out["BRICKID"], out["BRICKNAME"], out["OBJID"] = (
        plan.release[sl],
        plan.brickid[sl],
        plan.brickname[sl],
        plan.objid[sl],
    )
    out["TYPE"] = TYPE_NAMES[pop.typ]
    out["RA"], out["DEC"] = plan.ra[sl], dec
    out["RA_IVAR"] = 1.0 / (quality["pos_sig"] / np.cos(np.radians(dec))) ** 2
    out["DEC_IVAR"] = 1.0 / quality["pos_sig"] ** 2
    out["DCHISQ"] = quality["dchisq"]
    out["EBV"] = cond.ebv
    for b in sm.DR10_OPTICAL + sm.WISE:
        out[f"FLUX_{b}"], out[f"FLUX_IVAR_{b}"], out[f"MW_TRANSMISSION_{b}"] = flux[b], ivar[b], cond.mw[b]
    for b in sm.DR10_OPTICAL:
        out[f"NOBS_{b}"] = cond.nobs[b]
        out[f"ANYMASK_{b}"], out[f"ALLMASK_{b}"] = masks.anymask[b], masks.allmask[b]
        out[f"PSFSIZE_{b}"] = np.where(cond.nobs[b] > 0, cond.fwhm[b], 0.0)
        out[f"PSFDEPTH_{b}"], out[f"GALDEPTH_{b}"] = cond.psfdepth[b], cond.galdepth[b]
        out[f"FIBERFLUX_{b}"] = flux[b] * quality["fibfrac"]
    out["WISEMASK_W1"] = np.where(masks.maskbits & MB["WISEM1"], 0x1, 0)
    out["WISEMASK_W2"] = np.where(masks.maskbits & MB["WISEM2"], 0x1, 0)
    out["PSFDEPTH_W1"], out["PSFDEPTH_W2"] = ivar["W1"], ivar["W2"]
    out["WISE_COADD_ID"] = _unwise_tile(plan.ra[sl], dec)
    snr, has_shape = quality["snr"], pop.shape_r > 0
    out["SHAPE_R"] = pop.shape_r
    out["SHAPE_R_IVAR"] = np.where(has_shape, 0.5 * (snr / np.maximum(pop.shape_r, 0.1)) ** 2, 0.0)
    out["SHAPE_E1"], out["SHAPE_E2"] = pop.e1, pop.e2
    out["SHAPE_E1_IVAR"] = np.where(has_shape, (0.5 * snr) ** 2, 0.0)
    out["SHAPE_E2_IVAR"] = np.where(has_shape, (0.5 * snr) ** 2, 0.0)
    out["REF_CAT"], out["REF_ID"] = refs["ref_cat"], refs["ref_id"]
    out["REF_EPOCH"] = np.select([refs["is_gaia"], refs["is_tycho"]], [2016.0, 2000.0], 0.0)
    out["MASKBITS"], out["FITBITS"] = masks.maskbits, refs["fitbits"]
    out["SERSIC"] = pop.sersic
    out["SERSIC_IVAR"] = np.where(pop.typ == SER, (snr / np.maximum(pop.sersic, 0.5)) ** 2 * 0.1, 0.0)


def _write_fit_columns(rng, out, ra, dec, seed: int, cond: Conditions, flux, masks: MaskColumns, quality: dict) -> None:
    """RCHISQ, FRACFLUX, NOBS_W*, FRACMASKED, FRACIN and FIBERTOTFLUX (drawn in this order)."""
    n = len(ra)
    in_medium = masks.in_medium
    for b in sm.DR10_OPTICAL + sm.WISE:
        out[f"RCHISQ_{b}"] = 1.0 + np.abs(rng.normal(0, 0.3, n)) + 0.02 * np.sqrt(quality["snr2"])
        out[f"FRACFLUX_{b}"] = rng.exponential(0.02, n) + np.where(in_medium, rng.exponential(0.2, n), 0)
    for b, nobs in wise_nobs(rng, ra, dec, seed).items():
        out[f"NOBS_{b}"] = nobs
    for b in sm.DR10_OPTICAL:
        out[f"FRACMASKED_{b}"] = np.where(
            masks.in_bright | masks.core, rng.uniform(0, 0.3, n), rng.exponential(0.002, n)
        )
        out[f"FRACIN_{b}"] = rng.uniform(0.97, 1.0, n)
        out[f"FIBERTOTFLUX_{b}"] = flux[b] * quality["fibfrac"] * (1 + rng.exponential(0.05, n))


def _write_gaia_columns(rng, out, pop: Population, refs: dict) -> None:
    """Gaia photometry and astrometry of the Gaia and Tycho-2 sources (zero elsewhere)."""
    n, gr = len(pop.typ), pop.gr
    gsel = refs["is_gaia"] | refs["is_tycho"]
    g = np.where(gsel, refs["gaia_g"], 0.0)
    out["GAIA_PHOT_G_MEAN_MAG"] = g
    out["GAIA_PHOT_G_MEAN_FLUX_OVER_ERROR"] = np.where(gsel, 10 ** (-0.2 * (g - 23.5)), 0.0)
    out["GAIA_PHOT_BP_MEAN_MAG"] = np.where(gsel, g + 0.25 + 0.4 * gr, 0.0)
    out["GAIA_PHOT_BP_MEAN_FLUX_OVER_ERROR"] = np.where(gsel, 10 ** (-0.2 * (g - 22.5)), 0.0)
    out["GAIA_PHOT_RP_MEAN_MAG"] = np.where(gsel, g - 0.45 - 0.3 * gr, 0.0)
    out["GAIA_PHOT_RP_MEAN_FLUX_OVER_ERROR"] = np.where(gsel, 10 ** (-0.2 * (g - 22.0)), 0.0)
    out["GAIA_ASTROMETRIC_EXCESS_NOISE"] = np.where(gsel, rng.exponential(0.1, n), 0.0)
    out["GAIA_DUPLICATED_SOURCE"] = np.where(gsel & (rng.uniform(size=n) < 0.01), ord("T"), ord("F"))
    out["GAIA_PHOT_BP_RP_EXCESS_FACTOR"] = np.where(gsel, 1.2 + rng.exponential(0.03, n), 0.0)
    out["GAIA_ASTROMETRIC_SIGMA5D_MAX"] = np.where(gsel, 0.05 * 10 ** (0.2 * (g - 15)), 0.0)
    out["GAIA_ASTROMETRIC_PARAMS_SOLVED"] = np.where(gsel, np.where(g < 20, 31, 3), 0)
    plx_err = np.where(gsel, 0.02 * 10 ** (0.2 * (g - 15)), 1.0)
    out["PARALLAX"] = np.where(gsel, np.abs(rng.normal(0.5, 0.5, n)) + plx_err * rng.standard_normal(n), 0.0)
    out["PARALLAX_IVAR"] = np.where(gsel, 1 / plx_err**2, 0.0)
    out["PMRA"] = np.where(gsel, rng.normal(0, 6, n), 0.0)
    out["PMDEC"] = np.where(gsel, rng.normal(-3, 6, n), 0.0)
    out["PMRA_IVAR"] = out["PARALLAX_IVAR"] * 0.8
    out["PMDEC_IVAR"] = out["PARALLAX_IVAR"] * 0.8
