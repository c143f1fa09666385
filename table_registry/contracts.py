"""Every lake table's contract: each column with its Arrow type, unit and description, the unique
key and the value rules.

Where a science-library module builds a table from an Arrow schema, the types come from that
schema (:func:`~table_registry.columns.from_schema`) and the units and descriptions from
``table_registry/columns.py`` or from the table's own entries here; the rules (keys, ranges,
allowed values) are stated here, once per table. A column that is not required may be absent (an
older data model or another configuration lacks it) but has its type when present.
"""

from __future__ import annotations

import pyarrow as pa

from darkhaloscope.catalog.crossmatch import POSITIVE_SCHEMA
from darkhaloscope.catalog.cuts import FUNNEL_SCHEMA, NEGATIVE_SCHEMA, SELECTION_COLUMN
from darkhaloscope.catalog.sampling import CATALOG_SCHEMA, STRATA_SCHEMA
from darkhaloscope.evaluation.closure import CLOSURE_SCHEMA, FEATURES, SELECTION_MODEL_SCHEMA
from darkhaloscope.evaluation.forecast import FORECAST_SCHEMA
from darkhaloscope.evaluation.recall import CONFUSER_SCHEMA, RECALL_SCHEMA
from darkhaloscope.evaluation.selection import MARGINAL_SCHEMA, SELECTION_SCHEMA
from darkhaloscope.evaluation.thresholds import THRESHOLD_SCHEMA
from darkhaloscope.search.candidates import CANDIDATE_FIELDS, SCORE_COLUMNS
from darkhaloscope.search.grades import GRADES, GRADES_SCHEMA, UNGRADED
from darkhaloscope.search.streaming import SCORE_FIELDS, STAMP_SCHEMA
from darkhaloscope.search.targets import TARGET_SCHEMA
from darkhaloscope.stamps import STAMP_SHAPE, tensor_type
from darkhaloscope.survey.known_lenses import KNOWN_LENS_SCHEMA
from darkhaloscope.survey.manifest import MANIFEST_SCHEMA
from darkhaloscope.survey.redshifts import PHOTO_Z_SCHEMA, SPECTRA_SCHEMA
from lake_platform.alert_log import ALERTS_SCHEMA
from lake_platform.contracts import Column, Contract, Range

from .columns import ARCSEC, DEG, IVAR_NMGY, MAG, NMGY, NMGY_PIX, PIX, RAD, SWEEP_COLUMNS, col, from_schema, optional

_BANDS = ("g", "r", "z")
_SPLITS = ("train", "val", "test")
_F32, _F64, _I64, _STR, _BOOL = pa.float32(), pa.float64(), pa.int64(), pa.string(), pa.bool_()
_STAMP = tensor_type(STAMP_SHAPE)

SWEEPS = Contract(
    table="sweeps",
    columns=SWEEP_COLUMNS,
    key=("release", "brickid", "objid"),
    ranges=(Range("ra", 0.0, 360.0, hi_inclusive=False), Range("dec", -90.0, 90.0), Range("row_index", 0, None)),
)


