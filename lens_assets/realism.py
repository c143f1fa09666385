"""The realism gate, ``realism_probe``: a linear probe on the published lens finder's penultimate
features telling the truth world's lenses from injections matched to them
(``darkhaloscope.evaluation.realism``). Its check warns, never blocks, above AUROC 0.70.

The truth lenses are the known lenses of the test split (held out by HEALPix pixel, never seen in
training): on the mock, lenses painted by the independent truth renderer
(``mock_survey.truth_render``), matched to the injections in θ_E, arc S/N and the source's
half-light radius and position from the mock's known-lens truth; on DR10, lenscat's confirmed lenses,
which record no θ_E, so the injections are a seeded random draw of as many.

``realism_ablation`` (not part of the demo: ``dhs materialize realism_ablation``) trains one finder
per source model x nuisance arm through the lens finder's trainer and scores every arm on that same
truth world (``darkhaloscope.evaluation.ablation``).
"""

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.evaluation.ablation import (
    ABLATION_PAGE,
    ablation_table,
    arm_name,
    parse_arm,
    profile_arms,
    stream_injections,
    truth_detections,
)
from darkhaloscope.evaluation.injection_scoring import injection_images
from darkhaloscope.evaluation.products import ablation_html
from darkhaloscope.evaluation.realism import (
    MATCH_TRANSFORMS,
    PROBE_WARN_AUROC,
    probe_comparison,
    probe_warns,
    realism_table,
)
from darkhaloscope.evaluation.scoring import published_lens_finder
from darkhaloscope.stamps import from_tensor_column
from darkhaloscope.training.gates import GATES
from resources import ComputeResource, LakeResource, SurveyResource
from table_registry import (
    CUTOUTS,
    INJECTION_BANK,
    INJECTION_PLAN,
    LENS_FINDER,
    REALISM_ABLATION,
    REALISM_PROBE,
    TRAINING_SET,
)
from table_registry import evaluation as checks

from .shared.publish import Publish, file_link, inputs, lake_asset, staged_table
from .training import TRAINER_COMMAND, run_folder, trainer_extras

#: The known-lens truth the probe matches injections on.
MATCHED_TRUTH = tuple(MATCH_TRANSFORMS)


def _truth_lenses(cutouts: ds.Dataset, training_set: ds.Dataset, survey: SurveyResource) -> tuple[pa.Table, np.ndarray]:
    """(truth rows, their stamps): the test split's known lenses not in the training set, with
    MATCHED_TRUTH from the mock's known-lens truth on the mock (lenses off the sky's coverage,
    without an S/N, left out)."""
    import pyarrow.parquet as pq

    from mock_survey.lenses import known_lens_parameters

    seen = training_set.to_table(columns=["object_id"]).column("object_id")
    rows = cutouts.to_table(
        columns=["object_id", "image"],
        filter=(pc.field("label") == 1) & (pc.field("split") == "test") & ~pc.field("object_id").isin(seen),
    )
    images = from_tensor_column(rows.column("image"), name="image") if rows.num_rows else np.zeros((0, 3, 1, 1))
    truth = rows.select(["object_id"])
    if survey.is_mock:
        known = known_lens_parameters(pq.read_table(survey.mock_manifest().truth_path))
        known = known.filter(pc.is_finite(known.column("arc_snr")))
        pos = pc.index_in(truth.column("object_id"), known.column("object_id"))
        keep = pos.is_valid().to_numpy(zero_copy_only=False)
        found = known.take(pos.filter(pos.is_valid()))
        truth = truth.filter(pa.array(keep))
        for name in MATCHED_TRUTH:
            truth = truth.append_column(name, found.column(name))
        images = images[keep]
    return truth, images


@lake_asset(
    REALISM_PROBE,
    code_version="4",
    kinds={"pytorch", "parquet"},
    pool="gpu",
    deps=[dg.AssetKey(list(LENS_FINDER.key))],
    ins=inputs(
        cutouts=CUTOUTS, injection_bank=INJECTION_BANK, injection_plan=INJECTION_PLAN, training_set=TRAINING_SET
    ),
)
def realism_probe(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    compute: ComputeResource,
    survey: SurveyResource,
    cutouts: ds.Dataset,
    injection_bank: ds.Dataset,
    injection_plan: pa.Table,
    training_set: ds.Dataset,
) -> Publish:
    """A cross-validated logistic regression on the lens finder's penultimate features: truth-world
    lenses (the test split's known lenses) against injections matched to them one to one in θ_E, arc
    S/N and the source's size and position (mock) or drawn at random (DR10), AUROC with a 95 %
    bootstrap interval. Warns above 0.70: the finder's representation then tells the world it is
    applied to from the one it trained on."""
    truth, images = _truth_lenses(cutouts, training_set, survey)
    injections = injection_bank.to_table(
        columns=["injection_id", "host_object_id", *MATCHED_TRUTH], filter=pc.field("success")
    )
    comparison = (
        "mock known lenses (truth renderer) vs injections"
        if survey.is_mock
        else "lenscat test-split lenses vs injections"
    )
    device = compute.torch_device()

    def stamps(ids):
        found = injection_images(injection_plan, cutouts, ids, device)
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


