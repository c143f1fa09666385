"""Search stage: every preselected galaxy scored by the published lens finder, the ranked candidate
catalog, its inspection gallery and the visual grades.

``search_targets`` and ``search_scores`` are partitioned like the sweeps. ``search_scores`` cuts
and scores in one stream (``darkhaloscope.search.streaming``): only the stamps of rows at or above
the keep-threshold are stored (``search_stamps``), and each scored chunk is committed in flight so
a rerun after a crash scores only what is missing. The chunks are scored in the asset's process,
as Spark tasks (``darkhaloscope.search.spark``) or in ``lens_assets/pipes/search_sweep.py``
launched through Dagster Pipes; every launch commits to the same in-flight area, from which the
asset stages, audits and publishes. ``candidates``, ``candidate_gallery`` and
``visual_grades`` are single tables; ``visual_grades`` gains one round per landed grades CSV
(``dhs grade``) and feeds the next ``training_set``: it takes no input from ``candidates`` (the
CSV carries what the grader saw), which keeps the grading loop a DAG.
"""

import sys
import time
from dataclasses import asdict

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.catalog.cuts import recorded_selection
from darkhaloscope.catalog.spark_conf import S3RetryCount
from darkhaloscope.catalog.sweep_tasks import sweeps_partition_batches
from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.scoring import injection_rows
from darkhaloscope.imaging.sources import ImageSourceOpener
from darkhaloscope.search.candidates import DEFAULT_DEDUP_ARCSEC, SCORE_COLUMNS, build_candidates
from darkhaloscope.search.gallery import GALLERY_FILE, gallery_files, gallery_stamps
from darkhaloscope.search.grades import UNGRADED, changed_earlier_rows, checked_grades_file, new_round, parse_grades_csv
from darkhaloscope.search.launch import search_with_published_finder
from darkhaloscope.search.spark import search_on_spark
from darkhaloscope.search.streaming import STAMP_SCHEMA, InflightSearch, SearchSettings, coverage_problems, score_schema
from darkhaloscope.search.targets import funnel_preselected
from darkhaloscope.search.targets import search_targets as select_search_targets
from lake_platform import audits as au
from resources import ComputeResource, LakeResource, SurveyResource
from resources.compute import QuietPySparkResource, reported
from resources.imaging import ImagingResource
from resources.settings import search_pool
from table_registry import (
    CANDIDATE_GALLERY,
    CANDIDATES,
    INJECTION_SCORES,
    KNOWN_LENSES,
    LENS_FINDER,
    SEARCH_SCORES,
    SEARCH_STAMPS,
    SEARCH_TARGETS,
    SELECTION_FUNNEL,
    SWEEPS,
    THRESHOLDS,
    VISUAL_GRADES,
)
from table_registry import search as checks

from .shared.automation import NEW_PARTITION, UPSTREAM_UPDATED
from .shared.partitions import per_file_backfill
from .shared.progress import report_progress
from .shared.publish import Publish, file_link, lake_asset, per_partition, staged_table
from .survey import sweeps

_DEFAULT_SEARCH = SearchSettings()


@lake_asset(
    SEARCH_TARGETS,
    code_version="1",
    kinds={"parquet"},
    ins={"selection_funnel": dg.AssetIn(list(SELECTION_FUNNEL.key))},
    deps=[sweeps],
    backfill_policy=per_file_backfill(),
    automation_condition=NEW_PARTITION,
)
def search_targets(context: dg.AssetExecutionContext, lake: LakeResource, selection_funnel: pa.Table) -> Publish:
    """Every galaxy of a sweep file the search covers: the negatives' cuts as recorded in
    ``selection_funnel`` (footprint, TYPE, maskbits, nobs, z mag) before the known-lens exclusion
    and any sampling, with the HEALPix split, in brick order. Their number is the funnel's count
    remaining before the ``known_lens`` step. A run covers one sweep file or several."""
    names, sweeps_table = list(context.partition_keys), lake.lake().table(*SWEEPS.key)
    selection = recorded_selection(selection_funnel)
    staged, outcomes, md = [], [], {}
    for name in names:
        table = select_search_targets(sweeps_partition_batches(sweeps_table, name), selection)
        expected = funnel_preselected(selection_funnel, name)
        outcomes.append(
            au.equal_counts_audit(
                checks.SEARCH_TARGETS_IN_FUNNEL, expected, table.num_rows, f"search targets of {name}"
            )
        )
        part = staged_table(context, SEARCH_TARGETS, name)
        part.write(table)
        staged.append(part)
        md[name] = {"n_targets": table.num_rows}
    return Publish(
        {SEARCH_TARGETS: staged},
        audits={SEARCH_TARGETS: au.combine(outcomes, names)},
        metadata={SEARCH_TARGETS: per_partition(md)},
    )


