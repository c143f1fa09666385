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

from darkhaloscope import audits as au
from darkhaloscope.catalog.cuts import recorded_selection
from darkhaloscope.catalog.sweep_tasks import sweeps_partition_batches
from darkhaloscope.contracts import CANDIDATE_GALLERY, CANDIDATES, SEARCH_SCORES, SEARCH_STAMPS, SEARCH_TARGETS, VISUAL_GRADES
from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.scoring import injection_rows
from darkhaloscope.imaging.source_settings import ImageSourceSettings
from darkhaloscope.search.candidates import DEFAULT_DEDUP_ARCSEC, build_candidates
from darkhaloscope.search.gallery import DEFAULT_TOP_N, GALLERY_FILE, GALLERY_TABLE, gallery_html, gallery_stamps, top_candidates
from darkhaloscope.search.grades import GRADES_TABLE, UNGRADED, changed_earlier_rows, new_round, parse_grades_csv
from darkhaloscope.search.launch import search_with_published_finder
from darkhaloscope.search.spark import search_on_spark
from darkhaloscope.search.streaming import (
    SCORE_CHUNKS, STAMP_CHUNKS, STAMP_SCHEMA, InflightSearch, SearchSettings, coverage_problems, score_schema,
)
from darkhaloscope.search.targets import funnel_preselected, search_targets as select_search_targets
from darkhaloscope.survey.sweeps import SWEEP_DIM
from resources import ComputeResource, LakeResource, SurveyResource
from resources.compute import QuietPySparkResource, reported
from resources.imaging import ImagingResource

from .catalog import FUNNEL
from .common import OWNERS, as_metadata, check_specs, fail_fast_on_bad_input, gate
from .evaluation import INJ_SCORES, LENS_FINDER, THR
from .partitions import sweep_partitions
from .survey import known_lenses, sweeps

GROUP = "search"
TARGETS, SCORES, STAMPS = (GROUP, "search_targets"), (GROUP, "search_scores"), (GROUP, "search_stamps")
CANDS, GALLERY, GRADES = (GROUP, "candidates"), GALLERY_TABLE, GRADES_TABLE
_DEFAULT_SEARCH = SearchSettings()


@dg.asset(key=list(TARGETS), group_name=GROUP, partitions_def=sweep_partitions, kinds={"parquet"}, owners=OWNERS, code_version="1",
          ins={"selection_funnel": dg.AssetIn(list(FUNNEL))}, deps=[sweeps],
          check_specs=check_specs(TARGETS, (au.SEARCH_TARGETS_CONTRACT, au.SEARCH_TARGETS_IN_FUNNEL)))
def search_targets(context: dg.AssetExecutionContext, lake: LakeResource, selection_funnel: pa.Table):
    """Every galaxy of one sweep file the search covers: the negatives' cuts as recorded in
    ``selection_funnel`` (footprint, TYPE, maskbits, nobs, z mag) before the known-lens exclusion
    and any sampling, with the HEALPix split, in brick order. Their number is the funnel's count
    remaining before the ``known_lens`` step."""
    store, name = lake.lake(), context.partition_key
    with fail_fast_on_bad_input():
        table = select_search_targets(sweeps_partition_batches(store, name), recorded_selection(selection_funnel))
        expected = funnel_preselected(selection_funnel, name)
    staged = lake.stage(context).table(*TARGETS, {SWEEP_DIM: name})
    staged.write(table)
    outcomes = [au.contract_audit(au.SEARCH_TARGETS_CONTRACT, staged.read(), SEARCH_TARGETS),
                au.equal_counts_audit(au.SEARCH_TARGETS_IN_FUNNEL, expected, staged.num_rows(), f"search targets of {name}")]
    yield from gate(context, {TARGETS: ([staged], outcomes)}, {TARGETS: as_metadata({"n_targets": table.num_rows})})


class SearchConfig(dg.Config):
    """``keep_threshold``: stamps of rows scoring at least this are kept (``search_stamps``);
    ``chunk``: targets per image-source request and scoring call; ``launch``: where the chunks are
    scored, ``local`` (the asset's process), ``spark`` (tasks of contiguous chunks on the Spark
    session's executors) or ``pipes`` (a process launched through Dagster Pipes, the way to a GPU
    host); empty: the ``compute`` resource's ``search_launch`` (DHS_SEARCH_LAUNCH, default local)."""

    keep_threshold: float = _DEFAULT_SEARCH.keep_threshold
    chunk: int = _DEFAULT_SEARCH.chunk
    launch: str = ""


