"""Survey-wide constants of the DESI Legacy Imaging Surveys DR10 and the photometry conversions
that use them."""

import numpy as np

#: Coadd pixel scale of the Legacy Surveys, arcsec per pixel.
PIXEL_SCALE_ARCSEC = 0.262
#: AB magnitude zero point of nanomaggy fluxes: m = 22.5 - 2.5 log10(flux / nanomaggy).
AB_ZEROPOINT = 22.5


def mag_to_flux(mag) -> np.ndarray:
    """AB magnitude -> flux in nanomaggies: 10^(-0.4 (m - 22.5))."""
    return 10.0 ** (-0.4 * (np.asarray(mag, dtype=np.float64) - AB_ZEROPOINT))


def flux_to_mag(flux_nmgy) -> np.ndarray:
    """Flux [nanomaggies] -> AB magnitude 22.5 − 2.5 log10(flux); NaN where flux <= 0 or missing
    (Legacy Surveys fluxes can be negative)."""
    f = np.asarray(flux_nmgy, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(f > 0, AB_ZEROPOINT - 2.5 * np.log10(np.where(f > 0, f, 1.0)), np.nan)


def depth_mag_from_psfdepth(psfdepth) -> np.ndarray:
    """5σ point-source depth in AB mag from DR10 ``psfdepth`` (inverse variance, 1/nmgy²).

    The 5σ flux is 5 / sqrt(psfdepth), so ``m5 = 22.5 − 2.5 log10(5 / sqrt(psfdepth))``; NaN where
    psfdepth is not positive.
    """
    d = np.asarray(psfdepth, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return flux_to_mag(np.where(d > 0, 5.0 / np.sqrt(np.where(d > 0, d, 1.0)), np.nan))


def psfdepth_from_depth_mag(depth_mag) -> np.ndarray:
    """DR10 ``psfdepth`` (1/nmgy²) of a 5σ point-source depth in AB mag: (5 / 5σ flux)²."""
    return 25.0 / mag_to_flux(depth_mag) ** 2


#: Optical bands used by the lens finder, in stamp channel order.
BANDS = ("g", "r", "z")
#: Side of a cutout stamp in pixels (Paper IV: 101 x 101 = 26.5 arcsec).
STAMP_SIZE = 101
#: Sweep catalogs of a DR10 mirror, relative to its root (the Legacy Surveys release layout; 10.1
#: holds the sub-blob-fixed DR10.1 sweeps).
DR10_SWEEP_DIR = "south/sweep/10.1"
#: Coadd brick side in pixels.
BRICK_SIZE = 3600
#: HEALPix resolution of the spatial train/val/test split (NESTED ordering).
SPLIT_NSIDE = 128
#: Fine HEALPix resolution used to sort rows spatially (NESTED ordering).
FINE_NSIDE = 8192