class SearchConfig(dg.Config):
    """``keep_threshold``: stamps of rows scoring at least this are kept (``search_stamps``);
    ``chunk``: targets per image-source request and scoring call; ``launch``: where the chunks are
    scored, ``local`` (the asset's process), ``spark`` (tasks of contiguous chunks on the Spark
    session's executors) or ``pipes`` (a process launched through Dagster Pipes, the way to a GPU
    host); empty: the ``compute`` resource's ``search_launch`` (DHS_SEARCH_LAUNCH, default local).
    A run's launch must hold the pool the code location's ``search_scores`` holds (``spark`` for
    the Spark launch, ``gpu`` for the others: ``search_pool``, chosen by DHS_SEARCH_LAUNCH)."""

    keep_threshold: float = _DEFAULT_SEARCH.keep_threshold
    chunk: int = _DEFAULT_SEARCH.chunk
    launch: str = ""


def search_scores(
    context: dg.AssetExecutionContext,
    config: SearchConfig,
    lake: LakeResource,
    compute: ComputeResource,
    survey: SurveyResource,
    imaging: ImagingResource,
    pyspark: QuietPySparkResource,
    pipes_subprocess_client: dg.PipesSubprocessClient,
    search_targets: pa.Table,
) -> Publish:
    """Cut the targets of each sweep file of the run brick by brick from the configured image source
    and score each chunk as it is cut with the published lens finder (its preprocessing and
    calibration; loaded once per run, or once per Spark task), in the asset's process, as Spark
    tasks or in a process launched through Dagster Pipes; every row records the model's content
    hash. A run covers one sweep file or several."""
    store, names = lake.lake(), list(context.partition_keys)
    t0, retries = time.monotonic(), S3RetryCount()
    launch = compute.launch_of_search(config.launch)
    pool = search_pool(launch)
    if pool != context.op_def.pool:
        raise InputError(
            f"search launch {launch!r} holds the {pool!r} pool, but this code location's search_scores holds "
            f"{context.op_def.pool!r} (DHS_SEARCH_LAUNCH={compute.search_launch!r}): set DHS_SEARCH_LAUNCH={launch} "
            "where the code location runs, or choose a launch of its pool"
        )
    settings = SearchSettings(chunk=config.chunk, keep_threshold=config.keep_threshold)
    source = imaging.settings(survey)
    finder, inflight_area = store.table(*LENS_FINDER.key), store.inflight()
    targets = {n: search_targets.filter(pc.equal(search_targets.column("sweep_file"), n)) for n in names}
    if launch == "local":

        def progress(name: str, index: int, n_chunks: int, resumed: bool) -> None:
            done = "already in flight" if resumed else "scored"
            report_progress(context.log, f"search {name}: chunk {index + 1}/{n_chunks} {done}")

        runs = search_with_published_finder(
            finder, inflight_area, targets, source, compute.torch_device(), settings, progress=progress
        )
    elif launch == "spark":
        retries.include_tasks(pyspark.spark_session)

        def task_done(done: int, total: int) -> None:
            report_progress(context.log, f"search on Spark: {done}/{total} tasks done")

        runs = search_on_spark(
            pyspark.spark_session, finder, inflight_area, targets, source, compute.device, settings, progress=task_done
        )
    else:
        runs = _search_through_pipes(
            context, pipes_subprocess_client, store, lake.s3_endpoint, source, compute.device, settings
        )
    staged = {n: _stage_search(context, inflight_area, n, targets[n], runs[n]) for n in names}
    seconds = time.monotonic() - t0
    n_targets = search_targets.num_rows
    md = {
        **per_partition({n: {**runs[n], **staged[n][3]} for n in names}),
        "launch": launch,
        "seconds": round(seconds, 1),
        "s3_retries": retries.count(),
        "targets_per_second": round(n_targets / max(seconds, 1e-9), 1),
    }
    inflights = [staged[n][4] for n in names]
    return Publish(
        {SEARCH_SCORES: [staged[n][0] for n in names], SEARCH_STAMPS: [staged[n][1] for n in names]},
        audits={
            SEARCH_SCORES: au.combine(
                [o for n in names for o in staged[n][2][0]], [n for n in names for _ in range(2)]
            ),
            SEARCH_STAMPS: au.combine([o for n in names for o in staged[n][2][1]], names),
        },
        metadata={SEARCH_SCORES: md},
        after=lambda: [inflight.clear() for inflight in inflights],
    )


