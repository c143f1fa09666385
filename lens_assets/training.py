"""Training stage: the training set (catalog rows and injection hosts; injections are rendered on
the fly while training) and the lens finder, trained by a standalone script through Dagster Pipes
(``resources.launch.PipesLaunchClient``: a local subprocess, or on a GPU host through
``DHS_LAUNCH_PREFIX``), one GPU run at a time (pool ``gpu``). The trainer reads the training set
from the lake and writes its runs to the lake's in-flight area; both assets publish through the
one publish path: the lens finder's checkpoint is staged and audited by its shortcut gates before
any scorer sees it."""

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.scoring import CHECKPOINT_PARTITION
from darkhaloscope.imaging.cutout_table import cutout_batches, load_stamps
from darkhaloscope.search.grades import grades_for_training
from darkhaloscope.storage import PartitionedTable
from darkhaloscope.training.gates import GATES
from darkhaloscope.training.profiles import training_profile
from darkhaloscope.training.runs import published_files
from darkhaloscope.training.training_set import (
    CUTOUT_COLUMNS,
    TIER_WEIGHTS,
    assemble_training_set,
    counts_by_split_and_kind,
    recorded_specs,
    training_rows,
    with_graded,
)
from resources import ComputeResource, LakeResource, SurveyResource
from resources.imaging import ImagingResource
from table_registry import CUTOUT_VALIDATION, CUTOUTS, LENS_FINDER, SEARCH_TARGETS, TRAINING_SET, VISUAL_GRADES

from .shared.publish import GATE_COLUMNS, Publish, lake_asset, rows_table, staged_table


class TrainingSetConfig(dg.Config):
    """Tier weights of real positives (C: graded possible lenses), whether negatives host
    injections rendered on the fly while training, the class ratio (at most
    ``negatives_per_positive`` negatives per positive in each split; 0 = every training-catalog
    negative, whose ratio the catalog's ``negatives_per_positive`` sets) and the visual grades used:
    ``grades_round`` -1 every landed round, 0 none, N rounds 1..N; ``min_arc_snr``: the injection
    stream's acceptance threshold on the arc S/N (r-band matched filter) of its training and
    validation arcs; ``faint_fraction``: the share of the training arcs accepted at the stream's
    lower ``faint_min_arc_snr`` instead; None keeps the profile's value, and either is refused with
    ``injections`` false. A lower threshold for every arc ranks faint arcs higher and costs
    validation AUROC (its arcs are fainter too) and some bright-arc completeness (BENCHMARKS.md,
    *The stream's S/N threshold sets how faint arcs rank*); the faint share keeps the bright arcs
    (BENCHMARKS.md, *Half the training arcs faint*)."""

    weight_tier_a: float = TIER_WEIGHTS["A"]
    weight_tier_b: float = TIER_WEIGHTS["B"]
    weight_tier_c: float = TIER_WEIGHTS["C"]
    injections: bool = True
    negatives_per_positive: float = 0.0
    grades_round: int = -1
    min_arc_snr: float | None = None
    faint_fraction: float | None = None


