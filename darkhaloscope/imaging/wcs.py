"""The gnomonic (TAN) WCS of a coadd brick or a cutout, projected by ``astropy.wcs`` (wcslib).

Pixel convention: **0-based** pixel coordinates (x = column, y = row; numpy index ``[y, x]``),
i.e. FITS pixel minus one, as astropy's ``wcs_world2pix(..., 0)``. ``crpix`` keeps the FITS
(1-based) value, as in a header.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from astropy.io import fits
from astropy.wcs import WCS

from ..constants import BRICK_SIZE, PIXEL_SCALE_ARCSEC
from ..errors import InputError

#: Header keywords of distortion terms (SIP, TPV) a plain TAN WCS must not carry.
DISTORTION_KEYWORDS = ("A_ORDER", "B_ORDER", "PV1_1", "PV2_1")
#: The keywords of a celestial TAN WCS (FITS WCS Papers I and II) that from_header passes to astropy.
_CELESTIAL_KEYWORD = re.compile(
    r"^(CTYPE|CRVAL|CRPIX|CDELT|CUNIT|CROTA|CD\d_|PC\d_|PV\d_)|^(RADESYS|RADECSYS|EQUINOX|EPOCH|LONPOLE|LATPOLE|WCSAXES)$"
)


@dataclass(frozen=True)
class TanWCS:
    """A TAN WCS with a CD matrix (deg/pixel): reference sky position ``crval`` (deg), 1-based
    reference pixel ``crpix``, image ``shape`` (ny, nx). Projections are astropy's."""

    crval: tuple[float, float]
    crpix: tuple[float, float]
    cd: tuple[tuple[float, float], tuple[float, float]]
    shape: tuple[int, int] = (BRICK_SIZE, BRICK_SIZE)
    astropy: WCS = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        w = WCS(naxis=2)
        w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
        w.wcs.crval = list(self.crval)
        w.wcs.crpix = list(self.crpix)
        w.wcs.cd = np.array(self.cd, dtype=np.float64)
        w.wcs.radesys = "ICRS"
        w.wcs.equinox = 2000.0
        w.pixel_shape = (self.shape[1], self.shape[0])
        w.wcs.set()
        object.__setattr__(self, "astropy", w)

    @classmethod
    def for_brick(
        cls, ra_c: float, dec_c: float, size: int = BRICK_SIZE, pixel_scale: float = PIXEL_SCALE_ARCSEC
    ) -> "TanWCS":
        """Brick coadd WCS: ``size`` × ``size`` pixels, centre (size/2 + 0.5) at (ra_c, dec_c) in deg, North up,
        East left."""
        s = pixel_scale / 3600.0
        c = size / 2.0 + 0.5
        return cls((float(ra_c), float(dec_c)), (c, c), ((-s, 0.0), (0.0, s)), (size, size))

    @classmethod
    def for_cutout(
        cls,
        ra_deg: float,
        dec_deg: float,
        size: int,
        pixel_scale: float = PIXEL_SCALE_ARCSEC,
        offset_pix: tuple[float, float] = (0.0, 0.0),
    ) -> "TanWCS":
        """WCS of a ``size`` × ``size`` cutout with (ra, dec) at 0-based pixel (size//2 + dx, size//2 + dy)."""
        s = pixel_scale / 3600.0
        return cls(
            (float(ra_deg), float(dec_deg)),
            (size // 2 + 1.0 + float(offset_pix[0]), size // 2 + 1.0 + float(offset_pix[1])),
            ((-s, 0.0), (0.0, s)),
            (size, size),
        )

    @classmethod
    def from_header(cls, header, source: str = "header") -> "TanWCS":
        """The TAN WCS (CD or CDELT/PC form, read by astropy) of a FITS header; InputError naming ``source``."""
        ctype = (str(header.get("CTYPE1", "")), str(header.get("CTYPE2", "")))
        if not (ctype[0].startswith("RA---TAN") and ctype[1].startswith("DEC--TAN")):
            raise InputError(
                f"{source}: expected a RA---TAN/DEC--TAN WCS, got CTYPE1={ctype[0]!r}, CTYPE2={ctype[1]!r}"
            )
        if any(k in header for k in DISTORTION_KEYWORDS) or ctype[0] != "RA---TAN":
            raise InputError(f"{source}: distorted TAN WCS (SIP/TPV) is not supported")
        missing = [k for k in ("CRVAL1", "CRVAL2", "CRPIX1", "CRPIX2") if k not in header]
        if missing or not ("CD1_1" in header or "CDELT1" in header):
            raise InputError(f"{source}: WCS keyword(s) {missing or ['CD1_1 or CDELT1']} missing")
        # only the celestial keywords: astropy would serialise the whole header (a coadd's has ~100
        # cards) to parse it, once per file the cutouts open, and note fixes of keywords (DATE-OBS
        # forms) that do not touch the celestial axes
        w = WCS(fits.Header([card for card in header.cards if _CELESTIAL_KEYWORD.match(card.keyword)]), naxis=2)
        cd = w.pixel_scale_matrix
        # in a tile-compressed file's table header NAXISn describe the table, ZNAXISn the image
        shape = (
            int(header.get("ZNAXIS2", header.get("NAXIS2", 0))),
            int(header.get("ZNAXIS1", header.get("NAXIS1", 0))),
        )
        return cls(
            tuple(float(v) for v in w.wcs.crval),
            tuple(float(v) for v in w.wcs.crpix),
            ((float(cd[0, 0]), float(cd[0, 1])), (float(cd[1, 0]), float(cd[1, 1]))),
            shape,
        )

    def to_header(self) -> fits.Header:
        """astropy Header with the TAN WCS keywords (CD form, ICRS)."""
        h = fits.Header()
        h["CTYPE1"], h["CTYPE2"] = "RA---TAN", "DEC--TAN"
        h["CRVAL1"], h["CRVAL2"] = self.crval
        h["CRPIX1"], h["CRPIX2"] = self.crpix
        h["CD1_1"], h["CD1_2"] = self.cd[0]
        h["CD2_1"], h["CD2_2"] = self.cd[1]
        h["EQUINOX"] = 2000.0
        h["RADESYS"] = "ICRS"
        return h

    def world_to_pixel(self, ra_deg, dec_deg) -> tuple[np.ndarray, np.ndarray]:
        """0-based (x, y) pixel of (ra, dec) in degrees; NaN on the far hemisphere."""
        ra, dec = np.broadcast_arrays(np.asarray(ra_deg, dtype=np.float64), np.asarray(dec_deg, dtype=np.float64))
        x, y = self.astropy.wcs_world2pix(ra.ravel(), dec.ravel(), 0)
        return x.reshape(ra.shape), y.reshape(dec.shape)

    def pixel_to_world(self, x, y) -> tuple[np.ndarray, np.ndarray]:
        """(ra in [0, 360), dec) in degrees of 0-based pixel (x, y)."""
        xa, ya = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
        ra, dec = self.astropy.wcs_pix2world(xa.ravel(), ya.ravel(), 0)
        return np.mod(ra, 360.0).reshape(xa.shape), dec.reshape(ya.shape)
