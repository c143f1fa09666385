"""The Legacy Surveys brick grid, brick TAN WCS, and cutouts cut from DR10 coadd bricks.

Geometry (shared/reference/science.md §2.2): the sky is tiled in 0.25° Dec rows centred on
multiples of 0.25°; row ``i`` (centre Dec ``-90 + 0.25 i``) holds an even number of bricks equally
spaced in RA, ``2 ceil(360/0.25 cos(|Dec_c| - 0.125°) / 2)`` (one brick at each pole). BRICKID counts
from 1 row by row from the south pole, RA increasing within a row; this reproduces DR10's 662,174
bricks and e.g. brick 0959p805 = BRICKID 657438. Each brick's coadd is a 3600 × 3600 TAN image at
0.262″/pixel centred on the brick centre (CRPIX 1800.5), North up, East left.

Pixel convention of this module: **0-based** pixel coordinates (x = column, y = row; numpy index
``[y, x]``), i.e. FITS pixel minus one, as astropy's ``world_to_pixel_values``. A stamp of side S
has its centre at 0-based index ``S // 2`` (50 for 101).
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..constants import BANDS, BRICK_SIZE, PIXEL_SCALE_ARCSEC, STAMP_SIZE
from ..errors import InputError

#: Dec height of a brick row (deg).
BRICK_ROW_HEIGHT_DEG = 0.25
_N_ROWS = int(round(180.0 / BRICK_ROW_HEIGHT_DEG)) + 1  # 721 rows, pole caps included

#: Bit values of ``CutoutBatch.band_missing``: bit i set when band BANDS[i] has no file.
BAND_MISSING_BIT = {b: 1 << i for i, b in enumerate(BANDS)}


# ----------------------------------------------------------------------------------------------
# Brick names and the grid
# ----------------------------------------------------------------------------------------------


def brick_name(ra_deg, dec_deg) -> np.ndarray:
    """Brick name ``<AAAa>[pm]<BBB>`` of brick centres (deg): int(RA·10) 4 digits, sign, int(|Dec|·10).

    Vectorised; returns an array of str. A tiny epsilon guards against centres like 12.3 stored
    as 12.2999999 (names are defined on the exact centres of survey-bricks).
    """
    ra = np.atleast_1d(np.asarray(ra_deg, dtype=np.float64))
    dec = np.atleast_1d(np.asarray(dec_deg, dtype=np.float64))
    a = np.floor(np.mod(ra, 360.0) * 10.0 + 1e-6).astype(np.int64)
    b = np.floor(np.abs(dec) * 10.0 + 1e-6).astype(np.int64)
    sign = np.where(dec >= 0, "p", "m")
    return np.array([f"{x:04d}{s}{y:03d}" for x, s, y in zip(a, sign, b)], dtype=object)


@lru_cache(maxsize=1)
def _grid_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row centre Dec (deg), bricks per row, BRICKID offset of each row) for the 721 grid rows."""
    dec_c = -90.0 + BRICK_ROW_HEIGHT_DEG * np.arange(_N_ROWS)
    declo = np.abs(dec_c) - BRICK_ROW_HEIGHT_DEG / 2
    ncol = (2 * np.ceil(360.0 / BRICK_ROW_HEIGHT_DEG * np.cos(np.radians(declo)) / 2)).astype(np.int64)
    ncol[0] = ncol[-1] = 1
    offset = np.concatenate([[0], np.cumsum(ncol)[:-1]])
    return dec_c, ncol, offset


def grid_row_col(ra_deg, dec_deg) -> tuple[np.ndarray, np.ndarray]:
    """Grid (row, column) of the brick whose primary region contains each (ra, dec) in deg."""
    ra = np.mod(np.asarray(ra_deg, dtype=np.float64), 360.0)
    dec = np.asarray(dec_deg, dtype=np.float64)
    _, ncol, _ = _grid_rows()
    row = np.clip(np.floor((dec + 90.0 + BRICK_ROW_HEIGHT_DEG / 2) / BRICK_ROW_HEIGHT_DEG), 0, _N_ROWS - 1)
    row = row.astype(np.int64)
    col = np.minimum(np.floor(ra / 360.0 * ncol[row]).astype(np.int64), ncol[row] - 1)
    return row, col


