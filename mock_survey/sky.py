"""The mock sky: renders any window of the embedded mock survey in g, r, z (DHS_SURVEY=mock).

Units: images in nanomaggies per pixel on the 0.262″ brick TAN grids; invvar in 1/nmgy²; angles
in arcsec unless named ``_deg``.

Model (per source, from the sweep columns):
- PSF: a point source; REX/EXP: Sérsic n = 1; DEV: n = 4; SER: n = SERSIC (clipped to [0.5, 6]);
  DUP carries no optical flux and is not drawn. Negative fluxes are drawn as 0.
- Radius convention: Tractor's SHAPE_R is the half-light radius along the **major axis**; the
  profiles module uses the product-average radius, so r_sersic = SHAPE_R · sqrt(q) with
  q = (1 − |e|)/(1 + |e|). Tractor's (e1, e2) have the position angle East of North; on the image
  grid (x West, y North) that is the lenstronomy ellipticity (−e1, −e2).
- Profiles are truncated at SHAPE_R · t(n) along the major axis (t = 4 for n ≤ 1 rising to 8 for
  n ≥ 4, as Tractor truncates its EXP/DEV mixtures), pixel-integrated by supersampling small
  galaxies, normalised to the catalog flux (so a stamp's total is the catalog flux), and convolved
  with a Moffat (β = 3.5) PSF of FWHM = the source's PSFSIZE in each band: the same PSF model
  as the injected arcs (``psf.SURVEY_PSF_PROFILE``), so PSF wings tell arcs and hosts not apart.
  Sub-pixel positions are exact: each stamp is shifted by a Fourier phase ramp.
- Noise: per brick and band the median PSFSIZE / PSFDEPTH of the catalog sources in that brick
  define the pixel noise σ = 1/sqrt(PSFDEPTH · N_eff), N_eff = 4π (FWHM / 2.3548 / 0.262)² pixels,
  the effective area of a Gaussian PSF of that FWHM, as DR10 defines PSFDEPTH (psfnorm/σ)² with
  psfnorm² = 1/N_eff (legacypipe coadds.py; DR10 catalog page). invvar = 1/σ² everywhere on a covered brick.
- Hosts with structure: STRUCTURED_FRACTION of the DEV, EXP and SER galaxies carry one offset
  clump (an exponential of 0.2–0.4 SHAPE_R, 0.5–1.5 SHAPE_R from the centre in a random direction,
  holding 5–20 % of the galaxy's flux in every band, taken from the galaxy so the total is the
  catalog's): light the point-symmetric Tractor model lacks, as real companions, bars, arms and
  star-forming clumps are. Which galaxies and every clump parameter are hashes of the position
  (``_structure_draws``), so every window agrees and a galaxy keeps its clump; ``structure=False``
  draws the bare Tractor models.
- Maskbits: NPRIMARY outside the brick's primary region; a source's catalog MASKBITS (other bits)
  are painted on a disk around it (radius max(5 px, 2·SHAPE_R)), an approximation to the DR10 map.

Determinism: each brick's 3600² pixel grid is cut into fixed ``tile_size``² tiles. A tile is the
sum, in catalog order, of the float32 stamps of every source overlapping it (stamps are computed
in float64 and rounded, so they do not depend on which other sources share a batch), plus noise
seeded by (noise key, brick, tile, band) via darkhaloscope.seeding, the noise key being that of the
mock seed (``mock_sky_noise_key``). Any two windows therefore agree pixel for pixel, and mock coadd
files written from the same tiles match the rendered cutouts exactly.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from darkhaloscope.constants import (
    AB_ZEROPOINT,
    BANDS,
    BRICK_SIZE,
    PIXEL_SCALE_ARCSEC,
    STAMP_SIZE,
    psfdepth_from_depth_mag,
)
from darkhaloscope.errors import InputError
from darkhaloscope.imaging.batch import CutoutBatch, choose_bricks, paste_window
from darkhaloscope.imaging.bricks import BrickTable, check_coords
from darkhaloscope.imaging.coadd import coadd_path
from darkhaloscope.imaging.sources import no_failures
from darkhaloscope.imaging.wcs import TanWCS
from darkhaloscope.profiles import sersic_b_n, sersic_surface_brightness
from darkhaloscope.psf import GAUSSIAN_FWHM_PER_SIGMA, MOFFAT_BETA, SURVEY_PSF_PROFILE, kernel_radius_pix, psf_kernels
from darkhaloscope.seeding import rng_for, unit_hash_array

#: Version key of the mock sky's noise seeds; change it and every noise pixel changes.
MOCK_SKY_KEY = "dhs-mock-sky-v1"
#: Sweep columns the mock sky draws its sources from.
MOCK_SKY_COLUMNS = [
    "ra",
    "dec",
    "type",
    "flux_g",
    "flux_r",
    "flux_z",
    "shape_r",
    "shape_e1",
    "shape_e2",
    "sersic",
    "psfsize_g",
    "psfsize_r",
    "psfsize_z",
    "psfdepth_g",
    "psfdepth_r",
    "psfdepth_z",
    "maskbits",
]
#: FFT stamp sizes (pixels) a source is rendered on; the largest bounds a galaxy's extent.
STAMP_CLASSES = (24, 32, 48, 64, 96, 128, 192, 256)
#: PSF kernels reach 3 FWHM, as the injection engine's (a Moffat β = 3.5 keeps 99.6% of its light there).
KERNEL_N_FWHM = 3.0
#: Galaxies with SHAPE_R below this many pixels are pixel-integrated on a 3x3 sub-grid.
SUPERSAMPLE_BELOW_PIX = 2.5
#: Typical DR10 PSF FWHM (arcsec) and PSFDEPTH (1/nmgy², 5σ = 24.7/23.9/23.0 AB) when a catalog gives none.
DEFAULT_PSFSIZE = {"g": 1.5, "r": 1.35, "z": 1.3}
DEFAULT_PSFDEPTH = {b: float(psfdepth_from_depth_mag(m)) for b, m in zip(BANDS, (24.7, 23.9, 23.0))}
NPRIMARY = 0x1
#: Side (pixels) of the tiles a brick is rendered in (divides the 3600-pixel brick).
TILE_SIZE = 200
_TYPE_N = {"REX": 1.0, "EXP": 1.0, "DEV": 4.0}
#: Hosts with structure: the fraction of galaxies of each Tractor type that carry one offset clump
#: the Tractor model does not (see the module doc). DEV: the ~17 % of galaxies with tidal features
#: at DECaLS depth (Hood et al. 2018, ApJ 857, 144); EXP/SER (discs): the ~30 % barred or clumpy
#: (Masters et al. 2011, MNRAS 411, 2026, Galaxy Zoo 2 bars). REX (barely resolved) and PSF: none.
STRUCTURED_FRACTION = {"DEV": 0.17, "EXP": 0.30, "SER": 0.30}
#: The clump: flux fraction taken from its galaxy, offset [SHAPE_R] and radius [SHAPE_R, at least
#: STRUCTURE_MIN_R_ARCSEC], each drawn uniformly in (low, high).
STRUCTURE_FLUX_FRAC, STRUCTURE_OFFSET, STRUCTURE_R = (0.05, 0.20), (0.5, 1.5), (0.2, 0.4)
STRUCTURE_MIN_R_ARCSEC = 0.1


def mock_sky_noise_key(seed: int) -> str:
    """Key of the pixel noise of mock seed ``seed``: MOCK_SKY_KEY for seed 0, the default sky, and
    MOCK_SKY_KEY/seed-<seed> for the others, so each seed has its own noise."""
    return MOCK_SKY_KEY if int(seed) == 0 else f"{MOCK_SKY_KEY}/seed-{int(seed)}"


def gaussian_neff_pix(fwhm_arcsec, pixel_scale: float = PIXEL_SCALE_ARCSEC):
    """Effective area (pixels) of a Gaussian PSF of FWHM ``fwhm_arcsec``: 4π σ²."""
    sigma = np.asarray(fwhm_arcsec, dtype=np.float64) / GAUSSIAN_FWHM_PER_SIGMA / pixel_scale
    return 4.0 * np.pi * sigma**2


def pixel_sigma(psfdepth, fwhm_arcsec, pixel_scale: float = PIXEL_SCALE_ARCSEC):
    """Per-pixel noise σ (nmgy) implied by PSFDEPTH (1/nmgy²) and PSF FWHM (arcsec)."""
    return 1.0 / np.sqrt(np.asarray(psfdepth, dtype=np.float64) * gaussian_neff_pix(fwhm_arcsec, pixel_scale))


def _column(cat, name: str, required: bool = True):
    if isinstance(cat, dict):
        if name not in cat:
            if required:
                raise InputError(f"mock sky catalog lacks column {name!r}")
            return None
        col = cat[name]
    else:  # pyarrow Table
        if name not in cat.column_names:
            if required:
                raise InputError(f"mock sky catalog lacks column {name!r}")
            return None
        col = cat.column(name).to_numpy(zero_copy_only=False)
    return np.asarray(col)


def _structure_draws(ra: np.ndarray, dec: np.ndarray) -> np.ndarray:
    """(N, 5) uniforms per source position (0.01″ grid): selection, flux fraction, offset, angle, radius."""
    key = np.round(ra * 3.6e5).astype(np.int64) * np.int64(100_000_000) + np.round((dec + 90.0) * 3.6e5).astype(
        np.int64
    )
    return np.stack([unit_hash_array(key, f"mock-host-structure-{i}") for i in range(5)], axis=1)


def structured_host(ra, dec, types) -> np.ndarray:
    """Whether the galaxies at ``ra``, ``dec`` [deg] of Tractor ``types`` carry the offset clump
    (STRUCTURED_FRACTION of their type, drawn by ``_structure_draws``); the sky also leaves sources
    without a profile (``n`` or ``shape_r`` zero, or not kept) bare."""
    ra, dec = np.atleast_1d(np.asarray(ra, float)), np.atleast_1d(np.asarray(dec, float))
    frac_of_type = np.array([STRUCTURED_FRACTION.get(str(t).strip().upper(), 0.0) for t in np.atleast_1d(types)])
    return _structure_draws(ra, dec)[:, 0] < frac_of_type


def _with_structure(types: np.ndarray, arrays: tuple) -> tuple:
    """The source arrays (ra, dec, n, shape_r, e1, e2, shrink, flux, psfsize, psfdepth, maskbits,
    keep, clump) with each structured galaxy's clump inserted right after it (STRUCTURED_FRACTION)."""
    ra, dec, n, shape_r, e1, e2, shrink, flux, psfsize, psfdepth, mb, keep, clump = arrays
    u = _structure_draws(ra, dec)
    par = np.flatnonzero(keep & (n > 0) & (shape_r > 0) & structured_host(ra, dec, types))
    if len(par) == 0:
        return arrays
    f = STRUCTURE_FLUX_FRAC[0] + np.diff(STRUCTURE_FLUX_FRAC)[0] * u[par, 1]
    dist = shape_r[par] * (STRUCTURE_OFFSET[0] + np.diff(STRUCTURE_OFFSET)[0] * u[par, 2])
    ang = 2.0 * np.pi * u[par, 3]
    r_clump = np.maximum(shape_r[par] * (STRUCTURE_R[0] + np.diff(STRUCTURE_R)[0] * u[par, 4]), STRUCTURE_MIN_R_ARCSEC)
    flux = flux.copy()
    child_flux = flux[par] * f[:, None]
    flux[par] *= (1.0 - f)[:, None]
    child = (
        ra[par] + dist * np.cos(ang) / 3600.0 / np.cos(np.radians(dec[par])),
        dec[par] + dist * np.sin(ang) / 3600.0,
        np.ones(len(par)),
        r_clump,
        np.zeros(len(par)),
        np.zeros(len(par)),
        np.ones(len(par)),
        child_flux,
        psfsize[par],
        psfdepth[par],
        np.zeros(len(par), np.int32),
        np.ones(len(par), bool),
        np.ones(len(par), bool),
    )
    parent = (ra, dec, n, shape_r, e1, e2, shrink, flux, psfsize, psfdepth, mb, keep, clump)
    # drawing order: each clump right after its galaxy
    order = np.argsort(np.concatenate([2 * np.arange(len(ra)), 2 * par + 1]), kind="stable")
    return tuple(np.concatenate([a, c])[order] for a, c in zip(parent, child, strict=True))


