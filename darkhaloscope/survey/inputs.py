"""Every file of a DR10 mirror that a run reads, by the readers that open them, as paths relative
to the mirror's root (the Legacy Surveys release layout, ``reference/science.md`` §2):

- the sweep catalogs ``south/sweep/10.1/sweep-<brickmin>-<brickmax>.fits`` (5°×5° blocks), read by
  ``sweeps`` (:func:`darkhaloscope.survey.sweeps.ingest_sweep`);
- their photo-z companions ``south/sweep/10.1-photo-z/sweep-<…>-pz.fits``, read by ``photo_z``
  (:func:`darkhaloscope.survey.redshifts.read_photo_z`);
- the SDSS DR16 spectra matched to DR10-south and SDSS's own file, ``south/external/…``, read by
  ``spectra`` (:func:`darkhaloscope.survey.redshifts.read_spectra`): the hosts' σ_v relation is
  calibrated on them (``injection_plan``);
- each brick's coadds ``south/coadd/<AAA>/<brick>/legacysurvey-<brick>-{image,invvar}-{g,r,z}.fits.fz``
  and ``…-maskbits.fits.fz``, read by the cutouts and the search
  (:class:`darkhaloscope.imaging.coadd.BrickImageSource`);
- optionally ``survey-bricks.fits.gz`` (brick centres; computed from the names without it).

:func:`box_paths` lists them for a sky box (what to fetch); :func:`sweep_bricks` reads the bricks a
sweep file's objects lie in (the coadds a run over it cuts from).
"""

from __future__ import annotations

import math

import numpy as np

from ..constants import BANDS, DR10_SWEEP_DIR
from ..errors import InputError
from ..imaging.bricks import BrickTable
from ..imaging.coadd import coadd_path
from .redshifts import DR10_PHOTO_Z_DIR, DR10_SPECOBJ_SDSS, DR10_SPECOBJ_SURVEY, pz_filename
from .sweeps import SweepBox, sweep_filename

#: The coadd files of a brick the imaging reads: image and inverse variance per band, and maskbits.
COADD_KINDS = (*((kind, b) for kind in ("image", "invvar") for b in BANDS), ("maskbits", None))
#: The spectra files, relative to a mirror's root.
SPECTRA_PATHS = (DR10_SPECOBJ_SURVEY, DR10_SPECOBJ_SDSS)
BRICKS_FILE = "survey-bricks.fits.gz"
#: Side of a sweep file's block [deg] (the DR10 sweeps tile the sky in 5°×5° blocks).
SWEEP_BLOCK_DEG = 5


#: The path pattern of each kind of file a run reads, in the order above (the tutorial's table
#: lists these; ``tests/test_first_real_run.py`` checks it).
INPUT_PATTERNS = (
    f"{DR10_SWEEP_DIR}/sweep-<brickmin>-<brickmax>.fits",
    f"{DR10_PHOTO_Z_DIR}/sweep-<brickmin>-<brickmax>-pz.fits",
    *SPECTRA_PATHS,
    *(f"south/coadd/<AAA>/<brick>/legacysurvey-<brick>-{kind}-<g,r,z>.fits.fz" for kind in ("image", "invvar")),
    "south/coadd/<AAA>/<brick>/legacysurvey-<brick>-maskbits.fits.fz",
    BRICKS_FILE,
)


def brick_paths(brick: str) -> list[str]:
    """The coadd files of ``brick`` the imaging reads, relative to the mirror's root."""
    return [coadd_path("", brick, kind, band).lstrip("/") for kind, band in COADD_KINDS]


def companion_paths(sweep_file: str) -> list[str]:
    """The files read beside sweep file ``sweep_file`` (its photo-z companion)."""
    return [f"{DR10_PHOTO_Z_DIR}/{pz_filename(sweep_file)}"]


def sweep_bricks(path: str) -> list[str]:
    """The distinct ``BRICKNAME`` values of a sweep file (HDU 1), sorted: the bricks its objects lie in."""
    from astropy.io import fits

    try:
        with fits.open(path, memmap=True) as hdul:
            if len(hdul) < 2 or "BRICKNAME" not in (hdul[1].columns.names or []):
                raise InputError(f"{path}: HDU 1 has no BRICKNAME column (is it a DR10 sweep file?)")
            names = np.unique(np.char.strip(np.asarray(hdul[1].data["BRICKNAME"]).astype(str)))
    except OSError as exc:
        raise InputError(f"{path}: not a readable FITS file ({exc})") from exc
    return [str(n) for n in names if n]


def box_sweep_files(ra_min: float, ra_max: float, dec_min: float, dec_max: float) -> list[str]:
    """Names of the sweep files whose 5°×5° blocks overlap the box (degrees)."""
    _check_box(ra_min, ra_max, dec_min, dec_max)
    b = SWEEP_BLOCK_DEG
    ras = range(int(math.floor(ra_min / b)) * b, int(math.ceil(ra_max / b)) * b, b)
    decs = range(int(math.floor(dec_min / b)) * b, int(math.ceil(dec_max / b)) * b, b)
    return [sweep_filename(SweepBox(r, r + b, d, d + b)) for d in decs for r in ras]


def box_bricks(ra_min: float, ra_max: float, dec_min: float, dec_max: float) -> list[str]:
    """Names of the bricks whose primary region overlaps the box (degrees), sorted."""
    _check_box(ra_min, ra_max, dec_min, dec_max)
    return sorted(str(n) for n in BrickTable.generate((ra_min, ra_max), (dec_min, dec_max)).brickname)


def box_paths(ra_min: float, ra_max: float, dec_min: float, dec_max: float, coadds: bool = True) -> list[str]:
    """Every file a run over the box reads (module doc), relative to a mirror's root: the sweep files
    of the blocks it overlaps with their photo-z companions, the spectra, ``survey-bricks.fits.gz``
    and (``coadds``) the coadds of every brick it overlaps."""
    sweeps = box_sweep_files(ra_min, ra_max, dec_min, dec_max)
    paths = [p for s in sweeps for p in (f"{DR10_SWEEP_DIR}/{s}", *companion_paths(s))]
    paths += [*SPECTRA_PATHS, BRICKS_FILE]
    if coadds:
        paths += [p for b in box_bricks(ra_min, ra_max, dec_min, dec_max) for p in brick_paths(b)]
    return paths


def _check_box(ra_min: float, ra_max: float, dec_min: float, dec_max: float) -> None:
    if not (0.0 <= ra_min < ra_max <= 360.0 and -90.0 <= dec_min < dec_max <= 90.0):
        raise InputError(
            f"sky box RA {ra_min}..{ra_max}, Dec {dec_min}..{dec_max} is empty or off the sky "
            "(0 <= ra_min < ra_max <= 360, -90 <= dec_min < dec_max <= 90, degrees)"
        )