def grid_brickid(row, col) -> np.ndarray:
    """BRICKID (1-based) of grid (row, column); columns wrap around in RA."""
    _, ncol, offset = _grid_rows()
    row = np.asarray(row, dtype=np.int64)
    return offset[row] + np.mod(np.asarray(col, dtype=np.int64), ncol[row]) + 1


@dataclass(frozen=True)
class BrickTable:
    """A set of bricks with the survey-bricks columns (angles in degrees).

    ``brickid`` is sorted ascending so ids can be looked up with ``searchsorted``.
    """

    brickname: np.ndarray  # str (object)
    brickid: np.ndarray  # int32
    ra: np.ndarray  # brick centre
    dec: np.ndarray
    ra1: np.ndarray  # primary region bounds
    ra2: np.ndarray
    dec1: np.ndarray
    dec2: np.ndarray
    _by_name: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        order = np.argsort(self.brickid, kind="stable")
        if np.any(order != np.arange(len(order))):
            for name in ("brickname", "brickid", "ra", "dec", "ra1", "ra2", "dec1", "dec2"):
                object.__setattr__(self, name, getattr(self, name)[order])
        self._by_name.update({str(n): i for i, n in enumerate(self.brickname)})

    def __len__(self) -> int:
        return len(self.brickid)

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def generate(cls, ra_range=(0.0, 360.0), dec_range=(-90.0, 90.0)) -> "BrickTable":
        """The grid's bricks whose primary region overlaps ``ra_range`` × ``dec_range`` (deg).

        ``ra_range`` may wrap (ra_min > ra_max means through RA = 0).
        """
        dec_c, ncol, offset = _grid_rows()
        d0, d1 = float(dec_range[0]), float(dec_range[1])
        r0, r1 = float(ra_range[0]) % 360.0, float(ra_range[1])
        full_ra = (float(ra_range[1]) - float(ra_range[0])) >= 360.0
        r1 = r1 % 360.0 if not full_ra else r1
        rows = np.flatnonzero((dec_c + BRICK_ROW_HEIGHT_DEG / 2 > d0) & (dec_c - BRICK_ROW_HEIGHT_DEG / 2 < d1))
        parts = {k: [] for k in ("row", "col")}
        for row in rows:
            n = int(ncol[row])
            cols = np.arange(n)
            if not full_ra and n > 1:
                lo = cols * 360.0 / n
                hi = (cols + 1) * 360.0 / n
                if r0 <= r1:
                    keep = (hi > r0) & (lo < r1)
                else:
                    keep = (hi > r0) | (lo < r1)
                cols = cols[keep]
            parts["row"].append(np.full(len(cols), row))
            parts["col"].append(cols)
        row = np.concatenate(parts["row"]) if parts["row"] else np.zeros(0, np.int64)
        col = np.concatenate(parts["col"]) if parts["col"] else np.zeros(0, np.int64)
        n = ncol[row].astype(np.float64)
        ra1 = col * 360.0 / n
        ra2 = (col + 1) * 360.0 / n
        ra = np.where(n == 1, 180.0, 0.5 * (ra1 + ra2))
        ra1 = np.where(n == 1, 0.0, ra1)
        ra2 = np.where(n == 1, 360.0, ra2)
        dec = dec_c[row]
        dec1 = np.maximum(dec - BRICK_ROW_HEIGHT_DEG / 2, -90.0)
        dec2 = np.minimum(dec + BRICK_ROW_HEIGHT_DEG / 2, 90.0)
        return cls(brick_name(ra, dec) if len(ra) else np.zeros(0, object),
                   (offset[row] + col + 1).astype(np.int32), ra, dec, ra1, ra2, dec1, dec2)

    @classmethod
    def read_fits(cls, path, filesystem=None) -> "BrickTable":
        """Load a release's ``survey-bricks.fits.gz`` (local path, or a path on a pyarrow filesystem)."""
        from astropy.io import fits

        try:
            src = io.BytesIO(_read_bytes(path, filesystem)) if filesystem is not None else path
            with fits.open(src) as hdul:
                t = hdul[1].data
                cols = {c.upper() for c in t.columns.names}
                need = ("BRICKNAME", "BRICKID", "RA", "DEC", "RA1", "RA2", "DEC1", "DEC2")
                missing = [c for c in need if c not in cols]
                if missing:
                    raise InputError(f"{path}: survey-bricks table lacks columns {missing}")
                names = np.array([str(s).strip() for s in t["BRICKNAME"]], dtype=object)
                arr = {c: np.asarray(t[c], dtype=np.float64) for c in need[2:]}
                bid = np.asarray(t["BRICKID"], dtype=np.int32)
        except OSError as exc:
            raise InputError(f"cannot read brick table {path}: {exc}") from exc
        return cls(names, bid, arr["RA"], arr["DEC"], arr["RA1"], arr["RA2"], arr["DEC1"], arr["DEC2"])

    def write_fits(self, path) -> None:
        """Write the table as a survey-bricks FITS file (``.fits.gz`` is gzipped by astropy)."""
        from astropy.io import fits

        _, ncol, offset = _grid_rows()
        row = np.clip(np.round((self.dec + 90.0) / BRICK_ROW_HEIGHT_DEG).astype(np.int64), 0, _N_ROWS - 1)
        cols = [
            fits.Column("BRICKNAME", "8A", array=np.array([str(s) for s in self.brickname], dtype="S8")),
            fits.Column("BRICKID", "J", array=self.brickid),
            fits.Column("BRICKQ", "I", array=np.zeros(len(self), np.int16)),
            fits.Column("BRICKROW", "J", array=row.astype(np.int32)),
            fits.Column("BRICKCOL", "J", array=(self.brickid - 1 - offset[row]).astype(np.int32)),
        ] + [fits.Column(c.upper(), "D", array=getattr(self, c)) for c in ("ra", "dec", "ra1", "ra2", "dec1", "dec2")]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fits.BinTableHDU.from_columns(cols).writeto(path, overwrite=True)

    # -- look-ups -----------------------------------------------------------------------------
    def index_of(self, name: str) -> int:
        """Row index of brick ``name``; InputError when the brick is not in the table."""
        try:
            return self._by_name[str(name)]
        except KeyError:
            raise InputError(f"brick {name!r} is not in the brick table") from None

    def _index_of_ids(self, ids: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self.brickid, ids)
        pos = np.minimum(pos, max(len(self) - 1, 0))
        ok = (len(self) > 0) & (self.brickid[pos] == ids) if len(self) else np.zeros(ids.shape, bool)
        return np.where(ok, pos, -1)

    def bricks_containing(self, ra_deg, dec_deg) -> np.ndarray:
        """Row index (int64, -1 when absent from this table) of the brick whose primary region
        (RA1 ≤ ra < RA2, DEC1 ≤ dec < DEC2) contains each (ra, dec) in degrees. Vectorised."""
        ra, dec = _coords(ra_deg, dec_deg)
        row, col = grid_row_col(ra, dec)
        idx = self._index_of_ids(grid_brickid(row, col))
        if len(self):
            # guard against tables that do not follow the standard grid
            i = np.maximum(idx, 0)
            inside = (dec >= self.dec1[i] - 1e-9) & (dec <= self.dec2[i] + 1e-9)
            idx = np.where(inside, idx, -1)
        return idx

    def candidate_bricks(self, ra_deg, dec_deg) -> np.ndarray:
        """(N, 9) row indices (-1 = none) of the primary brick (column 0) and its grid neighbours."""
        ra, dec = _coords(ra_deg, dec_deg)
        _, ncol, _ = _grid_rows()
        row, _ = grid_row_col(ra, dec)
        out = [self.bricks_containing(ra, dec)]
        for drow in (0, -1, 1):
            r = np.clip(row + drow, 0, _N_ROWS - 1)
            c = np.minimum(np.floor(np.mod(ra, 360.0) / 360.0 * ncol[r]).astype(np.int64), ncol[r] - 1)
            for dcol in ((-1, 1) if drow == 0 else (-1, 0, 1)):
                out.append(self._index_of_ids(grid_brickid(r, c + dcol)))
        return np.stack(out, axis=1)

    def wcs(self, i: int) -> "TanWCS":
        """The coadd TAN WCS of brick row ``i``."""
        return TanWCS.for_brick(float(self.ra[i]), float(self.dec[i]))


