"""The Legacy Surveys brick grid: brick names, BRICKIDs, and tables of bricks (survey-bricks files).

Geometry (the Legacy Surveys brick definition, legacysurvey.org/dr10/description): the sky is tiled in 0.25° Dec rows centred on
multiples of 0.25°; row ``i`` (centre Dec ``-90 + 0.25 i``) holds an even number of bricks equally
spaced in RA, ``2 ceil(360/0.25 cos(|Dec_c| - 0.125°) / 2)`` (one brick at each pole). BRICKID counts
from 1 row by row from the south pole, RA increasing within a row; this reproduces DR10's 662,174
bricks and e.g. brick 0959p805 = BRICKID 657438. Each brick's coadd is a 3600 × 3600 TAN image at
0.262″/pixel centred on the brick centre (CRPIX 1800.5), North up, East left (``BrickTable.wcs``).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..errors import InputError
from .files import read_bytes
from .wcs import TanWCS

#: Dec height of a brick row (deg).
BRICK_ROW_HEIGHT_DEG = 0.25
_N_ROWS = int(round(180.0 / BRICK_ROW_HEIGHT_DEG)) + 1  # 721 rows, pole caps included


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
        return cls(
            brick_name(ra, dec) if len(ra) else np.zeros(0, object),
            (offset[row] + col + 1).astype(np.int32),
            ra,
            dec,
            ra1,
            ra2,
            dec1,
            dec2,
        )

    @classmethod
    def read_fits(cls, path, filesystem=None) -> "BrickTable":
        """Load a release's ``survey-bricks.fits.gz`` (local path, or a path on a pyarrow filesystem)."""
        from astropy.io import fits

        try:
            src = io.BytesIO(read_bytes(path, filesystem)) if filesystem is not None else path
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
        ra, dec = check_coords(ra_deg, dec_deg)
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
        ra, dec = check_coords(ra_deg, dec_deg)
        _, ncol, _ = _grid_rows()
        row, _ = grid_row_col(ra, dec)
        out = [self.bricks_containing(ra, dec)]
        for drow in (0, -1, 1):
            r = np.clip(row + drow, 0, _N_ROWS - 1)
            c = np.minimum(np.floor(np.mod(ra, 360.0) / 360.0 * ncol[r]).astype(np.int64), ncol[r] - 1)
            for dcol in (-1, 1) if drow == 0 else (-1, 0, 1):
                out.append(self._index_of_ids(grid_brickid(r, c + dcol)))
        return np.stack(out, axis=1)

    def wcs(self, i: int) -> TanWCS:
        """The coadd TAN WCS of brick row ``i``."""
        return TanWCS.for_brick(float(self.ra[i]), float(self.dec[i]))


@lru_cache(maxsize=1)
def full_sky_bricks() -> BrickTable:
    """All 662,174 bricks of the Legacy Surveys grid (generated, cached)."""
    return BrickTable.generate()


def check_coords(ra_deg, dec_deg) -> tuple[np.ndarray, np.ndarray]:
    """(ra, dec) as 1-d float64 arrays in degrees; InputError naming the first non-finite or |dec| > 90 value."""
    ra = np.atleast_1d(np.asarray(ra_deg, dtype=np.float64))
    dec = np.atleast_1d(np.asarray(dec_deg, dtype=np.float64))
    if ra.shape != dec.shape:
        raise InputError(f"ra and dec shapes differ: {ra.shape} vs {dec.shape}")
    bad = ~np.isfinite(ra) | ~np.isfinite(dec) | (np.abs(dec) > 90.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"invalid coordinate at index {i}: ra={ra[i]!r}, dec={dec[i]!r} (degrees)")
    return ra, dec