@dg.multi_asset(
    outs={"search_scores": dg.AssetOut(key=list(SCORES), kinds={"pytorch", "parquet"}, owners=OWNERS, code_version="2",
                                       description="lens-finder score of every search target (unscorable rows with their reason)"),
          "search_stamps": dg.AssetOut(key=list(STAMPS), kinds={"parquet"}, owners=OWNERS, code_version="2",
                                       description="the stamps of search targets scoring at or above the keep-threshold")},
    ins={"search_targets": dg.AssetIn(list(TARGETS))}, deps=[LENS_FINDER], group_name=GROUP, partitions_def=sweep_partitions, pool="gpu",
    check_specs=check_specs(SCORES, (au.SEARCH_SCORES_CONTRACT, au.SEARCH_SCORES_COVER_TARGETS)) + check_specs(STAMPS, (au.SEARCH_STAMPS_CONTRACT,)),
)
def search_scores(context: dg.AssetExecutionContext, config: SearchConfig, lake: LakeResource, compute: ComputeResource,
                  survey: SurveyResource, imaging: ImagingResource, pyspark: QuietPySparkResource,
                  pipes_subprocess_client: dg.PipesSubprocessClient, search_targets: pa.Table):
    """Cut the targets of one sweep file brick by brick from the configured image source and score
    each chunk as it is cut with the published lens finder (its preprocessing and calibration), in
    the asset's process, as Spark tasks or in a process launched through Dagster Pipes; every row
    records the model's content hash."""
    store, name = lake.lake(), context.partition_key
    stage = lake.stage(context)
    staged, staged_stamps = stage.table(*SCORES, {SWEEP_DIM: name}), stage.table(*STAMPS, {SWEEP_DIM: name})
    t0 = time.monotonic()
    with fail_fast_on_bad_input():
        launch = compute.launch_of_search(config.launch)
        settings = SearchSettings(chunk=config.chunk, keep_threshold=config.keep_threshold)
        source = imaging.settings(survey)
        if launch == "local":
            run = search_with_published_finder(store, name, search_targets, source, compute.torch_device(), settings)
        elif launch == "spark":
            run = search_on_spark(pyspark.spark_session, store, name, search_targets, source, compute.device, settings)
        else:
            run = _search_through_pipes(context, pipes_subprocess_client, store, lake.s3_endpoint, source, compute.device, settings)
        inflight = InflightSearch(store, name, run["model_version"])
        staged.write(inflight.batches(SCORE_CHUNKS, run["n_chunks"]), schema=score_schema(search_targets.schema))
        staged_stamps.write(inflight.batches(STAMP_CHUNKS, run["n_chunks"]), schema=STAMP_SCHEMA)
    seconds = time.monotonic() - t0
    scores = staged.read(columns=["object_id", "valid", "invalid_reason", "model_version", "stamp_kept"])
    coverage = coverage_problems(scores, search_targets.column("object_id"), run["model_version"])
    kept = staged_stamps.read(columns=["object_id"])
    stamps_match = sorted(kept.column("object_id").to_pylist()) == sorted(scores.filter(scores.column("stamp_kept")).column("object_id").to_pylist())
    outcomes = [au.contract_audit(au.SEARCH_SCORES_CONTRACT, staged.dataset(), SEARCH_SCORES),
                au.count_audit(au.SEARCH_SCORES_COVER_TARGETS, sum(coverage.values()), f"coverage problems in search scores of {name}", coverage)]
    if outcomes[0].passed:
        outcomes[0] = au.scores_audit(au.SEARCH_SCORES_CONTRACT, staged.dataset())
    stamp_outcomes = [au.contract_audit(au.SEARCH_STAMPS_CONTRACT, staged_stamps.dataset(), SEARCH_STAMPS)]
    if stamp_outcomes[0].passed and not stamps_match:
        stamp_outcomes = [au.SEARCH_STAMPS_CONTRACT.outcome(False, {}, f"kept stamps of {name} differ from the rows marked stamp_kept")]
    md = as_metadata({**run, **_reasons(scores), "n_stamps_kept": kept.num_rows, "launch": launch, "seconds": round(seconds, 1),
                      "targets_per_second": round(search_targets.num_rows / max(seconds, 1e-9), 1)})
    yield from gate(context, {SCORES: ([staged], outcomes), STAMPS: ([staged_stamps], stamp_outcomes)}, {SCORES: md})
    inflight.clear()


