"""Coadd imaging: the DR10 brick grid and coadd reader, the mock sky, and cutout files.

- ``bricks``: brick names and grid, ``BrickTable``, ``TanWCS``, ``CutoutBatch``, ``BrickImageSource``.
- ``mock_sky``: ``MockSky``, the deterministic mock coadd renderer (DHS_SURVEY=mock).
- ``cutout_io``: FITS cube and PNG writers for single cutouts.
"""

from .bricks import (
    BAND_MISSING_BIT,
    BrickImageSource,
    BrickTable,
    CutoutBatch,
    TanWCS,
    brick_name,
    choose_bricks,
    coadd_path,
    full_sky_bricks,
)
from .cutout_io import rgb_image, write_cutout_fits, write_cutout_png
from .mock_sky import MockSky, pixel_sigma

__all__ = [
    "BAND_MISSING_BIT",
    "BrickImageSource",
    "BrickTable",
    "CutoutBatch",
    "MockSky",
    "TanWCS",
    "brick_name",
    "choose_bricks",
    "coadd_path",
    "full_sky_bricks",
    "pixel_sigma",
    "rgb_image",
    "write_cutout_fits",
    "write_cutout_png",
]
