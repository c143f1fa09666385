"""Every lake table's contract: its columns with Arrow types, unique key and value rules.

The schemas come from the science library modules that build each table; the rules (keys,
ranges, allowed values) are stated here, once per table.
"""

from __future__ import annotations

import pyarrow as pa

from darkhaloscope.catalog.crossmatch import POSITIVE_SCHEMA
from darkhaloscope.catalog.cuts import FUNNEL_SCHEMA, NEGATIVE_SCHEMA, SELECTION_COLUMN
from darkhaloscope.catalog.sampling import CATALOG_SCHEMA
from darkhaloscope.evaluation.closure import CLOSURE_SCHEMA, SELECTION_MODEL_SCHEMA
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
from lakehouse.contracts import Contract, Range


def _f(*names: str, t: pa.DataType = pa.float32()) -> dict[str, pa.DataType]:
    return {n: t for n in names}


_BANDS = ("g", "r", "z")
_PHOT = {
    **_f(*(f"flux_{b}" for b in _BANDS)),
    **{f"nobs_{b}": pa.int16() for b in _BANDS},
    **_f(*(f"psfsize_{b}" for b in _BANDS)),
    **_f(*(f"psfdepth_{b}" for b in _BANDS)),
    **_f(*(f"galdepth_{b}" for b in _BANDS)),
    **_f("ebv", "shape_r", "shape_e1", "shape_e2", "sersic"),
    "maskbits": pa.int32(),
}

SWEEPS = Contract(
    table="sweeps",
    columns={
        "release": pa.int16(),
        "brickid": pa.int32(),
        "brickname": pa.string(),
        "objid": pa.int32(),
        "type": pa.string(),
        "ra": pa.float64(),
        "dec": pa.float64(),
        **_PHOT,
        "healpix_128": pa.int64(),
        "healpix_fine": pa.int64(),
        "sweep_file": pa.string(),
        "row_index": pa.int64(),
        "object_id": pa.int64(),
    },
    key=("release", "brickid", "objid"),
    ranges=(Range("ra", 0.0, 360.0, hi_inclusive=False), Range("dec", -90.0, 90.0), Range("row_index", 0, None)),
    # DR8 sweeps have no PSFSIZE, SHAPE_R/E1/E2 (SHAPEEXP_*/SHAPEDEV_* instead) or SERSIC columns
    optional=frozenset({*(f"psfsize_{b}" for b in _BANDS), "shape_r", "shape_e1", "shape_e2", "sersic"}),
)


def _columns(schema: pa.Schema) -> dict[str, pa.DataType]:
    return {f.name: f.type for f in schema}


PHOTO_Z = Contract(
    table="photo_z",
    columns=_columns(PHOTO_Z_SCHEMA),
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
    columns=_columns(SPECTRA_SCHEMA),
    key=("object_id",),
    ranges=(Range("ra", 0.0, 360.0, hi_inclusive=False), Range("dec", -90.0, 90.0)),
)


_SPLITS = ("train", "val", "test")

KNOWN_LENSES = Contract(
    table="known_lenses",
    columns=_columns(KNOWN_LENS_SCHEMA),
    key=("lens_id",),
    ranges=(
        Range("ra", 0.0, 360.0, hi_inclusive=False),
        Range("dec", -90.0, 90.0),
        Range("z_lens", 0.0, 10.0, nullable=True),
    ),
)

NEGATIVES = Contract(
    table="negatives",
    columns=_columns(NEGATIVE_SCHEMA),
    key=("object_id",),
    ranges=(Range("dec", -90.0, 90.0), Range("ra", 0.0, 360.0, hi_inclusive=False)),
    allowed_values={"pool": ("N1", "N2"), "split": _SPLITS},
)

POSITIVES = Contract(
    table="positives",
    columns=_columns(POSITIVE_SCHEMA),
    key=("object_id",),
    ranges=(Range("separation_arcsec", 0.0, 5.0),),
    allowed_values={"tier": ("A", "B"), "split": _SPLITS},
)

TRAINING_CATALOG = Contract(
    table="training_catalog",
    columns=_columns(CATALOG_SCHEMA),
    key=("object_id",),
    allowed_values={"split": _SPLITS},
)