def _stage_search(context: dg.AssetExecutionContext, inflight_area, name: str, targets: pa.Table, run: dict):
    """One sweep file's scores and kept stamps staged from its in-flight chunks: (scores, stamps,
    (score audits, stamp audits), metadata, the in-flight chunks to drop once published)."""
    staged, staged_stamps = staged_table(context, SEARCH_SCORES, name), staged_table(context, SEARCH_STAMPS, name)
    inflight = InflightSearch(inflight_area, name, run["model_version"])
    staged.write(inflight.batches("scores", run["n_chunks"]), schema=score_schema(targets.schema))
    staged_stamps.write(inflight.batches("stamps", run["n_chunks"]), schema=STAMP_SCHEMA)
    scores = staged.read(columns=["object_id", "valid", "invalid_reason", "model_version", "stamp_kept"])
    coverage = coverage_problems(scores, targets.column("object_id"), run["model_version"])
    kept = staged_stamps.read(columns=["object_id"])
    stamps_match = sorted(kept.column("object_id").to_pylist()) == sorted(
        scores.filter(scores.column("stamp_kept")).column("object_id").to_pylist()
    )
    outcomes = [
        au.scores_audit(checks.SEARCH_SCORES_CONTRACT, staged.dataset()),
        au.count_audit(
            checks.SEARCH_SCORES_COVER_TARGETS,
            sum(coverage.values()),
            f"coverage problems in search scores of {name}",
            coverage,
        ),
    ]
    stamp_outcomes = [
        checks.SEARCH_STAMPS_CONTRACT.outcome(
            stamps_match, {}, f"kept stamps of {name} differ from the rows marked stamp_kept"
        )
    ]
    md = {**_reasons(scores), "n_stamps_kept": kept.num_rows}
    return staged, staged_stamps, (outcomes, stamp_outcomes), md, inflight


def search_scores_asset(pool: str) -> dg.AssetsDefinition:
    """``search_scores`` (with ``search_stamps``) holding ``pool``: the pool of the launch the code
    location's environment chooses (``search_pool(DHS_SEARCH_LAUNCH)``); Dagster pools are fixed
    per op when the definitions load, so the Spark launch and the device launches are two
    definitions of the one asset, and a run must use a launch of its definition's pool."""
    return lake_asset(
        SEARCH_SCORES,
        SEARCH_STAMPS,
        code_version="3",
        kinds={"pytorch", "parquet"},
        pool=pool,
        ins={"search_targets": dg.AssetIn(list(SEARCH_TARGETS.key))},
        deps=[dg.AssetKey(list(LENS_FINDER.key))],
        backfill_policy=per_file_backfill(),
        automation_condition=NEW_PARTITION,
    )(search_scores)


def _search_through_pipes(
    context: dg.AssetExecutionContext,
    pipes: dg.PipesSubprocessClient,
    store,
    s3_endpoint: str | None,
    source: ImageSourceOpener,
    device: str,
    settings: SearchSettings,
) -> dict[str, dict]:
    """Run ``lens_assets.pipes.search_sweep`` on the run's sweep files through Dagster Pipes (the
    client the trainer uses) and return the counts it reported per sweep file."""
    extras = {
        "lake_uri": store.full_uri(store.root),
        "s3_endpoint": s3_endpoint,
        "sweep_files": list(context.partition_keys),
        "source": source.to_dict(),
        "settings": asdict(settings),
        "device": device,
    }
    done = pipes.run(context=context, command=[sys.executable, "-m", "lens_assets.pipes.search_sweep"], extras=extras)
    return reported(done, "search", f"the search of {', '.join(context.partition_keys)}")


