"""The evaluation stage's tables (``lens_assets/evaluation.py``): each with its contract and audits."""

from __future__ import annotations

import pyarrow as pa

from darkhaloscope.evaluation.ablation import ABLATION_FPR, ABLATION_SCHEMA
from darkhaloscope.evaluation.realism import PROBE_WARN_AUROC, REALISM_SCHEMA
from darkhaloscope.evaluation.recall import CONFUSER_SCHEMA, RECALL_SCHEMA
from darkhaloscope.evaluation.thresholds import THRESHOLD_SCHEMA
from darkhaloscope.lensing.priors import SOURCE_PARAMETERS
from darkhaloscope.survey.sweeps import SWEEP_DIM
from lake_platform.audits import Audit
from lake_platform.contracts import Column, Contract, Range

from .columns import BOOL, F32, F64, I64, IVAR_NMGY, STR, col, from_schema, optional
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
            *(tasks[n] for n in (*SOURCE_PARAMETERS[1:], "lens_q", "shear_g1", "shear_g2")),
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

THRESHOLDS_NO_HIDDEN_LENS = Audit(
    "thresholds_no_hidden_lens", "no negative a threshold is measured on hosts a hidden lens of the mock"
)

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
                "n_hidden_in_negatives": (
                    "",
                    "negatives the threshold was measured on that host one of the mock's hidden lenses "
                    "(0 by construction: catalog.reserve); null on a real survey",
                ),
            },
        ),
        key=("name",),
        ranges=(Range("n_valid_negatives", 0, None), Range("n_above", 0, None, nullable=True)),
    ),
    None,
    (THRESHOLDS_CONTRACT, THRESHOLDS_NO_HIDDEN_LENS),
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

REALISM_PROBE_CONTRACT = Audit("realism_probe_contract", "one row per comparison; AUROC and its interval in [0, 1]")

REALISM_PROBE_GATE = Audit(
    "realism_probe_gate",
    f"a linear probe on the finder's penultimate features tells truth lenses from matched injections "
    f"no better than AUROC {PROBE_WARN_AUROC} (warning above it, or when too few rows to measure)",
    blocking=False,
)

REALISM_PROBE = Table(
    "evaluation",
    "realism_probe",
    "linear probe on the lens finder's penultimate features: truth-world lenses against matched injections",
    Contract(
        table="realism_probe",
        columns=from_schema(
            REALISM_SCHEMA,
            {
                "comparison": (
                    "",
                    "what is compared: the truth lenses (mock known lenses or DR10 lenscat) and the injections",
                ),
                "n_truth": ("", "truth lenses with valid features (test split, unseen in training)"),
                "n_injections": ("", "injections matched to them with valid features"),
                "probe_auroc": (
                    "",
                    "AUROC of the out-of-fold probabilities of a 5-fold cross-validated logistic regression "
                    "(standardised features) telling truth lenses from injections; 0.5 = indistinguishable; "
                    "null when a class has fewer than 5 rows or the injections fewer than 5 hosts",
                ),
                "ci95_lo": ("", "lower end of probe_auroc's 95 % bootstrap interval (resampled by injection host)"),
                "ci95_hi": ("", "upper end of probe_auroc's 95 % bootstrap interval (resampled by injection host)"),
                "matched_on": (
                    "",
                    "the variables the injections were matched to the truth lenses on (nearest neighbour)",
                ),
            },
        ),
        key=("comparison",),
        ranges=tuple(Range(c, 0.0, 1.0, nullable=True) for c in ("probe_auroc", "ci95_lo", "ci95_hi")),
    ),
    None,
    (REALISM_PROBE_CONTRACT, REALISM_PROBE_GATE),
)

REALISM_ABLATION_CONTRACT = Audit(
    "realism_ablation_contract", "one row per arm; AUROCs and recall in [0, 1], delta_c in [-1, 1]"
)

REALISM_ABLATION = Table(
    "evaluation",
    "realism_ablation",
    "finders trained per source model x nuisance arm, scored on the same truth world",
    Contract(
        table="realism_ablation",
        columns=from_schema(
            ABLATION_SCHEMA,
            {
                "arm": ("", "the arm, <source_model>/<nuisance>"),
                "source_model": ("", "the training injections' source model (DHS_SOURCE_MODEL's values)"),
                "nuisance": ("", "the training injections' imaging nuisance (DHS_NUISANCE's values)"),
                "n_truth": ("", "truth lenses scored: the test split's known lenses unseen in training"),
                "n_negatives": ("", "held-out negatives with a valid score: the test split's negatives"),
                "auroc_truth": ("", "AUROC of the arm's finder, truth lenses against the held-out negatives"),
                "threshold": (
                    "",
                    f"score threshold passing a fraction {ABLATION_FPR:g} of the arm's held-out negatives",
                ),
                "recall_truth": ("", "fraction of the truth lenses above the threshold (unscorable ones missed)"),
                "probe_auroc": (
                    "",
                    "the realism probe's AUROC in the arm's features: truth lenses against matched "
                    "injections of the arm's own stream (its fixed validation injections); null when too few rows",
                ),
                "closure_pull": ("", "null: the selection closure is not rerun per arm"),
                "delta_c": ("", "recall_truth minus the baseline arm's, on the same lenses"),
                "delta_c_sd": ("", "sd of delta_c over a paired bootstrap of the truth lenses (1000 resamples)"),
                "baseline_arm": ("", "the Sérsic arm of the same nuisance (else sersic/none); null when absent"),
            },
        ),
        key=("arm",),
        ranges=(
            *(Range(c, 0.0, 1.0, nullable=True) for c in ("auroc_truth", "recall_truth", "probe_auroc")),
            Range("delta_c", -1.0, 1.0, nullable=True),
            Range("delta_c_sd", 0.0, 1.0, nullable=True),
        ),
    ),
    None,
    (REALISM_ABLATION_CONTRACT,),
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
    REAL_LENS_RECALL,
    FPR_BY_CONFUSER,
    REALISM_PROBE,
    REALISM_ABLATION,
    EVALUATION_REPORT,
)