@lru_cache(maxsize=1)
def full_sky_bricks() -> BrickTable:
    """All 662,174 bricks of the Legacy Surveys grid (generated, cached)."""
    return BrickTable.generate()


def _coords(ra_deg, dec_deg) -> tuple[np.ndarray, np.ndarray]:
    ra = np.atleast_1d(np.asarray(ra_deg, dtype=np.float64))
    dec = np.atleast_1d(np.asarray(dec_deg, dtype=np.float64))
    if ra.shape != dec.shape:
        raise InputError(f"ra and dec shapes differ: {ra.shape} vs {dec.shape}")
    bad = ~np.isfinite(ra) | ~np.isfinite(dec) | (np.abs(dec) > 90.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"invalid coordinate at index {i}: ra={ra[i]!r}, dec={dec[i]!r} (degrees)")
    return ra, dec


# ----------------------------------------------------------------------------------------------
# TAN WCS
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TanWCS:
    """Gnomonic (TAN) WCS with a CD matrix (deg/pixel); pixel coordinates are 0-based.

    ``crpix`` is the FITS (1-based) reference pixel, as in the header.
    """

    crval: tuple[float, float]
    crpix: tuple[float, float]
    cd: tuple[tuple[float, float], tuple[float, float]]
    shape: tuple[int, int] = (BRICK_SIZE, BRICK_SIZE)  # (ny, nx)

    @classmethod
    def for_brick(cls, ra_c: float, dec_c: float, size: int = BRICK_SIZE,
                  pixel_scale: float = PIXEL_SCALE_ARCSEC) -> "TanWCS":
        """Brick coadd WCS: ``size``² pixels, centre (size/2 + 0.5) at (ra_c, dec_c), North up, East left."""
        s = pixel_scale / 3600.0
        c = size / 2.0 + 0.5
        return cls((ra_c, dec_c), (c, c), ((-s, 0.0), (0.0, s)), (size, size))

    @classmethod
    def from_header(cls, header, source: str = "header") -> "TanWCS":
        """Read a TAN WCS (CD or CDELT/PC form) from a FITS header; InputError naming ``source``."""
        if not (str(header.get("CTYPE1", "")).startswith("RA---TAN") and str(header.get("CTYPE2", "")).startswith("DEC--TAN")):
            raise InputError(f"{source}: expected a RA---TAN/DEC--TAN WCS, got CTYPE1={header.get('CTYPE1')!r}")
        if any(k in header for k in ("A_ORDER", "PV1_1", "PV2_1")):
            raise InputError(f"{source}: distorted TAN WCS (SIP/TPV) is not supported")
        try:
            if "CD1_1" in header:
                cd = ((float(header["CD1_1"]), float(header.get("CD1_2", 0.0))),
                      (float(header.get("CD2_1", 0.0)), float(header["CD2_2"])))
            else:
                c1, c2 = float(header["CDELT1"]), float(header["CDELT2"])
                cd = ((c1 * float(header.get("PC1_1", 1.0)), c1 * float(header.get("PC1_2", 0.0))),
                      (c2 * float(header.get("PC2_1", 0.0)), c2 * float(header.get("PC2_2", 1.0))))
            return cls((float(header["CRVAL1"]), float(header["CRVAL2"])),
                       (float(header["CRPIX1"]), float(header["CRPIX2"])), cd,
                       (int(header.get("NAXIS2", header.get("ZNAXIS2", 0))), int(header.get("NAXIS1", header.get("ZNAXIS1", 0)))))
        except KeyError as exc:
            raise InputError(f"{source}: WCS keyword {exc} missing") from None

    def to_header(self):
        """astropy Header with the TAN WCS keywords (CD form)."""
        from astropy.io import fits

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
        ra = np.radians(np.asarray(ra_deg, dtype=np.float64))
        dec = np.radians(np.asarray(dec_deg, dtype=np.float64))
        ra0, dec0 = math.radians(self.crval[0]), math.radians(self.crval[1])
        dra = ra - ra0
        cosd = np.cos(dec)
        cos_c = math.sin(dec0) * np.sin(dec) + math.cos(dec0) * cosd * np.cos(dra)
        cos_c = np.where(cos_c > 0, cos_c, np.nan)
        xi = np.degrees(cosd * np.sin(dra) / cos_c)
        eta = np.degrees((math.cos(dec0) * np.sin(dec) - math.sin(dec0) * cosd * np.cos(dra)) / cos_c)
        (a, b), (c, d) = self.cd
        det = a * d - b * c
        x = (d * xi - b * eta) / det + self.crpix[0] - 1.0
        y = (-c * xi + a * eta) / det + self.crpix[1] - 1.0
        return x, y

    def pixel_to_world(self, x, y) -> tuple[np.ndarray, np.ndarray]:
        """(ra, dec) in degrees of 0-based pixel (x, y)."""
        px = np.asarray(x, dtype=np.float64) - (self.crpix[0] - 1.0)
        py = np.asarray(y, dtype=np.float64) - (self.crpix[1] - 1.0)
        (a, b), (c, d) = self.cd
        xi = np.radians(a * px + b * py)
        eta = np.radians(c * px + d * py)
        ra0, dec0 = math.radians(self.crval[0]), math.radians(self.crval[1])
        den = math.cos(dec0) - eta * math.sin(dec0)
        ra = ra0 + np.arctan2(xi, den)
        dec = np.arctan2(math.sin(dec0) + eta * math.cos(dec0), np.hypot(xi, den))
        return np.mod(np.degrees(ra), 360.0), np.degrees(dec)


