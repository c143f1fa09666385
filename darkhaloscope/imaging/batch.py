"""Batches of g, r, z cutouts and where each stamp is cut (shared by every image source).

A stamp of side S is centred on the target's pixel rounded to the nearest pixel, 0-based index
``S // 2`` (50 for 101); the sub-pixel remainder is recorded (``dx``, ``dy``). Pixel coordinates
are 0-based (x = column, y = row; numpy index ``[y, x]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..constants import BANDS, BRICK_SIZE, STAMP_SIZE
from .bricks import BrickTable, check_coords

#: Bit values of ``CutoutBatch.band_missing``: bit i set when band BANDS[i] has no file.
BAND_MISSING_BIT = {b: 1 << i for i, b in enumerate(BANDS)}
#: ``band_missing`` of a target with no file in any band.
ALL_BANDS_MISSING = sum(BAND_MISSING_BIT.values())


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
    invvar_centre_only: the source read invvar at the centre pixel ``[S // 2, S // 2]`` only (a
    coadd mirror asked for no more); elsewhere it is 0 without meaning "no data".
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
    invvar_centre_only: bool = False

    def __len__(self) -> int:
        return self.image.shape[0]

    def has_data(self) -> np.ndarray:
        """(N,) bool: some band of the stamp has a pixel with invvar > 0, or a non-zero pixel (a
        cutout service may send no inverse variance). False for a target outside the survey."""
        n = len(self)
        return (self.invvar > 0).reshape(n, -1).any(axis=1) | (self.image != 0).reshape(n, -1).any(axis=1)

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
            x=np.full(n, np.nan),
            y=np.full(n, np.nan),
            dx=np.zeros(n, np.float32),
            dy=np.zeros(n, np.float32),
        )

    @classmethod
    def for_choice(cls, choice: "BrickChoice", size: int, with_maskbits: bool = True) -> "CutoutBatch":
        """Empty batch with each target's brick pixel, sub-pixel offset and padding flag from
        ``choice``; targets with no brick are flagged missing in every band."""
        batch = cls.empty(len(choice.brick), size, with_maskbits)
        batch.x[:], batch.y[:] = choice.x, choice.y
        batch.dx[:] = np.where(np.isfinite(choice.x), choice.x - choice.ix, 0).astype(np.float32)
        batch.dy[:] = np.where(np.isfinite(choice.y), choice.y - choice.iy, 0).astype(np.float32)
        batch.edge_padded[:] = choice.padded
        batch.band_missing[choice.brick < 0] = ALL_BANDS_MISSING
        return batch


@dataclass(frozen=True)
class BrickChoice:
    """Where each target's stamp is cut: brick row index (-1 none), 0-based pixel, padding flag."""

    brick: np.ndarray  # (N,) int64 row in the BrickTable
    x: np.ndarray  # (N,) float64
    y: np.ndarray
    ix: np.ndarray  # (N,) int64 stamp centre pixel
    iy: np.ndarray
    padded: np.ndarray  # (N,) bool: the stamp reaches past the chosen brick


def choose_bricks(
    table: BrickTable, ra_deg, dec_deg, size: int = STAMP_SIZE, brick_size: int = BRICK_SIZE
) -> BrickChoice:
    """Pick the brick each stamp is cut from.

    The primary brick if the whole ``size``² stamp lies inside its pixels; otherwise the
    neighbouring brick where it lies whole (the one with the most margin); otherwise the primary
    brick (or, when the table lacks it, the neighbour holding most of the stamp), flagged
    ``padded`` (the part outside is filled with invvar 0). Brick -1: no brick of the table near.
    """
    ra, dec = check_coords(ra_deg, dec_deg)
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
    pick = np.where(fits_whole[:, 0], 0, np.where(fits_whole[np.arange(n), best] | ~primary_ok, best, 0))
    r = np.arange(n)
    chosen = cand[r, pick]
    xs, ys = x[r, pick], y[r, pick]
    ixs = np.where(np.isfinite(xs), np.floor(xs + 0.5), 0).astype(np.int64)
    iys = np.where(np.isfinite(ys), np.floor(ys + 0.5), 0).astype(np.int64)
    return BrickChoice(chosen.astype(np.int64), xs, ys, ixs, iys, ~fits_whole[r, pick])


def paste_window(
    dst: np.ndarray, src: np.ndarray, ix: int, iy: int, size: int, src_y0: int = 0, src_x0: int = 0
) -> bool:
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
        dst[..., sy0 - y0 : sy1 - y0, sx0 - x0 : sx1 - x0] = src[..., sy0:sy1, sx0:sx1]
    return sy0 == y0 and sx0 == x0 and sy1 == y0 + size and sx1 == x0 + size
