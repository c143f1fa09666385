"""The evaluation stage's tables (``lens_assets/evaluation.py``): each with its contract and audits."""

from __future__ import annotations

import pyarrow as pa

from darkhaloscope.evaluation.closure import FEATURES, SELECTION_MODEL_SCHEMA
from darkhaloscope.evaluation.recall import CONFUSER_SCHEMA, RECALL_SCHEMA
from darkhaloscope.evaluation.selection import MARGINAL_SCHEMA, SELECTION_SCHEMA
from darkhaloscope.evaluation.thresholds import THRESHOLD_SCHEMA
from darkhaloscope.survey.sweeps import SWEEP_DIM
from lake_platform.audits import Audit
from lake_platform.contracts import Column, Contract, Range

from .columns import ARCSEC, BOOL, F32, F64, I64, IVAR_NMGY, STR, col, described, from_schema, optional
from .injection import INJECTION_BATCH_DIM, INJECTION_TASK
from .table import Table

_SCORE_KIND = ("", "cutout (cutout_scores); injection or control (injection_scores)")


def scores_contract(table: str) -> Contract:
    """The score rows of ``score_batches`` (``cutout_scores`` and ``injection_scores``): the scored
    rows' own columns (optional, by table) and the score columns every row has."""
    if table == "cutout_scores":
        meta = (
            col("object_id", I64),
            col("label", pa.int8()),
            col("split", STR),
            col("pool", STR),
            col("confuser_category", STR),
            col("tier", STR),
            col("name", STR),
            col("in_training_catalog", BOOL),
            col("psfsize_r", F32),
            col("psfdepth_r", F32),
        )
    else:
        tasks = {c.name: c for c in INJECTION_TASK}
        meta = (
            tasks["injection_id"],
            *(tasks[n] for n in ("theta_e_arcsec", "z_l", "z_s", "sigma_v_kms")),
            col("success", BOOL),
            col("failure_reason", STR),
            tasks["psf_fwhm_r"],
            Column("psfdepth_r", F64, IVAR_NMGY, "point-source depth of the host in r"),
            col("src_mag_r", F64),
            col("lensed_mag_r", F64),
            col("arc_snr", F64),
            col("magnification", F64),
            col("host_object_id", I64),
            *(tasks[n] for n in ("lens_mag_z", "host_z", "z_l_bin", "host_z_source", "sigma_v_source")),
        )
    return Contract(
        table=table,
        columns=(
            *optional(meta),
            Column("kind", STR, *_SCORE_KIND),
            col("score", F64),
            col("valid", BOOL),
            col("invalid_reason", STR),
        ),
        ranges=(Range("score", 0.0, 1.0, nullable=True),),
        allowed_values={"kind": ("cutout", "injection", "control")},
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

CUTOUT_SCORES_CONTRACT = Audit(
    "cutout_scores_contract", "one row per cutout; valid rows scored in [0, 1], invalid rows unscored with a reason"
)

CUTOUT_SCORES = Table(
    "evaluation",
    "cutout_scores",
    "lens-finder score of every cutout, one partition per sweep file",
    scores_contract("cutout_scores"),
    SWEEP_DIM,
    (CUTOUT_SCORES_CONTRACT,),
)

INJECTION_SCORES_CONTRACT = Audit(
    "injection_scores_contract",
    "injections and controls; valid rows scored in [0, 1], invalid rows unscored with a reason",
)

INJECTION_SCORES = Table(
    "evaluation",
    "injection_scores",
    "lens-finder score of every injection and its paired control, one partition per batch",
    scores_contract("injection_scores"),
    INJECTION_BATCH_DIM,
    (INJECTION_SCORES_CONTRACT,),
)

THRESHOLDS_CONTRACT = Audit("thresholds_contract", "one row per threshold with its number of negatives")

THRESHOLDS = Table(
    "evaluation",
    "thresholds",
    "score thresholds at target false-positive rates from held-out negatives",
    Contract(
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
    ),
    None,
    (THRESHOLDS_CONTRACT,),
)

SELECTION_FUNCTION_CONTRACT = Audit(
    "selection_function_contract", "completeness and its intervals in [0, 1], counts consistent"
)

SELECTION_FUNCTION_COVERAGE = Audit(
    "selection_function_coverage",
    "cells with at least one valid injection cover the grid (warning when a cell is empty)",
    blocking=False,
)

SELECTION_FUNCTION = Table(
    "evaluation",
    "selection_function",
    "C(θ_E, z_l) per threshold on the injection plan's grid, with heatmaps",
    Contract(
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
            Column("theta_e_arcsec", F64, ARCSEC, "θ_E of the cell (its centre; for joins and plots)"),
            Column("z_l", F64, "", "z_l of the cell (its centre)"),
        ),
        key=("threshold_name", "theta_e_centre", "z_l_centre"),
        ranges=_FRACTIONS,
    ),
    None,
    (SELECTION_FUNCTION_CONTRACT, SELECTION_FUNCTION_COVERAGE),
)

