"""The validation stage's tables (``lens_assets/validation.py``): each with its contract and audits."""

from __future__ import annotations

from darkhaloscope.evaluation.validation import METHODS, VALIDATION_SCHEMA
from lake_platform.audits import Audit
from lake_platform.contracts import Contract, Range

from .columns import from_schema
from .table import Table

REAL_LENS_VALIDATION_CONTRACT = Audit(
    "real_lens_validation_contract", "one row per (threshold, method, tier), counts non-negative, expectations finite"
)

REAL_LENS_VALIDATION_PULL = Audit(
    "real_lens_validation_pull",
    "held-out known lenses detected within 3 sd of the number predicted per lens (where the truth carries ψ; "
    "else from C(θ_E, z_l)): a warning when |pull| > 3",
    blocking=False,
)

REAL_LENS_VALIDATION = Table(
    "evaluation",
    "real_lens_validation",
    "held-out known lenses detected against Σ C(θ_E, z_l) of their cells and Σ P_det(ψ) at their ψ, by tier and "
    "threshold",
    Contract(
        table="real_lens_validation",
        columns=from_schema(
            VALIDATION_SCHEMA,
            {
                "method": (
                    "",
                    "cell: Σ C(θ_E, z_l) of the lenses' cells (C averaged over the proposal's sources); per_lens: "
                    "Σ P_det(ψ) of the detection model at each lens's ψ (where the truth carries it: the mock)",
                ),
                "tier": ("", "A, B or all"),
                "n": ("", "test-split known lenses of the tier with a valid score"),
                "n_with_truth": (
                    "",
                    "of them with the truth the method needs: θ_E and z_l (the mock's truth; lenscat on a real "
                    "survey), every parameter of ψ for per_lens",
                ),
                "n_outside_grid": (
                    "",
                    "of those, outside the selection function's grid (per_lens: the detection model's validity "
                    "range): counted apart, never filled",
                ),
                "n_insufficient_cell": (
                    "",
                    "of those, in a cell the selection function marks insufficient: counted apart, never filled "
                    "(0 for per_lens)",
                ),
                "n_compared": ("", "the rest: lenses the expectation is computed for"),
                "n_detected": ("", "of the compared lenses, those scoring above the threshold"),
                "n_expected": (
                    "",
                    "Σ C of the compared lenses' cells, or Σ P_det at their ψ (null when none is compared)",
                ),
                "n_expected_sd": (
                    "",
                    "sd of n_detected about n_expected: cell, binomial Σ C(1 − C) plus Σ_cells (k_cell σ_cell)², "
                    "σ_cell the half-width of the cell's 68 % interval; per_lens, binomial Σ P(1 − P) plus the "
                    "variance of Σ P over the model's host-bootstrap refits",
                ),
                "pull": ("", "(n_detected − n_expected) / n_expected_sd (null when the sd is 0 or nothing compared)"),
            },
        ),
        key=("threshold_name", "method", "tier"),
        ranges=tuple(
            Range(c, 0, None)
            for c in ("n", "n_with_truth", "n_outside_grid", "n_insufficient_cell", "n_compared", "n_detected")
        )
        + (Range("n_expected", 0.0, None, nullable=True), Range("n_expected_sd", 0.0, None, nullable=True)),
        allowed_values={"tier": ("A", "B", "all"), "method": METHODS},
    ),
    None,
    (REAL_LENS_VALIDATION_CONTRACT, REAL_LENS_VALIDATION_PULL),
)

#: The validation stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (REAL_LENS_VALIDATION,)
