"""One process's share of a sweep file's search, wherever it runs: the asset's own process, a
Spark task (:mod:`darkhaloscope.search.spark`) or a subprocess launched through Dagster Pipes (on a GPU host).

Each process loads the published lens finder itself, opens the image source from its settings
(never a live client shipped from elsewhere) and runs :func:`.streaming.search_partition` over its
chunks, committing each to the sweep file's in-flight area (a scratch store of the lake); the
caller reads the rows back from there, so every launch publishes the same rows.
"""

from __future__ import annotations

from typing import Callable, Sequence

import pyarrow as pa

from ..imaging.sources import ImageSourceOpener
from ..storage import PartitionedTable, TableStore
from .streaming import InflightSearch, SearchSettings, search_partition


def search_with_published_finder(
    lens_finder: PartitionedTable,
    inflight: TableStore,
    sweep_file: str,
    targets: pa.Table,
    source: ImageSourceOpener,
    device: str,
    settings: SearchSettings,
    chunks: Sequence[int] | None = None,
    progress: Callable[[int, int, bool], None] | None = None,
) -> dict:
    """Score and commit to the scratch store ``inflight`` the chunks ``chunks`` (default: all) of
    ``targets`` of ``sweep_file`` with the lens finder published in the ``lens_finder`` table, on
    ``device`` (``auto``, ``cpu`` or ``cuda``, resolved in this process: a Spark executor or a GPU
    host resolves its own), cutting from the image source that ``source`` opens. Returns
    :func:`.streaming.search_partition`'s counts with ``model_version`` (the spec's ``data_version``,
    the key of the in-flight chunks) and ``device``."""
    from ..evaluation.scoring import published_lens_finder
    from ..training.inference import SCORE_BATCH, resolve_device

    resolved = resolve_device(device)
    with published_lens_finder(lens_finder, str(resolved)) as (model, spec):
        chunks_done = InflightSearch(inflight, sweep_file, spec.data_version)
        # the search neither scores nor keeps maskbits or invvar: a masked centre shows in the
        # invvar of the centre pixel, all it reads of them
        images = source.open(with_maskbits=False, invvar_centre_only=True)
        run = search_partition(
            targets,
            images,
            model,
            spec,
            str(resolved),
            settings,
            chunks_done,
            SCORE_BATCH.get(resolved.type, 16),
            chunks,
            progress,
        )
    return {**run, "model_version": spec.data_version, "device": str(resolved)}