@dataclass
class _Sources:
    """Catalog sources in drawing order, as float64 arrays (angles arcsec, fluxes nmgy)."""

    ra: np.ndarray
    dec: np.ndarray
    n: np.ndarray  # Sérsic index; 0 = point source
    r_maj: np.ndarray  # SHAPE_R (arcsec)
    e1: np.ndarray  # image-grid (lenstronomy) ellipticity
    e2: np.ndarray
    flux: np.ndarray  # (N, 3)
    psfsize: np.ndarray  # (N, 3) FWHM arcsec
    psfdepth: np.ndarray  # (N, 3)
    maskbits: np.ndarray  # (N,) int32
    half: np.ndarray  # (N,) stamp half-size (pixels) = STAMP_CLASS / 2
    trunc: np.ndarray  # (N,) truncation radius along the major axis (arcsec)
    gal_half: np.ndarray  # (N,) half-size (pixels) of the grid the profile is evaluated on; 0 = point
    clump: np.ndarray  # (N,) bool: a structured galaxy's clump (not a catalog source)

    @classmethod
    def from_catalog(cls, cat, structure: bool = True) -> "_Sources":
        ra, dec = check_coords(_column(cat, "ra"), _column(cat, "dec"))
        types = np.array([str(t).strip().upper() for t in _column(cat, "type")], dtype=object)
        unknown = sorted(set(types) - {"PSF", "REX", "EXP", "DEV", "SER", "DUP"})
        if unknown:
            raise InputError(f"mock sky catalog column 'type' has unknown values {unknown[:5]}")
        flux = np.stack([_column(cat, f"flux_{b}").astype(np.float64) for b in BANDS], axis=1)
        if not np.all(np.isfinite(flux)):
            raise InputError("mock sky catalog has non-finite flux_g/r/z values")
        psfsize = np.stack([_column(cat, f"psfsize_{b}").astype(np.float64) for b in BANDS], axis=1)
        psfdepth = np.stack([_column(cat, f"psfdepth_{b}").astype(np.float64) for b in BANDS], axis=1)
        ext = types != "PSF"
        shape_r = _column(cat, "shape_r", required=bool(ext.any()))
        m = len(ra)
        shape_r = np.zeros(m) if shape_r is None else np.nan_to_num(shape_r.astype(np.float64))
        e1 = _column(cat, "shape_e1", required=bool(ext.any()))
        e2 = _column(cat, "shape_e2", required=bool(ext.any()))
        e1 = np.zeros(m) if e1 is None else np.nan_to_num(e1.astype(np.float64))
        e2 = np.zeros(m) if e2 is None else np.nan_to_num(e2.astype(np.float64))
        emod = np.hypot(e1, e2)
        shrink = np.where(emod > 0.95, 0.95 / np.maximum(emod, 1e-12), 1.0)  # keep q > 0
        sersic = _column(cat, "sersic", required=bool((types == "SER").any()))
        sersic = np.full(m, 4.0) if sersic is None else np.nan_to_num(sersic.astype(np.float64), nan=4.0)
        n = np.array([_TYPE_N.get(t, 0.0) for t in types])
        n = np.where(types == "SER", np.clip(sersic, 0.5, 6.0), n)
        n = np.where(shape_r > 0, n, 0.0)  # a zero-size galaxy is a point source
        mb = _column(cat, "maskbits", required=False)
        mb = np.zeros(m, np.int32) if mb is None else mb.astype(np.int32)
        keep = (types != "DUP") & (flux.max(axis=1) > 0)
        flux = np.maximum(flux, 0.0)
        clump = np.zeros(m, bool)
        if structure:
            ra, dec, n, shape_r, e1, e2, shrink, flux, psfsize, psfdepth, mb, keep, clump = _with_structure(
                types, (ra, dec, n, shape_r, e1, e2, shrink, flux, psfsize, psfdepth, mb, keep, clump)
            )
            m = len(ra)
        # stamp size: truncated profile + PSF kernel must fit the FFT box without wrapping
        t_fac = 4.0 + 4.0 * (np.clip(n, 1.0, 4.0) - 1.0) / 3.0
        fwhm_max = np.nanmax(np.where(psfsize > 0, psfsize, np.nan), axis=1)
        fwhm_max = np.where(np.isfinite(fwhm_max), fwhm_max, max(DEFAULT_PSFSIZE.values()))
        krad = np.array([kernel_radius_pix(f, n_fwhm=KERNEL_N_FWHM) for f in fwhm_max]) if m else np.zeros(0)
        need = np.where(n > 0, np.ceil(t_fac * shape_r / PIXEL_SCALE_ARCSEC), 0) + krad + 2
        classes = np.array(STAMP_CLASSES)
        ci = np.minimum(np.searchsorted(classes / 2, need), len(classes) - 1)
        half = classes[ci] // 2
        trunc = np.minimum(t_fac * shape_r, (half - krad - 2) * PIXEL_SCALE_ARCSEC)
        # the profile itself is evaluated on a smaller grid that just holds the truncated galaxy
        gi = np.searchsorted(classes / 2, np.ceil(trunc / PIXEL_SCALE_ARCSEC) + 1)
        gal_half = np.where(n > 0, classes[np.minimum(gi, len(classes) - 1)] // 2, 0)
        s = np.flatnonzero(keep)
        return cls(
            ra[s],
            dec[s],
            n[s],
            shape_r[s],
            -e1[s] * shrink[s],
            -e2[s] * shrink[s],
            flux[s],
            psfsize[s],
            psfdepth[s],
            mb[s],
            half[s].astype(np.int64),
            trunc[s],
            gal_half[s].astype(np.int64),
            clump[s],
        )


@dataclass
class _BrickState:
    """Per-brick render state: source pixel positions, noise level, primary-region maskbits."""

    name: str
    wcs: TanWCS
    rows: np.ndarray  # indices into _Sources overlapping the brick, ascending
    x: np.ndarray
    y: np.ndarray
    ix: np.ndarray
    iy: np.ndarray
    sigma: np.ndarray  # (3,) pixel noise (nmgy)
    fwhm: np.ndarray  # (3,) brick-median FWHM (arcsec), used for invalid per-source PSFSIZE
    bounds: tuple  # ra1, ra2, dec1, dec2
    extras: list  # [(ix, iy, stamp float32 (3,h,w))] extra stamps placed on this brick


class MockSky:
    """Deterministic renderer of the mock coadd sky (see the module docstring).

    catalog: pyarrow Table or dict of numpy arrays with the sweep columns ra, dec (deg), type,
    flux_g/r/z (nmgy), shape_r (arcsec), shape_e1, shape_e2, sersic, psfsize_g/r/z (FWHM arcsec),
    psfdepth_g/r/z (1/nmgy²), optional maskbits. bricks: the covered bricks (default: the grid's
    bricks overlapping the catalog's RA/Dec bounding box). extra_stamps: iterable of
    (ra_deg, dec_deg, stamp) with stamp (3, h, w) nmgy/pixel, already PSF-convolved, whose pixel
    (h//2, w//2) lands exactly on (ra, dec); added to the sky (e.g. lensed arcs).
    tile_size: tile side (pixels, divides 3600). cache_tiles: LRU bound on rendered tiles
    (~0.6 MB each). noise: False renders the noiseless sky (invvar is unchanged). survey_psf: per
    band (PSFSIZE [arcsec], PSFDEPTH [1/nmgy²]) medians that set the noise of a brick without
    sources of its own (default: this catalog's, :meth:`survey_summary`; a sky drawn from part of a
    survey passes the whole survey's, so its pixels are the whole survey's). structure: draw the
    structured galaxies' clumps (module doc); False draws the bare Tractor models.
    """

    #: Rendering is deterministic and local: callers need not commit chunks as they arrive.
    checkpoint_chunks = False

    def __init__(
        self,
        catalog,
        bricks: BrickTable | None = None,
        extra_stamps=None,
        tile_size: int = TILE_SIZE,
        cache_tiles: int = 256,
        key: str = MOCK_SKY_KEY,
        noise: bool = True,
        survey_psf=None,
        structure: bool = True,
    ):
        if BRICK_SIZE % tile_size:
            raise InputError(f"tile_size {tile_size} must divide the brick size {BRICK_SIZE}")
        self.src = _Sources.from_catalog(catalog, structure=structure)
        if bricks is None:
            if len(self.src.ra) == 0:
                raise InputError("mock sky catalog is empty and no brick table was given")
            bricks = BrickTable.generate(
                (self.src.ra.min(), self.src.ra.max()), (self.src.dec.min(), self.src.dec.max())
            )
        self.bricks = bricks
        self.tile = tile_size
        self.key = key
        self.noise = bool(noise)
        self.cache_tiles = max(int(cache_tiles), 4)
        self._tiles: OrderedDict = OrderedDict()
        self._states: OrderedDict = OrderedDict()
        self._dec_order = np.argsort(self.src.dec, kind="stable")
        self._dec_sorted = self.src.dec[self._dec_order]
        self._src_brick = (
            bricks.bricks_containing(self.src.ra, self.src.dec) if len(self.src.ra) else np.zeros(0, np.int64)
        )
        # survey medians of PSFSIZE / PSFDEPTH per band: the noise of a brick without sources of its own
        self._survey_psf = (
            [
                (
                    _robust_median(self.src.psfsize[~self.src.clump, j], DEFAULT_PSFSIZE[band]),
                    _robust_median(self.src.psfdepth[~self.src.clump, j], DEFAULT_PSFDEPTH[band]),
                )
                for j, band in enumerate(BANDS)
            ]
            if survey_psf is None
            else [(float(f), float(d)) for f, d in survey_psf]
        )
        self._extras = self._place_extras(extra_stamps)

    def survey_summary(self) -> dict:
        """What a sky drawn from part of this catalog needs to render this sky's pixels: ``psf``,
        the per-band (PSFSIZE [arcsec], PSFDEPTH [1/nmgy²]) medians (``survey_psf``), and
        ``bounds``, the drawn sources' (ra_min, ra_max, dec_min, dec_max) [deg], over which the
        default brick table is generated (``BrickTable.generate``)."""
        s = self.src
        bounds = [float(s.ra.min()), float(s.ra.max()), float(s.dec.min()), float(s.dec.max())] if len(s.ra) else None
        return {"psf": [[float(f), float(d)] for f, d in self._survey_psf], "bounds": bounds}

    # ------------------------------------------------------------------------------------------
    def _place_extras(self, extra_stamps):
        """Extra stamps, shifted to their sub-pixel position in every brick they may touch."""
        out = []
        for k, item in enumerate(extra_stamps or ()):
            ra, dec, stamp = item
            stamp = np.asarray(stamp, dtype=np.float64)
            if stamp.ndim != 3 or stamp.shape[0] != len(BANDS) or not np.all(np.isfinite(stamp)):
                raise InputError(f"extra stamp {k} must be a finite (3, h, w) array, got shape {stamp.shape}")
            out.append((float(ra), float(dec), stamp))
        return out

    def _state(self, b: int) -> _BrickState:
        st = self._states.get(b)
        if st is not None:
            self._states.move_to_end(b)
            return st
        wcs = self.bricks.wcs(b)
        s = self.src
        margin = (BRICK_SIZE / 2 * math.sqrt(2) + max(STAMP_CLASSES) / 2) * PIXEL_SCALE_ARCSEC / 3600.0
        dec_c = float(self.bricks.dec[b])
        lo, hi = np.searchsorted(self._dec_sorted, [dec_c - margin, dec_c + margin])
        cand = np.sort(self._dec_order[lo:hi])
        x, y = wcs.world_to_pixel(s.ra[cand], s.dec[cand])
        h = s.half[cand]
        ix = np.floor(x + 0.5)
        iy = np.floor(y + 0.5)
        ok = np.isfinite(x) & (ix + h > 0) & (ix - h < BRICK_SIZE) & (iy + h > 0) & (iy - h < BRICK_SIZE)
        rows = cand[ok]
        sigma, fwhm = self._brick_noise(b)
        extras = []
        for ra, dec, stamp in self._extras:
            ex, ey = wcs.world_to_pixel(ra, dec)
            if not np.isfinite(ex):
                continue
            eix, eiy = int(np.floor(ex + 0.5)), int(np.floor(ey + 0.5))
            hh, ww = stamp.shape[1:]
            if (
                eix + ww // 2 + 1 < 0
                or eix - ww // 2 - 1 > BRICK_SIZE
                or eiy + hh // 2 + 1 < 0
                or eiy - hh // 2 - 1 > BRICK_SIZE
            ):
                continue
            shifted = (
                _fourier_shift(torch.from_numpy(stamp), float(ex - eix), float(ey - eiy)).numpy().astype(np.float32)
            )
            extras.append((eix, eiy, shifted))
        st = _BrickState(
            str(self.bricks.brickname[b]),
            wcs,
            rows,
            x[ok],
            y[ok],
            ix[ok].astype(np.int64),
            iy[ok].astype(np.int64),
            sigma,
            fwhm,
            (self.bricks.ra1[b], self.bricks.ra2[b], self.bricks.dec1[b], self.bricks.dec2[b]),
            extras,
        )
        self._states[b] = st
        while len(self._states) > 8:
            self._states.popitem(last=False)
        return st

    def _brick_noise(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Pixel noise σ (3,) [nmgy] and FWHM (3,) [arcsec] of brick ``b``: from the brick median of
        the catalog's PSFSIZE/PSFDEPTH, else the survey median, else DR10 typical values."""
        own = np.flatnonzero((self._src_brick == b) & ~self.src.clump)
        fwhm = np.array([_robust_median(self.src.psfsize[own, j], self._survey_psf[j][0]) for j in range(len(BANDS))])
        depth = np.array([_robust_median(self.src.psfdepth[own, j], self._survey_psf[j][1]) for j in range(len(BANDS))])
        return pixel_sigma(depth, fwhm), fwhm

    # ------------------------------------------------------------------------------------------
    def _render_sources(self, st: _BrickState, local: np.ndarray) -> dict:
        """float32 (3, S, S) stamps (nmgy/pixel) of the brick's sources ``local`` (indices into st)."""
        s = self.src
        out = {}
        if len(local) == 0:
            return out
        rows = st.rows[local]
        r_px = s.r_maj[rows] / PIXEL_SCALE_ARCSEC
        # sub = 0 marks point sources; small galaxies are supersampled 3x3 per pixel
        sub = np.where(s.n[rows] == 0, 0, np.where(r_px < SUPERSAMPLE_BELOW_PIX, 3, 1))
        S = 2 * s.half[rows]
        G = 2 * s.gal_half[rows]
        groups = np.unique(np.stack([S, G, sub], axis=1), axis=0)
        for size, gsize, ss in groups:
            g = np.flatnonzero((S == size) & (G == gsize) & (sub == ss))
            step = max(1, 2**20 // int(max(size, gsize * max(ss, 1))) ** 2)  # ~8 MB per float64 tensor
            for c0 in range(0, len(g), step):
                gi = g[c0 : c0 + step]
                stamps = self._render_group(st, local[gi], rows[gi], int(size), int(gsize), int(ss))
                for k, li in enumerate(local[gi]):
                    out[int(li)] = stamps[k]
        return out

    def _render_group(self, st: _BrickState, local, rows, size: int, gsize: int, sub: int) -> np.ndarray:
        """Render sources of one stamp size S (``sub`` = 0: point sources) as (B, 3, S, S) float32.

        The profile is evaluated on a ``gsize``² grid centred on index gsize//2, zero-padded to S
        and convolved in Fourier space; one phase ramp both moves the centre to pixel S//2 and
        applies the sub-pixel offset (exact for the band-limited PSF-convolved image).
        """
        s = self.src
        dt = torch.float64
        B = len(rows)
        if sub > 0:
            pix = torch.arange(gsize, dtype=dt) - gsize // 2
            offs = (torch.arange(sub, dtype=dt) + 0.5) / sub - 0.5
            coords = ((pix[:, None] + offs[None, :]).reshape(-1)) * PIXEL_SCALE_ARCSEC
            yy, xx = torch.meshgrid(coords, coords, indexing="ij")
            e1 = torch.from_numpy(s.e1[rows]).reshape(-1, 1, 1)
            e2 = torch.from_numpy(s.e2[rows]).reshape(-1, 1, 1)
            emod = torch.hypot(e1, e2)
            q = (1 - emod) / (1 + emod)
            r_maj = torch.from_numpy(s.r_maj[rows]).reshape(-1, 1, 1)
            r_s = r_maj * torch.sqrt(q)
            n = torch.from_numpy(s.n[rows]).reshape(-1, 1, 1)
            zero = torch.zeros_like(r_s)
            prof = sersic_surface_brightness(xx[None], yy[None], torch.ones_like(r_s), r_s, n, e1, e2, zero, zero)
            # truncation at semi-major axis `trunc` == the profile's value there (it is monotonic in radius)
            tr = torch.from_numpy(s.trunc[rows]).reshape(-1, 1, 1)
            floor = torch.exp(-sersic_b_n(n) * ((tr / r_maj) ** (1.0 / n) - 1.0))
            prof = torch.where(prof >= floor, prof, torch.zeros_like(prof))
            if sub > 1:
                prof = prof.reshape(B, gsize, sub, gsize, sub).mean(dim=(2, 4))
            total = prof.sum(dim=(-2, -1), keepdim=True)
            prof = prof / total
            gal_f = torch.fft.rfft2(prof, s=(size, size))[:, None]
            centre = gsize // 2
        else:
            gal_f = torch.ones(B, 1, size, size // 2 + 1, dtype=torch.complex128)
            centre = 0
        fw = s.psfsize[rows].copy()
        bad = ~(np.isfinite(fw) & (fw > 0))
        fw[bad] = np.broadcast_to(st.fwhm, fw.shape)[bad]
        krad = min(kernel_radius_pix(float(fw.max()), n_fwhm=KERNEL_N_FWHM), size // 2 - 1)
        ker = psf_kernels(torch.from_numpy(fw.reshape(-1)), krad, profile=SURVEY_PSF_PROFILE, beta=MOFFAT_BETA).reshape(
            B, len(BANDS), 2 * krad + 1, 2 * krad + 1
        )
        ker_f = torch.fft.rfft2(ker, s=(size, size))  # kernel centre at index krad
        shift = size // 2 - krad - centre
        phase = _phase_ramp(
            size,
            size,
            torch.from_numpy(st.x[local] - st.ix[local]) + shift,
            torch.from_numpy(st.y[local] - st.iy[local]) + shift,
        )[:, None]
        img = torch.fft.irfft2(gal_f * ker_f * phase, s=(size, size))
        img = img * torch.from_numpy(s.flux[rows]).reshape(B, len(BANDS), 1, 1)
        return img.numpy().astype(np.float32)

    # ------------------------------------------------------------------------------------------
    def _ensure_tiles(self, b: int, tiles: list[tuple[int, int]]) -> None:
        """Render the brick's ``tiles`` [(ty, tx)] that are not cached (one batch of sources)."""
        todo = [t for t in dict.fromkeys(tiles) if (b, t[0], t[1]) not in self._tiles]
        for t in tiles:
            if (b, t[0], t[1]) in self._tiles:
                self._tiles.move_to_end((b, t[0], t[1]))
        if not todo:
            return
        st = self._state(b)
        T = self.tile
        h = self.src.half[st.rows]
        x0, y0 = st.ix - h, st.iy - h
        x1, y1 = st.ix + h, st.iy + h
        per_tile = {}
        for ty, tx in todo:
            ov = (x1 > tx * T) & (x0 < tx * T + T) & (y1 > ty * T) & (y0 < ty * T + T)
            per_tile[(ty, tx)] = np.flatnonzero(ov)
        union = np.unique(np.concatenate(list(per_tile.values()))) if per_tile else np.zeros(0, np.int64)
        stamps = self._render_sources(st, union)
        for (ty, tx), local in per_tile.items():
            acc = np.zeros((len(BANDS), T, T), np.float64)
            for li in local:  # ascending catalog order: the summation order is fixed
                stamp = stamps[int(li)]
                S = stamp.shape[-1]
                _add_window(acc, stamp, int(st.ix[li]) - S // 2 - tx * T, int(st.iy[li]) - S // 2 - ty * T)
            for eix, eiy, stamp in st.extras:
                hh, ww = stamp.shape[1:]
                _add_window(acc, stamp, eix - ww // 2 - tx * T, eiy - hh // 2 - ty * T)
            img = np.empty((len(BANDS), T, T), np.float32)
            for j, band in enumerate(BANDS):
                if self.noise:
                    noise = rng_for(self.key, st.name, ty, tx, band).standard_normal((T, T), dtype=np.float32)
                    acc[j] += noise.astype(np.float64) * st.sigma[j]
                img[j] = acc[j].astype(np.float32)
            mask = self._tile_maskbits(st, local, ty, tx)
            self._tiles[(b, ty, tx)] = (img, mask)
            self._tiles.move_to_end((b, ty, tx))
        while len(self._tiles) > self.cache_tiles:
            self._tiles.popitem(last=False)

    def _tile_maskbits(self, st: _BrickState, local, ty: int, tx: int) -> np.ndarray:
        T = self.tile
        yy, xx = np.mgrid[ty * T : ty * T + T, tx * T : tx * T + T]
        ra, dec = st.wcs.pixel_to_world(xx, yy)
        ra1, ra2, dec1, dec2 = st.bounds
        mask = np.where((ra >= ra1) & (ra < ra2) & (dec >= dec1) & (dec < dec2), 0, NPRIMARY).astype(np.int32)
        s = self.src
        bits = s.maskbits[st.rows[local]] & ~NPRIMARY
        for li, bv in zip(local[bits != 0], bits[bits != 0]):
            rad = max(5.0, 2.0 * s.r_maj[st.rows[li]] / PIXEL_SCALE_ARCSEC)
            disk = (xx - st.x[li]) ** 2 + (yy - st.y[li]) ** 2 <= rad * rad
            mask[disk] |= np.int32(bv)
        return mask

    def _cut(self, b: int, ix: int, iy: int, size: int, img_out, iv_out, mb_out) -> None:
        """Assemble the ``size`` × ``size`` window centred on brick pixel (ix, iy) from cached tiles."""
        T = self.tile
        lo = size // 2
        st = self._state(b)
        y0, x0 = iy - lo, ix - lo
        for ty in range(max(y0, 0) // T, min(y0 + size - 1, BRICK_SIZE - 1) // T + 1):
            for tx in range(max(x0, 0) // T, min(x0 + size - 1, BRICK_SIZE - 1) // T + 1):
                img, mask = self._tiles[(b, ty, tx)]
                paste_window(img_out, img, ix, iy, size, ty * T, tx * T)
                paste_window(mb_out, mask, ix, iy, size, ty * T, tx * T)
                ones = np.broadcast_to((1.0 / st.sigma**2).astype(np.float32)[:, None, None], img.shape)
                paste_window(iv_out, ones, ix, iy, size, ty * T, tx * T)

    def _tiles_for(self, ix: int, iy: int, size: int) -> list[tuple[int, int]]:
        T = self.tile
        lo = size // 2
        y0, x0 = iy - lo, ix - lo
        return [
            (ty, tx)
            for ty in range(max(y0, 0) // T, min(y0 + size - 1, BRICK_SIZE - 1) // T + 1)
            for tx in range(max(x0, 0) // T, min(x0 + size - 1, BRICK_SIZE - 1) // T + 1)
        ]

    # ------------------------------------------------------------------------------------------
    def cutouts(self, ra_deg, dec_deg, size: int = STAMP_SIZE) -> tuple[CutoutBatch, np.ndarray]:
        """``size`` × ``size`` g, r, z cutouts around each (ra, dec) in degrees, the same way as
        BrickImageSource cuts DR10 bricks (same brick choice, centring and padding flags), and
        the per-target failure messages (all '': the mock sky renders every target)."""
        if int(size) <= 0:
            raise InputError(f"cutout size must be positive, got {size!r}")
        size = int(size)
        ra, dec = check_coords(ra_deg, dec_deg)
        choice = choose_bricks(self.bricks, ra, dec, size)
        batch = CutoutBatch.for_choice(choice, size, True)
        chunk_tiles = max(self.cache_tiles // 2, 4)
        for b in np.unique(choice.brick[choice.brick >= 0]):
            rows = np.flatnonzero(choice.brick == b)
            # tile-row-major order keeps the tiles a chunk needs close together
            rows = rows[np.lexsort((choice.ix[rows], choice.iy[rows] // self.tile))]
            batch.brickname[rows] = str(self.bricks.brickname[b])
            i = 0
            while i < len(rows):
                need: dict = {}
                j = i
                while j < len(rows):
                    t = self._tiles_for(int(choice.ix[rows[j]]), int(choice.iy[rows[j]]), size)
                    if need and len(need) + len(t) > chunk_tiles:
                        break
                    need.update(dict.fromkeys(t))
                    j += 1
                self._ensure_tiles(int(b), list(need))
                for r in rows[i:j]:
                    self._cut(
                        int(b),
                        int(choice.ix[r]),
                        int(choice.iy[r]),
                        size,
                        batch.image[r],
                        batch.invvar[r],
                        batch.maskbits[r],
                    )
                i = j
        return batch, no_failures(len(ra))

    def render_window(self, ra_deg: float, dec_deg: float, size: int = STAMP_SIZE):
        """One window: (image (3,S,S) float32 nmgy, invvar (3,S,S) float32, maskbits (S,S) int32)."""
        b, _ = self.cutouts([ra_deg], [dec_deg], size)
        return b.image[0], b.invvar[0], b.maskbits[0]

    def pixel_invvar(self, ra_deg, dec_deg, size: int = STAMP_SIZE) -> np.ndarray:
        """(N, 3) float32 inverse variance (1/nmgy²) of the pixels of a ``size`` × ``size`` cutout at each
        (ra, dec) in degrees: the value ``cutouts`` puts in the stamp's covered pixels (the noise
        of the brick it is cut from; 0 off the footprint), without rendering the stamp."""
        ra, dec = check_coords(ra_deg, dec_deg)
        choice = choose_bricks(self.bricks, ra, dec, int(size))
        out = np.zeros((len(ra), len(BANDS)), np.float32)
        for b in np.unique(choice.brick[choice.brick >= 0]):
            out[choice.brick == b] = (1.0 / self._brick_noise(int(b))[0] ** 2).astype(np.float32)
        return out

    # ------------------------------------------------------------------------------------------
    def brick_arrays(self, brick: str):
        """The whole brick from its tiles: (image (3,3600,3600) f32, invvar (3,) f32, maskbits (3600,3600) i32)."""
        b = self.bricks.index_of(brick)
        T = self.tile
        nt = BRICK_SIZE // T
        img = np.empty((len(BANDS), BRICK_SIZE, BRICK_SIZE), np.float32)
        mask = np.empty((BRICK_SIZE, BRICK_SIZE), np.int32)
        for ty in range(nt):
            row = [(ty, tx) for tx in range(nt)]
            self._ensure_tiles(b, row)
            for _, tx in row:
                t_img, t_mask = self._tiles[(b, ty, tx)]
                img[:, ty * T : ty * T + T, tx * T : tx * T + T] = t_img
                mask[ty * T : ty * T + T, tx * T : tx * T + T] = t_mask
        st = self._state(b)
        return img, (1.0 / st.sigma**2).astype(np.float32), mask

    def write_mock_brick(self, brick: str, out_root: str, bands=BANDS, lossless: bool = True) -> list[str]:
        """Write real-format coadd files for ``brick`` under ``<out_root>/south/coadd/<AAA>/<brick>/``.

        image/invvar per band (float32 in HDU 1, 100² tiles) and maskbits (int32, RICE_1), each with
        the brick's TAN WCS. ``lossless``: image and invvar GZIP_2-compressed, so the files hold the
        mock sky's pixels exactly; otherwise compressed as the DR10 coadds are (RICE_1, quantized
        with SUBTRACTIVE_DITHER_2, which keeps zero pixels zero), the files' sizes and decoding
        cost those of the survey's. Returns the paths written.
        """
        from astropy.io import fits

        for band in bands:
            if band not in BANDS:
                raise InputError(f"unknown band {band!r}; expected one of {BANDS}")
        img, ivar, mask = self.brick_arrays(brick)
        b = self.bricks.index_of(brick)
        hdr = self.bricks.wcs(b).to_header()
        hdr["BRICKNAM"] = (brick, "LegacySurvey brick RRRr[pm]DDd")
        hdr["BRICKID"] = int(self.bricks.brickid[b])
        hdr["SURVEY"] = "DHS-MOCK"
        paths = []

        def write(path, data, kind, band, ctype, q, dither=-1):
            h = hdr.copy()
            h["IMTYPE"] = kind
            if band:
                h["FILTER"] = band
            if kind == "image":
                h["BUNIT"] = "nanomaggy"
                h["MAGZERO"] = AB_ZEROPOINT
            os.makedirs(os.path.dirname(path), exist_ok=True)
            hdu = fits.CompImageHDU(
                data,
                header=h,
                compression_type=ctype,
                tile_shape=(100, 100),
                quantize_level=q,
                quantize_method=dither,
                dither_seed=-1,
            )
            fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(path + ".tmp", overwrite=True)
            os.replace(path + ".tmp", path)
            paths.append(path)

        # dither method 2 = SUBTRACTIVE_DITHER_2; the seed from the tile checksums (-1) keeps the bytes deterministic
        pixels = ("GZIP_2", 0.0) if lossless else ("RICE_1", 16.0, 2)
        for j, band in enumerate(BANDS):
            if band not in bands:
                continue
            write(coadd_path(out_root, brick, "image", band), img[j], "image", band, *pixels)
            write(
                coadd_path(out_root, brick, "invvar", band),
                np.full(img.shape[1:], ivar[j], np.float32),
                "invvar",
                band,
                *pixels,
            )
        write(coadd_path(out_root, brick, "maskbits"), mask, "maskbits", None, "RICE_1", 16.0)
        return paths


def _robust_median(values: np.ndarray, default: float) -> float:
    v = values[np.isfinite(values) & (values > 0)]
    return float(np.median(v)) if len(v) else float(default)


def _phase_ramp(h: int, w: int, dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """(B, h, w//2+1) complex factors that shift rfft2 images by (+dx, +dy) pixels."""
    fy = torch.fft.fftfreq(h, dtype=torch.float64)
    fx = torch.fft.rfftfreq(w, dtype=torch.float64)
    arg = -2.0 * math.pi * (fx[None, None, :] * dx.reshape(-1, 1, 1) + fy[None, :, None] * dy.reshape(-1, 1, 1))
    return torch.polar(torch.ones_like(arg), arg)


def _fourier_shift(stamp: torch.Tensor, dx: float, dy: float) -> torch.Tensor:
    """Shift a (C, h, w) float64 image by (dx, dy) pixels (band-limited interpolation)."""
    h, w = stamp.shape[-2:]
    f = torch.fft.rfft2(stamp)
    ph = _phase_ramp(h, w, torch.tensor([dx], dtype=torch.float64), torch.tensor([dy], dtype=torch.float64))
    return torch.fft.irfft2(f * ph, s=(h, w))


def _add_window(acc: np.ndarray, stamp: np.ndarray, x0: int, y0: int) -> None:
    """acc[..., y0:y0+h, x0:x0+w] += stamp, clipped to acc's bounds."""
    H, W = acc.shape[-2:]
    h, w = stamp.shape[-2:]
    ay0, ax0 = max(y0, 0), max(x0, 0)
    ay1, ax1 = min(y0 + h, H), min(x0 + w, W)
    if ay1 > ay0 and ax1 > ax0:
        acc[..., ay0:ay1, ax0:ax1] += stamp[..., ay0 - y0 : ay1 - y0, ax0 - x0 : ax1 - x0]
