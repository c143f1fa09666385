"""Evaluation: thresholds from negatives, the selection function C(θ_E, z_l), real-lens recall,
false-positive rates by confuser, figures and the static HTML report.

Pure numpy / pyarrow / matplotlib (Agg); never imports dagster. The names below are imported from
their modules when first used, so that a module that needs no figure (the scoring of
:mod:`.scoring` and :mod:`.injection_scoring`) imports without matplotlib, as on a bare GPU host
(``benchmarks/gpu_check.py``).
"""

import importlib

#: Exported name -> the module of this package that defines it.
_EXPORTS = {
    **dict.fromkeys(("marginal_png", "mosaic_png", "roc_inputs", "roc_png", "selection_heatmap_png"), "plots"),
    **dict.fromkeys(("check_no_training_leak", "fpr_by_confuser", "real_lens_recall"), "recall"),
    **dict.fromkeys(("build_report", "example_ids", "gates_html", "table_html"), "report"),
    **dict.fromkeys(
        (
            "MARGINAL_COLUMNS",
            "completeness_crossing",
            "depth_mag_from_psfdepth",
            "marginal_completeness",
            "proportion_columns",
            "selection_function",
        ),
        "selection",
    ),
    **dict.fromkeys(("thresholds_from_negatives", "usable_thresholds", "valid_scores"), "thresholds"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
