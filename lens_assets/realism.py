"""The realism gate, ``realism_probe``: a linear probe on the published lens finder's penultimate
features telling the truth world's lenses from injections matched to them
(``darkhaloscope.evaluation.realism``). Its check warns, never blocks, above AUROC 0.70.

The truth lenses are the known lenses of the test split (held out by HEALPix pixel, never seen in
training): on the mock, lenses painted by the independent truth renderer (``mock_survey.truth_render``),
matched to the injections in θ_E and arc S/N from the mock's known-lens truth; on
DR10, lenscat's confirmed lenses, which record no θ_E, so the injections are a seeded random draw
of as many.
"""

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.evaluation.realism import PROBE_WARN_AUROC, probe_comparison, probe_warns, realism_table
from darkhaloscope.evaluation.scoring import published_lens_finder
from darkhaloscope.stamps import from_tensor_column
from resources import ComputeResource, LakeResource, SurveyResource
from table_registry import CUTOUTS, INJECTION_BANK, LENS_FINDER, REALISM_PROBE, TRAINING_SET
from table_registry import evaluation as checks

from .evaluation import injection_images
from .shared.publish import Publish, inputs, lake_asset


def _truth_lenses(cutouts: ds.Dataset, training_set: ds.Dataset, survey: SurveyResource) -> tuple[pa.Table, np.ndarray]:
    """(truth rows, their stamps): the test split's known lenses not in the training set, with
    θ_E and the arc's S/N from the mock's known-lens truth on the mock (lenses off the sky's
    coverage, without an S/N, left out)."""
    import pyarrow.parquet as pq

    seen = training_set.to_table(columns=["object_id"]).column("object_id")
    rows = cutouts.to_table(
        columns=["object_id", "image"],
        filter=(pc.field("label") == 1) & (pc.field("split") == "test") & ~pc.field("object_id").isin(seen),
    )
    images = from_tensor_column(rows.column("image"), name="image") if rows.num_rows else np.zeros((0, 3, 1, 1))
    truth = rows.select(["object_id"])
    if survey.is_mock:
        known = pq.read_table(survey.mock_manifest().truth_path, columns=["object_id", "theta_e_arcsec", "arc_snr"])
        known = known.filter(pc.is_finite(known.column("arc_snr")))
        pos = pc.index_in(truth.column("object_id"), known.column("object_id"))
        keep = pos.is_valid().to_numpy(zero_copy_only=False)
        found = known.take(pos.filter(pos.is_valid()))
        truth = truth.filter(pa.array(keep))
        for name in ("theta_e_arcsec", "arc_snr"):
            truth = truth.append_column(name, found.column(name))
        images = images[keep]
    return truth, images


@lake_asset(
    REALISM_PROBE,
    code_version="2",
    kinds={"pytorch", "parquet"},
    pool="gpu",
    deps=[dg.AssetKey(list(LENS_FINDER.key))],
    ins=inputs(cutouts=CUTOUTS, injection_bank=INJECTION_BANK, training_set=TRAINING_SET),
)
def realism_probe(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    compute: ComputeResource,
    survey: SurveyResource,
    cutouts: ds.Dataset,
    injection_bank: ds.Dataset,
    training_set: ds.Dataset,
) -> Publish:
    """A cross-validated logistic regression on the lens finder's penultimate features: truth-world
    lenses (the test split's known lenses) against injections matched to them one to one in θ_E
    and arc S/N (mock) or drawn at random (DR10), AUROC with a 95 % bootstrap interval. Warns above 0.70:
    the finder's representation then tells the world it is applied to from the one it trained on."""
    truth, images = _truth_lenses(cutouts, training_set, survey)
    injections = injection_bank.to_table(
        columns=["injection_id", "host_object_id", "theta_e_arcsec", "arc_snr"], filter=pc.field("success")
    )
    comparison = (
        "mock known lenses (truth renderer) vs injections"
        if survey.is_mock
        else "lenscat test-split lenses vs injections"
    )
    device = compute.torch_device()

    def stamps(ids):
        found = injection_images(injection_bank, ids)
        return np.stack([found[i] for i in ids]) if ids else np.zeros((0, 3, 1, 1), np.float32)

    with published_lens_finder(lake.lake().table(*LENS_FINDER.key), device) as (model, spec):
        row = probe_comparison(comparison, truth, images, injections, stamps, model, spec, device)
    table = realism_table([row])
    warned = probe_warns(table)
    unmeasured = [r["comparison"] for r in table.to_pylist() if r["probe_auroc"] is None]
    audit = checks.REALISM_PROBE_GATE.outcome(
        not warned and not unmeasured,
        {"probe_auroc": row["probe_auroc"], "n_truth": row["n_truth"], "limit": PROBE_WARN_AUROC},
        f"probe AUROC above {PROBE_WARN_AUROC}: {warned}; too few rows to measure: {unmeasured}",
    )
    md = {"probe_auroc": row["probe_auroc"], "n_truth": row["n_truth"], "matched_on": row["matched_on"]}
    return Publish({REALISM_PROBE: table}, audits={REALISM_PROBE: [audit]}, metadata={REALISM_PROBE: md})


realism_defs = dg.Definitions(assets=[realism_probe])
