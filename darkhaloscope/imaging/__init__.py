"""Coadd imaging: image sources behind one protocol, the brick grid, and single-cutout files.

- ``sources``: the ``ImageSource`` protocol (``cutouts(ra, dec, size) -> (CutoutBatch, failures)``),
  ``ImageSourceOpener`` (plain settings that open one) and ``ServiceSource`` (a Legacy Surveys cutout service; its HTTP
  client is ``service``).
- ``coadd``: ``BrickImageSource``, cutouts from a DR10 coadd mirror (local or ``s3://``).
- ``bricks``: brick names, the brick grid and ``BrickTable``; ``wcs``: the brick/cutout TAN WCS
  (astropy.wcs); ``batch``: ``CutoutBatch`` and the choice of brick for each stamp; ``files``:
  reading local or pyarrow-filesystem files.
- ``cutout_io``: ``dhs cutout`` (checked request, FITS cube or PNG).
"""

from .batch import BAND_MISSING_BIT, CutoutBatch, choose_bricks
from .bricks import BrickTable, brick_name, full_sky_bricks
from .coadd import BrickImageSource, coadd_path
from .cutout_io import asinh_rgb, cutout_to_file, rgb_image, write_cutout_fits, write_cutout_png
from .sources import ImageSource, ServiceSource
from .wcs import TanWCS

__all__ = [
    "BAND_MISSING_BIT",
    "BrickImageSource",
    "BrickTable",
    "CutoutBatch",
    "ImageSource",
    "ServiceSource",
    "TanWCS",
    "asinh_rgb",
    "brick_name",
    "choose_bricks",
    "coadd_path",
    "cutout_to_file",
    "full_sky_bricks",
    "rgb_image",
    "write_cutout_fits",
    "write_cutout_png",
]
