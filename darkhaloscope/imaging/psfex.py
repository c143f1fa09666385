"""DECam PSFEx models: read a PSFEx file, evaluate its pixelised PSF at a CCD position and resample
it to the coadd's 0.262″ pixel.

PSFEx (Bertin 2011, ASP Conf. Ser. 442, 435; the PSFEx manual's "PSF file format") stores the PSF
as ``PSFAXIS3`` basis images ``PSF_MASK`` (``PSFAXIS2`` × ``PSFAXIS1`` pixels of ``PSF_SAMP``
image pixels each) whose weights are polynomials of degree ``POLDEG1`` in the scaled CCD
coordinates dx = (X_IMAGE − POLZERO1)/POLSCAL1, dy = (Y_IMAGE − POLZERO2)/POLSCAL2, the terms in
PSFEx's order 1, dx, dx², …, dy, dx·dy, …, dy^deg (x powers fastest, total degree ≤ deg).
X_IMAGE/Y_IMAGE are SExtractor's 1-based pixel coordinates.

Two layouts are read: PSFEx's own (one row, the keys in the HDU header, column PSF_MASK) and the
Legacy Surveys' merged files (legacypipe ``merge_psfex``: the keys as lower-case columns, one row
per CCD, ``psf_mask``), as the DR9/DR10 ``calib/psfex`` files are. This module lives in the science
library because it reads a real survey data format; the mock's truth renderer is one user.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from ..constants import BANDS, PIXEL_SCALE_ARCSEC
from ..errors import InputError

#: The PSFEx keys a model needs (POLNAME/POLZERO/POLSCAL per axis, then the sampling and degree).
PSFEX_KEYS = ("POLNAME1", "POLNAME2", "POLZERO1", "POLZERO2", "POLSCAL1", "POLSCAL2", "PSF_SAMP", "POLDEG1")
#: The band in a DECam calibration file's name (``c4d_<date>_<time>_ooi_<band>_<version>-psfex.fits``).
_BAND_IN_NAME = re.compile(r"_oo[ik]_([a-zA-Z])_")
#: The three DECam PSFEx models shipped as package data (legacypipe test case, BSD-3; see LICENSE there).
PACKAGED_PSFEX_DIR = Path(__file__).resolve().parent.parent / "data" / "psfex"


@dataclass(frozen=True)
class PsfexModel:
    """One CCD's PSFEx model: ``basis`` (K, ny, nx) in PSF pixels of ``samp`` image pixels,
    polynomial ``zero``/``scale`` (x, y) [image pixels], ``degree``, the ``band`` and the ``source`` file."""

    basis: np.ndarray
    zero: tuple[float, float]
    scale: tuple[float, float]
    degree: int
    samp: float
    band: str
    source: str

    def terms(self, x: float, y: float) -> np.ndarray:
        """The K polynomial weights at 1-based CCD pixel (x, y), in PSFEx's order."""
        dx = (x - self.zero[0]) / self.scale[0]
        dy = (y - self.zero[1]) / self.scale[1]
        return np.array(
            [dx**i * dy**j for j in range(self.degree + 1) for i in range(self.degree + 1 - j)], dtype=np.float64
        )

    def native(self, x: float, y: float) -> np.ndarray:
        """The PSF at CCD pixel (x, y) on its own PSF_SAMP grid (ny, nx), not normalised."""
        return np.tensordot(self.terms(x, y), self.basis, axes=1)

    def image_psf(
        self, x: float, y: float, size: int, pixel_scale: float = PIXEL_SCALE_ARCSEC, stretch: float = 1.0
    ) -> np.ndarray:
        """The PSF at CCD pixel (x, y) on a ``size``² grid of image pixels (``pixel_scale`` arcsec,
        the CCD's) centred on pixel (size−1)/2, normalised to sum 1, float64.

        The native grid (PSF_SAMP image pixels per PSF pixel, centred on (n−1)/2 as PSFEx centres
        it) is resampled by cubic-spline interpolation; ``stretch`` > 1 widens the PSF by that
        factor about its centre (the same shape at a worse seeing)."""
        from scipy.ndimage import map_coordinates

        if size < 3 or size % 2 == 0:
            raise InputError(f"PSF size must be odd and >= 3, got {size}")
        if not stretch > 0:
            raise InputError(f"PSF stretch must be > 0, got {stretch}")
        native = self.native(x, y)
        ny, nx = native.shape
        off = (np.arange(size) - (size - 1) / 2.0) / (self.samp * stretch)
        yy, xx = np.meshgrid(off + (ny - 1) / 2.0, off + (nx - 1) / 2.0, indexing="ij")
        out = map_coordinates(native, [yy, xx], order=3, mode="constant", cval=0.0)
        total = out.sum()
        if not (np.isfinite(total) and total > 0):
            raise InputError(f"{self.source}: the PSF at ({x}, {y}) has no positive flux on a {size}² grid")
        return out / total

    @cached_property
    def fwhm_pix(self) -> float:
        """FWHM [image pixels] of the constant term's PSF: the diameter of the circle with the area
        above half maximum, measured on an 8× finer cubic-spline grid (robust to PSFEx's extended
        wings, unlike second moments)."""
        from scipy.ndimage import zoom

        fine = zoom(self.basis[0], 8, order=3)
        area = float((fine > 0.5 * fine.max()).sum()) * (self.samp / 8.0) ** 2
        return float(2.0 * np.sqrt(area / np.pi))


