"""Sky geometry: HEALPix indices, the spatial train/val/test split, separations and unit vectors.

HEALPix indices come from astropy-healpix and separations from astropy.coordinates; unit vectors
and chord lengths serve the KD-tree matches (scipy cKDTree on the unit sphere).

One implementation of the split, used for negatives, positives and injections alike:
every object inherits the split of its HEALPix pixel (NESTED, nside 128 by default), and a
pixel's split comes from a stable hash of its id, so a pixel never appears in two splits.
"""

from __future__ import annotations

import numpy as np
from astropy import units as u
from astropy.coordinates import angular_separation
from astropy_healpix import HEALPix

from .constants import SPLIT_NSIDE
from .errors import InputError
from .seeding import unit_hash_array

#: Default split fractions, in the order they are cut from the unit interval.
DEFAULT_SPLIT_FRACTIONS = (("train", 0.70), ("val", 0.15), ("test", 0.15))
SPLIT_SALT = "dhs-healpix-split-v1"


def healpix_nested(ra_deg: np.ndarray, dec_deg: np.ndarray, nside: int = SPLIT_NSIDE) -> np.ndarray:
    """NESTED HEALPix pixel index (int64) of each (ra, dec) in degrees, from astropy-healpix.

    Raises InputError naming the value when a coordinate is non-finite or out of range.
    """
    ra = np.asarray(ra_deg, dtype=np.float64)
    dec = np.asarray(dec_deg, dtype=np.float64)
    bad = ~np.isfinite(ra) | ~np.isfinite(dec) | (dec < -90.0) | (dec > 90.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"invalid coordinate at row {i}: ra={ra.flat[i]!r}, dec={dec.flat[i]!r} (degrees)")
    hp = HEALPix(nside=nside, order="nested")
    return np.asarray(hp.lonlat_to_healpix(np.mod(ra, 360.0) * u.deg, dec * u.deg), dtype=np.int64)


def split_for_pixels(
    pixels: np.ndarray,
    fractions: tuple[tuple[str, float], ...] = DEFAULT_SPLIT_FRACTIONS,
    salt: str = SPLIT_SALT,
) -> np.ndarray:
    """Split name for each HEALPix pixel id, from a stable hash of the id (vectorised).

    ``fractions`` are cut from [0, 1) in the order given (not alphabetically).
    """
    total = sum(f for _, f in fractions)
    if not np.isclose(total, 1.0):
        raise InputError(f"split fractions must sum to 1, got {fractions!r}")
    h = unit_hash_array(np.asarray(pixels, dtype=np.int64), salt)
    names = np.array([name for name, _ in fractions], dtype=object)
    edges = np.cumsum([f for _, f in fractions])[:-1]
    return names[np.searchsorted(edges, h, side="right")]


def split_for_coords(ra_deg, dec_deg, nside: int = SPLIT_NSIDE, fractions=DEFAULT_SPLIT_FRACTIONS):
    """Split name of each (ra, dec) in degrees: the split of its NESTED HEALPix pixel."""
    return split_for_pixels(healpix_nested(ra_deg, dec_deg, nside), fractions)


def angular_separation_arcsec(ra1, dec1, ra2, dec2) -> np.ndarray:
    """Great-circle separation in arcsec between (ra1, dec1) and (ra2, dec2), all in degrees
    (``astropy.coordinates.angular_separation``, the Vincenty formula, exact at every separation)."""
    sep = angular_separation(*(np.asarray(a, dtype=np.float64) * u.deg for a in (ra1, dec1, ra2, dec2)))
    return sep.to_value(u.arcsec)


def unit_vectors(ra_deg, dec_deg) -> np.ndarray:
    """Cartesian unit vectors (N, 3) of (ra, dec) in degrees, for chord-distance KD-tree matching."""
    ra = np.radians(np.asarray(ra_deg, dtype=np.float64))
    dec = np.radians(np.asarray(dec_deg, dtype=np.float64))
    return np.stack([np.cos(dec) * np.cos(ra), np.cos(dec) * np.sin(ra), np.sin(dec)], axis=-1)


def chord_for_arcsec(radius_arcsec: float) -> float:
    """Chord length on the unit sphere subtending ``radius_arcsec``."""
    return 2.0 * np.sin(np.radians(radius_arcsec / 3600.0) / 2.0)
