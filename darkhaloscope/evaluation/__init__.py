"""Evaluation: thresholds from negatives, the selection function C(θ_E, z_l), real-lens recall,
false-positive rates by confuser, figures and the static HTML report.

Pure numpy / pyarrow / matplotlib (Agg); never imports dagster.
"""

from .plots import marginal_png, mosaic_png, roc_inputs, roc_png, selection_heatmap_png
from .recall import check_no_training_leak, fpr_by_confuser, real_lens_recall
from .report import build_report, example_ids, gates_html, table_html
from .selection import (
    MARGINAL_COLUMNS,
    completeness_crossing,
    depth_mag_from_psfdepth,
    marginal_completeness,
    proportion_columns,
    selection_function,
)
from .thresholds import thresholds_from_negatives, usable_thresholds, valid_scores

__all__ = [
    "MARGINAL_COLUMNS",
    "build_report",
    "check_no_training_leak",
    "completeness_crossing",
    "depth_mag_from_psfdepth",
    "example_ids",
    "fpr_by_confuser",
    "gates_html",
    "marginal_completeness",
    "marginal_png",
    "mosaic_png",
    "proportion_columns",
    "real_lens_recall",
    "roc_inputs",
    "roc_png",
    "selection_function",
    "selection_heatmap_png",
    "table_html",
    "thresholds_from_negatives",
    "usable_thresholds",
    "valid_scores",
]
