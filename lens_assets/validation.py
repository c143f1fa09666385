"""Validation stage: ``real_lens_validation``, the known lenses held out from training (the test
split, spatially disjoint from training by HEALPix pixel) detected against the number the selection
function predicts (``evaluation.validation``): from C(θ_E, z_l) of their cells (``method = cell``)
and, where the truth carries each lens's ψ, from the detection model at it (``method = per_lens``).

On the mock the truth is the known lenses' (``truth/known_lens_truth.parquet``: θ_E, z_l and the
lens's and source's parameters; the host's observing conditions from the sweeps); on a real survey
the redshifts are lenscat's (the positives' ``z_lens``) and, lenscat carrying no Einstein radius,
the θ_E are those of the table DHS_KNOWN_LENS_THETA_E names, by lenscat name; without one no lens
has both and none is compared (docs/how-to/real-lens-validation.md). No real known lens carries its
source's ψ: on a real survey there are ``cell`` rows only.
"""

import dagster as dg
import pyarrow as pa
import pyarrow.dataset as ds

from darkhaloscope.evaluation.closure import HOST_PARAMETERS, theta_e_edges, with_host_parameters
from darkhaloscope.evaluation.detection import PARAMETERS, detection_models
from darkhaloscope.evaluation.scoring import injection_rows
from darkhaloscope.evaluation.validation import largest_pull, lenscat_truth, read_theta_e_table, with_lens_truth
from darkhaloscope.evaluation.validation import real_lens_validation as validation_table
from darkhaloscope.lensing.bank import plan_grid, plan_proposal
from resources import LakeResource, SurveyResource
from table_registry import (
    CUTOUT_SCORES,
    INJECTION_PLAN,
    INJECTION_SCORES,
    POSITIVES,
    REAL_LENS_VALIDATION,
    SELECTION_FUNCTION,
    SWEEPS,
    THRESHOLDS,
    TRAINING_SET,
)
from table_registry import validation as checks

from .shared.publish import Publish, inputs, lake_asset

#: The detection model's parameters a lens's truth carries (the rest are its host's, from the sweeps).
TRUTH_PARAMETERS = tuple(c for c in PARAMETERS if c not in (*HOST_PARAMETERS, "theta_e_arcsec", "z_l"))

#: |pull| above which the check warns: a 3 sd disagreement between detections and C.
PULL_WARNING = 3.0


def _lens_truth(survey: SurveyResource, positives: pa.Table) -> tuple[pa.Table, str]:
    """(``object_id``, ``z_lens``, ``theta_e_arcsec`` and, on the mock, TRUTH_PARAMETERS) of the known
    lenses, and where they come from: the mock's truth, or lenscat's z_lens with the θ_E of
    DHS_KNOWN_LENS_THETA_E where it names one."""
    if survey.is_mock:
        import pyarrow.parquet as pq

        from mock_survey.lenses import known_lens_parameters

        path = survey.mock_manifest().truth_path
        return known_lens_parameters(pq.read_table(path)), f"mock truth {path.name}"
    if survey.known_lens_theta_e:
        theta_e = read_theta_e_table(survey.known_lens_theta_e)
        return lenscat_truth(positives, theta_e), f"lenscat z_lens, θ_E of {survey.known_lens_theta_e}"
    return lenscat_truth(positives), "lenscat z_lens; no θ_E (lenscat has none; DHS_KNOWN_LENS_THETA_E unset)"


@lake_asset(
    REAL_LENS_VALIDATION,
    code_version="2",
    kinds={"parquet"},
    ins=inputs(
        thresholds=THRESHOLDS,
        cutout_scores=CUTOUT_SCORES,
        training_set=TRAINING_SET,
        selection_function=SELECTION_FUNCTION,
        positives=POSITIVES,
        injection_scores=INJECTION_SCORES,
        injection_plan=INJECTION_PLAN,
    ),
    deps=[dg.AssetKey(list(SWEEPS.key))],
)
def real_lens_validation(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    survey: SurveyResource,
    thresholds: pa.Table,
    cutout_scores: ds.Dataset,
    training_set: ds.Dataset,
    selection_function: pa.Table,
    positives: pa.Table,
    injection_scores: ds.Dataset,
    injection_plan: pa.Table,
) -> Publish:
    """Test-split known lenses detected at each threshold against Σ C(θ_E, z_l) of their cells
    (``cell``) and, where the truth carries ψ (the mock), Σ P_det(ψ) of the detection model fitted on
    the scored bank (``per_lens``), each with its sd and the pull, per tier; lenses without the truth a
    method needs, outside its range or in insufficient cells counted apart (fails if any lens was seen
    in training). A warning check when |pull| > 3 on the per-lens rows (the cell rows where there are
    none: C averages over the proposal's sources, not the lenses')."""
    scores = cutout_scores.to_table(
        columns=["object_id", "tier", "split", "score", "valid"], filter=ds.field("label") == 1
    )
    truth, source = _lens_truth(survey, positives)
    per_lens = set(TRUTH_PARAMETERS) <= set(truth.column_names)
    lenses = with_lens_truth(scores, truth, source, TRUTH_PARAMETERS if per_lens else ())
    models, not_fitted = {}, {}
    if per_lens:
        lenses = with_host_parameters(lenses, lake.lake().table(*SWEEPS.key).dataset())
        theta_e, _ = plan_grid(injection_plan)
        models, not_fitted = detection_models(
            injection_rows(injection_scores, "injection"),
            thresholds,
            plan_proposal(injection_plan),
            theta_e_edges(theta_e),
        )
    table = validation_table(
        lenses,
        thresholds,
        selection_function,
        training_set.to_table(columns=["object_id"]).column("object_id"),
        split="test",
        models=models,
    )
    worst, method = largest_pull(table)
    audit = checks.REAL_LENS_VALIDATION_PULL.outcome(
        worst is None or worst <= PULL_WARNING,
        {"largest_abs_pull": worst, "method": method},
        f"|pull| = {worst:.2f} > {PULL_WARNING:g} ({method} rows): detections disagree with the prediction"
        if worst
        else "",
    )
    md = {"truth": source, "largest_abs_pull": worst, "gated_method": method, "no_detection_model": not_fitted}
    return Publish(
        {REAL_LENS_VALIDATION: table}, audits={REAL_LENS_VALIDATION: [audit]}, metadata={REAL_LENS_VALIDATION: md}
    )


validation_defs = dg.Definitions(assets=[real_lens_validation])
