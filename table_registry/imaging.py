"""The imaging stage's tables (``lens_assets/imaging.py``): each with its contract and audits."""

from __future__ import annotations

import pyarrow as pa

from darkhaloscope.stamps import STAMP_SHAPE, tensor_type
from darkhaloscope.survey.sweeps import SWEEP_DIM
from lake_platform.audits import Audit
from lake_platform.contracts import Column, Contract, Range

from .columns import BANDS, BOOL, F32, F64, I64, NMGY_PIX, SPLITS, STAMP, STR, col, optional
from .table import Table


def _per_band(name: str, typ: pa.DataType, unit: str, text: str) -> tuple[Column, ...]:
    return tuple(Column(name.format(b=b), typ, unit, text.format(b=b)) for b in BANDS)


#: Per-cutout quality metrics (darkhaloscope/imaging/quality.py; radii in pixels of 0.262″).
_QUALITY = (
    *_per_band("has_{b}", BOOL, "", "whether band {b} has any finite, non-zero pixel with inverse variance"),
    *_per_band("nonfinite_frac_{b}", F64, "", "fraction of non-finite pixels in band {b}"),
    *_per_band("zero_frac_{b}", F64, "", "fraction of pixels exactly 0 in band {b}"),
    *_per_band("core_brightness_{b}", F64, NMGY_PIX, "median of the core (r ≤ 8 px) in band {b}"),
    *_per_band("core_max_{b}", F64, NMGY_PIX, "maximum of the core (r ≤ 8 px) in band {b}"),
    *_per_band("annulus_brightness_{b}", F64, NMGY_PIX, "median of the annulus (0.65–0.9 of the half-width), {b}"),
    *_per_band("outer_brightness_{b}", F64, NMGY_PIX, "median beyond the annulus in band {b}"),
    *_per_band("median_{b}", F64, NMGY_PIX, "median of the stamp in band {b}"),
    *_per_band("mad_{b}", F64, NMGY_PIX, "median absolute deviation of the stamp in band {b}"),
    *_per_band("radial_gradient_{b}", F64, "nanomaggy/pixel^2", "(core − outer brightness) over their radii, {b}"),
    *_per_band("clip_frac_{b}", F64, "", "fraction of pixels beyond 10 robust σ of the median in band {b}"),
    Column("nonfinite_frac", F64, "", "fraction of non-finite pixels over all bands"),
    Column("central_nonfinite_frac", F64, "", "fraction of non-finite pixels in the central 51×51 box"),
    Column("core_nonfinite_frac", F64, "", "fraction of non-finite pixels in the core (r ≤ 8 px)"),
    Column("bad_pixel_frac", F64, "", "fraction of pixels non-finite, zero or without inverse variance in a band"),
    Column("n_bands_present", pa.int8(), "", "bands with data (has_g + has_r + has_z)"),
    Column(
        "quality_flags",
        pa.int32(),
        "",
        "why the gate failed: 1 central non-finite, 2 core non-finite, 4 bad pixels, 8 missing band (bits OR-ed)",
    ),
    Column("quality_ok", BOOL, "", "whether the cutout passed the quality gate (quality_flags = 0)"),
    *_per_band("saturated_frac_{b}", F64, "", "fraction of pixels with the SATUR_{b} maskbit (null without maskbits)"),
)

_CUTOUT_REQUIRED = ("object_id", "ra", "dec", "label", "split", "image", "invvar")

CUTOUTS_CONTRACT = Audit("cutouts_contract", "schema (101×101 grz tensors), unique object ids, splits")

CUTOUTS = Table(
    "imaging",
    "cutouts",
    "101×101 g,r,z stamps (nanomaggies), invvar and quality of every catalog target",
    Contract(
        table="cutouts",
        columns=optional(
            (
                col("object_id", I64),
                col("ra", F64),
                col("dec", F64),
                col("type", STR),
                col("split", STR),
                col("sweep_file", STR),
                *(col(f"{k}_{b}", F32) for k in ("psfsize", "psfdepth") for b in BANDS),
                col("nobs_z_bin", STR),
                col("type_bin", STR),
                col("pool", STR, description="N1 or N2 for a negative; null for a positive"),
                col("confuser_category", STR),
                col("label", pa.int8()),
                col("tier", STR),
                col("name", STR),
                col("in_training_catalog", BOOL),
                col("image", STAMP),
                col("invvar", STAMP),
                Column(
                    "maskbits",
                    tensor_type(STAMP_SHAPE[1:], pa.int32()),
                    "",
                    "coadd MASKBITS per pixel [y, x] (absent where the image source has none, e.g. the cutout service)",
                ),
                col("dx_pix", F32),
                col("dy_pix", F32),
                Column("band_missing", pa.uint8(), "", "bands without data, one bit each (1 g, 2 r, 4 z)"),
                Column("edge_padded", BOOL, "", "whether the stamp ran over the edge of every brick and was padded"),
                Column("fetch_error", STR, "", "why the stamp could not be fetched (empty when it was)"),
                *_QUALITY,
            ),
            *_CUTOUT_REQUIRED,
        ),
        key=("object_id",),
        allowed_values={"split": SPLITS},
    ),
    SWEEP_DIM,
    (CUTOUTS_CONTRACT,),
)

CUTOUT_VALIDATION_CONTRACT = Audit("cutout_validation_contract", "one AUC row per shortcut feature, AUCs in [0, 1]")

POSITIVES_ALL_VALID = Audit("positives_all_valid", "every positive cutout passes the quality gate")

NEGATIVES_MOSTLY_VALID = Audit("negatives_mostly_valid", ">= 98% of negative cutouts pass the quality gate")

NO_CORE_BRIGHTNESS_SHORTCUT = Audit(
    "no_core_brightness_shortcut",
    "no core-brightness feature separates positives from negatives (AUC lower bound <= 0.70)",
)

CUTOUT_VALIDATION = Table(
    "imaging",
    "cutout_validation",
    "quality gates and the shortcut scan of the cutouts",
    Contract(
        table="cutout_validation",
        columns=optional(
            (
                Column("feature", STR, "", "image feature of the shortcut scan (a quality metric of the cutouts)"),
                Column("n_pos", I64, "", "positives with a finite value of the feature"),
                Column("n_neg", I64, "", "negatives with a finite value of the feature"),
                Column("auc", F64, "", "AUC of the feature alone telling positives from negatives"),
                Column("auc_lo", F64, "", "lower end of the AUC's bootstrap interval"),
                Column("auc_hi", F64, "", "upper end of the AUC's bootstrap interval"),
                Column("separation_lo", F64, "", "lower bound of |AUC − 0.5| + 0.5 from the interval"),
                Column("flag", STR, "", "red (separation > 0.70), yellow (> 0.60), green, or na"),
                Column("expected_physics", BOOL, "", "whether lenses are expected to differ on it (not a shortcut)"),
                Column("core_feature", BOOL, "", "whether the feature measures the stamp's core (a red one blocks)"),
                Column("scope", STR, "", "the rows scanned (training_catalog)"),
            ),
            "feature",
            "auc",
            "flag",
            "core_feature",
        ),
        key=("feature",),
        ranges=(Range("auc", 0.0, 1.0, nullable=True),),
        allowed_values={"flag": ("red", "yellow", "green", "na")},
    ),
    None,
    (CUTOUT_VALIDATION_CONTRACT, POSITIVES_ALL_VALID, NEGATIVES_MOSTLY_VALID, NO_CORE_BRIGHTNESS_SHORTCUT),
)

#: The imaging stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    CUTOUTS,
    CUTOUT_VALIDATION,
)
