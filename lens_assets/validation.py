"""Validation stage: ``real_lens_validation``, the known lenses held out from training (the test
split, spatially disjoint from training by HEALPix pixel) detected against the number the selection
function predicts at their Einstein radii and lens redshifts (``evaluation.validation``).

On the mock the θ_E and z_l are the known lenses' truth (``truth/known_lens_truth.parquet``); on a
real survey the redshifts are lenscat's (the positives' ``z_lens``) and, lenscat carrying no
Einstein radius, the θ_E are those of the table DHS_KNOWN_LENS_THETA_E names, by lenscat name;
without one no lens has both and none is compared (docs/how-to/real-lens-validation.md).
"""

import dagster as dg
import pyarrow as pa
import pyarrow.dataset as ds

from darkhaloscope.evaluation.validation import largest_pull, lenscat_truth, read_theta_e_table, with_lens_truth
from darkhaloscope.evaluation.validation import real_lens_validation as validation_table
from resources import LakeResource, SurveyResource
from table_registry import CUTOUT_SCORES, POSITIVES, REAL_LENS_VALIDATION, SELECTION_FUNCTION, THRESHOLDS, TRAINING_SET
from table_registry import validation as checks

from .shared.publish import Publish, inputs, lake_asset

#: |pull| above which the check warns: a 3 sd disagreement between detections and C.
PULL_WARNING = 3.0


def _lens_truth(survey: SurveyResource, positives: pa.Table) -> tuple[pa.Table, str]:
    """(``object_id``, ``z_lens``, ``theta_e_arcsec``) of the known lenses, and where they come from:
    the mock's truth, or lenscat's z_lens with the θ_E of DHS_KNOWN_LENS_THETA_E where it names one."""
    if survey.is_mock:
        import pyarrow.parquet as pq

        path = survey.mock_manifest().truth_path
        return pq.read_table(path, columns=["object_id", "z_lens", "theta_e_arcsec"]), f"mock truth {path.name}"
    if survey.known_lens_theta_e:
        theta_e = read_theta_e_table(survey.known_lens_theta_e)
        return lenscat_truth(positives, theta_e), f"lenscat z_lens, θ_E of {survey.known_lens_theta_e}"
    return lenscat_truth(positives), "lenscat z_lens; no θ_E (lenscat has none; DHS_KNOWN_LENS_THETA_E unset)"


@lake_asset(
    REAL_LENS_VALIDATION,
    code_version="1",
    kinds={"parquet"},
    ins=inputs(
        thresholds=THRESHOLDS,
        cutout_scores=CUTOUT_SCORES,
        training_set=TRAINING_SET,
        selection_function=SELECTION_FUNCTION,
        positives=POSITIVES,
    ),
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
) -> Publish:
    """Test-split known lenses detected at each threshold against Σ C(θ_E, z_l) of their cells,
    with the binomial and cells' sd and the pull, per tier; lenses without θ_E or z_l, outside the
    grid or in insufficient cells counted apart (fails if any lens was seen in training). A
    warning check when |pull| > 3."""
    scores = cutout_scores.to_table(
        columns=["object_id", "tier", "split", "score", "valid"], filter=ds.field("label") == 1
    )
    truth, source = _lens_truth(survey, positives)
    table = validation_table(
        with_lens_truth(scores, truth, source),
        thresholds,
        selection_function,
        training_set.to_table(columns=["object_id"]).column("object_id"),
        split="test",
    )
    worst = largest_pull(table)
    audit = checks.REAL_LENS_VALIDATION_PULL.outcome(
        worst is None or worst <= PULL_WARNING,
        {"largest_abs_pull": worst},
        f"|pull| = {worst:.2f} > {PULL_WARNING:g}: detections disagree with C(θ_E, z_l)" if worst else "",
    )
    md = {"truth": source, "largest_abs_pull": worst}
    return Publish(
        {REAL_LENS_VALIDATION: table}, audits={REAL_LENS_VALIDATION: [audit]}, metadata={REAL_LENS_VALIDATION: md}
    )


validation_defs = dg.Definitions(assets=[real_lens_validation])