SELECTION_MARGINALS_CONTRACT = Audit("selection_marginals_contract", "completeness in [0, 1] per marginal bin")

SELECTION_MARGINALS = Table(
    "evaluation",
    "selection_marginals",
    "completeness against PSF, depth, source and lensed magnitude, arc S/N",
    Contract(
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
    ),
    None,
    (SELECTION_MARGINALS_CONTRACT,),
)

SELECTION_MODEL_CONTRACT = Audit(
    "selection_model_contract", "one central fit and its bootstrap refits per threshold, finite coefficients"
)

SELECTION_MODEL = Table(
    "evaluation",
    "selection_model",
    "P(detected | θ_E, arc S/N, lens z mag) at the search's threshold: a logistic fit over the injections, "
    "with host-bootstrap refits",
    Contract(
        table="selection_model",
        columns=from_schema(
            SELECTION_MODEL_SCHEMA,
            described(
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
    ),
    None,
    (SELECTION_MODEL_CONTRACT,),
)

REAL_LENS_RECALL_CONTRACT = Audit(
    "real_lens_recall_contract", "recall and its intervals in [0, 1] per tier and threshold"
)

REAL_LENS_RECALL = Table(
    "evaluation",
    "real_lens_recall",
    "recall of test-split known lenses by tier and threshold",
    Contract(
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
    ),
    None,
    (REAL_LENS_RECALL_CONTRACT,),
)

FPR_BY_CONFUSER_CONTRACT = Audit("fpr_by_confuser_contract", "false-positive rates in [0, 1] per confuser category")

FPR_BY_CONFUSER = Table(
    "evaluation",
    "fpr_by_confuser",
    "false-positive rate of held-out negatives by N2 confuser category",
    Contract(
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
    ),
    None,
    (FPR_BY_CONFUSER_CONTRACT,),
)

EVALUATION_REPORT_CONTRACT = Audit("evaluation_report_contract", "the report exists and embeds its figures")

EVALUATION_REPORT = Table(
    "evaluation",
    "evaluation_report",
    "the static HTML evaluation report and its index row",
    Contract(
        table="evaluation_report",
        columns=(
            col("uri", STR, description="location of the report's index.html"),
            col("bytes", I64),
            Column("figures", I64, "", "figures in the report"),
        ),
        ranges=(Range("bytes", 1, None), Range("figures", 1, None)),
    ),
    None,
    (EVALUATION_REPORT_CONTRACT,),
)

#: The evaluation stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    CUTOUT_SCORES,
    INJECTION_SCORES,
    THRESHOLDS,
    SELECTION_FUNCTION,
    SELECTION_MARGINALS,
    SELECTION_MODEL,
    REAL_LENS_RECALL,
    FPR_BY_CONFUSER,
    EVALUATION_REPORT,
)