CUTOUTS = Contract(
    table="cutouts",
    columns={
        "object_id": pa.int64(),
        "ra": pa.float64(),
        "dec": pa.float64(),
        "label": pa.int8(),
        "split": pa.string(),
        "image": tensor_type(STAMP_SHAPE),
        "invvar": tensor_type(STAMP_SHAPE),
    },
    key=("object_id",),
    allowed_values={"split": _SPLITS},
)

TRAINING_SET = Contract(
    table="training_set",
    columns={
        "object_id": pa.int64(),
        "split": pa.string(),
        "label": pa.int8(),
        "weight": pa.float32(),
        "kind": pa.string(),
        "image": tensor_type(STAMP_SHAPE),
    },
    key=("object_id",),
    ranges=(Range("label", 0, 1), Range("weight", 0.0, None)),
    allowed_values={"split": ("train", "val"), "kind": ("real_positive", "negative")},
)

SWEEP_FILES = Contract(
    table="sweep_files",
    columns=_columns(MANIFEST_SCHEMA),
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
    columns={**_columns(FUNNEL_SCHEMA), SELECTION_COLUMN: pa.string()},
    key=("sweep_file", "step_index"),
    ranges=(Range("n_removed", 0, None), Range("n_remaining", 0, None)),
)

TRAINING_STRATA = Contract(
    table="training_strata",
    columns={"stratum": pa.string(), "n_positives": pa.int64(), "n1_actual": pa.int64(), "n2_actual": pa.int64()},
    key=("stratum",),
    ranges=(Range("n_positives", 0, None), Range("n1_actual", 0, None), Range("n2_actual", 0, None)),
)

CUTOUT_VALIDATION = Contract(
    table="cutout_validation",
    columns={"feature": pa.string(), "auc": pa.float64(), "flag": pa.string(), "core_feature": pa.bool_()},
    key=("feature",),
    ranges=(Range("auc", 0.0, 1.0, nullable=True),),
    allowed_values={"flag": ("red", "yellow", "green", "na")},
)

INJECTION_PLAN = Contract(
    table="injection_plan",
    columns={
        "injection_id": pa.int64(),
        "batch": pa.int32(),
        "seed": pa.int64(),
        "host_object_id": pa.int64(),
        "theta_e_arcsec": pa.float64(),
        "z_l": pa.float64(),
        "z_s": pa.float64(),
        "sigma_v_kms": pa.float64(),
        "z_l_bin": pa.float64(),
        "host_z": pa.float64(),
        "host_z_source": pa.string(),
        "sigma_v_source": pa.string(),
        "lens_mag_z": pa.float64(),
    },
    key=("injection_id",),
    ranges=(
        Range("batch", 0, None),
        Range("theta_e_arcsec", 0.0, None, lo_inclusive=False),
        Range("z_l", 0.0, None, lo_inclusive=False),
        Range("z_s", 0.0, None, lo_inclusive=False),
        Range("sigma_v_kms", 0.0, None, lo_inclusive=False),
    ),
    allowed_values={
        "host_split": _SPLITS,
        "host_z_source": ("spec", "phot"),
        "sigma_v_source": ("measured", "relation"),
    },
)


SELECTION_MODEL = Contract(
    table="selection_model",
    columns=_columns(SELECTION_MODEL_SCHEMA),
    key=("threshold_name", "replica"),
    ranges=(Range("replica", 0, None), Range("n_injections", 1, None)),
)
SELECTION_CLOSURE = Contract(
    table="selection_closure",
    columns=_columns(CLOSURE_SCHEMA),
    key=("threshold_name", "bin"),
    ranges=(Range("n_hidden", 0, None), Range("n_recovered", 0, None), Range("n_predicted_sd", 0.0, None)),
)

