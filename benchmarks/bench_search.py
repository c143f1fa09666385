"""Benchmark: survey search from coadd bricks to committed scores, streamed (cut a chunk, score it,
keep only the score rows and the stamps above the keep-threshold) against the existing path (cut
every stamp into a ``cutouts`` table in the lake, then score that table), in one run.

Both paths read the same 8 mock DR10 bricks (compressed as DR10's are, written once by
``benchmarks.bench_cutouts`` to benchmarks/out/mock_dr10_rice) with BrickImageSource as their
assets open it (the cutouts stage: every plane of the stamp; the search: images, and invvar at the
centre only),
score with the demo profile's lens finder (strided ResNet, its preprocessing and its averaging over
dihedral views, random weights: the cost does not depend on the weights) on the same targets in
brick order (128 per brick, about DR10's density after the preselection: 45 M galaxies on
~300,000 bricks), and commit their tables to a local lake. The search scores 256-target chunks,
the asset's default, so 4 of them here.
Prints one JSON line: galaxies per second per core of each path (both use every core torch is
given), their ratio and the bytes stored per galaxy.

``--spark`` adds the search's Spark launch (``search.spark.search_on_spark``, what ``launch: spark``
runs): the same targets, finder and bricks, the lens finder published in a lake and the image
source opened from its settings as an executor does, the chunks spread over tasks as the launch
spreads them (at most the session's default parallelism: one task per core of the ``local[cores]``
session, which is started before the timing, as the catalog stage's session is up when the search runs),
each task loading the finder and scoring on one thread, the partition's tables then written as the
streamed form writes them. Its ratio to the streamed form is what the DR10 projection's per-core
rate assumes of a Spark cluster.

    python -m benchmarks.bench_search [--per-brick 128] [--bricks 8] [--repeat 2] [--keep-threshold 0.5]
        [--device cpu|cuda] [--spark]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import tempfile
import time
from dataclasses import replace

import numpy as np
import pyarrow as pa
import torch

import table_registry as T
from benchmarks.bench_cutouts import OUT, ensure_bricks, targets
from darkhaloscope.evaluation.scoring import CHECKPOINT_PARTITION, score_batches
from darkhaloscope.imaging.coadd import BrickImageSource
from darkhaloscope.imaging.cutout_table import cutout_batches
from darkhaloscope.imaging.source_settings import ImageSourceSettings
from darkhaloscope.search.spark import search_on_spark
from darkhaloscope.search.streaming import (
    STAMP_SCHEMA,
    InflightSearch,
    SearchSettings,
    score_chunk,
    score_schema,
    search_partition,
)
from darkhaloscope.search.targets import TARGET_SCHEMA
from darkhaloscope.survey.location import SurveyLocation
from darkhaloscope.training.checkpoint import load_checkpoint, save_checkpoint, write_spec
from darkhaloscope.training.inference import SCORE_BATCH
from darkhaloscope.training.models import build_model
from darkhaloscope.training.profiles import training_profile
from lake_platform.lake import Lake


def target_table(ra: np.ndarray, dec: np.ndarray) -> pa.Table:
    """Search targets (TARGET_SCHEMA) at the given positions, one sweep file, in brick order."""
    n = len(ra)
    cols = {f.name: pa.nulls(n, f.type) for f in TARGET_SCHEMA}
    cols.update(
        object_id=pa.array(np.arange(1, n + 1), pa.int64()),
        sweep_file=pa.array(["bench.fits"] * n),
        row_index=pa.array(np.arange(n)),
        ra=pa.array(ra),
        dec=pa.array(dec),
        split=pa.array(["test"] * n),
        healpix_128=pa.array(np.zeros(n, np.int64)),
        nobs_z_bin=pa.array(["3-5"] * n),
        type_bin=pa.array(["DEV"] * n),
        type=pa.array(["DEV"] * n),
        **{f"psfsize_{b}": pa.array(np.full(n, 1.3), pa.float32()) for b in "grz"},
        **{f"psfdepth_{b}": pa.array(np.full(n, 900.0), pa.float32()) for b in "grz"},
    )
    return pa.Table.from_pydict(cols, schema=pa.schema([f.with_nullable(True) for f in TARGET_SCHEMA]))


def lens_finder(folder: str, device: str):
    profile = training_profile("demo")
    arch = profile.members[0].arch
    torch.manual_seed(0)
    model = build_model(arch, profile.preprocess.out_channels(3))
    # an untrained network's scores are arbitrary (they may put every target above the
    # keep-threshold, and the run would time stamp writing, not the search: BENCHMARKS.md, the
    # search row); a trained finder keeps almost none of a survey's galaxies (lenses are ~1 in
    # 10^4), so the output layer's bias is set to keep none: the forward pass costs the same
    with torch.no_grad():
        [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1].bias.fill_(-10.0)
    spec = save_checkpoint(
        folder,
        "best",
        model,
        architecture=arch,
        in_channels=profile.preprocess.out_channels(3),
        preprocess=profile.preprocess,
    )
    write_spec(folder, replace(spec, dihedral_views=profile.members[0].dihedral_views))
    return load_checkpoint(folder, "best", device=device)


def _publish(lake: Lake, tgt: pa.Table, inflight: InflightSearch, n_chunks: int) -> dict:
    """The partition's scores and kept stamps written from the in-flight chunks, as the asset does."""
    a = lake.table(*T.SEARCH_SCORES.key).write(inflight.batches("scores", n_chunks), schema=score_schema(tgt.schema))
    b = lake.table(*T.SEARCH_STAMPS.key).write(inflight.batches("stamps", n_chunks), schema=STAMP_SCHEMA)
    inflight.clear()
    return {"bytes": a.bytes + b.bytes, "stamps_kept": b.rows}


