"""One process's share of a search, wherever it runs: the asset's own process, a Spark task
(:mod:`darkhaloscope.search.spark`) or a subprocess launched through Dagster Pipes (on a GPU host);
one sweep file or several (a run covering several partitions).

Each process loads the published lens finder once, opens the image source once from its settings
(never a live client shipped from elsewhere) and runs :func:`.streaming.search_partition` over its
chunks of each sweep file, committing each to that sweep file's in-flight area (a scratch store
of the lake); the caller reads the rows back from there, so every launch publishes the same rows.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import pyarrow as pa

from ..imaging.sources import ImageSourceOpener
from ..storage import PartitionedTable, TableStore
from .streaming import InflightSearch, SearchSettings, search_partition


def search_with_published_finder(
    lens_finder: PartitionedTable,
    inflight: TableStore,
    partitions: Mapping[str, pa.Table],
    source: ImageSourceOpener,
    device: str,
    settings: SearchSettings,
    chunks: Mapping[str, Sequence[int]] | None = None,
    progress: Callable[[str, int, int, bool], None] | None = None,
) -> dict[str, dict]:
    """Score and commit to the scratch store ``inflight`` the chunks ``chunks[sweep_file]``
    (default: all) of the targets of each sweep file in ``partitions`` (sweep file -> targets) with
    the lens finder published in the ``lens_finder`` table, loaded once, on ``device`` (``auto``,
    ``cpu`` or ``cuda``, resolved in this process: a Spark executor or a GPU host resolves its own),
    cutting from the image source that ``source`` opens (once). ``progress(sweep_file, index,
    n_chunks, resumed)`` follows each chunk. Returns per sweep file
    :func:`.streaming.search_partition`'s counts with ``model_version`` (the spec's ``data_version``,
    the key of the in-flight chunks) and ``device``."""
    from ..evaluation.scoring import published_lens_finder
    from ..training.inference import SCORE_BATCH, resolve_device

    resolved = resolve_device(device)
    runs = {}
    with published_lens_finder(lens_finder, str(resolved)) as (model, spec):
        # the search neither scores nor keeps maskbits or invvar: a masked centre shows in the
        # invvar of the centre pixel, all it reads of them
        images = source.open(with_maskbits=False, invvar_centre_only=True)
        for name, targets in partitions.items():
            run = search_partition(
                targets,
                images,
                model,
                spec,
                str(resolved),
                settings,
                InflightSearch(inflight, name, spec.data_version),
                SCORE_BATCH.get(resolved.type, 16),
                None if chunks is None else chunks[name],
                None if progress is None else (lambda i, n, resumed, name=name: progress(name, i, n, resumed)),
            )
            runs[name] = {**run, "model_version": spec.data_version, "device": str(resolved)}
    return runs
