"""The survey stage's tables (``lens_assets/survey.py``): each with its contract and audits."""

from __future__ import annotations

from darkhaloscope.survey.known_lenses import KNOWN_LENS_SCHEMA
from darkhaloscope.survey.manifest import MANIFEST_SCHEMA
from darkhaloscope.survey.redshifts import PHOTO_Z_SCHEMA, SPECTRA_SCHEMA
from darkhaloscope.survey.sweeps import SWEEP_DIM
from lake_platform.audits import Audit
from lake_platform.contracts import Contract, Range

from .columns import DEG, NMGY, SWEEP_COLUMNS, described, from_schema
from .table import Table

SWEEP_FILES_CONTRACT = Audit("sweep_files_contract", "unique sweep file names with valid sky boxes (contract)")

SWEEP_FILES = Table(
    "survey",
    "sweep_files",
    "manifest of the survey's sweep files (name, sky box, size) and which survey they come from",
    Contract(
        table="sweep_files",
        columns=from_schema(
            MANIFEST_SCHEMA,
            {
                "sweep_file": ("", "file name of the sweep file (the sweep_file partition key)"),
                "ra_min": (DEG, "lower RA edge of the file's sky box (from its name)"),
                "ra_max": (DEG, "upper RA edge of the file's sky box"),
                "dec_min": (DEG, "lower Dec edge of the file's sky box"),
                "dec_max": (DEG, "upper Dec edge of the file's sky box"),
                "size_bytes": ("byte", "size of the file on the mirror, null where unknown"),
            },
        ),
        key=("sweep_file",),
        ranges=(
            Range("ra_min", 0.0, 360.0),
            Range("ra_max", 0.0, 360.0),
            Range("dec_min", -90.0, 90.0),
            Range("dec_max", -90.0, 90.0),
            Range("size_bytes", 0, None, nullable=True),
        ),
    ),
    None,
    (SWEEP_FILES_CONTRACT,),
)

SWEEPS_CONTRACT = Audit(
    "sweeps_contract", "schema, types, key uniqueness and coordinate ranges match the sweeps contract"
)

SWEEPS_ROW_COUNT = Audit("sweeps_row_count", "row count equals the FITS row count")

SWEEPS_INSIDE_BOX = Audit("sweeps_inside_box", "every row lies inside the sky box in its file name")

SWEEPS_UNIQUE_ACROSS_PARTITIONS = Audit(
    "sweeps_unique_across_partitions", "no object of this sweep file is also in another sweep file's partition"
)

SWEEPS = Table(
    "survey",
    "sweeps",
    "one sweep file read into Arrow: lower-case DR10 columns, HEALPix indices, provenance",
    Contract(
        table="sweeps",
        columns=SWEEP_COLUMNS,
        key=("release", "brickid", "objid"),
        ranges=(Range("ra", 0.0, 360.0, hi_inclusive=False), Range("dec", -90.0, 90.0), Range("row_index", 0, None)),
    ),
    SWEEP_DIM,
    (SWEEPS_CONTRACT, SWEEPS_ROW_COUNT, SWEEPS_INSIDE_BOX, SWEEPS_UNIQUE_ACROSS_PARTITIONS),
)

PHOTO_Z_CONTRACT = Audit("photo_z_contract", "schema, unique object ids and redshift ranges of the photo-z rows")

PHOTO_Z_COVERS_SWEEP = Audit(
    "photo_z_covers_sweep", "one photo-z row (a redshift or a null) for every row of the sweep partition"
)

PHOTO_Z = Table(
    "survey",
    "photo_z",
    "photo-zs of one sweep file from its row-matched DR10 photo-z sweep (null where none), with Z_SPEC",
    Contract(
        table="photo_z",
        columns=from_schema(
            PHOTO_Z_SCHEMA,
            described(
                PHOTO_Z_SCHEMA,
                {
                    "object_id": ("", "object_id of the sweep row the photo-z belongs to"),
                    "sweep_file": ("", "the sweep file the pz file is row-matched to"),
                    "row_index": ("", "row of the object in its sweep file (and in the pz file)"),
                },
            ),
        ),
        key=("object_id",),
        ranges=(
            Range("row_index", 0, None),
            Range("z_phot_median", 0.0, 10.0, nullable=True),
            Range("z_phot_std", 0.0, None, nullable=True),
            Range("z_spec", 0.0, 10.0, nullable=True, lo_inclusive=False),
        ),
    ),
    SWEEP_DIM,
    (PHOTO_Z_CONTRACT, PHOTO_Z_COVERS_SWEEP),
)

SPECTRA_CONTRACT = Audit("spectra_contract", "schema, one spectrum per object and valid coordinates")

SPECTRA = Table(
    "survey",
    "spectra",
    "SDSS DR16 spectra (Z, ZWARNING, CLASS, VDISP) matched to DR10 sources, one per source",
    Contract(
        table="spectra",
        columns=from_schema(
            SPECTRA_SCHEMA,
            described(
                SPECTRA_SCHEMA,
                {
                    "object_id": ("", "object_id of the sweep row the spectrum is matched to"),
                    "dec": (DEG, "Tractor Dec of the matched source"),
                    "flux_r": (NMGY, "Tractor model flux in r of the matched source"),
                    "flux_z": (NMGY, "Tractor model flux in z of the matched source"),
                    "mw_transmission_r": ("", "Galactic transmission in r of the matched source"),
                    "mw_transmission_z": ("", "Galactic transmission in z of the matched source"),
                    "plate": ("", "SDSS PLATE"),
                    "mjd": ("", "SDSS MJD of the observation"),
                    "fiberid": ("", "SDSS FIBERID"),
                },
            ),
        ),
        key=("object_id",),
        ranges=(Range("ra", 0.0, 360.0, hi_inclusive=False), Range("dec", -90.0, 90.0)),
    ),
    None,
    (SPECTRA_CONTRACT,),
)

KNOWN_LENSES_CONTRACT = Audit("known_lenses_contract", "schema, unique names and valid coordinates")

KNOWN_LENSES = Table(
    "survey",
    "known_lenses",
    "the lenscat catalog of known strong lenses, normalised",
    Contract(
        table="known_lenses",
        columns=from_schema(
            KNOWN_LENS_SCHEMA,
            {
                "lens_id": ("", "identifier of the lens: its lenscat name, made unique"),
                "name": ("", "lenscat name of the lens"),
                "ra": (DEG, "right ascension of the lens (lenscat)"),
                "dec": (DEG, "declination of the lens (lenscat)"),
                "z_lens": ("", "lens redshift, null where lenscat has none"),
                "grade": ("", "lenscat grading: confident or probable"),
                "kind": ("", "lenscat type: galaxy, group or cluster"),
                "reference": ("", "lenscat reference(s) of the discovery"),
            },
        ),
        key=("lens_id",),
        ranges=(
            Range("ra", 0.0, 360.0, hi_inclusive=False),
            Range("dec", -90.0, 90.0),
            Range("z_lens", 0.0, 10.0, nullable=True),
        ),
    ),
    None,
    (KNOWN_LENSES_CONTRACT,),
)

#: The survey stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    SWEEP_FILES,
    SWEEPS,
    PHOTO_Z,
    SPECTRA,
    KNOWN_LENSES,
)
