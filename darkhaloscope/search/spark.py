"""The search of one sweep file on Spark: its chunks spread over Spark tasks on CPU executors.

Nothing here cuts or scores. The targets are in brick order, so contiguous chunks are brick
groups; Spark schedules one task per group (at most the session's default parallelism), and each
task runs :func:`.launch.search_with_published_finder` on its chunks: it loads the published lens
finder, opens the image source from its settings and commits each chunk to the lake's in-flight
area, skipping chunks already there. Only the counts come back to the driver, which then reads
the rows from the lake exactly as after an in-process search. A task scores with as many threads as
it has cores (PySpark sets ``OMP_NUM_THREADS`` of its Python workers from ``spark.task.cpus``,
and torch follows it), so the tasks of an executor do not oversubscribe it.

Executors need the lake as the driver sees it (its tables travel in the task closure, as in
:mod:`darkhaloscope.catalog.spark`) and the image source: the same survey mirror or mock-survey
cache path, or network access to the cutout service.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import pyarrow as pa

from ..catalog.spark_conf import counting_s3_retries
from ..imaging.sources import ImageSourceOpener
from ..storage import PartitionedTable, TableStore
from .launch import search_with_published_finder
from .streaming import SearchSettings, chunk_count


def search_on_spark(
    spark,
    lens_finder: PartitionedTable,
    inflight: TableStore,
    sweep_file: str,
    targets: pa.Table,
    source: ImageSourceOpener,
    device: str,
    settings: SearchSettings,
) -> dict:
    """Score and commit every chunk of ``targets`` of ``sweep_file`` not yet in flight, in Spark
    tasks of contiguous chunks, on each executor's ``device``. Returns the counts of
    :func:`.launch.search_with_published_finder` summed over the tasks, with the one
    ``model_version`` they all scored with and the devices they used (comma-separated)."""
    sc = spark.sparkContext
    n_chunks = chunk_count(targets.num_rows, settings)
    shared = sc.broadcast(targets)

    def task(indices: Iterable[int]) -> Iterator[dict]:
        yield search_with_published_finder(
            lens_finder, inflight, sweep_file, shared.value, source, device, settings, chunks=list(indices)
        )

    try:
        # an empty partition still runs a task, so a sweep file without targets reports its model
        chunks = sc.parallelize(range(n_chunks), max(1, min(n_chunks, sc.defaultParallelism)))
        runs = chunks.mapPartitions(counting_s3_retries(spark, task)).collect()
    finally:
        shared.destroy()
    versions = sorted({r["model_version"] for r in runs})
    if len(versions) != 1:
        raise RuntimeError(
            f"the search of {sweep_file} scored with {len(versions)} lens-finder versions "
            f"{[v[:16] for v in versions]}: "
            "the published lens finder changed during the run; run it again"
        )
    return {
        "n_chunks": sum(r["n_chunks"] for r in runs),
        "n_scored_now": sum(r["n_scored_now"] for r in runs),
        "n_resumed": sum(r["n_resumed"] for r in runs),
        "model_version": versions[0],
        "device": ",".join(sorted({r["device"] for r in runs})),
    }
