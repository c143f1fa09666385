"""The search of one or several sweep files on Spark: their chunks spread over Spark tasks on CPU
executors.

Nothing here cuts or scores. The targets are in brick order, so contiguous chunks are brick
groups; Spark schedules one task per group (at most the session's default parallelism; a group
may run on from one sweep file into the next of the run), and each task runs
:func:`.launch.search_with_published_finder` on its chunks: it loads the published lens finder,
opens the image source from its settings and commits each chunk to the lake's in-flight area,
skipping chunks already there. Only the counts come back to the driver, which then reads
the rows from the lake exactly as after an in-process search. A task scores with as many threads as
it has cores (PySpark sets ``OMP_NUM_THREADS`` of its Python workers from ``spark.task.cpus``,
and torch follows it), so the tasks of an executor do not oversubscribe it.

Executors need the lake as the driver sees it (its tables travel in the task closure, as in
:mod:`darkhaloscope.catalog.spark`) and the image source: the same survey mirror or mock-survey
cache path, or network access to the cutout service.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping

import pyarrow as pa

from ..catalog.spark_conf import counting_s3_retries, task_progress
from ..imaging.sources import ImageSourceOpener
from ..storage import PartitionedTable, TableStore
from .launch import search_with_published_finder
from .streaming import SearchSettings, chunk_count


def search_on_spark(
    spark,
    lens_finder: PartitionedTable,
    inflight: TableStore,
    partitions: Mapping[str, pa.Table],
    source: ImageSourceOpener,
    device: str,
    settings: SearchSettings,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, dict]:
    """Score and commit every chunk of the targets of each sweep file in ``partitions`` (sweep file
    -> targets) not yet in flight, in Spark tasks of contiguous chunks (of one sweep file or of
    neighbouring ones), on each executor's ``device``. Returns per sweep file the counts of
    :func:`.launch.search_with_published_finder` summed over the tasks, with the one
    ``model_version`` every task scored with and the devices they used (comma-separated).
    ``progress(tasks done, tasks)`` follows the tasks as they end (:func:`..catalog.spark_conf.task_progress`)."""
    sc = spark.sparkContext
    # (sweep file, chunk) in order; a sweep file without targets gets a task entry without a chunk
    # (-1), so it still reports the model it would have scored with
    work = [
        (name, i)
        for name, targets in partitions.items()
        for i in (range(chunk_count(targets.num_rows, settings)) or [-1])
    ]
    shared = sc.broadcast(dict(partitions))

    def task(entries: Iterable[tuple[str, int]]) -> Iterator[dict]:
        chunks: dict[str, list[int]] = {}
        for name, i in entries:
            chunks.setdefault(name, []).extend([i] if i >= 0 else [])
        if chunks:
            targets = {name: shared.value[name] for name in chunks}
            yield search_with_published_finder(lens_finder, inflight, targets, source, device, settings, chunks=chunks)

    try:
        parts = sc.parallelize(work, max(1, min(len(work), sc.defaultParallelism)))
        with task_progress(spark, f"search-{sc.applicationId}", progress or (lambda done, total: None)):
            runs = parts.mapPartitions(counting_s3_retries(spark, task)).collect()
    finally:
        shared.destroy()
    versions = sorted({r["model_version"] for run in runs for r in run.values()})
    if len(versions) != 1:
        raise RuntimeError(
            f"the search of {', '.join(partitions)} scored with {len(versions)} lens-finder versions "
            f"{[v[:16] for v in versions]}: "
            "the published lens finder changed during the run; run it again"
        )
    out = {}
    for name in partitions:
        mine = [run[name] for run in runs if name in run]
        out[name] = {
            "n_chunks": sum(r["n_chunks"] for r in mine),
            "n_scored_now": sum(r["n_scored_now"] for r in mine),
            "n_resumed": sum(r["n_resumed"] for r in mine),
            "model_version": versions[0],
            "device": ",".join(sorted({r["device"] for r in mine})),
        }
    return out