@lake_asset(
    TRAINING_SET,
    code_version="6",
    kinds={"parquet"},
    deps=[dg.AssetKey(list(t.key)) for t in (CUTOUTS, CUTOUT_VALIDATION, SEARCH_TARGETS, VISUAL_GRADES)],
)
def training_set(
    context: dg.AssetExecutionContext,
    config: TrainingSetConfig,
    lake: LakeResource,
    compute: ComputeResource,
    survey: SurveyResource,
    imaging: ImagingResource,
) -> Publish:
    """Real positives (tier weights A 1.0, B 0.5) and the training catalog's negatives of the train
    and val splits (test stays untouched), with the visually graded candidates of those splits
    (graded lenses as positives with their grade as tier, C 0.25; graded non-lenses as labelled
    hard negatives; negatives shown to a grader and not yet graded are left out, awaiting
    inspection; the grade rounds and their hash are recorded); negatives that can host
    injections carry their inverse variance and host columns, and the table records the injection
    stream (priors, counts, S/N acceptance) and the preprocessing spec of the profile: the lens
    finder renders fresh injections every epoch from them instead of reading stored ones."""
    store = lake.lake()
    profile = training_profile(compute.profile)
    overrides = {
        k: v
        for k, v in (("min_arc_snr", config.min_arc_snr), ("faint_fraction", config.faint_fraction))
        if v is not None
    }
    if overrides and not config.injections:
        raise InputError(
            f"training_set config {overrides} sets the injection stream's acceptance, "
            "but injections is false: there is no stream"
        )
    stream = replace(profile.stream, **overrides)
    # the source and nuisance models are the deployment's (DHS_SOURCE_MODEL, DHS_NUISANCE), recorded with the stream
    stream = replace(
        stream, injection=replace(stream.injection, source_model=compute.source_model, nuisance=compute.nuisance)
    )
    cutouts = store.table(*CUTOUTS.key)
    rows = training_rows(cutouts.read(columns=list(CUTOUT_COLUMNS)))
    (images, invvar), _ = load_stamps(cutouts.dataset(), rows.column("object_id").to_numpy(), ("image", "invvar"))
    grades = store.table(*VISUAL_GRADES.key)
    graded, awaiting, used = grades_for_training(grades.read() if grades.exists() else None, config.grades_round)
    extra = _graded_cutouts(store.table(*SEARCH_TARGETS.key), graded, rows, lambda: imaging.source(survey))
    rows, images, invvar, counts = with_graded(rows, images, invvar, graded, extra, awaiting)
    table = assemble_training_set(
        rows,
        images,
        invvar,
        preprocess=profile.preprocess,
        stream=stream if config.injections else None,
        tier_weights={"A": config.weight_tier_a, "B": config.weight_tier_b, "C": config.weight_tier_c},
        negatives_per_positive=config.negatives_per_positive,
        host_types=profile.injection_host_types,
        grades={**used, **counts},
    )
    specs = recorded_specs(table.schema)
    md = {
        "counts": counts_by_split_and_kind(table),
        "visual_grades_used": {**used, **counts},
        "preprocess_spec": specs[0].to_dict(),
        "injection_stream": specs[1].to_dict() if specs[1] else None,
    }
    return Publish({TRAINING_SET: table}, metadata={TRAINING_SET: md})


def _graded_cutouts(targets_table, graded: pa.Table, rows: pa.Table, open_source) -> pa.Table | None:
    """Cutouts (stamps and quality) of the graded objects the training rows lack, cut from the image
    source at their ``search_targets`` rows; None when there are none."""
    missing = pc.filter(
        graded.column("object_id"), pc.invert(pc.is_in(graded.column("object_id"), rows.column("object_id")))
    )
    if len(missing) == 0:
        return None
    targets = targets_table.dataset().to_table(filter=pc.field("object_id").isin(missing))
    lost = sorted(set(missing.to_pylist()) - set(targets.column("object_id").to_pylist()))
    if lost:
        raise InputError(
            f"graded objects {lost[:5]} ({len(lost)} in all) are in no search_targets partition: "
            "their sweep file left the survey; land grades of the current search"
        )
    return pa.Table.from_batches(list(cutout_batches(targets.sort_by("object_id"), open_source())))


class LensFinderConfig(dg.Config):
    """core_threshold: threshold of the blocking core-only gate (cross-validated AUROC of a logistic
    regression on the r < 5 px core alone, on the validation rows whose core holds no lensed light;
    at or above it the classes differ in the core by something other than an arc: a shortcut).
    Changing it re-runs the gates on the completed model without training again. epochs: 0 trains
    every member for its profile's epochs; N > 0 trains every member for N epochs (a smoke run of a
    profile, e.g. the full one on a small lake: the epochs name the run, so it never stands in
    for the profile's own run)."""

    core_threshold: float = GATES["core_lr_auc"].threshold
    epochs: int = 0


def _runs(store) -> PartitionedTable:
    """The folder of the trainer's runs: a table of the lake's in-flight area, where a run resumes
    or is reused from, on any host."""
    return store.inflight().table("training", "lens_finder_runs")


def _run_locations(store) -> tuple[str, str]:
    """(training-set URI for the trainer, the URI of the folder of its training runs)."""
    return store.table(*TRAINING_SET.key).files()[0], _runs(store).files_location()


@contextmanager
def run_folder(store, runs_uri: str, run_dir: str) -> Iterator[str]:
    """A local folder holding the run ``run_dir`` that the trainer reported: the folder itself on a
    local lake, a temporary copy of it from a lake on S3."""
    if not run_dir.startswith(f"{runs_uri}/"):
        raise InputError(f"the trainer reported the run {run_dir}, which is not in the lake's runs folder {runs_uri}")
    with _runs(store).local_folder({}, subfolder=run_dir[len(runs_uri) + 1 :]) as folder:
        if not os.path.isdir(folder):
            raise InputError(
                f"the trainer reported the run {run_dir}, which this host cannot read: a trainer launched through "
                "DHS_LAUNCH_PREFIX on another host needs the lake on S3, or on a filesystem both hosts mount at "
                "the same path"
            )
        yield folder