def _search_through_pipes(context: dg.AssetExecutionContext, pipes: dg.PipesSubprocessClient, store, s3_endpoint: str | None,
                          source: ImageSourceSettings, device: str, settings: SearchSettings) -> dict:
    """Run ``lens_assets.pipes.search_sweep`` on this partition through Dagster Pipes (the client
    the trainer uses) and return the counts it reported."""
    extras = {"lake_uri": store.full_uri(store.root), "s3_endpoint": s3_endpoint, "sweep_file": context.partition_key,
              "targets_table": list(TARGETS), "source": source.to_dict(), "settings": asdict(settings), "device": device}
    done = pipes.run(context=context, command=[sys.executable, "-m", "lens_assets.pipes.search_sweep"], extras=extras)
    return reported(done, "search", f"the search of {context.partition_key}")


def _reasons(scores: pa.Table) -> dict:
    invalid = scores.filter(pc.invert(scores.column("valid")))
    # the first token of a reason names its kind (fetch_failed: <message> keeps only the kind)
    kinds = [r.split(";")[0].split(":")[0] for r in invalid.column("invalid_reason").to_pylist()]
    values, counts = np.unique(np.asarray(kinds, dtype=object).astype(str), return_counts=True) if kinds else ([], [])
    return {"n_rows": scores.num_rows, "n_unscorable": invalid.num_rows, "unscorable_by_reason": {str(v): int(c) for v, c in zip(values, counts)}}


class CandidatesConfig(dg.Config):
    """``threshold_name``: a name of the thresholds table (empty: the strictest resolvable one);
    ``dedup_arcsec``: candidates closer than this to a better one are merged into it."""

    threshold_name: str = ""
    dedup_arcsec: float = DEFAULT_DEDUP_ARCSEC


@dg.asset(key=list(CANDS), group_name=GROUP, kinds={"parquet"}, owners=OWNERS, code_version="2",
          ins={"search_scores": dg.AssetIn(list(SCORES)), "thresholds": dg.AssetIn(list(THR)), "known_lenses": dg.AssetIn(known_lenses.key),
               "injection_scores": dg.AssetIn(list(INJ_SCORES))},
          check_specs=check_specs(CANDS, (au.CANDIDATES_CONTRACT, au.CANDIDATES_ONE_MODEL)))
def candidates(context: dg.AssetExecutionContext, config: CandidatesConfig, lake: LakeResource, search_scores: ds.Dataset,
               thresholds: pa.Table, known_lenses: pa.Table, injection_scores: ds.Dataset):
    """Searched galaxies scoring above the threshold, ranked by score, de-duplicated within 3″,
    matched to the known lenses (known vs new, separation and name of the nearest), with the rank
    percentile of their score among all scored galaxies and the search's completeness at the
    threshold (valid injections above it, with the Jeffreys 68% interval on their effective number)."""
    columns = ["object_id", "sweep_file", "brickname", "ra", "dec", "type", "mag_r", "split", "score", "model_version", "valid"]
    with fail_fast_on_bad_input():
        table = build_candidates(search_scores.to_table(columns=columns), thresholds, known_lenses,
                                 injection_rows(injection_scores, "injection"), config.threshold_name or None, config.dedup_arcsec)
    staged = lake.stage(context).table(*CANDS)
    staged.write(table)
    versions = pc.unique(table.column("model_version")).to_pylist()
    outcomes = [au.contract_audit(au.CANDIDATES_CONTRACT, staged.read(), CANDIDATES),
                au.count_audit(au.CANDIDATES_ONE_MODEL, max(len(versions) - 1, 0), "extra model versions among the candidates", {"versions": versions})]
    known = int(pc.sum(table.column("known")).as_py() or 0)
    md = {"n_candidates": table.num_rows, "n_known": known, "n_new": table.num_rows - known,
          "threshold": table.column("threshold_name")[0].as_py() if table.num_rows else (config.threshold_name or "strictest")}
    yield from gate(context, {CANDS: ([staged], outcomes)}, {CANDS: md})


class GalleryConfig(dg.Config):
    """``top_n``: how many of the best-ranked candidates the page shows."""

    top_n: int = DEFAULT_TOP_N


@dg.asset(key=list(GALLERY), group_name=GROUP, kinds={"html"}, owners=OWNERS, code_version="1",
          ins={"candidates": dg.AssetIn(list(CANDS)), "search_stamps": dg.AssetIn(list(STAMPS))},
          check_specs=check_specs(GALLERY, (au.CANDIDATE_GALLERY_CONTRACT,)))
