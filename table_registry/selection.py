"""The selection stage's tables (``lens_assets/selection.py``): each with its contract and audits."""

from __future__ import annotations

from darkhaloscope.evaluation.detection import CALIBRATION_SCHEMA, SELECTION_MODEL_SCHEMA
from darkhaloscope.evaluation.populations import POPULATION_SCHEMA
from darkhaloscope.evaluation.selection import MARGINAL_SCHEMA, SELECTION_SCHEMA
from lake_platform.audits import Audit
from lake_platform.contracts import Column, Contract, Range

from .columns import ARCSEC, F64, from_schema
from .table import Table

_FRACTIONS = tuple(
    Range(c, 0.0, 1.0, nullable=True) for c in ("completeness", "ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi")
)

#: The counts and completeness of one cell or bin of injections (darkhaloscope/evaluation/selection.py).
_COUNTS = {
    "n_injected": ("", "injections planned in the cell"),
    "n_failed": ("", "injections not rendered or not scorable; excluded from n_valid"),
    "n_render_failed": ("", "injections whose render failed"),
    "n_valid": ("", "injections rendered and scored"),
    "n_effective": (
        "",
        "independent trials n_valid is worth: host-clustered (the hosts' intraclass correlation), less what the "
        "threshold's own uncertainty costs",
    ),
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
                    "population": ("", "population C is for: the proposal the injections were drawn from"),
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
    "selection_model_contract", "one row per (threshold, model parameter) with its validity range and Brier scores"
)

SELECTION_MODEL = Table(
    "evaluation",
    "selection_model",
    "the detection model P_det(ψ) per threshold (gradient-boosted trees on the scored bank): its parameters, their "
    "validity ranges and its cross-validated Brier scores",
    Contract(
        table="selection_model",
        columns=from_schema(
            SELECTION_MODEL_SCHEMA,
            {
                "threshold_name": ("", "threshold the model detects at (score > threshold)"),
                "threshold": ("", "the score cut"),
                "parameter": ("", "model input (evaluation/detection.py FEATURES)"),
                "columns": ("", "injection-bank columns the input is made of"),
                "unit": ("", "unit of the input"),
                "valid_lo": (
                    "",
                    "lower end of the input's validity range (the proposal's, else the bank's), in its unit",
                ),
                "valid_hi": ("", "upper end of the input's validity range, in its unit"),
                "monotone": ("", "+1: P_det constrained to rise with the input, -1 to fall, 0 free"),
                "model": ("", "the library model (refitted identically by every reader; no model file is stored)"),
                "n_injections": ("", "valid injections the model was fitted on"),
                "n_hosts": ("", "distinct hosts of those injections"),
                "n_detected": ("", "of them detected"),
                "n_replicas": ("", "fits: the central one and its host-bootstrap refits"),
                "brier_cv": ("", "Brier score of the model's out-of-fold probabilities (4 host-grouped folds)"),
                "brier_cv_logistic": ("", "the same for a logistic regression on the same inputs"),
                "brier_base": ("", "the same for the base rate p(1 - p)"),
            },
        ),
        key=("threshold_name", "parameter"),
        ranges=(Range("n_injections", 1, None), Range("brier_cv", 0.0, 1.0), Range("brier_base", 0.0, 0.25)),
    ),
    None,
    (SELECTION_MODEL_CONTRACT,),
)

SELECTION_CALIBRATION_CONTRACT = Audit(
    "selection_calibration_contract", "reliability bins of the detection model per threshold, fractions in [0, 1]"
)

SELECTION_CALIBRATION = Table(
    "evaluation",
    "selection_calibration",
    "the detection model's reliability curve per threshold, on injections held out by host",
    Contract(
        table="selection_calibration",
        columns=from_schema(
            CALIBRATION_SCHEMA,
            {
                "threshold_name": ("", "threshold of the detection model"),
                "p_lo": ("", "lower edge of the bin of predicted P_det"),
                "p_hi": ("", "upper edge of the bin of predicted P_det"),
                "n": ("", "held-out injections in the bin (out-of-fold, host-grouped)"),
                "mean_predicted": ("", "mean predicted P_det in the bin"),
                "observed": ("", "fraction of them detected"),
                "observed_ci68_lo": ("", "lower end of its 68 % Jeffreys interval"),
                "observed_ci68_hi": ("", "upper end of its 68 % Jeffreys interval"),
            },
        ),
        key=("threshold_name", "p_lo"),
        ranges=tuple(Range(c, 0.0, 1.0, nullable=True) for c in ("mean_predicted", "observed")),
    ),
    None,
    (SELECTION_CALIBRATION_CONTRACT,),
)

SELECTION_POPULATIONS_CONTRACT = Audit(
    "selection_populations_contract", "C per (population, threshold, cell or marginal) in [0, 1] with its N_eff"
)

SELECTION_POPULATIONS = Table(
    "evaluation",
    "selection_populations",
    "C(θ_E, z_l) and its marginals reweighted to named lens populations (proposal, LensPop-like, the mock's, a "
    "user's), with N_eff per cell",
    Contract(
        table="selection_populations",
        columns=from_schema(
            POPULATION_SCHEMA,
            {
                "population": ("", "lens population C is reweighted to: proposal, lenspop, mock or user:<name>"),
                "threshold_name": ("", "threshold (score > threshold)"),
                "threshold": ("", "the score cut"),
                "kind": ("", "cell, or a marginal over the population's lenses: theta_e, z_l or all"),
                "theta_e_centre": (ARCSEC, "θ_E at the cell's centre (null for marginals over θ_E)"),
                "theta_e_lo": (ARCSEC, "lower θ_E edge"),
                "theta_e_hi": (ARCSEC, "upper θ_E edge"),
                "z_l_centre": ("", "z_l at the cell's centre (null for marginals over z_l)"),
                "z_l_lo": ("", "lower z_l edge"),
                "z_l_hi": ("", "upper z_l edge"),
                "n_injections": ("", "valid injections in the row"),
                "completeness": ("", "C = Σ w d / Σ w, w = p(ψ | population) / q(ψ)"),
                "ci68_lo": (
                    "",
                    "lower end of the 68 % interval (host-clustered, the threshold's uncertainty included)",
                ),
                "ci68_hi": ("", "upper end of the 68 % interval"),
                "ci95_lo": ("", "lower end of the 95 % interval"),
                "ci95_hi": ("", "upper end of the 95 % interval"),
                "n_eff": ("", "Kish effective number of injections (Σw)² / Σw²"),
                "n_eff_clustered": ("", "the same with the hosts' intraclass correlation"),
                "sufficient": (
                    "",
                    "n_eff >= the floor (10) and, for a marginal, >= 95 % of its lenses in measured cells",
                ),
                "population_share": (
                    "",
                    "share of the population's lenses in the row (null without a deflector model)",
                ),
                "measured_share": ("", "share of the row's lenses in sufficient cells (marginals)"),
            },
        ),
        key=("population", "threshold_name", "kind", "theta_e_centre", "z_l_centre"),
        ranges=tuple(
            Range(c, 0.0, 1.0, nullable=True)
            for c in ("completeness", "ci68_lo", "ci68_hi", "ci95_lo", "ci95_hi", "population_share", "measured_share")
        ),
        allowed_values={"kind": ("cell", "theta_e", "z_l", "all")},
    ),
    None,
    (SELECTION_POPULATIONS_CONTRACT,),
)


#: The selection stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    SELECTION_FUNCTION,
    SELECTION_MARGINALS,
    SELECTION_MODEL,
    SELECTION_CALIBRATION,
    SELECTION_POPULATIONS,
)