def _reasons(scores: pa.Table) -> dict:
    invalid = scores.filter(pc.invert(scores.column("valid")))
    # the first token of a reason names its kind (fetch_failed: <message> keeps only the kind)
    kinds = [r.split(";")[0].split(":")[0] for r in invalid.column("invalid_reason").to_pylist()]
    values, counts = np.unique(np.asarray(kinds, dtype=object).astype(str), return_counts=True) if kinds else ([], [])
    return {
        "n_rows": scores.num_rows,
        "n_unscorable": invalid.num_rows,
        "unscorable_by_reason": {str(v): int(c) for v, c in zip(values, counts)},
    }


class CandidatesConfig(dg.Config):
    """``threshold_name``: a name of the thresholds table (empty: the strictest resolvable one);
    ``dedup_arcsec``: candidates closer than this to a better one are merged into it."""

    threshold_name: str = ""
    dedup_arcsec: float = DEFAULT_DEDUP_ARCSEC


@lake_asset(
    CANDIDATES,
    code_version="3",
    kinds={"parquet"},
    automation_condition=UPSTREAM_UPDATED,
    ins={
        "search_scores": dg.AssetIn(list(SEARCH_SCORES.key)),
        "thresholds": dg.AssetIn(list(THRESHOLDS.key)),
        "known_lenses": dg.AssetIn(list(KNOWN_LENSES.key)),
        "injection_scores": dg.AssetIn(list(INJECTION_SCORES.key)),
    },
)
def candidates(
    context: dg.AssetExecutionContext,
    config: CandidatesConfig,
    lake: LakeResource,
    search_scores: ds.Dataset,
    thresholds: pa.Table,
    known_lenses: pa.Table,
    injection_scores: ds.Dataset,
) -> Publish:
    """Searched galaxies scoring above the threshold, ranked by score, de-duplicated within 3″,
    matched to the known lenses (known vs new, separation and name of the nearest), with the rank
    percentile of their score among all scored galaxies and the search's completeness at the
    threshold (valid injections above it, with the Jeffreys 68% interval on their effective number)."""
    columns = [*SCORE_COLUMNS, "valid"]
    table = build_candidates(
        search_scores.to_table(columns=columns),
        thresholds,
        known_lenses,
        injection_rows(injection_scores, "injection"),
        config.threshold_name or None,
        config.dedup_arcsec,
    )
    versions = pc.unique(table.column("model_version")).to_pylist()
    outcomes = [
        au.count_audit(
            checks.CANDIDATES_ONE_MODEL,
            max(len(versions) - 1, 0),
            "extra model versions among the candidates",
            {"versions": versions},
        )
    ]
    known = int(pc.sum(table.column("known")).as_py() or 0)
    md = {
        "n_candidates": table.num_rows,
        "n_known": known,
        "n_new": table.num_rows - known,
        "threshold": table.column("threshold_name")[0].as_py()
        if table.num_rows
        else (config.threshold_name or "strictest"),
    }
    return Publish({CANDIDATES: table}, audits={CANDIDATES: outcomes}, metadata={CANDIDATES: md})


