"""Every lake table's audits: one :class:`~lake_platform.audits.Audit` per asset check (its name, what
it checks, whether a failure blocks publication)."""

from lake_platform.audits import Audit

SWEEP_FILES_CONTRACT = Audit("sweep_files_contract", "unique sweep file names with valid sky boxes (contract)")
SWEEPS_CONTRACT = Audit(
    "sweeps_contract", "schema, types, key uniqueness and coordinate ranges match the sweeps contract"
)
SWEEPS_ROW_COUNT = Audit("sweeps_row_count", "row count equals the FITS row count")
SWEEPS_INSIDE_BOX = Audit("sweeps_inside_box", "every row lies inside the sky box in its file name")
SWEEPS_UNIQUE_ACROSS_PARTITIONS = Audit(
    "sweeps_unique_across_partitions", "no object of this sweep file is also in another sweep file's partition"
)
PHOTO_Z_CONTRACT = Audit("photo_z_contract", "schema, unique object ids and redshift ranges of the photo-z rows")
PHOTO_Z_COVERS_SWEEP = Audit(
    "photo_z_covers_sweep", "one photo-z row (a redshift or a null) for every row of the sweep partition"
)
SPECTRA_CONTRACT = Audit("spectra_contract", "schema, one spectrum per object and valid coordinates")
KNOWN_LENSES_CONTRACT = Audit("known_lenses_contract", "schema, unique names and valid coordinates")
NEGATIVES_CONTRACT = Audit("negatives_contract", "schema, unique object ids, pools and splits match the contract")
NEGATIVES_EXCLUSION = Audit(
    "negatives_exclusion", "no negative within the exclusion radius of a known lens (independent astropy cross-match)"
)
NEGATIVES_PASS_CUTS = Audit(
    "negatives_pass_cuts", "every negative passes every cut, re-verified with DuckDB SQL over the staged table"
)
SELECTION_FUNNEL_CONTRACT = Audit(
    "selection_funnel_contract", "one funnel row per (sweep file, cut step), counts consistent, selection recorded"
)
POSITIVES_CONTRACT = Audit(
    "positives_contract", "schema, unique lens names, tiers, separations within the match radius"
)
TRAINING_CATALOG_CONTRACT = Audit("training_catalog_contract", "schema, unique object ids, labels and splits")
SPLITS_DISJOINT = Audit(
    "splits_disjoint",
    "no HEALPix pixel in two splits (pixels recomputed from ra/dec) across negatives, positives and the catalog",
)
SPLIT_FRACTIONS = Audit(
    "split_fractions",
    "split fractions of the negative pool within 3 sd of 70/15/15, the sd from its HEALPix pixels (warning)",
    blocking=False,
)
STRATA_HAVE_NEGATIVES = Audit("strata_have_negatives", "every stratum of the positives has negatives")
TRAINING_STRATA_CONTRACT = Audit("training_strata_contract", "one row per stratum, non-negative counts")
CUTOUTS_CONTRACT = Audit("cutouts_contract", "schema (101×101 grz tensors), unique object ids, splits")
CUTOUT_VALIDATION_CONTRACT = Audit("cutout_validation_contract", "one AUC row per shortcut feature, AUCs in [0, 1]")
POSITIVES_ALL_VALID = Audit("positives_all_valid", "every positive cutout passes the quality gate")
NEGATIVES_MOSTLY_VALID = Audit("negatives_mostly_valid", ">= 98% of negative cutouts pass the quality gate")
NO_CORE_BRIGHTNESS_SHORTCUT = Audit(
    "no_core_brightness_shortcut",
    "no core-brightness feature separates positives from negatives (AUC lower bound <= 0.70)",
)
TRAINING_SET_CONTRACT = Audit(
    "training_set_contract", "schema, unique object ids, labels, weights, kinds and the train/val splits only"
)
INJECTION_PLAN_CONTRACT = Audit(
    "injection_plan_contract", "unique injection ids, grid values and seeds present, batches assigned"
)
INJECTION_MATCHES_LENSTRONOMY = Audit(
    "injection_matches_lenstronomy",
    "a sample re-rendered with lenstronomy's ImageModel matches (pixels within 1% of peak, flux within 0.5%)",
)
INJECTION_HOSTS_IN_BIN = Audit(
    "injection_hosts_in_bin",
    "every injection's host redshift (its z_l) lies in the z_l bin of its cell (z_l_bin ± half the grid step)",
)
INJECTION_PHYSICS_VALID = Audit(
    "injection_physics_valid",
    "every prior-drawn parameter within its prior's range, μ >= 1, all pixels finite, arc flux in the stamp = source "
    "flux × μ",
)
CUTOUT_SCORES_CONTRACT = Audit(
    "cutout_scores_contract", "one row per cutout; valid rows scored in [0, 1], invalid rows unscored with a reason"
)
INJECTION_SCORES_CONTRACT = Audit(
    "injection_scores_contract",
    "injections and controls; valid rows scored in [0, 1], invalid rows unscored with a reason",
)
THRESHOLDS_CONTRACT = Audit("thresholds_contract", "one row per threshold with its number of negatives")
SELECTION_FUNCTION_CONTRACT = Audit(
    "selection_function_contract", "completeness and its intervals in [0, 1], counts consistent"
)
SELECTION_FUNCTION_COVERAGE = Audit(
    "selection_function_coverage",
    "cells with at least one valid injection cover the grid (warning when a cell is empty)",
    blocking=False,
)
SELECTION_MODEL_CONTRACT = Audit(
    "selection_model_contract", "one row per (threshold, model parameter) with its validity range and Brier scores"
)
SELECTION_CALIBRATION_CONTRACT = Audit(
    "selection_calibration_contract", "reliability bins of the detection model per threshold, fractions in [0, 1]"
)
SELECTION_POPULATIONS_CONTRACT = Audit(
    "selection_populations_contract", "C per (population, threshold, cell or marginal) in [0, 1] with its N_eff"
)
THRESHOLDS_NO_HIDDEN_LENS = Audit(
    "thresholds_no_hidden_lens", "no negative a threshold is measured on hosts a hidden lens of the mock"
)
SELECTION_CLOSURE_CONTRACT = Audit(
    "selection_closure_contract", "counts, pulls and power per threshold, method and θ_E bin"
)
CLOSURE_NO_LEAK = Audit(
    "closure_no_leak",
    "no hidden lens of the mock is a threshold negative, an injection host or in the training set",
)
LENS_FORECAST_CONTRACT = Audit(
    "lens_forecast_contract", "expected detected lenses per deg² and in the searched area, per θ_E bin and overall"
)
SELECTION_MARGINALS_CONTRACT = Audit("selection_marginals_contract", "completeness in [0, 1] per marginal bin")
REAL_LENS_RECALL_CONTRACT = Audit(
    "real_lens_recall_contract", "recall and its intervals in [0, 1] per tier and threshold"
)
FPR_BY_CONFUSER_CONTRACT = Audit("fpr_by_confuser_contract", "false-positive rates in [0, 1] per confuser category")
EVALUATION_REPORT_CONTRACT = Audit("evaluation_report_contract", "the report exists and embeds its figures")
SEARCH_TARGETS_CONTRACT = Audit("search_targets_contract", "schema, unique object ids, coordinates and splits")
SEARCH_TARGETS_IN_FUNNEL = Audit(
    "search_targets_in_funnel",
    "targets of each sweep file = the funnel's rows remaining before the known-lens exclusion",
)
SEARCH_SCORES_CONTRACT = Audit(
    "search_scores_contract", "one row per target; valid rows scored in [0, 1], invalid rows unscored with a reason"
)
SEARCH_SCORES_COVER_TARGETS = Audit(
    "search_scores_cover_targets",
    "every target has exactly one row (scored or with its reason), all from the published model",
)
SEARCH_STAMPS_CONTRACT = Audit(
    "search_stamps_contract", "kept stamps: unique object ids, exactly the rows marked stamp_kept"
)
CANDIDATES_CONTRACT = Audit(
    "candidates_contract", "unique candidates ranked 1..n, scores, percentiles and completeness in range"
)
CANDIDATES_ONE_MODEL = Audit(
    "candidates_one_model", "every candidate was scored by one model, the published lens finder"
)
CANDIDATE_GALLERY_CONTRACT = Audit(
    "candidate_gallery_contract", "the page exists and shows one stamp per candidate shown"
)
VISUAL_GRADES_CONTRACT = Audit(
    "visual_grades_contract", "one row per (round, object), grades in A/B/C/not_a_lens/ungraded"
)
VISUAL_GRADES_ROUNDS_KEPT = Audit("visual_grades_rounds_kept", "every earlier round is kept unchanged")
ALERTS_CONTRACT = Audit("alerts_contract", "one row per delivered alert with kind, asset and severity")