def streamed(lake: Lake, tgt: pa.Table, source, model, spec, device: str, keep: float) -> tuple[float, dict]:
    """The search_scores asset's path: chunks cut, scored and committed in flight, then the
    partition's scores and kept stamps written from them."""
    t0 = time.perf_counter()
    inflight = InflightSearch(lake.inflight(), "bench.fits", spec.data_version)
    run = search_partition(
        tgt, source, model, spec, device, SearchSettings(keep_threshold=keep), inflight, SCORE_BATCH.get(device, 16)
    )
    out = _publish(lake, tgt, inflight, run["n_chunks"])
    return time.perf_counter() - t0, out


def on_spark(spark, lake: Lake, tgt: pa.Table, ckpt: str, device: str, keep: float) -> tuple[float, dict]:
    """The Spark launch: the finder published in ``lake``, the chunks scored and committed by Spark
    tasks (each loading the finder and opening the bricks from the settings), then the partition's
    tables written from the in-flight chunks."""
    finder = lake.table(*T.LENS_FINDER.key)
    shutil.copytree(ckpt, lake.files_path(*T.LENS_FINDER.key, CHECKPOINT_PARTITION))
    settings = ImageSourceSettings(survey=SurveyLocation(root=str(OUT)))
    t0 = time.perf_counter()
    run = search_on_spark(
        spark, finder, lake.inflight(), {"bench.fits": tgt}, settings, device, SearchSettings(keep_threshold=keep)
    )["bench.fits"]
    out = _publish(lake, tgt, InflightSearch(lake.inflight(), "bench.fits", run["model_version"]), run["n_chunks"])
    return time.perf_counter() - t0, out


def materialized(lake: Lake, tgt: pa.Table, source, model, spec, device: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    batches = cutout_batches(tgt.append_column("label", pa.array(np.zeros(tgt.num_rows, np.int8))), source)
    first = next(batches)
    cutouts = lake.table(*T.CUTOUTS.key)
    cut = cutouts.write(itertools.chain([first], batches), schema=first.schema)
    scored = score_batches(cutouts.dataset(), ["object_id", "label", "split"], "image", "cutout", model, spec, device)
    first = next(scored)
    sc = lake.table(*T.CUTOUT_SCORES.key).write(itertools.chain([first], scored), schema=first.schema)
    return time.perf_counter() - t0, {"bytes": cut.bytes + sc.bytes, "cutout_bytes": cut.bytes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-brick", type=int, default=128)
    ap.add_argument("--bricks", type=int, default=8)
    ap.add_argument("--keep-threshold", type=float, default=0.5)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--spark", action="store_true", help="also time the Spark launch (local[cores])")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(cores)
    table, names, _ = ensure_bricks(args.bricks)
    ra, dec = targets(table, names, args.per_brick, "search")
    tgt = target_table(ra, dec)
    # as the assets open them: the cutouts table keeps every plane; the search reads the images
    # and, to tell a masked centre, the invvar of the centre pixel
    source, search_source = (
        BrickImageSource(str(OUT)),
        BrickImageSource(str(OUT), with_maskbits=False, invvar_centre_only=True),
    )
    work = tempfile.mkdtemp(prefix="bench_search_")
    spark = None
    try:
        model, spec = lens_finder(f"{work}/ckpt", args.device)
        score_chunk(tgt.slice(0, 16), search_source, model, spec, args.device, SearchSettings())  # warm-up
        if args.spark:
            from darkhaloscope.catalog.spark_conf import spark_session
            from resources.settings import spark_env

            spark = spark_session(f"local[{cores}]", app_name="bench-search", env=spark_env())
        t_base = t_stream = t_spark = np.inf
        for i in range(args.repeat):  # the forms take turns; the least time counts
            t, base = materialized(Lake(f"{work}/base{i}"), tgt, source, model, spec, args.device)
            t_base = min(t_base, t)
            t, stream = streamed(
                Lake(f"{work}/stream{i}"), tgt, search_source, model, spec, args.device, args.keep_threshold
            )
            t_stream = min(t_stream, t)
            if spark is not None:
                t, on = on_spark(spark, Lake(f"{work}/spark{i}"), tgt, f"{work}/ckpt", args.device, args.keep_threshold)
                assert on == stream, f"the Spark launch stored {on}, the streamed form {stream}"
                t_spark = min(t_spark, t)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    n = tgt.num_rows
    spark_rates = (
        {
            "spark_galaxies_per_s_per_core": round(n / t_spark / cores, 2),
            "speedup_spark_vs_streamed": round(t_stream / t_spark, 2),
        }
        if spark is not None
        else {}
    )
    print(
        json.dumps(
            {
                "benchmark": "search",
                "device": args.device,
                "cores": cores,
                "galaxies": n,
                "bricks": len(names),
                "streamed_galaxies_per_s_per_core": round(n / t_stream / cores, 2),
                "materialized_galaxies_per_s_per_core": round(n / t_base / cores, 2),
                "speedup_streamed_vs_materialized": round(t_base / t_stream, 2),
                "streamed_bytes_per_galaxy": round(stream["bytes"] / n, 1),
                "materialized_bytes_per_galaxy": round(base["bytes"] / n, 1),
                "stamp_bytes_per_galaxy": round(base["cutout_bytes"] / n, 1),
                "stamps_kept": stream["stamps_kept"],
                "storage_ratio_streamed_to_stamps": round(stream["bytes"] / base["cutout_bytes"], 4),
                **spark_rates,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
