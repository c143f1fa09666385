"""Benchmark: the orchestration overhead per partition of the per-sweep-file assets, against the
same work in one process, in the same run.

A mock survey of ``--files`` sweep files of ``--rows`` rows each (DHS_MOCK_SWEEP_FILES,
DHS_MOCK_ROWS_PER_FILE, DHS_MOCK_HIDDEN_LENSES) is generated once (its sky's lens arcs painted
once, all untimed). Then, each in a fresh process, lake and Dagster instance:

* ``direct``: the work of ``sweeps``, ``negatives`` (with ``selection_funnel``), ``search_targets``,
  ``cutouts`` and ``search_scores`` (with ``search_stamps``) in one process, calling the library as
  the assets do and writing straight to the lake: one Spark session, one opening of the mock sky,
  one load of the lens finder, every sweep file in turn;
* ``dagster`` for each ``--per-run`` K: the same five assets materialized with ``dhs
  materialize``'s code (``Materializer``, Dagster's in-process executor, the instance on disk as
  under ``dhs``) with DHS_PARTITIONS_PER_RUN=K: runs of K sweep files (``negatives`` has a
  single-run policy: one run whatever K). Each asset's wall time includes its runs' set-up
  (resources, Spark session, the sky, the model), Dagster's event log, the staging,
  audits and publication of write–audit–publish, and ``dhs materialize``'s planning.

The overhead per partition of an asset is (its ``dagster`` wall time − its ``direct`` wall time) /
``--files``: what orchestrating it adds to the work, per sweep file. For ``negatives`` and
``cutouts`` both passes also time the work itself (the Spark job of ``negatives_on_spark``; the
image source drawing the stamps inside ``cutout_batches``), and the net overhead per partition is
((dagster − its work) − (direct − its work)) / ``--files``: the work's own run-to-run spread then
drops out of the difference. The prerequisites the passes share (``sweep_files``,
``known_lenses``, ``positives``, ``training_catalog``, an untrained lens finder of the demo
profile's architecture whose output bias keeps no stamp, as in bench_search.py) are made in each
pass outside the timing. Both passes check they wrote the same
number of rows per table. Prints one JSON line: per asset and pass the seconds, the runs and the
overhead per partition, and the durations of the ``dagster`` passes' runs in order (their trend
shows whether a run costs more as the lake and the instance hold more partitions).

``--until ASSET`` stops both passes after that asset (e.g. ``cutouts``: the search, the longest
and with the smallest share, left out).

    python -m benchmarks.bench_orchestration [--files 300] [--rows 1000] [--hidden 20] [--per-run 1 32]
        [--until cutouts]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: The per-sweep-file assets timed, in the order they run.
TIMED = ("sweeps", "negatives", "search_targets", "cutouts", "search_scores")
#: Tables whose rows both passes count.
COUNTED = {
    "sweeps": ("survey", "sweeps"),
    "negatives": ("catalog", "negatives"),
    "search_targets": ("search", "search_targets"),
    "cutouts": ("imaging", "cutouts"),
    "search_scores": ("search", "search_scores"),
}


def mock_env(a) -> dict:
    return {
        "DHS_SURVEY": "mock",
        "DHS_MOCK_DIR": str(Path(a.work) / "mock"),
        "DHS_MOCK_SWEEP_FILES": str(a.files),
        "DHS_MOCK_ROWS_PER_FILE": str(a.rows),
        "DHS_MOCK_HIDDEN_LENSES": str(a.hidden),
        "DHS_DEVICE": "cpu",
        "DHS_SEARCH_LAUNCH": "local",
        "DHS_AUTOMATION": "off",
        "DHS_SPARK_MASTER": "local[*]",
    }


def mock_survey(env: dict):
    from mock_survey.survey import MockSurvey

    return MockSurvey(
        cache_dir=env["DHS_MOCK_DIR"],
        n_sweep_files=int(env["DHS_MOCK_SWEEP_FILES"]),
        n_rows_per_file=int(env["DHS_MOCK_ROWS_PER_FILE"]),
        n_hidden_lenses=int(env["DHS_MOCK_HIDDEN_LENSES"]),
    )


#: Seconds spent in each timed work function (module doc), per asset, in this process.
WORK_SECONDS: dict[str, float] = {}


def time_work() -> None:
    """Wrap the work functions where both passes call them, accumulating ``WORK_SECONDS``."""
    import darkhaloscope.catalog.spark as spark_lib
    import darkhaloscope.imaging.cutout_table as cutout_lib
    import lens_assets.catalog
    import lens_assets.imaging

    def timed_call(asset, fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                WORK_SECONDS[asset] = WORK_SECONDS.get(asset, 0.0) + time.perf_counter() - t0

        return wrapper

    def timed_batches(fn):
        def wrapper(*args, **kwargs):
            batches = fn(*args, **kwargs)
            while True:
                t0 = time.perf_counter()
                batch = next(batches, None)
                WORK_SECONDS["cutouts"] = WORK_SECONDS.get("cutouts", 0.0) + time.perf_counter() - t0
                if batch is None:
                    return
                yield batch

        return wrapper

    negatives = timed_call("negatives", spark_lib.negatives_on_spark)
    spark_lib.negatives_on_spark = lens_assets.catalog.negatives_on_spark = negatives
    batches = timed_batches(cutout_lib.cutout_batches)
    cutout_lib.cutout_batches = lens_assets.imaging.cutout_batches = batches


def publish_finder(lake) -> None:
    """The untrained finder of bench_search.py, published where the search reads it."""
    from benchmarks.bench_search import lens_finder
    from darkhaloscope.evaluation.scoring import CHECKPOINT_PARTITION

    lens_finder(lake.files_path("training", "lens_finder", CHECKPOINT_PARTITION), "cpu")


def row_counts(lake) -> dict:
    return {a: (lake.dataset(*k).count_rows() if lake.exists(*k) else 0) for a, k in COUNTED.items()}


# ------------------------------------------------------------------------------------ direct pass
def direct_pass(lake_root: str, env: dict, until: str) -> dict:
    """The five assets' work in this process, straight to the lake (module doc)."""
    from darkhaloscope.catalog.cuts import NegativeSelectionConfig, funnel_with_selection
    from darkhaloscope.catalog.sampling import N1_FRACTION
    from darkhaloscope.catalog.spark import (
        negatives_dataframe,
        negatives_on_spark,
        positives_on_spark,
        training_catalog_on_spark,
    )
    from darkhaloscope.catalog.sweep_tasks import sweeps_partition_batches
    from darkhaloscope.imaging.cutout_table import cutout_batches, cutout_targets
    from darkhaloscope.search.launch import search_with_published_finder
    from darkhaloscope.search.streaming import STAMP_SCHEMA, InflightSearch, SearchSettings, score_schema
    from darkhaloscope.search.targets import search_targets
    from darkhaloscope.survey.known_lenses import load_known_lenses
    from darkhaloscope.survey.sweeps import ingest_sweep
    from lake_platform.lake import Lake
    from lens_assets.catalog import DEMO_RATIO
    from mock_survey.sources import MockSkySettings
    from resources.compute import QuietPySparkResource
    from resources.config import spark_config

    survey = mock_survey(env)
    manifest = survey.manifest()
    files = sorted(manifest.sweep_files, key=lambda p: p.name)
    names = [p.name for p in files]
    lake = Lake(lake_root)
    known = load_known_lenses()
    seconds = {}

    t0 = time.perf_counter()
    for path in files:
        ingest_sweep(path, lake.table("survey", "sweeps"), sweep_file=path.name)
    seconds["sweeps"] = time.perf_counter() - t0

    selection = NegativeSelectionConfig()
    t0 = time.perf_counter()
    session = QuietPySparkResource(spark_config=spark_config(env["DHS_SPARK_MASTER"])).spark_session
    try:
        funnel = negatives_on_spark(
            session,
            lake.table("survey", "sweeps"),
            known,
            lake.table("catalog", "negatives"),
            selection,
            names=names,
        )
        for name in names:
            lake.write_table(
                "catalog",
                "selection_funnel",
                funnel_with_selection({name: funnel[name]}, selection),
                partition={"sweep_file": name},
            )
        seconds["negatives"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        targets = {}
        for name in names:
            targets[name] = search_targets(sweeps_partition_batches(lake.table("survey", "sweeps"), name), selection)
            lake.write_table("search", "search_targets", targets[name], partition={"sweep_file": name})
        seconds["search_targets"] = time.perf_counter() - t0

        # the cutouts' inputs, made as the dagster pass makes them (outside the timing)

        positives, _ = positives_on_spark(session, lake.table("survey", "sweeps"), known, config=selection)
        catalog, _ = training_catalog_on_spark(
            session,
            negatives_dataframe(session, lake.table("catalog", "negatives"), names),
            positives,
            ratio=DEMO_RATIO,
            n1_fraction=N1_FRACTION,
        )
    finally:
        session.stop()

    t0 = time.perf_counter()
    sky = MockSkySettings(root=str(manifest.root)).open()
    training_ids = catalog.column("object_id")
    for name in names:
        negatives = lake.read_table("catalog", "negatives", partition={"sweep_file": name})
        tgt = cutout_targets(negatives, positives, training_ids, name)
        batches = cutout_batches(tgt, sky)
        first = next(batches)
        lake.write_table("imaging", "cutouts", [first, *batches], schema=first.schema, partition={"sweep_file": name})
    seconds["cutouts"] = time.perf_counter() - t0
    if until == "cutouts":
        return {"seconds": seconds, "rows": row_counts(lake)}

    publish_finder(lake)
    t0 = time.perf_counter()
    settings = SearchSettings()
    runs = search_with_published_finder(
        lake.table("training", "lens_finder"),
        lake.inflight(),
        targets,
        MockSkySettings(root=str(manifest.root)),
        "cpu",
        settings,
    )
    for name in names:
        inflight = InflightSearch(lake.inflight(), name, runs[name]["model_version"])
        part = {"sweep_file": name}
        n = runs[name]["n_chunks"]
        lake.write_table(
            "search",
            "search_scores",
            inflight.batches("scores", n),
            schema=score_schema(targets[name].schema),
            partition=part,
        )
        lake.write_table("search", "search_stamps", inflight.batches("stamps", n), schema=STAMP_SCHEMA, partition=part)
        inflight.clear()
    seconds["search_scores"] = time.perf_counter() - t0
    return {"seconds": seconds, "rows": row_counts(lake)}


# ------------------------------------------------------------------------------------ dagster pass
RUN_LINE = re.compile(r"^\[\d+/\d+\] (\S+)(?: \[[^\]]*\])? ok in ([0-9.]+)s")


def dagster_pass(lake_root: str, home: str, until: str) -> dict:
    """The five assets through ``Materializer`` (the environment set by the caller)."""
    import dagster as dg

    from definitions import defs
    from dhs.instance import write_instance_settings
    from dhs.materialize import Materializer
    from lake_platform.lake import Lake

    write_instance_settings(Path(home))
    instance = dg.DagsterInstance.from_config(home)
    log = io.StringIO()
    m = Materializer(defs, instance, out=log)
    seconds, runs = {}, {}

    def step(asset: str, timed: bool) -> None:
        start = log.tell()
        t0 = time.perf_counter()
        m.run([asset], upstream=False)
        if timed:
            seconds[asset] = time.perf_counter() - t0
            lines = log.getvalue()[start:].splitlines()
            runs[asset] = [float(g.group(2)) for g in map(RUN_LINE.match, lines) if g]

    step("sweep_files", False)
    step("sweeps", True)
    step("known_lenses", False)
    step("negatives", True)
    step("search_targets", True)
    step("positives", False)
    step("training_catalog", False)
    step("cutouts", True)
    lake = Lake(lake_root)
    if until == "search_scores":
        publish_finder(lake)
        step("search_scores", True)
    return {"seconds": seconds, "run_seconds": runs, "rows": row_counts(lake)}


# ---------------------------------------------------------------------------------------- driver
def child(a) -> None:
    time_work()
    if a.stage == "direct":
        out = direct_pass(a.lake, {**mock_env(a), **os.environ}, a.until)
    else:
        out = dagster_pass(a.lake, a.home, a.until)
    print("RESULT " + json.dumps({**out, "work_seconds": WORK_SECONDS}))


def run_child(a, stage: str, extra_env: dict, work: Path) -> dict:
    lake, home = tempfile.mkdtemp(dir=work, prefix=f"{stage}-lake-"), tempfile.mkdtemp(dir=work, prefix="home-")
    env = {**os.environ, **mock_env(a), "DHS_LAKE": lake, "DAGSTER_HOME": home, **extra_env}
    cmd = [sys.executable, "-m", "benchmarks.bench_orchestration", "--stage", stage, "--lake", lake, "--home", home]
    cmd += ["--work", a.work, "--files", str(a.files), "--rows", str(a.rows), "--hidden", str(a.hidden)]
    cmd += ["--until", a.until]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{stage} pass failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    (result,) = [json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return {**result, "process_seconds": round(time.perf_counter() - t0, 1)}


def net_overhead(asset: str, direct: dict, dagster: dict, files: int) -> dict:
    """The work's seconds in each pass and the net overhead per partition (module doc), for the
    assets whose work is timed."""
    if asset not in direct["work_seconds"]:
        return {}
    wd, wo = direct["work_seconds"][asset], dagster["work_seconds"][asset]
    rest = (dagster["seconds"][asset] - wo) - (direct["seconds"][asset] - wd)
    return {
        "work_direct_s": round(wd, 2),
        "work_dagster_s": round(wo, 2),
        "net_overhead_per_partition_s": round(rest / files, 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=300, help="mock sweep files (partitions)")
    p.add_argument("--rows", type=int, default=1000, help="rows per mock sweep file")
    p.add_argument("--hidden", type=int, default=20, help="hidden lenses of the mock")
    p.add_argument(
        "--per-run", type=int, nargs="+", default=[1, 32], help="DHS_PARTITIONS_PER_RUN of each dagster pass"
    )
    p.add_argument("--until", choices=["cutouts", "search_scores"], default="search_scores", help="last asset timed")
    p.add_argument("--work", default=str(REPO / "benchmarks" / "out" / "orchestration"), help="scratch folder")
    p.add_argument("--stage", choices=["direct", "dagster"], help=argparse.SUPPRESS)
    p.add_argument("--lake", help=argparse.SUPPRESS)
    p.add_argument("--home", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.stage:
        return child(a)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    load = [os.getloadavg()[0]]
    t0 = time.perf_counter()
    from mock_survey.regional_sky import survey_sky

    env = mock_env(a)
    survey_sky(mock_survey(env).manifest())  # the mock and its sky's arcs, once, untimed
    prepared = time.perf_counter() - t0
    direct = run_child(a, "direct", {}, work)
    load.append(os.getloadavg()[0])
    print(f"direct pass: {json.dumps(direct)}", file=sys.stderr, flush=True)  # progress; the result is stdout's
    passes = {}
    for k in a.per_run:
        passes[k] = run_child(a, "dagster", {"DHS_PARTITIONS_PER_RUN": str(k)}, work)
        load.append(os.getloadavg()[0])
        print(f"dagster pass, {k} per run: {json.dumps(passes[k])}", file=sys.stderr, flush=True)
    out = {
        "files": a.files,
        "rows_per_file": a.rows,
        "mock_prepared_s": round(prepared, 1),
        "load_avg_1min": [round(x, 2) for x in load],
        "direct_s": {k: round(v, 2) for k, v in direct["seconds"].items()},
        "rows": direct["rows"],
    }
    for k, res in passes.items():
        if res["rows"] != direct["rows"]:
            raise SystemExit(f"the passes wrote different rows: direct {direct['rows']}, per-run {k} {res['rows']}")
        out[f"per_run_{k}"] = {
            asset: {
                "dagster_s": round(res["seconds"][asset], 2),
                "runs": len(res["run_seconds"][asset]),
                "overhead_per_partition_s": round((res["seconds"][asset] - direct["seconds"][asset]) / a.files, 3),
                "overhead_ratio": round(res["seconds"][asset] / direct["seconds"][asset], 2),
                "run_seconds": res["run_seconds"][asset],
                **net_overhead(asset, direct, res, a.files),
            }
            for asset in TIMED[: TIMED.index(a.until) + 1]
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