def candidate_gallery(context: dg.AssetExecutionContext, config: GalleryConfig, lake: LakeResource, survey: SurveyResource,
                      imaging: ImagingResource, candidates: pa.Table, search_stamps: ds.Dataset):
    """One static HTML page (offline, stamps embedded) of the top candidates' g, r, z colour
    stamps with score, known/new, a Legacy Surveys viewer link and a grading control whose CSV
    export ``dhs grade`` lands in ``visual_grades``."""
    store = lake.lake()
    with fail_fast_on_bad_input():
        top = top_candidates(candidates, config.top_n)
        stamps = gallery_stamps(top, search_stamps, lambda: imaging.source(survey, store), _DEFAULT_SEARCH.size)
        html = gallery_html(top, stamps).encode("utf-8")
    staged = lake.stage(context).table(*GALLERY)
    staged.write_bytes(GALLERY_FILE, html)
    uri = store.full_uri(f"{staged.published_folder}/{GALLERY_FILE}")
    shown = html.count(b'class="stamp"')
    staged.write(pa.table({"uri": [uri], "bytes": [len(html)], "stamps": [shown]}))
    outcomes = [au.contract_audit(au.CANDIDATE_GALLERY_CONTRACT, staged.read(), CANDIDATE_GALLERY)]
    if outcomes[0].passed and shown != top.num_rows:
        outcomes = [au.CANDIDATE_GALLERY_CONTRACT.outcome(False, {"shown": shown}, f"the page shows {shown} stamps for {top.num_rows} candidates")]
    md = {"stamps": shown, "gallery": dg.MetadataValue.url(f"file://{uri}") if not store.is_s3 else uri}
    yield from gate(context, {GALLERY: ([staged], outcomes)}, {GALLERY: md})


class GradesConfig(dg.Config):
    """``csv_path``: the grades CSV to land as the next round (``dhs grade FILE.csv`` sets it);
    empty: land nothing (the published rounds stay as they are, or an empty table on the first run)."""

    csv_path: str = ""


@dg.asset(key=list(GRADES), group_name=GROUP, kinds={"parquet"}, owners=OWNERS, code_version="3",
          check_specs=check_specs(GRADES, (au.VISUAL_GRADES_CONTRACT, au.VISUAL_GRADES_ROUNDS_KEPT)))
def visual_grades(context: dg.AssetExecutionContext, config: GradesConfig, lake: LakeResource):
    """Visual grades (A, B, C, not_a_lens, or ungraded: shown, awaiting inspection) of candidates,
    one round per landed grades CSV, each with what the grader saw (position, score, model
    version); earlier rounds are kept as they were. The next ``training_set`` reads them (graded
    lenses → positives, graded non-lenses → hard negatives, negatives awaiting inspection left
    out), so no graph edge comes in from ``candidates``: the CSV is self-contained and ``dhs grade``
    checks it against the candidates before landing."""
    store = lake.lake()
    with fail_fast_on_bad_input():
        previous = store.read_table(*GRADES) if store.exists(*GRADES) else None
        payload = _read_csv(config.csv_path) if config.csv_path else b""
        grades = parse_grades_csv(payload, config.csv_path) if config.csv_path else None
        table = new_round(previous, grades, config.csv_path.rsplit("/", 1)[-1], payload)
    staged = lake.stage(context).table(*GRADES)
    staged.write(table)
    landed = staged.read()
    outcomes = [au.contract_audit(au.VISUAL_GRADES_CONTRACT, landed, VISUAL_GRADES),
                au.count_audit(au.VISUAL_GRADES_ROUNDS_KEPT, changed_earlier_rows(previous, landed), "rows of earlier rounds changed or lost")]
    md = {"round": int(pc.max(table.column("round")).as_py() or 0),
          "n_graded": 0 if grades is None else int(pc.sum(pc.not_equal(grades.column("grade"), UNGRADED)).as_py() or 0),
          "grades": dg.MetadataValue.json({} if grades is None else {str(d["values"]): int(d["counts"]) for d in grades.column("grade").value_counts().to_pylist()})}
    yield from gate(context, {GRADES: ([staged], outcomes)}, {GRADES: md})


def _read_csv(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InputError(f"grades file {path}: {exc.strerror or exc}") from exc


search_defs = dg.Definitions(assets=[search_targets, search_scores, candidates, candidate_gallery, visual_grades])