# ----------------------------------------------------------------------------------------------
# Cutout batches and brick choice (shared by the DR10 reader and the mock sky)
# ----------------------------------------------------------------------------------------------


@dataclass
class CutoutBatch:
    """Cutouts of N targets in bands g, r, z.

    image: (N, 3, S, S) float32, nanomaggies per pixel. invvar: (N, 3, S, S) float32, 1/nmgy²
    (0 where there is no data). maskbits: (N, S, S) int32 DR10 MASKBITS, or None when the source
    has no maskbits image. band_missing: (N,) uint8, bit BAND_MISSING_BIT[band] set when that
    band's file is absent (the band is zeros with invvar 0). edge_padded: (N,) bool, the stamp
    reached past the brick's pixels and was padded with invvar 0. brickname: (N,) str, the brick
    the stamp was cut from. x, y: (N,) float64 0-based pixel of the target in that brick.
    dx, dy: (N,) float32 sub-pixel offset (pixels) of the target from the stamp's centre pixel
    ``S // 2`` (the stamp centre is the target's pixel position rounded to the nearest pixel).
    """

    image: np.ndarray
    invvar: np.ndarray
    maskbits: np.ndarray | None
    band_missing: np.ndarray
    edge_padded: np.ndarray
    brickname: np.ndarray
    x: np.ndarray
    y: np.ndarray
    dx: np.ndarray
    dy: np.ndarray

    def __len__(self) -> int:
        return self.image.shape[0]

    @classmethod
    def empty(cls, n: int, size: int, with_maskbits: bool = True) -> "CutoutBatch":
        """Zero-filled batch (all invvar 0) to be filled in place."""
        return cls(
            image=np.zeros((n, len(BANDS), size, size), np.float32),
            invvar=np.zeros((n, len(BANDS), size, size), np.float32),
            maskbits=np.zeros((n, size, size), np.int32) if with_maskbits else None,
            band_missing=np.zeros(n, np.uint8),
            edge_padded=np.zeros(n, bool),
            brickname=np.full(n, "", dtype=object),
            x=np.full(n, np.nan), y=np.full(n, np.nan),
            dx=np.zeros(n, np.float32), dy=np.zeros(n, np.float32),
        )