def _described(schema: pa.Schema, own: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """``own`` (unit, description) of ``schema``'s columns, completed by the descriptions its writer
    put in the fields' metadata (``unit``, ``description``)."""
    meta = {
        f.name: (f.metadata.get(b"unit", b"").decode(), f.metadata[b"description"].decode())
        for f in schema
        if f.metadata and b"description" in f.metadata
    }
    return {**meta, **own}


PHOTO_Z = Contract(
    table="photo_z",
    columns=from_schema(
        PHOTO_Z_SCHEMA,
        _described(
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
)
SPECTRA = Contract(
    table="spectra",
    columns=from_schema(
        SPECTRA_SCHEMA,
        _described(
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
)

KNOWN_LENSES = Contract(
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
)

NEGATIVES = Contract(
    table="negatives",
    columns=from_schema(NEGATIVE_SCHEMA),
    key=("object_id",),
    ranges=(Range("dec", -90.0, 90.0), Range("ra", 0.0, 360.0, hi_inclusive=False)),
    allowed_values={"pool": ("N1", "N2"), "split": _SPLITS},
)

_LENS_MATCH = {
    "lens_index": ("", "row of the lens in known_lenses"),
    "lens_ra": (DEG, "right ascension of the catalogued lens"),
    "lens_dec": (DEG, "declination of the catalogued lens"),
    "grade": ("", "lenscat grading: confident or probable"),
    "kind": ("", "lenscat type of the lens (galaxy: only galaxy-scale lenses are positives)"),
    "reference": ("", "lenscat reference(s) of the discovery"),
    "tier": ("", "training tier: A (lenscat confident) or B (probable)"),
    "separation_arcsec": (ARCSEC, "separation between the catalogued lens and the sweep source matched to it"),
    "in_negative_footprint": ("", "whether the source lies inside the negatives' declination footprint"),
    "passes_negative_cuts": ("", "whether the source passes the negatives' quality cuts (type, maskbits, nobs, z mag)"),
    "failed_cuts": ("", "the quality cuts the source fails, comma-separated (empty when it passes)"),
}
POSITIVES = Contract(
    table="positives",
    columns=from_schema(POSITIVE_SCHEMA, _LENS_MATCH),
    key=("object_id",),
    ranges=(Range("separation_arcsec", 0.0, 5.0),),
    allowed_values={"tier": ("A", "B"), "split": _SPLITS},
)

TRAINING_CATALOG = Contract(
    table="training_catalog",
    columns=from_schema(
        CATALOG_SCHEMA,
        {
            "role": ("", "positive or negative"),
            "stratum": ("", "(nobs_z_bin, type_bin) stratum the row was sampled in"),
            "pool": ("", "N1 or N2 for a negative; the positives' pool name for a lens"),
            "lens_name": ("", "lenscat name of a positive, null for a negative"),
            "z_lens": ("", "lens redshift of a positive from lenscat, null where unknown"),
            "sample_hash": ("", "the stable hash in [0, 1) that orders the negatives of a stratum for sampling"),
        },
    ),
    key=("object_id",),
    allowed_values={"split": _SPLITS},
)

SWEEP_FILES = Contract(
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
)

SELECTION_FUNNEL = Contract(
    table="selection_funnel",
    columns=(
        *from_schema(
            FUNNEL_SCHEMA,
            {
                "step_index": ("", "position of the cut in the funnel (0 = the file as read)"),
                "step": ("", "cut name: dec_footprint, type, maskbits, nobs, zmag, known_lens"),
                "n_removed": ("", "rows this cut removed"),
                "n_remaining": ("", "rows left after this cut"),
            },
        ),
        Column(SELECTION_COLUMN, pa.string(), "", "the negative selection the funnel was run with (JSON)"),
    ),
    key=("sweep_file", "step_index"),
    ranges=(Range("n_removed", 0, None), Range("n_remaining", 0, None)),
)

TRAINING_STRATA = Contract(
    table="training_strata",
    columns=optional(
        from_schema(
            STRATA_SCHEMA,
            {
                "stratum": ("", "(nobs_z_bin, type_bin) stratum"),
                "n_positives": ("", "positives in the stratum"),
                "target": ("", "negatives wanted in the stratum (the class ratio times n_positives)"),
                "n1_target": ("", "N1 negatives wanted (85 % of target)"),
                "n2_target": ("", "N2 negatives wanted (15 % of target)"),
                "n1_actual": ("", "N1 negatives sampled"),
                "n2_actual": ("", "N2 negatives sampled"),
                "backfilled": ("", "negatives taken from the other pool where one ran short"),
                "n1_available": ("", "N1 negatives in the stratum"),
                "n2_available": ("", "N2 negatives in the stratum"),
                "available": ("", "negatives in the stratum"),
            },
        ),
        "stratum",
        "n_positives",
        "n1_actual",
        "n2_actual",
    ),
    key=("stratum",),
    ranges=(Range("n_positives", 0, None), Range("n1_actual", 0, None), Range("n2_actual", 0, None)),
)


def _per_band(name: str, typ: pa.DataType, unit: str, text: str) -> tuple[Column, ...]:
    return tuple(Column(name.format(b=b), typ, unit, text.format(b=b)) for b in _BANDS)


#: Per-cutout quality metrics (darkhaloscope/imaging/quality.py; radii in pixels of 0.262″).
_QUALITY = (
    *_per_band("has_{b}", _BOOL, "", "whether band {b} has any finite, non-zero pixel with inverse variance"),
    *_per_band("nonfinite_frac_{b}", _F64, "", "fraction of non-finite pixels in band {b}"),
    *_per_band("zero_frac_{b}", _F64, "", "fraction of pixels exactly 0 in band {b}"),
    *_per_band("core_brightness_{b}", _F64, NMGY_PIX, "median of the core (r ≤ 8 px) in band {b}"),
    *_per_band("core_max_{b}", _F64, NMGY_PIX, "maximum of the core (r ≤ 8 px) in band {b}"),
    *_per_band("annulus_brightness_{b}", _F64, NMGY_PIX, "median of the annulus (0.65–0.9 of the half-width), {b}"),
    *_per_band("outer_brightness_{b}", _F64, NMGY_PIX, "median beyond the annulus in band {b}"),
    *_per_band("median_{b}", _F64, NMGY_PIX, "median of the stamp in band {b}"),
    *_per_band("mad_{b}", _F64, NMGY_PIX, "median absolute deviation of the stamp in band {b}"),
    *_per_band("radial_gradient_{b}", _F64, "nanomaggy/pixel^2", "(core − outer brightness) over their radii, {b}"),
    *_per_band("clip_frac_{b}", _F64, "", "fraction of pixels beyond 10 robust σ of the median in band {b}"),
    Column("nonfinite_frac", _F64, "", "fraction of non-finite pixels over all bands"),
    Column("central_nonfinite_frac", _F64, "", "fraction of non-finite pixels in the central 51×51 box"),
    Column("core_nonfinite_frac", _F64, "", "fraction of non-finite pixels in the core (r ≤ 8 px)"),
    Column("bad_pixel_frac", _F64, "", "fraction of pixels non-finite, zero or without inverse variance in a band"),
    Column("n_bands_present", pa.int8(), "", "bands with data (has_g + has_r + has_z)"),
    Column(
        "quality_flags",
        pa.int32(),
        "",
        "why the gate failed: 1 central non-finite, 2 core non-finite, 4 bad pixels, 8 missing band (bits OR-ed)",
    ),
    Column("quality_ok", _BOOL, "", "whether the cutout passed the quality gate (quality_flags = 0)"),
    *_per_band("saturated_frac_{b}", _F64, "", "fraction of pixels with the SATUR_{b} maskbit (null without maskbits)"),
)

_CUTOUT_REQUIRED = ("object_id", "ra", "dec", "label", "split", "image", "invvar")
CUTOUTS = Contract(
    table="cutouts",
    columns=optional(
        (
            col("object_id", _I64),
            col("ra", _F64),
            col("dec", _F64),
            col("type", _STR),
            col("split", _STR),
            col("sweep_file", _STR),
            *(col(f"{k}_{b}", _F32) for k in ("psfsize", "psfdepth") for b in _BANDS),
            col("nobs_z_bin", _STR),
            col("type_bin", _STR),
            col("pool", _STR, description="N1 or N2 for a negative; null for a positive"),
            col("confuser_category", _STR),
            col("label", pa.int8()),
            col("tier", _STR),
            col("name", _STR),
            col("in_training_catalog", _BOOL),
            col("image", _STAMP),
            col("invvar", _STAMP),
            Column(
                "maskbits",
                tensor_type(STAMP_SHAPE[1:], pa.int32()),
                "",
                "coadd MASKBITS per pixel [y, x] (absent where the image source has none, e.g. the cutout service)",
            ),
            col("dx_pix", _F32),
            col("dy_pix", _F32),
            Column("band_missing", pa.uint8(), "", "bands without data, one bit each (1 g, 2 r, 4 z)"),
            Column("edge_padded", _BOOL, "", "whether the stamp ran over the edge of every brick and was padded"),
            Column("fetch_error", _STR, "", "why the stamp could not be fetched (empty when it was)"),
            *_QUALITY,
        ),
        *_CUTOUT_REQUIRED,
    ),
    key=("object_id",),
    allowed_values={"split": _SPLITS},
)

TRAINING_SET = Contract(
    table="training_set",
    columns=optional(
        (
            col("object_id", _I64),
            col("split", _STR, description="train or val (test rows never enter the training set)"),
            col("tier", _STR, description="A or B (lenscat) or A/B/C (a visual grade) for a positive; weights it"),
            col("pool", _STR, description="N1, N2 or graded (a visually graded candidate)"),
            col("ra", _F64),
            col("dec", _F64),
            col("type", _STR),
            *(col(f"{k}_{b}", _F32) for k in ("psfsize", "psfdepth") for b in _BANDS),
            col("dx_pix", _F32),
            col("dy_pix", _F32),
            col("label", pa.int8()),
            Column(
                "weight", _F32, "", "loss weight: a positive's tier weight (A 1.0, B 0.5, C 0.25), 1 for a negative"
            ),
            Column("kind", _STR, "", "real_positive or negative"),
            Column("grade_round", _I64, "", "visual-grade round that labelled the row, null when no grade did"),
            col("image", _STAMP),
            Column(
                "invvar",
                _STAMP,
                "pixel^2/nanomaggy^2",
                "inverse variance of an injection host's stamp (null for rows that host no injection)",
            ),
        ),
        "object_id",
        "split",
        "label",
        "weight",
        "kind",
        "image",
    ),
    key=("object_id",),
    ranges=(Range("label", 0, 1), Range("weight", 0.0, None)),
    allowed_values={"split": ("train", "val"), "kind": ("real_positive", "negative")},
)

CUTOUT_VALIDATION = Contract(
    table="cutout_validation",
    columns=optional(
        (
            Column("feature", _STR, "", "image feature of the shortcut scan (a quality metric of the cutouts)"),
            Column("n_pos", _I64, "", "positives with a finite value of the feature"),
            Column("n_neg", _I64, "", "negatives with a finite value of the feature"),
            Column("auc", _F64, "", "AUC of the feature alone telling positives from negatives"),
            Column("auc_lo", _F64, "", "lower end of the AUC's bootstrap interval"),
            Column("auc_hi", _F64, "", "upper end of the AUC's bootstrap interval"),
            Column("separation_lo", _F64, "", "lower bound of |AUC − 0.5| + 0.5 from the interval"),
            Column("flag", _STR, "", "red (separation > 0.70), yellow (> 0.60), green, or na"),
            Column("expected_physics", _BOOL, "", "whether lenses are expected to differ on it (not a shortcut)"),
            Column("core_feature", _BOOL, "", "whether the feature measures the stamp's core (a red one blocks)"),
            Column("scope", _STR, "", "the rows scanned (training_catalog)"),
        ),
        "feature",
        "auc",
        "flag",
        "core_feature",
    ),
    key=("feature",),
    ranges=(Range("auc", 0.0, 1.0, nullable=True),),
    allowed_values={"flag": ("red", "yellow", "green", "na")},
)

#: One injection: its task (the plan) and what the bank adds when it renders it.
_INJECTION_TASK = (
    Column("injection_id", _I64, "", "identifier of the injection: batch × batch size + index_in_batch"),
    Column("batch", pa.int32(), "", "batch of the plan (the injection_batch partition of the bank)"),
    Column("index_in_batch", pa.int32(), "", "position in its batch"),
    Column("seed", _I64, "", "seed of the injection's random draws (a stable hash of its key)"),
    Column("profile", _STR, "", "the profile that planned it (demo or full)"),
    Column("cell_id", pa.int32(), "", "(θ_E, z_l) cell of the grid"),
    col("host_object_id", _I64),
    Column("host_ra", _F64, DEG, "right ascension of the host"),
    Column("host_dec", _F64, DEG, "declination of the host"),
    Column("host_split", _STR, "", "split of the host (test: the selection function uses held-out hosts)"),
    Column("host_type", _STR, "", "Tractor type of the host"),
    col("theta_e_arcsec", _F64),
    col("z_l", _F64),
    col("z_s", _F64),
    col("sigma_v_kms", _F64),
    col("z_l_bin", _F64),
    col("host_z", _F64),
    col("host_z_source", _STR),
    col("sigma_v_source", _STR),
    col("lens_mag_z", _F64),
    Column("host_log_sigma_mu", _F64, "dex(km/s)", "mean of the host's log-normal σ_v: its VDISP, else the relation's"),
    Column(
        "host_log_sigma_sd", _F64, "dex", "sd of the host's log-normal σ_v (VDISP_ERR, else the relation's scatter)"
    ),
    Column("lens_q_offset", _F64, "", "drawn offset of the SIE's axis ratio from the host light's"),
    Column("lens_phi_offset_rad", _F64, RAD, "drawn offset of the SIE's position angle from the host light's"),
    Column("lens_q", _F64, "", "axis ratio of the SIE"),
    Column("lens_phi_rad", _F64, RAD, "position angle of the SIE"),
    Column("lens_e1", _F64, "", "ellipticity e1 of the SIE (lenstronomy's convention)"),
    Column("lens_e2", _F64, "", "ellipticity e2 of the SIE"),
    Column("host_dx_pix", _F64, PIX, "sub-pixel offset of the host in its stamp along x"),
    Column("host_dy_pix", _F64, PIX, "sub-pixel offset of the host in its stamp along y"),
    Column("lens_offset_x_arcsec", _F64, ARCSEC, "mass centre relative to the host's light centre, East"),
    Column("lens_offset_y_arcsec", _F64, ARCSEC, "mass centre relative to the host's light centre, North"),
    Column("lens_center_x_arcsec", _F64, ARCSEC, "mass centre relative to the stamp's centre pixel, East"),
    Column("lens_center_y_arcsec", _F64, ARCSEC, "mass centre relative to the stamp's centre pixel, North"),
    Column("shear_g1", _F64, "", "external shear component γ1"),
    Column("shear_g2", _F64, "", "external shear component γ2"),
    col("src_mag_r", _F64),
    Column("src_g_minus_r", _F64, MAG, "source colour g − r"),
    Column("src_r_minus_z", _F64, MAG, "source colour r − z"),
    Column("src_r_sersic_arcsec", _F64, ARCSEC, "half-light radius of the Sérsic source"),
    Column("src_n_sersic", _F64, "", "Sérsic index of the source"),
    Column("src_q", _F64, "", "axis ratio of the source"),
    Column("src_phi_rad", _F64, RAD, "position angle of the source"),
    Column("src_e1", _F64, "", "ellipticity e1 of the source"),
    Column("src_e2", _F64, "", "ellipticity e2 of the source"),
    Column("src_beta_frac", _F64, "", "source offset from the lens centre in units of θ_E"),
    Column("src_x_arcsec", _F64, ARCSEC, "source position relative to the lens centre, East"),
    Column("src_y_arcsec", _F64, ARCSEC, "source position relative to the lens centre, North"),
    *(col(f"psf_fwhm_{b}", _F64) for b in _BANDS),
    *(col(f"psfdepth_{b}", _F64) for b in _BANDS),
)
_TASK_RULES = (
    Range("batch", 0, None),
    Range("theta_e_arcsec", 0.0, None, lo_inclusive=False),
    Range("z_l", 0.0, None, lo_inclusive=False),
    Range("z_s", 0.0, None, lo_inclusive=False),
    Range("sigma_v_kms", 0.0, None, lo_inclusive=False),
)
_TASK_VALUES = {
    "host_split": _SPLITS,
    "host_z_source": ("spec", "phot"),
    "sigma_v_source": ("measured", "relation"),
}

INJECTION_PLAN = Contract(
    table="injection_plan",
    columns=optional(
        _INJECTION_TASK,
        "injection_id",
        "batch",
        "seed",
        "host_object_id",
        "theta_e_arcsec",
        "z_l",
        "z_s",
        "sigma_v_kms",
        "z_l_bin",
        "host_z",
        "host_z_source",
        "sigma_v_source",
        "lens_mag_z",
    ),
    key=("injection_id",),
    ranges=_TASK_RULES,
    allowed_values=_TASK_VALUES,
)

#: The injection bank has no blocking contract audit (its audits check the physics); its columns
#: are declared for the reference and the UI.
INJECTION_BANK = Contract(
    table="injection_bank",
    columns=optional(
        (
            *_INJECTION_TASK,
            col("success", _BOOL),
            col("failure_reason", _STR),
            col("magnification", _F64),
            col("arc_snr", _F64),
            *(Column(f"arc_snr_{b}", _F64, "", f"matched-filter S/N of the arc in {b}") for b in _BANDS),
            *(Column(f"lensed_mag_{b}", _F64, MAG, f"magnitude of the lensed arc in {b}") for b in _BANDS),
            Column("n_refined_pixels", pa.int32(), "", "pixels the adaptive supersampling refined"),
            Column("image", _STAMP, NMGY_PIX, "the host's stamp with the arc added [band, y, x]"),
            Column("control", _STAMP, NMGY_PIX, "the paired control: the same host's stamp without the arc"),
        )
    ),
    key=("injection_id",),
)

_SCORE_KIND = ("", "cutout (cutout_scores); injection or control (injection_scores)")


def scores_contract(table: str) -> Contract:
    """The score rows of ``score_batches`` (``cutout_scores`` and ``injection_scores``): the scored
    rows' own columns (optional, by table) and the score columns every row has."""
    if table == "cutout_scores":
        meta = (
            col("object_id", _I64),
            col("label", pa.int8()),
            col("split", _STR),
            col("pool", _STR),
            col("confuser_category", _STR),
            col("tier", _STR),
            col("name", _STR),
            col("in_training_catalog", _BOOL),
            col("psfsize_r", _F32),
            col("psfdepth_r", _F32),
        )
    else:
        tasks = {c.name: c for c in _INJECTION_TASK}
        meta = (
            tasks["injection_id"],
            *(tasks[n] for n in ("theta_e_arcsec", "z_l", "z_s", "sigma_v_kms")),
            col("success", _BOOL),
            col("failure_reason", _STR),
            tasks["psf_fwhm_r"],
            Column("psfdepth_r", _F64, IVAR_NMGY, "point-source depth of the host in r"),
            col("src_mag_r", _F64),
            col("lensed_mag_r", _F64),
            col("arc_snr", _F64),
            col("magnification", _F64),
            col("host_object_id", _I64),
            *(tasks[n] for n in ("lens_mag_z", "host_z", "z_l_bin", "host_z_source", "sigma_v_source")),
        )
    return Contract(
        table=table,
        columns=(
            *optional(meta),
            Column("kind", _STR, *_SCORE_KIND),
            col("score", _F64),
            col("valid", _BOOL),
            col("invalid_reason", _STR),
        ),
        ranges=(Range("score", 0.0, 1.0, nullable=True),),
        allowed_values={"kind": ("cutout", "injection", "control")},
    )


THRESHOLDS = Contract(
    table="thresholds",
    columns=from_schema(
        THRESHOLD_SCHEMA,
        {
            "name": ("", "threshold name: fpr=<f> or top=<p>%"),
            "kind": ("", "fpr (a false-positive rate), top_percentile or fixed"),
            "target": ("", "target false-positive fraction (null for fixed)"),
            "threshold": ("", "score threshold: detected when score > threshold (null when not resolvable)"),
            "n_total_negatives": ("", "held-out negatives"),
            "n_valid_negatives": ("", "held-out negatives with a valid score"),
            "n_above": ("", "valid held-out negatives above the threshold"),
            "achieved_fpr": ("", "n_above / n_valid_negatives"),
            "threshold_ci68_lo": ("", "lower end of the threshold's 68 % bootstrap interval"),
            "threshold_ci68_hi": ("", "upper end of the threshold's 68 % bootstrap interval"),
            "resolvable": ("", "whether enough negatives resolve the target (≥ 1/target)"),
            "note": ("", "why a target is not resolvable, else empty"),
        },
    ),
    key=("name",),
    ranges=(Range("n_valid_negatives", 0, None), Range("n_above", 0, None, nullable=True)),
)

_FRACTIONS = tuple(
    Range(c, 0.0, 1.0, nullable=True) for c in ("completeness", "ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi")
)
#: The counts and completeness of one cell or bin of injections (darkhaloscope/evaluation/selection.py).
_COUNTS = {
    "n_injected": ("", "injections planned in the cell"),
    "n_failed": ("", "injections not rendered or not scorable; excluded from n_valid"),
    "n_render_failed": ("", "injections whose render failed"),
    "n_valid": ("", "injections rendered and scored"),
    "n_effective": ("", "independent injections n_valid is worth: n_valid over its hosts' design effect (Kish)"),
    "n_detected": ("", "valid injections scoring above the threshold"),
    "completeness": ("", "n_detected / n_valid: the fraction of lenses found"),
    "ci68_lo": ("", "lower end of completeness's 68 % Jeffreys interval on n_effective trials"),
    "ci68_hi": ("", "upper end of completeness's 68 % Jeffreys interval on n_effective trials"),
    "ci95_lo": ("", "lower end of completeness's 95 % Jeffreys interval on n_effective trials"),
    "ci95_hi": ("", "upper end of completeness's 95 % Jeffreys interval on n_effective trials"),
    "sufficient": ("", "whether n_valid reaches the minimum for a usable estimate"),
    "mean_score": ("", "mean score of the valid injections"),
    "mean_arc_snr": ("", "mean arc S/N of the valid injections"),
}

SELECTION_FUNCTION = Contract(
    table="selection_function",
    columns=(
        *from_schema(
            SELECTION_SCHEMA,
            {
                **_COUNTS,
                "theta_e_centre": (ARCSEC, "θ_E at the cell's centre"),
                "theta_e_lo": (ARCSEC, "lower θ_E edge of the cell"),
                "theta_e_hi": (ARCSEC, "upper θ_E edge of the cell"),
                "z_l_centre": ("", "z_l at the cell's centre"),
                "z_l_lo": ("", "lower z_l edge of the cell"),
                "z_l_hi": ("", "upper z_l edge of the cell"),
            },
        ),
        Column("theta_e_arcsec", _F64, ARCSEC, "θ_E of the cell (its centre; for joins and plots)"),
        Column("z_l", _F64, "", "z_l of the cell (its centre)"),
    ),
    key=("threshold_name", "theta_e_centre", "z_l_centre"),
    ranges=_FRACTIONS,
)

SELECTION_MARGINALS = Contract(
    table="selection_marginals",
    columns=from_schema(
        MARGINAL_SCHEMA,
        {
            **_COUNTS,
            "by": ("", "what the marginal bins: psf_fwhm, depth, source magnitude, lensed magnitude, arc_snr, …"),
            "bin": ("", "label of the bin"),
            "bin_lo": ("", "lower edge of the bin (in the unit of by)"),
            "bin_hi": ("", "upper edge of the bin (in the unit of by)"),
            "bin_centre": ("", "centre of the bin (in the unit of by)"),
        },
    ),
    key=("threshold_name", "by", "bin"),
    ranges=_FRACTIONS,
)

REAL_LENS_RECALL = Contract(
    table="real_lens_recall",
    columns=from_schema(
        RECALL_SCHEMA,
        {
            "tier": ("", "A, B or all"),
            "n": ("", "test-split known lenses of the tier"),
            "n_unscorable": ("", "of them without a valid score"),
            "n_detected": ("", "of them scoring above the threshold"),
            "recall": ("", "n_detected / (n − n_unscorable)"),
            "ci68_lo": ("", "lower end of recall's 68 % Jeffreys interval"),
            "ci68_hi": ("", "upper end of recall's 68 % Jeffreys interval"),
            "ci95_lo": ("", "lower end of recall's 95 % Jeffreys interval"),
            "ci95_hi": ("", "upper end of recall's 95 % Jeffreys interval"),
            "median_score": ("", "median score of the tier's lenses"),
        },
    ),
    key=("threshold_name", "tier"),
    ranges=tuple(Range(c, 0.0, 1.0, nullable=True) for c in ("recall", "ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi")),
)

FPR_BY_CONFUSER = Contract(
    table="fpr_by_confuser",
    columns=from_schema(
        CONFUSER_SCHEMA,
        {
            "group": ("", "the held-out negatives of the row: all, a pool or a confuser category"),
            "pool": ("", "N1, N2 or all"),
            "confuser_category": ("", "N2 confuser category, or all"),
            "n_valid": ("", "held-out negatives of the group with a valid score"),
            "n_above": ("", "of them above the threshold"),
            "fpr": ("", "n_above / n_valid: the group's false-positive rate"),
            "ci68_lo": ("", "lower end of fpr's 68 % Jeffreys interval"),
            "ci68_hi": ("", "upper end of fpr's 68 % Jeffreys interval"),
            "ci95_lo": ("", "lower end of fpr's 95 % Jeffreys interval"),
            "ci95_hi": ("", "upper end of fpr's 95 % Jeffreys interval"),
        },
    ),
    ranges=tuple(Range(c, 0.0, 1.0, nullable=True) for c in ("fpr", "ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi")),
)

EVALUATION_REPORT = Contract(
    table="evaluation_report",
    columns=(
        col("uri", _STR, description="location of the report's index.html"),
        col("bytes", _I64),
        Column("figures", _I64, "", "figures in the report"),
    ),
    ranges=(Range("bytes", 1, None), Range("figures", 1, None)),
)

LENS_FINDER = Contract(
    table="lens_finder",
    columns=(
        Column("checkpoint_uri", _STR, "", "folder of the published checkpoint (safetensors + JSON spec)"),
        Column("data_version", _STR, "", "the checkpoint's data version: its weights sha256 (and views averaged)"),
        Column("val_auroc", _F64, "", "validation AUROC of the published model"),
        Column("metrics", _STR, "", "the training run's metrics and gates (JSON)"),
    ),
)

ALERTS = Contract(
    table="alerts",
    columns=optional(
        from_schema(
            ALERTS_SCHEMA,
            {
                "dedup_key": ("", "the alert's identity: one alert per failed check or run"),
                "kind": ("", "check_failed or run_failed"),
                "asset": ("", "asset key of the failed check or run"),
                "check": ("", "name of the failed check (empty for a run)"),
                "partition": ("", "partition key, empty for an unpartitioned asset"),
                "severity": ("", "ERROR (a blocking check, a failed run) or WARN"),
                "description": ("", "what failed, in one line (secrets redacted)"),
                "metadata_json": ("", "the check's metadata (JSON, secrets redacted)"),
                "run_id": ("", "Dagster run id"),
                "run_url": ("", "link to the run in the Dagster UI"),
                "created_at": ("", "when the alert was raised (ISO 8601, UTC)"),
                "delivered_to": ("", "sinks that took the alert (log, webhook, slack)"),
                "delivery_errors_json": ("", "each owed sink's last delivery error (JSON)"),
                "status": ("", "done, pending (a sink still owes it) or given_up"),
                "attempts": ("", "delivery rounds tried"),
                "last_attempt_at": ("", "when delivery was last tried (ISO 8601, UTC)"),
            },
        ),
        "dedup_key",
        "kind",
        "asset",
        "severity",
        "run_id",
    ),
    key=("dedup_key",),
    allowed_values={"severity": ("ERROR", "WARN")},
)

SEARCH_TARGETS = Contract(
    table="search_targets",
    columns=from_schema(TARGET_SCHEMA),
    key=("object_id",),
    ranges=(Range("dec", -90.0, 90.0), Range("ra", 0.0, 360.0, hi_inclusive=False)),
    allowed_values={"split": _SPLITS},
)

_SEARCH_SCORE = {
    "stamp_kept": ("", "whether the stamp scored at or above the keep-threshold and is in search_stamps"),
    "invalid_reason": (
        "",
        "why the target could not be scored: fetch_failed: …, no_data, missing_band_<b>, masked_centre_<b>, "
        "nonfinite_<b>, zero_<b> (empty when valid)",
    ),
}
SEARCH_SCORES = Contract(
    table="search_scores",
    columns=(
        col("object_id", _I64),
        col("sweep_file", _STR),
        col("brickid", pa.int32(), required=False),
        col("brickname", _STR, required=False),
        col("ra", _F64),
        col("dec", _F64),
        col("type", _STR, required=False),
        *(col(f"mag_{b}", _F32, required=False) for b in _BANDS),
        col("shape_r", _F32, required=False),
        col("healpix_128", _I64, required=False),
        col("split", _STR),
        *from_schema(pa.schema(list(SCORE_FIELDS)), {k: v for k, v in _SEARCH_SCORE.items()}),
    ),
    key=("object_id",),
    ranges=(Range("score", 0.0, 1.0, nullable=True),),
)

SEARCH_STAMPS = Contract(
    table="search_stamps",
    columns=from_schema(STAMP_SCHEMA),
    key=("object_id",),
    ranges=(Range("score", 0.0, 1.0),),
)

CANDIDATES = Contract(
    table="candidates",
    columns=(
        *(col(c, TARGET_SCHEMA.field(c).type) for c in SCORE_COLUMNS if c in TARGET_SCHEMA.names),
        col("score", _F64),
        col("model_version", _STR),
        *from_schema(
            pa.schema(list(CANDIDATE_FIELDS)),
            {
                "rank": ("", "rank by score, 1 the highest"),
                "score_percentile": ("", "percentile of the score among all validly scored search targets"),
                "n_merged": ("", "lower-scoring candidates within 3″ merged into this one"),
                "known": ("", "whether a known lens lies within 1.5″"),
                "known_name": ("", "lenscat name of the nearest known lens"),
                "known_separation_arcsec": (ARCSEC, "separation to the nearest known lens"),
                "completeness": ("", "the search's completeness at the threshold: valid injections above it"),
                "completeness_ci68_lo": ("", "lower end of completeness's 68 % Jeffreys interval"),
                "completeness_ci68_hi": ("", "upper end of completeness's 68 % Jeffreys interval"),
                "n_injections": ("", "valid injections the completeness is measured on"),
            },
        ),
    ),
    key=("object_id",),
    ranges=(
        Range("rank", 1, None),
        Range("score", 0.0, 1.0),
        Range("score_percentile", 0.0, 100.0),
        Range("n_merged", 0, None),
        Range("known_separation_arcsec", 0.0, None, nullable=True),
        *(Range(c, 0.0, 1.0, nullable=True) for c in ("completeness", "completeness_ci68_lo", "completeness_ci68_hi")),
    ),
)

CANDIDATE_GALLERY = Contract(
    table="candidate_gallery",
    columns=(
        col("uri", _STR, description="location of gallery.html"),
        col("bytes", _I64),
        Column("stamps", _I64, "", "candidates shown"),
    ),
    ranges=(Range("bytes", 1, None), Range("stamps", 0, None)),
)

VISUAL_GRADES = Contract(
    table="visual_grades",
    columns=from_schema(
        GRADES_SCHEMA,
        {
            "round": ("", "grading round, 1 for the first CSV landed"),
            "grade": ("", "A, B, C (a lens, by confidence), not_a_lens, or ungraded (shown, awaiting inspection)"),
            "ra": (DEG, "right ascension of the candidate as graded"),
            "dec": (DEG, "declination of the candidate as graded"),
            "score": ("", "the candidate's score when it was graded"),
            "known": ("", "whether the candidate was a known lens"),
            "source_file": ("", "the grades CSV the round was landed from"),
            "source_sha256": ("", "sha256 of that CSV"),
        },
    ),
    key=("round", "object_id"),
    ranges=(Range("round", 1, None),),
    allowed_values={"grade": (*GRADES, UNGRADED)},
)


SELECTION_MODEL = Contract(
    table="selection_model",
    columns=from_schema(
        SELECTION_MODEL_SCHEMA,
        _described(
            SELECTION_MODEL_SCHEMA,
            {
                "intercept": ("", "intercept of the logistic model of P(detected)"),
                **{f"coef_{f}": ("", f"coefficient of the feature {f} (evaluation/closure.py)") for f in FEATURES},
                "n_injections": ("", "valid injections the model was fitted on"),
                "n_hosts": ("", "distinct hosts of those injections"),
            },
        ),
    ),
    key=("threshold_name", "replica"),
    ranges=(Range("replica", 0, None), Range("n_injections", 1, None)),
)
SELECTION_CLOSURE = Contract(
    table="selection_closure",
    columns=from_schema(
        CLOSURE_SCHEMA,
        _described(
            CLOSURE_SCHEMA,
            {
                "n_hidden": ("", "hidden lenses of the mock in the bin whose host the finder never saw"),
                "n_predicted": ("", "hidden lenses the selection model predicts the search finds (Σ P(detected))"),
                "n_predicted_sd": ("", "sd of n_predicted: the model's bootstrap and the binomial draw"),
                "n_recovered": ("", "hidden lenses the search scored above the threshold"),
            },
        ),
    ),
    key=("threshold_name", "bin"),
    ranges=(Range("n_hidden", 0, None), Range("n_recovered", 0, None), Range("n_predicted_sd", 0.0, None)),
)
LENS_FORECAST = Contract(
    table="lens_forecast",
    columns=from_schema(
        FORECAST_SCHEMA,
        _described(
            FORECAST_SCHEMA,
            {
                "area_deg2": ("deg2", "searched area: the searched sweep files' RA/Dec boxes"),
                "n_per_deg2": ("1/deg2", "expected lenses the search finds per square degree"),
                "n_per_deg2_sd": ("1/deg2", "sd of n_per_deg2 from the selection model's bootstrap"),
                "n_in_area": ("", "expected lenses the search finds in the searched area"),
                "n_in_area_sd": ("", "sd of n_in_area from the selection model's bootstrap"),
                "n_lensed_per_deg2": ("1/deg2", "lenses of the population before detection (P_det = 1)"),
            },
        ),
    ),
    key=("threshold_name", "population", "bin"),
    ranges=(
        Range("area_deg2", 0.0, None),
        Range("n_per_deg2", 0.0, None),
        Range("n_per_deg2_sd", 0.0, None),
        Range("n_in_area", 0.0, None),
        Range("n_in_area_sd", 0.0, None),
        Range("n_lensed_per_deg2", 0.0, None, nullable=True),
        Range("n_truth", 0, None, nullable=True),
    ),
    allowed_values={"population": ("vdf", "mock")},
)
