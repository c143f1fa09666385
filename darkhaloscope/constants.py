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