def _value(hdu, row, key: str, path: str):
    """A PSFEx key from the HDU header, else from the (lower- or upper-case) column of ``row``."""
    if key in hdu.header:
        return hdu.header[key]
    for name in (key.lower(), key):
        if name in hdu.columns.names:
            return row[name]
    raise InputError(f"{path}: HDU 1 states no PSFEx key {key} (neither a header keyword nor a column)")


def _band_of(path: str, hdu, row) -> str | None:
    """The file's band: a FILTER/BAND header keyword or column, else the DECam file name's."""
    for key in ("FILTER", "BAND"):
        if key in hdu.header:
            return str(hdu.header[key]).strip()[:1]
        for name in (key.lower(), key):
            if name in hdu.columns.names:
                return str(row[name]).strip()[:1]
    m = _BAND_IN_NAME.search(Path(path).name)
    return m.group(1) if m else None


def read_psfex(path: str | Path, ccdname: str | None = None, band: str | None = None) -> PsfexModel:
    """The PSFEx model of ``path`` (HDU 1), of CCD ``ccdname`` when the file has several rows.

    Raises InputError naming the file (and HDU, key or CCD) when HDU 1 is not a PSFEx table, a key
    is missing, POLNAME is not X_IMAGE/Y_IMAGE, the basis has NaNs or the wrong shape, PSF_SAMP is
    not > 0, or the file's band is not ``band`` (when given)."""
    from astropy.io import fits

    path = str(path)
    try:
        hdul = fits.open(path, memmap=False)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable FITS file ({e})") from e
    with hdul:
        if len(hdul) < 2 or not isinstance(hdul[1], fits.BinTableHDU):
            raise InputError(f"{path}: HDU 1 is not a binary table: not a PSFEx file")
        hdu = hdul[1]
        mask_col = next((c for c in ("PSF_MASK", "psf_mask") if c in hdu.columns.names), None)
        if mask_col is None:
            raise InputError(f"{path}: HDU 1 has no PSF_MASK column: not a PSFEx file")
        rows = hdu.data
        i = 0
        if len(rows) != 1:
            if ccdname is None or "ccdname" not in hdu.columns.names:
                raise InputError(f"{path}: HDU 1 has {len(rows)} PSF models; name the CCD (ccdname)")
            names = [str(c).strip() for c in rows["ccdname"]]
            if ccdname not in names:
                raise InputError(f"{path}: no CCD {ccdname!r} in HDU 1 (has {names[:8]})")
            i = names.index(ccdname)
        row = rows[i]
        v = {k: _value(hdu, row, k, path) for k in PSFEX_KEYS}
        file_band = _band_of(path, hdu, row)
        basis = np.asarray(row[mask_col], dtype=np.float64)
    for k, want in (("POLNAME1", "X_IMAGE"), ("POLNAME2", "Y_IMAGE")):
        if str(v[k]).strip() != want:
            raise InputError(f"{path}: HDU 1 {k} is {v[k]!r}, expected {want!r}")
    degree = int(v["POLDEG1"])
    n_terms = (degree + 1) * (degree + 2) // 2
    if basis.ndim == 2:
        basis = basis[None]
    if basis.ndim != 3 or basis.shape[0] != n_terms:
        raise InputError(
            f"{path}: HDU 1 PSF_MASK has shape {basis.shape}, expected ({n_terms}, ny, nx) for POLDEG1 {degree}"
        )
    if not np.isfinite(basis).all():
        raise InputError(f"{path}: HDU 1 PSF_MASK has {int((~np.isfinite(basis)).sum())} non-finite values")
    samp = float(v["PSF_SAMP"])
    scale = (float(v["POLSCAL1"]), float(v["POLSCAL2"]))
    if not (np.isfinite(samp) and samp > 0) or not all(np.isfinite(s) and s != 0 for s in scale):
        raise InputError(f"{path}: HDU 1 PSF_SAMP {samp} must be > 0 and POLSCAL {scale} non-zero")
    if band is not None and file_band != band:
        raise InputError(f"{path}: the file's band is {file_band!r}, not {band!r}")
    return PsfexModel(
        basis=basis,
        zero=(float(v["POLZERO1"]), float(v["POLZERO2"])),
        scale=scale,
        degree=degree,
        samp=samp,
        band=file_band or "",
        source=path,
    )


@lru_cache(maxsize=8)
def packaged_psfex(band: str) -> PsfexModel:
    """The shipped DECam PSFEx model of ``band`` (g, r or z): one real CCD's (legacypipe test data), read once."""
    if band not in BANDS:
        raise InputError(f"no packaged PSFEx model for band {band!r} (bands {list(BANDS)})")
    files = sorted(PACKAGED_PSFEX_DIR.glob(f"*_ooi_{band}_*-psfex.fits"))
    if len(files) != 1:
        raise InputError(f"{PACKAGED_PSFEX_DIR}: expected one PSFEx file of band {band!r}, found {len(files)}")
    return read_psfex(files[0], band=band)