@dataclass(frozen=True)
class BrickChoice:
    """Where each target's stamp is cut: brick row index (-1 none), 0-based pixel, padding flag."""

    brick: np.ndarray  # (N,) int64 row in the BrickTable
    x: np.ndarray  # (N,) float64
    y: np.ndarray
    ix: np.ndarray  # (N,) int64 stamp centre pixel
    iy: np.ndarray
    padded: np.ndarray  # (N,) bool: the stamp reaches past the chosen brick


def choose_bricks(table: BrickTable, ra_deg, dec_deg, size: int = STAMP_SIZE,
                  brick_size: int = BRICK_SIZE) -> BrickChoice:
    """Pick the brick each stamp is cut from.

    The primary brick if the whole ``size``² stamp lies inside its pixels; otherwise the
    neighbouring brick where it lies whole (the one with the most margin); otherwise the primary
    brick (or, when the table lacks it, the neighbour holding most of the stamp), flagged
    ``padded`` (the part outside is filled with invvar 0). Brick -1: no brick of the table near.
    """
    ra, dec = _coords(ra_deg, dec_deg)
    cand = table.candidate_bricks(ra, dec)  # (N, 9)
    n, k = cand.shape
    lo = size // 2
    hi = size - 1 - lo
    x = np.full((n, k), np.nan)
    y = np.full((n, k), np.nan)
    for b in np.unique(cand[cand >= 0]):
        sel = cand == b
        rows = np.nonzero(sel)[0]
        w = table.wcs(int(b))
        x[sel], y[sel] = w.world_to_pixel(ra[rows], dec[rows])
    ix = np.floor(x + 0.5)
    iy = np.floor(y + 0.5)
    margin = np.minimum.reduce([ix - lo, iy - lo, brick_size - 1 - hi - ix, brick_size - 1 - hi - iy])
    margin = np.where(np.isfinite(margin) & (cand >= 0), margin, -np.inf)
    fits_whole = margin >= 0
    best = np.argmax(margin, axis=1)  # most interior existing candidate (-inf marks none)
    primary_ok = cand[:, 0] >= 0
    pick = np.where(fits_whole[:, 0], 0,
                    np.where(fits_whole[np.arange(n), best] | ~primary_ok, best, 0))
    r = np.arange(n)
    chosen = cand[r, pick]
    xs, ys = x[r, pick], y[r, pick]
    ixs = np.where(np.isfinite(xs), np.floor(xs + 0.5), 0).astype(np.int64)
    iys = np.where(np.isfinite(ys), np.floor(ys + 0.5), 0).astype(np.int64)
    return BrickChoice(chosen.astype(np.int64), xs, ys, ixs, iys, ~fits_whole[r, pick])