#: The trainer the lens finder and the realism ablation's arms run through Pipes.
TRAINER_COMMAND = (sys.executable, "-m", "lens_assets.pipes.train_lens_finder")


def trainer_extras(store, lake: LakeResource, compute: ComputeResource, epochs: int, core_threshold: float) -> dict:
    """The Pipes extras of a training run of the profile's members (``epochs`` 0: the profile's
    own; N > 0: N epochs each) on the published training set, its runs in the lake's runs folder."""
    if epochs < 0:
        raise InputError(
            f"config epochs must be 0 (the profile's) or a positive number of epochs per member, got {epochs}"
        )
    train_uri, runs_dir = _run_locations(store)
    profile = training_profile(compute.profile)
    override = {"epochs": epochs} if epochs else {}
    return {
        "training_set_uri": train_uri,
        "out_dir": runs_dir,
        "s3_endpoint": lake.s3_endpoint,
        "members": [replace(m, device=compute.device, **override).to_dict() for m in profile.members],
        "gate_thresholds": {"core_lr_auc": float(core_threshold)},
        "ensemble_hidden": profile.ensemble_hidden,
    }


@lake_asset(
    LENS_FINDER,
    code_version="4",
    kinds={"pytorch", "safetensors"},
    deps=[training_set],
    pool="gpu",
    retry_policy=dg.RetryPolicy(max_retries=2, delay=5),
)
def lens_finder(
    context: dg.AssetExecutionContext,
    config: LensFinderConfig,
    lake: LakeResource,
    compute: ComputeResource,
    pipes_subprocess_client: dg.PipesSubprocessClient,
) -> Publish:
    """The CNN lens finder of the profile (demo: the strided ResNet; full: the compact bottleneck
    ResNet and the strided ResNet stacked by Paper IV's meta-learner), trained on injections
    rendered on the fly by ``lens_assets/pipes/train_lens_finder.py`` through Dagster Pipes,
    calibrated on the val split, audited by the shortcut gates (reported as checks).

    Each training run lives in its own folder (new inputs train a new model, an interrupted run
    resumes, a completed run is reused and audited again). The chosen run's checkpoint
    (``artifact=checkpoint``, what the score assets read) and the ``lens_finder`` registry row are
    staged and audited by the gates; a failed blocking gate rejects them, leaving the published
    checkpoint and registry row byte for byte."""
    store = lake.lake()
    extras = trainer_extras(store, lake, compute, config.epochs, config.core_threshold)
    runs_dir = extras["out_dir"]
    result = pipes_subprocess_client.run(
        context=context,
        command=list(TRAINER_COMMAND),
        extras=extras,
    ).get_materialize_result()
    md = {k: getattr(v, "value", v) for k, v in (result.metadata or {}).items()}
    staged = staged_table(context, LENS_FINDER)
    with run_folder(store, runs_dir, str(md["run_dir"])) as run_dir:
        files = published_files(run_dir)
    for name, data in files:
        staged.write_bytes(name, data, subfolder=CHECKPOINT_PARTITION)
    uri = staged.published_uri(subfolder=CHECKPOINT_PARTITION)
    staged.write(
        pa.table(
            {
                "checkpoint_uri": [uri],
                "data_version": [result.data_version.value if result.data_version else None],
                "val_auroc": [float(md["val_auroc"]) if "val_auroc" in md else None],
                "metrics": [json.dumps(md, default=str, sort_keys=True)],
            }
        )
    )
    outcomes = [LENS_FINDER.audit(g["name"]).outcome(bool(g["passed"]), g, _gate_problem(g)) for g in md["gates"]]
    # the gates as a table in the UI (their details stay in the checks and in the registry row)
    shown = {**(result.metadata or {}), "gates": rows_table(md["gates"], GATE_COLUMNS)}
    return Publish({LENS_FINDER: staged}, audits={LENS_FINDER: outcomes}, metadata={LENS_FINDER: shown})


def _gate_problem(gate: dict) -> str:
    """What a failed gate says: its value against its threshold (or why it was not measured)."""
    if gate["value"] is None:
        return f"{gate['name']} not measured: {gate.get('skipped', 'no value')}"
    return f"{gate['name']} = {gate['value']:.4f} against the threshold {gate['threshold']}"


training_defs = dg.Definitions(assets=[training_set, lens_finder])