@lake_asset(
    CANDIDATE_GALLERY,
    code_version="2",
    kinds={"html"},
    automation_condition=UPSTREAM_UPDATED,
    ins={"candidates": dg.AssetIn(list(CANDIDATES.key)), "search_stamps": dg.AssetIn(list(SEARCH_STAMPS.key))},
)
def candidate_gallery(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    survey: SurveyResource,
    imaging: ImagingResource,
    candidates: pa.Table,
    search_stamps: ds.Dataset,
) -> Publish:
    """One static HTML page (offline, its stamps as PNG files beside it, linked relatively) of every
    candidate, new ones first and the known lenses in their own folded section, each stamp labelled
    with rank and score (cut again where the search kept none), with filters (status, score, size,
    grade), a Legacy Surveys viewer link for real-survey stamps and a grading control whose choices
    the browser keeps until their CSV export, which ``dhs grade`` lands in ``visual_grades``."""
    stamps = gallery_stamps(candidates, search_stamps, lambda: imaging.source(survey), _DEFAULT_SEARCH.size)
    files = gallery_files(candidates, stamps, viewer=not survey.is_mock)
    staged = staged_table(context, CANDIDATE_GALLERY)
    for name, payload in files.items():
        staged.write_bytes(name, payload)
    page = files[GALLERY_FILE]
    uri = staged.published_uri(GALLERY_FILE)
    shown = page.count(b'class="stamp"')
    staged.write(pa.table({"uri": [uri], "bytes": [len(page)], "stamps": [shown]}))
    outcomes = [
        checks.CANDIDATE_GALLERY_CONTRACT.outcome(
            shown == candidates.num_rows == len(files) - 1,
            {"shown": shown, "stamp_files": len(files) - 1},
            f"the page shows {shown} stamps ({len(files) - 1} files) for {candidates.num_rows} candidates",
        )
    ]
    known = int(pc.sum(candidates.column("known")).as_py() or 0)
    md = {
        "stamps": shown,
        "n_new": candidates.num_rows - known,
        "n_known": known,
        "stamps_cut_at_gallery_time": candidates.num_rows
        - int(pc.sum(pc.is_in(candidates.column("object_id"), _kept_ids(search_stamps))).as_py() or 0),
        "gallery": file_link(uri),
    }
    return Publish({CANDIDATE_GALLERY: staged}, audits={CANDIDATE_GALLERY: outcomes}, metadata={CANDIDATE_GALLERY: md})


def _kept_ids(search_stamps: ds.Dataset) -> pa.Array:
    return search_stamps.to_table(columns=["object_id"]).column("object_id").combine_chunks()


class GradesConfig(dg.Config):
    """``csv_path``: the grades CSV to land as the next round (``dhs grade FILE.csv`` sets it);
    empty: land nothing (the published rounds stay as they are, or an empty table on the first run).
    ``csv_sha256``: the sha256 of the bytes ``dhs grade`` checked (the run lands only those);
    ``again``: land a file whose bytes a round already holds."""

    csv_path: str = ""
    csv_sha256: str = ""
    again: bool = False


@lake_asset(VISUAL_GRADES, code_version="3", kinds={"parquet"})
def visual_grades(context: dg.AssetExecutionContext, config: GradesConfig, lake: LakeResource) -> Publish:
    """Visual grades (A, B, C, not_a_lens, or ungraded: shown, awaiting inspection) of candidates,
    one round per landed grades CSV, each with what the grader saw (position, score, model
    version); earlier rounds are kept as they were. The next ``training_set`` reads them (graded
    lenses → positives, graded non-lenses → hard negatives, negatives awaiting inspection left
    out), so no graph edge comes in from ``candidates``: the CSV is self-contained, and every
    landing (the command line or the UI) checks it against the published candidates first."""
    grades_table = lake.lake().table(*VISUAL_GRADES.key)
    previous = grades_table.read() if grades_table.exists() else None
    candidates = lake.lake().table(*CANDIDATES.key)
    payload = (
        checked_grades_file(config.csv_path, config.csv_sha256, candidates, previous, config.again)
        if config.csv_path
        else b""
    )
    grades = parse_grades_csv(payload, config.csv_path) if config.csv_path else None
    table = new_round(previous, grades, config.csv_path.rsplit("/", 1)[-1], payload)
    outcomes = [
        au.count_audit(
            checks.VISUAL_GRADES_ROUNDS_KEPT,
            changed_earlier_rows(previous, table),
            "rows of earlier rounds changed or lost",
        )
    ]
    md = {
        "round": int(pc.max(table.column("round")).as_py() or 0),
        "n_graded": 0 if grades is None else int(pc.sum(pc.not_equal(grades.column("grade"), UNGRADED)).as_py() or 0),
        "grades": {}
        if grades is None
        else {str(d["values"]): int(d["counts"]) for d in grades.column("grade").value_counts().to_pylist()},
    }
    return Publish({VISUAL_GRADES: table}, audits={VISUAL_GRADES: outcomes}, metadata={VISUAL_GRADES: md})


def search_defs(search_launch: str) -> dg.Definitions:
    """The search stage, its ``search_scores`` holding the pool of ``search_launch``, the code
    location's default launch (``compute.search_launch``, DHS_SEARCH_LAUNCH)."""
    return dg.Definitions(
        assets=[
            search_targets,
            search_scores_asset(search_pool(search_launch)),
            candidates,
            candidate_gallery,
            visual_grades,
        ]
    )