def _negative_scores(cutouts: ds.Dataset, training_set: ds.Dataset, model, spec, device: str) -> np.ndarray:
    """Scores (NaN where unscorable) of the held-out negatives: the test split's label-0 cutouts
    not in the training set, streamed 256 stamps at a time."""
    from darkhaloscope.training.inference import score_stamps

    seen = training_set.to_table(columns=["object_id"]).column("object_id")
    held_out = (pc.field("label") == 0) & (pc.field("split") == "test") & ~pc.field("object_id").isin(seen)
    scores = [
        score_stamps(model, spec, from_tensor_column(b.column("image"), name="image"), device=device)[0]
        for b in cutouts.to_batches(columns=["image"], filter=held_out, batch_size=256)
        if b.num_rows
    ]
    return np.concatenate(scores) if scores else np.zeros(0)


class RealismAblationConfig(dg.Config):
    """arms: ``<source_model>/<nuisance>`` names (empty: the profile's, demo 3 and full 6,
    ``ablation.PROFILE_ARMS``); epochs: as the lens finder's (0: the profile's, N > 0: N epochs
    per member, a smoke run); core_threshold: the shortcut gate's, as the lens finder's."""

    arms: list[str] = []
    epochs: int = 0
    core_threshold: float = GATES["core_lr_auc"].threshold


@lake_asset(
    REALISM_ABLATION,
    code_version="2",
    kinds={"pytorch", "parquet"},
    pool="gpu",
    ins=inputs(cutouts=CUTOUTS, training_set=TRAINING_SET),
)
def realism_ablation(
    context: dg.AssetExecutionContext,
    config: RealismAblationConfig,
    lake: LakeResource,
    compute: ComputeResource,
    survey: SurveyResource,
    pipes_subprocess_client: dg.PipesSubprocessClient,
    cutouts: ds.Dataset,
    training_set: ds.Dataset,
) -> Publish:
    """One finder per arm, trained by the lens finder's trainer on the published training set with
    the arm's source and nuisance models (``injection_models``: each arm its own run, reused when
    complete), scored on the same truth lenses and held-out negatives: AUROC, recall at fpr 1e-2 of
    the arm's negatives, the realism probe in the arm's features (truth lenses against the arm's own
    fixed validation injections, matched in θ_E and arc S/N: the stream records no source ψ), ΔC
    against the Sérsic arm with its paired bootstrap sd. Publishes none of the arms' checkpoints."""
    from darkhaloscope.training.checkpoint import load_checkpoint
    from darkhaloscope.training.data import load_training_set
    from darkhaloscope.training.inference import score_stamps

    from .pipes.train_lens_finder import with_injection_models

    arms = [arm_name(*parse_arm(a)) for a in config.arms] or profile_arms(compute.profile)
    store, device = lake.lake(), compute.torch_device()
    truth, images = _truth_lenses(cutouts, training_set, survey)
    # the val split's hosts, whose fixed validation injections in each arm's stream the probe takes
    val = load_training_set(store.table(*TRAINING_SET.key).read(filter=pc.field("split") == "val"))
    results, gates = {}, {}
    for arm in arms:
        source, nuisance = parse_arm(arm)
        extras = trainer_extras(store, lake, compute, config.epochs, config.core_threshold)
        extras["injection_models"] = {"source_model": source, "nuisance": nuisance}
        context.log.info(f"realism_ablation: training arm {arm}")
        result = pipes_subprocess_client.run(context=context, command=list(TRAINER_COMMAND), extras=extras)
        md = {k: getattr(v, "value", v) for k, v in (result.get_materialize_result().metadata or {}).items()}
        gates[arm] = bool(md["blocking_gates_passed"])  # shown: an arm that fails a shortcut gate is still scored
        with run_folder(store, extras["out_dir"], str(md["run_dir"])) as run_dir:
            model, spec = load_checkpoint(run_dir, "best", device=device)
        truth_scores = score_stamps(model, spec, images, device=device)[0]
        results[arm] = truth_detections(truth_scores, _negative_scores(cutouts, training_set, model, spec, device))
        injections, stamps = stream_injections(with_injection_models(val, "", extras["injection_models"])[0], device)
        probe = probe_comparison(
            f"truth lenses vs {arm} validation injections",
            truth,
            images,
            injections,
            lambda ids: stamps[ids],
            model,
            spec,
            device,
        )
        results[arm]["probe_auroc"] = probe["probe_auroc"]
    table = ablation_table(results)
    staged = staged_table(context, REALISM_ABLATION)
    staged.write_bytes(ABLATION_PAGE, ablation_html(table).encode("utf-8"))
    staged.write(table)
    md = {
        "arms": arms,
        "blocking_gates_passed": gates,
        "n_truth": int(len(images)),
        "table": table.select(["arm", "recall_truth", "delta_c"]).to_pylist(),
    }
    md["page"] = file_link(staged.published_uri(ABLATION_PAGE))
    return Publish({REALISM_ABLATION: staged}, metadata={REALISM_ABLATION: md})


realism_defs = dg.Definitions(assets=[realism_probe, realism_ablation])