def paste_window(dst: np.ndarray, src: np.ndarray, ix: int, iy: int, size: int, src_y0: int = 0, src_x0: int = 0) -> bool:
    """Copy the ``size``² window centred on pixel (ix, iy) of ``src`` (whose [0, 0] is pixel
    (src_x0, src_y0)) into ``dst[..., :size, :size]``; parts outside ``src`` are left untouched.

    Returns True when the window was complete.
    """
    lo = size // 2
    y0, x0 = iy - lo - src_y0, ix - lo - src_x0
    h, w = src.shape[-2:]
    sy0, sx0 = max(y0, 0), max(x0, 0)
    sy1, sx1 = min(y0 + size, h), min(x0 + size, w)
    if sy1 > sy0 and sx1 > sx0:
        dst[..., sy0 - y0:sy1 - y0, sx0 - x0:sx1 - x0] = src[..., sy0:sy1, sx0:sx1]
    return sy0 == y0 and sx0 == x0 and sy1 == y0 + size and sx1 == x0 + size


# ----------------------------------------------------------------------------------------------
# DR10 coadd reader
# ----------------------------------------------------------------------------------------------


def coadd_path(root: str, brick: str, kind: str, band: str | None = None, region: str = "south") -> str:
    """``<root>/<region>/coadd/<AAA>/<brick>/legacysurvey-<brick>-<kind>[-<band>].fits.fz``."""
    suffix = f"-{band}" if band else ""
    return f"{root.rstrip('/')}/{region}/coadd/{brick[:3]}/{brick}/legacysurvey-{brick}-{kind}{suffix}.fits.fz"


