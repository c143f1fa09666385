"""Cutouts from a DR10 coadd mirror:
``<root>/<region>/coadd/<AAA>/<brick>/legacysurvey-<brick>-<kind>[-<band>].fits.fz``."""

from __future__ import annotations

import numpy as np

from ..constants import BANDS, STAMP_SIZE
from ..errors import InputError
from .batch import BAND_MISSING_BIT, BrickChoice, CutoutBatch, choose_bricks, paste_window
from .bricks import BrickTable, check_coords, full_sky_bricks
from .files import file_exists, split_uri
from .sources import no_failures
from .tiled_fits import open_tiled_image
from .wcs import TanWCS


def coadd_path(root: str, brick: str, kind: str, band: str | None = None, region: str = "south") -> str:
    """``<root>/<region>/coadd/<AAA>/<brick>/legacysurvey-<brick>-<kind>[-<band>].fits.fz``."""
    suffix = f"-{band}" if band else ""
    return f"{root.rstrip('/')}/{region}/coadd/{brick[:3]}/{brick}/legacysurvey-{brick}-{kind}{suffix}.fits.fz"


class BrickImageSource:
    """Cutouts from a DR10 coadd mirror (``<root>/south/coadd/...``), local or on a pyarrow filesystem.

    Targets are grouped by brick; each brick's files are opened once for all its targets and read
    one band at a time, each compression tile the stamps touch decoded once (:mod:`.tiled_fits`),
    so at most one brick image (3600² float32, 52 MB) is in memory. A band whose files are absent
    is zeros with invvar 0, flagged in ``band_missing``; no target fails.

    ``with_maskbits`` False skips the maskbits file; ``invvar_centre_only`` reads each band's
    inverse variance at the stamp's centre pixel only (the rest of the stamp's invvar stays 0 and
    the batch says so), for readers that use it only to tell a masked centre: one tile per target
    and band instead of the 4 to 9 a stamp touches.
    """

    #: Reading is cheap and repeatable: callers need not commit chunks of cutouts as they arrive.
    checkpoint_chunks = False

    def __init__(
        self,
        root: str,
        filesystem=None,
        bricks: BrickTable | None = None,
        region: str = "south",
        bands=BANDS,
        with_maskbits: bool = True,
        invvar_centre_only: bool = False,
    ):
        self.fs, self.root = split_uri(str(root), filesystem)
        self.region = region
        self.bands = tuple(bands)
        self.with_maskbits = with_maskbits
        self.invvar_centre_only = invvar_centre_only
        if bricks is None:
            table_path = f"{self.root.rstrip('/')}/survey-bricks.fits.gz"
            bricks = (
                BrickTable.read_fits(table_path, self.fs) if file_exists(table_path, self.fs) else full_sky_bricks()
            )
        self.bricks = bricks

    def cutouts(self, ra_deg, dec_deg, size: int = STAMP_SIZE) -> tuple[CutoutBatch, np.ndarray]:
        """``size`` × ``size`` g, r, z stamps (nanomaggies/pixel) around each (ra, dec) in degrees, and the
        per-target failure messages (all '' for a coadd mirror)."""
        if int(size) <= 0:
            raise InputError(f"cutout size must be positive, got {size!r}")
        size = int(size)
        ra, dec = check_coords(ra_deg, dec_deg)
        choice = choose_bricks(self.bricks, ra, dec, size)
        batch = CutoutBatch.for_choice(choice, size, self.with_maskbits)
        batch.invvar_centre_only = self.invvar_centre_only
        for b in np.unique(choice.brick[choice.brick >= 0]):
            self._cut_brick(batch, choice, int(b), size)
        return batch, no_failures(len(ra))

    def _cut_brick(self, batch: CutoutBatch, choice: BrickChoice, b: int, size: int) -> None:
        """Fill the rows of ``batch`` whose stamps are cut from brick row ``b``, band by band."""
        rows = np.flatnonzero(choice.brick == b)
        name = str(self.bricks.brickname[b])
        batch.brickname[rows] = name
        expect = self.bricks.wcs(b)
        for j, band in enumerate(BANDS):
            paths = [coadd_path(self.root, name, kind, band, self.region) for kind in ("image", "invvar")]
            if band not in self.bands or not all(file_exists(p, self.fs) for p in paths):
                batch.band_missing[rows] |= BAND_MISSING_BIT[band]
                continue
            img, wcs = self._cut_file(paths[0], choice, rows, size, np.float32)
            iv, iv_wcs = self._cut_file(paths[1], choice, rows, size, np.float32, centre_only=self.invvar_centre_only)
            # the file's own WCS is authoritative; it must agree with the brick table's and the image's
            if not np.allclose(wcs.crval, expect.crval, atol=1e-6):
                raise InputError(f"{paths[0]}: CRVAL {wcs.crval} differs from survey-bricks centre {expect.crval}")
            if not (np.allclose(iv_wcs.crval, wcs.crval, atol=1e-9) and np.allclose(iv_wcs.crpix, wcs.crpix)):
                raise InputError(f"{paths[1]}: WCS differs from the brick's image WCS")
            batch.image[rows, j] = img
            batch.invvar[rows, j] = iv
        mpath = coadd_path(self.root, name, "maskbits", None, self.region)
        if self.with_maskbits and file_exists(mpath, self.fs):
            batch.maskbits[rows], _ = self._cut_file(mpath, choice, rows, size, np.int32)

    def _cut_file(
        self, path: str, choice: BrickChoice, rows: np.ndarray, size: int, dtype, centre_only: bool = False
    ) -> tuple[np.ndarray, TanWCS]:
        """(stamps (len(rows), S, S) cut from HDU 1 of ``path`` around the targets ``rows``, the
        file's WCS); ``centre_only``: only each stamp's centre pixel is read, the rest left 0."""
        out = np.zeros((len(rows), size, size), dtype)
        lo = size // 2
        with open_tiled_image(path, self.fs) as image:
            wcs = TanWCS.from_header(image.header, path)
            ny, nx = image.shape
            for k, r in enumerate(rows):
                ix, iy = int(choice.ix[r]), int(choice.iy[r])
                if centre_only:
                    if 0 <= iy < ny and 0 <= ix < nx:
                        out[k, lo, lo] = image[iy : iy + 1, ix : ix + 1][0, 0]
                    continue
                y0, x0 = max(iy - lo, 0), max(ix - lo, 0)
                y1, x1 = min(iy - lo + size, ny), min(ix - lo + size, nx)
                if y1 > y0 and x1 > x0:
                    paste_window(out[k], image[y0:y1, x0:x1], ix, iy, size, y0, x0)
        return out, wcs
