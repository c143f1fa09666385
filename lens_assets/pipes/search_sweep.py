"""The search of a run's sweep files as a standalone process, launched through Dagster Pipes by
``search_scores`` with ``launch: pipes`` (locally by ``PipesSubprocessClient``, like the trainer; on
a GPU host through ``DHS_LAUNCH_PREFIX`` or by another Pipes client running the same module;
``lens_assets.pipes.session``).

It imports only ``dagster_pipes`` (never dagster), the library and the lake factory
(``resources.storage``). It reads each sweep file's
published targets from the lake, scores and commits every chunk not yet in flight with one load
of the lens finder (:func:`darkhaloscope.search.launch.search_with_published_finder`), logs each
chunk through ``pipes.log`` and reports the counts, model version and device per sweep file as one
custom message ``{"search": {sweep file: {...}}}``; the asset reads the rows back from the lake,
audits and publishes them as on the local launch.

Extras: ``lake_uri``, ``s3_endpoint``, ``sweep_files`` (the run's partitions), ``source`` (the image-source settings'
``to_dict()``), ``settings`` (``SearchSettings`` fields) and ``device`` (``auto``, ``cpu`` or
``cuda``, resolved on the host that runs it).

    python -m lens_assets.pipes.search_sweep      (started by the Pipes client, never by hand)
"""

from __future__ import annotations

import sys


def main() -> None:
    from darkhaloscope.imaging.source_settings import source_opener_from_dict
    from darkhaloscope.search.launch import search_with_published_finder
    from darkhaloscope.search.streaming import SearchSettings
    from mock_survey.sources import KIND as MOCK_SKY
    from mock_survey.sources import MockSkySettings
    from resources.storage import open_lake
    from table_registry import LENS_FINDER, SEARCH_TARGETS

    from .session import open_step_pipes

    with open_step_pipes() as pipes:
        x = pipes.extras
        lake = open_lake(x["lake_uri"], x.get("s3_endpoint"))
        targets = {
            name: lake.read_table(*SEARCH_TARGETS.key, partition={SEARCH_TARGETS.partitioned_by: name})
            for name in x["sweep_files"]
        }

        def progress(name: str, index: int, n_chunks: int, resumed: bool) -> None:
            line = f"search {name}: chunk {index + 1}/{n_chunks} {'already in flight' if resumed else 'scored'}"
            pipes.log.info(line)
            print(line, file=sys.stderr, flush=True)  # the console too (dhs keeps Dagster's at WARNING)

        runs = search_with_published_finder(
            lake.table(*LENS_FINDER.key),
            lake.inflight(),
            targets,
            source_opener_from_dict(x["source"], {MOCK_SKY: MockSkySettings.from_dict}),
            x["device"],
            SearchSettings(**x["settings"]),
            progress=progress,
        )
        for name, run in runs.items():
            pipes.log.info(
                f"{name}: {run['n_scored_now']} chunks scored, {run['n_resumed']} resumed on {run['device']}"
            )
        pipes.report_custom_message({"search": runs})


if __name__ == "__main__":
    main()