def _read_bytes(path: str, filesystem) -> bytes:
    with filesystem.open_input_stream(path) as f:
        return f.read()


def _split_uri(root: str, filesystem):
    """(filesystem or None for local, path) for a local folder or an ``s3://`` URI."""
    if filesystem is not None:
        return filesystem, root
    if "://" in root:
        from pyarrow import fs as pafs

        f, path = pafs.FileSystem.from_uri(root)
        return f, path
    return None, root


class BrickImageSource:
    """Cutouts from a DR10 coadd mirror (``<root>/south/coadd/...``), local or on a pyarrow filesystem.

    Targets are grouped by brick; each brick's files are opened once for all its targets and read
    one band at a time, so at most one brick image (3600² float32, 52 MB) is in memory. When few
    targets share a brick only the compression tiles they touch are decompressed.
    """

    #: Use tile-aware section reads when targets × per-target tiles < this fraction of the brick's tiles.
    SECTION_FRACTION = 0.25

    def __init__(self, root: str, filesystem=None, bricks: BrickTable | None = None, region: str = "south",
                 bands=BANDS, with_maskbits: bool = True):
        self.fs, self.root = _split_uri(str(root), filesystem)
        self.region = region
        self.bands = tuple(bands)
        self.with_maskbits = with_maskbits
        if bricks is None:
            table_path = f"{self.root.rstrip('/')}/survey-bricks.fits.gz"
            bricks = BrickTable.read_fits(table_path, self.fs) if self._exists(table_path) else full_sky_bricks()
        self.bricks = bricks

    def _exists(self, path: str) -> bool:
        if self.fs is None:
            return os.path.exists(path)
        from pyarrow import fs as pafs

        return self.fs.get_file_info(path).type == pafs.FileType.File

    def _open(self, path: str):
        from astropy.io import fits

        src = path if self.fs is None else io.BytesIO(_read_bytes(path, self.fs))
        try:
            hdul = fits.open(src)
            if len(hdul) < 2:
                raise InputError(f"{path}: expected the image in HDU 1, file has {len(hdul)} HDU(s)")
        except OSError as exc:
            raise InputError(f"cannot read coadd file {path}: {exc}") from exc
        return hdul

    def _cut_file(self, path: str, choice: BrickChoice, rows: np.ndarray, size: int, out: np.ndarray,
                  expect_wcs: TanWCS | None) -> TanWCS:
        """Cut the targets ``rows`` from HDU 1 of ``path`` into ``out[rows]`` (shape (n, S, S))."""
        with self._open(path) as hdul:
            hdu = hdul[1]
            wcs = TanWCS.from_header(hdu.header, path)
            if expect_wcs is not None and not (np.allclose(wcs.crval, expect_wcs.crval, atol=1e-9)
                                               and np.allclose(wcs.crpix, expect_wcs.crpix)):
                raise InputError(f"{path}: WCS differs from the brick's image WCS")
            ny, nx = hdu.shape
            tiles = getattr(hdu, "tile_shape", None) or (ny, nx)
            per_target = (math.ceil(size / tiles[0]) + 1) * (math.ceil(size / tiles[1]) + 1)
            n_tiles = math.ceil(ny / tiles[0]) * math.ceil(nx / tiles[1])
            use_sections = hasattr(hdu, "section") and len(rows) * per_target < self.SECTION_FRACTION * n_tiles
            data = None if use_sections else hdu.data
            lo = size // 2
            for r in rows:
                ix, iy = int(choice.ix[r]), int(choice.iy[r])
                if use_sections:
                    y0, x0 = max(iy - lo, 0), max(ix - lo, 0)
                    y1, x1 = min(iy - lo + size, ny), min(ix - lo + size, nx)
                    if y1 > y0 and x1 > x0:
                        paste_window(out[r], np.asarray(hdu.section[y0:y1, x0:x1]), ix, iy, size, y0, x0)
                else:
                    paste_window(out[r], data, ix, iy, size)
            return wcs

    def cutouts(self, ra_deg, dec_deg, size: int = STAMP_SIZE) -> CutoutBatch:
        """Cut ``size``² g, r, z stamps (nanomaggies/pixel) around each (ra, dec) in degrees."""
        if int(size) <= 0:
            raise InputError(f"cutout size must be positive, got {size!r}")
        size = int(size)
        ra, dec = _coords(ra_deg, dec_deg)
        n = len(ra)
        batch = CutoutBatch.empty(n, size, self.with_maskbits)
        choice = choose_bricks(self.bricks, ra, dec, size)
        batch.x[:], batch.y[:] = choice.x, choice.y
        batch.dx[:] = np.where(np.isfinite(choice.x), choice.x - choice.ix, 0).astype(np.float32)
        batch.dy[:] = np.where(np.isfinite(choice.y), choice.y - choice.iy, 0).astype(np.float32)
        batch.edge_padded[:] = choice.padded
        batch.band_missing[choice.brick < 0] = sum(BAND_MISSING_BIT[b] for b in BANDS)
        for b in np.unique(choice.brick[choice.brick >= 0]):
            rows = np.flatnonzero(choice.brick == b)
            name = str(self.bricks.brickname[b])
            batch.brickname[rows] = name
            expect = self.bricks.wcs(int(b))
            for j, band in enumerate(BANDS):
                img_path = coadd_path(self.root, name, "image", band, self.region)
                iv_path = coadd_path(self.root, name, "invvar", band, self.region)
                if band not in self.bands or not (self._exists(img_path) and self._exists(iv_path)):
                    batch.band_missing[rows] |= BAND_MISSING_BIT[band]
                    continue
                img = np.zeros((len(rows), size, size), np.float32)
                iv = np.zeros_like(img)
                local = _Rows(choice, rows)
                wcs = self._cut_file(img_path, local, np.arange(len(rows)), size, img, None)
                self._cut_file(iv_path, local, np.arange(len(rows)), size, iv, wcs)
                # the file's own WCS is authoritative; it must agree with the brick table's
                if not np.allclose(wcs.crval, expect.crval, atol=1e-6):
                    raise InputError(f"{img_path}: CRVAL {wcs.crval} differs from survey-bricks centre {expect.crval}")
                batch.image[rows, j] = img
                batch.invvar[rows, j] = iv
            if self.with_maskbits:
                mpath = coadd_path(self.root, name, "maskbits", None, self.region)
                if self._exists(mpath):
                    mb = np.zeros((len(rows), size, size), np.int32)
                    self._cut_file(mpath, _Rows(choice, rows), np.arange(len(rows)), size, mb, None)
                    batch.maskbits[rows] = mb
        return batch


class _Rows:
    """View of a BrickChoice restricted to some targets (so files are cut into compact arrays)."""

    def __init__(self, choice: BrickChoice, rows: np.ndarray):
        self.ix = choice.ix[rows]
        self.iy = choice.iy[rows]
