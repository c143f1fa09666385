"""Real galaxy images for lensed sources: HST/ACS F814W COSMOS galaxies in GalSim's real-galaxy format.

The format (GalSim ``RealGalaxyCatalog``; Mandelbaum et al. 2012, MNRAS 420, 1518, the 23.5-mag
sample of the COSMOS survey, Koekemoer et al. 2007, ApJS 172, 196): a catalog table (HDU 1) with
one row per galaxy — IDENT, MAG (F814W AB), GAL_HDU (the image's HDU in the images file),
PIXEL_SCALE [arcsec/pixel] and NOISE_VARIANCE — and an images file with one image HDU per galaxy;
optionally the ``_fits`` catalog (GalSim ``COSMOSCatalog``) with, per IDENT, ``zphot`` (photometric
redshift) and ``hlr`` (half-light radius [arcsec]; element 0 is the Sérsic fit's).

This reader is in the science library (not the mock) because it reads a real survey data format
any source model may use; the mock's truth renderer is one user. The package ships 12 such
galaxies (``darkhaloscope/data/cosmos``: paltas' and SLSim's test sets, MIT; see LICENSE there).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError

#: The real-galaxy catalog columns this reader needs.
CATALOG_COLUMNS = ("IDENT", "MAG", "GAL_HDU", "PIXEL_SCALE", "NOISE_VARIANCE")
#: The shipped galaxies (package data).
PACKAGED_COSMOS_DIR = Path(__file__).resolve().parent.parent / "data" / "cosmos"
#: The shipped set with redshifts and sizes (paltas' test set: 10 galaxies).
PACKAGED_CATALOG = "paltas-real_galaxy_catalog_23.5.fits"
PACKAGED_IMAGES = "paltas-real_galaxy_images_23.5_n1.fits"
PACKAGED_FITS_CATALOG = "paltas-real_galaxy_catalog_23.5_fits.fits"


@dataclass(frozen=True)
class RealGalaxy:
    """One COSMOS galaxy: ``image`` (ny, nx) float64 in the file's flux units per pixel, ``pixel_scale``
    [arcsec], ``mag`` (F814W AB), ``noise_variance`` (the image's, its units squared), ``zphot`` and
    ``hlr_arcsec`` (NaN when no ``_fits`` catalog was read), ``ident`` (COSMOS IDENT)."""

    ident: int
    mag: float
    image: np.ndarray
    pixel_scale: float
    noise_variance: float
    zphot: float
    hlr_arcsec: float


def _open(path: str):
    from astropy.io import fits

    try:
        return fits.open(path, memmap=False)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable FITS file ({e})") from e


def _table(path: str, columns: tuple[str, ...]):
    from astropy.io import fits

    with _open(path) as hdul:
        if len(hdul) < 2 or not isinstance(hdul[1], fits.BinTableHDU):
            raise InputError(f"{path}: HDU 1 is not a binary table (a real-galaxy catalog has its rows there)")
        data = hdul[1].data
        missing = [c for c in columns if c not in data.columns.names]
        if missing:
            raise InputError(f"{path}: HDU 1 lacks columns {missing}")
        return {c: np.asarray(data[c]) for c in data.columns.names}


def _fits_catalog(path: str) -> dict[int, tuple[float, float]]:
    """IDENT -> (zphot, hlr [arcsec]) of a GalSim ``_fits`` catalog."""
    t = _table(path, ("IDENT", "zphot", "hlr"))
    hlr = np.asarray(t["hlr"], dtype=np.float64)
    hlr = hlr[:, 0] if hlr.ndim == 2 else hlr
    out = {}
    for ident, z, r in zip(t["IDENT"].astype(np.int64), t["zphot"].astype(np.float64), hlr, strict=True):
        if not (np.isfinite(z) and np.isfinite(r) and r > 0):
            raise InputError(f"{path}: IDENT {int(ident)} has zphot {z} / hlr {r} (need finite, hlr > 0)")
        out[int(ident)] = (float(z), float(r))
    return out


def read_real_galaxies(
    catalog: str | Path, images: str | Path, fits_catalog: str | Path | None = None
) -> list[RealGalaxy]:
    """The galaxies of a GalSim real-galaxy ``catalog`` with their ``images`` (and zphot/hlr from
    ``fits_catalog`` when given), in catalog order.

    Raises InputError naming the file, HDU or column: a missing catalog column, a GAL_HDU the images
    file lacks or that holds no 2-d image, NaNs or an all-zero image, a PIXEL_SCALE that is missing,
    not finite or not > 0 (no default is assumed), a galaxy the ``_fits`` catalog lacks."""
    catalog, images = str(catalog), str(images)
    t = _table(catalog, CATALOG_COLUMNS)
    extra = _fits_catalog(str(fits_catalog)) if fits_catalog is not None else None
    out = []
    with _open(images) as hdul:
        for i in range(len(t["IDENT"])):
            ident, hdu = int(t["IDENT"][i]), int(t["GAL_HDU"][i])
            scale = float(t["PIXEL_SCALE"][i])
            if not (np.isfinite(scale) and scale > 0):
                raise InputError(f"{catalog}: column PIXEL_SCALE of IDENT {ident} is {scale}, not a pixel scale > 0")
            if not 0 <= hdu < len(hdul):
                raise InputError(f"{images}: no HDU {hdu} (GAL_HDU of IDENT {ident}); the file has {len(hdul)}")
            img = hdul[hdu].data
            if img is None or np.ndim(img) != 2:
                raise InputError(f"{images}: HDU {hdu} (IDENT {ident}) holds no 2-d image")
            img = np.asarray(img, dtype=np.float64)
            if not np.isfinite(img).all():
                raise InputError(
                    f"{images}: HDU {hdu} (IDENT {ident}) has {int((~np.isfinite(img)).sum())} NaN/inf pixels"
                )
            if not img.sum() > 0:
                raise InputError(f"{images}: HDU {hdu} (IDENT {ident}) has no positive flux")
            zphot, hlr = np.nan, np.nan
            if extra is not None:
                if ident not in extra:
                    raise InputError(f"{fits_catalog}: no row for IDENT {ident} of {catalog}")
                zphot, hlr = extra[ident]
            out.append(
                RealGalaxy(
                    ident=ident,
                    mag=float(t["MAG"][i]),
                    image=img,
                    pixel_scale=scale,
                    noise_variance=float(t["NOISE_VARIANCE"][i]),
                    zphot=zphot,
                    hlr_arcsec=hlr,
                )
            )
    return out


def packaged_real_galaxies() -> list[RealGalaxy]:
    """The shipped COSMOS galaxies with redshifts and sizes (paltas' test set), in catalog order."""
    d = PACKAGED_COSMOS_DIR
    return read_real_galaxies(d / PACKAGED_CATALOG, d / PACKAGED_IMAGES, d / PACKAGED_FITS_CATALOG)