LENS_FORECAST = Contract(
    table="lens_forecast",
    columns=_columns(FORECAST_SCHEMA),
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


def scores_contract(table: str) -> Contract:
    """The score rows of ``score_batches`` (``cutout_scores`` and ``injection_scores``)."""
    return Contract(
        table=table,
        columns={"kind": pa.string(), "score": pa.float64(), "valid": pa.bool_(), "invalid_reason": pa.string()},
        ranges=(Range("score", 0.0, 1.0, nullable=True),),
        allowed_values={"kind": ("cutout", "injection", "control")},
    )


THRESHOLDS = Contract(
    table="thresholds",
    columns=_columns(THRESHOLD_SCHEMA),
    key=("name",),
    ranges=(Range("n_valid_negatives", 0, None), Range("n_above", 0, None, nullable=True)),
)

_FRACTIONS = tuple(
    Range(c, 0.0, 1.0, nullable=True) for c in ("completeness", "ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi")
)

SELECTION_FUNCTION = Contract(
    table="selection_function",
    columns={**_columns(SELECTION_SCHEMA), "theta_e_arcsec": pa.float64(), "z_l": pa.float64()},
    key=("threshold_name", "theta_e_centre", "z_l_centre"),
    ranges=_FRACTIONS,
)

SELECTION_MARGINALS = Contract(
    table="selection_marginals",
    columns=_columns(MARGINAL_SCHEMA),
    key=("threshold_name", "by", "bin"),
    ranges=_FRACTIONS,
)

REAL_LENS_RECALL = Contract(
    table="real_lens_recall",
    columns=_columns(RECALL_SCHEMA),
    key=("threshold_name", "tier"),
    ranges=tuple(Range(c, 0.0, 1.0, nullable=True) for c in ("recall", "ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi")),
)

FPR_BY_CONFUSER = Contract(
    table="fpr_by_confuser",
    columns=_columns(CONFUSER_SCHEMA),
    ranges=tuple(Range(c, 0.0, 1.0, nullable=True) for c in ("fpr", "ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi")),
)

EVALUATION_REPORT = Contract(
    table="evaluation_report",
    columns={"uri": pa.string(), "bytes": pa.int64(), "figures": pa.int64()},
    ranges=(Range("bytes", 1, None), Range("figures", 1, None)),
)

ALERTS = Contract(
    table="alerts",
    columns={
        "dedup_key": pa.string(),
        "kind": pa.string(),
        "asset": pa.string(),
        "severity": pa.string(),
        "run_id": pa.string(),
    },
    key=("dedup_key",),
    allowed_values={"severity": ("ERROR", "WARN")},
)

SEARCH_TARGETS = Contract(
    table="search_targets",
    columns=_columns(TARGET_SCHEMA),
    key=("object_id",),
    ranges=(Range("dec", -90.0, 90.0), Range("ra", 0.0, 360.0, hi_inclusive=False)),
    allowed_values={"split": _SPLITS},
)

SEARCH_SCORES = Contract(
    table="search_scores",
    columns={
        "object_id": pa.int64(),
        "sweep_file": pa.string(),
        "ra": pa.float64(),
        "dec": pa.float64(),
        "split": pa.string(),
        **{f.name: f.type for f in SCORE_FIELDS},
    },
    key=("object_id",),
    ranges=(Range("score", 0.0, 1.0, nullable=True),),
)

SEARCH_STAMPS = Contract(
    table="search_stamps",
    columns=_columns(STAMP_SCHEMA),
    key=("object_id",),
    ranges=(Range("score", 0.0, 1.0),),
)

CANDIDATES = Contract(
    table="candidates",
    columns={
        **{c: TARGET_SCHEMA.field(c).type for c in SCORE_COLUMNS if c in TARGET_SCHEMA.names},
        "score": pa.float64(),
        "model_version": pa.string(),
        **{f.name: f.type for f in CANDIDATE_FIELDS},
    },
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
    columns={"uri": pa.string(), "bytes": pa.int64(), "stamps": pa.int64()},
    ranges=(Range("bytes", 1, None), Range("stamps", 0, None)),
)

VISUAL_GRADES = Contract(
    table="visual_grades",
    columns=_columns(GRADES_SCHEMA),
    key=("round", "object_id"),
    ranges=(Range("round", 1, None),),
    allowed_values={"grade": (*GRADES, UNGRADED)},
)
