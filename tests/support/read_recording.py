"""``dhs`` with every lake read inside an asset step recorded: the end-to-end test's check that each
table an asset reads is one of its upstream assets.

    python -m tests.support.read_recording READS.jsonl demo

runs ``dhs demo`` (or any ``dhs`` command) in this process, with the lake factory
(:func:`resources.storage.open_lake`, which the lake resource and its IO manager call) wrapped to
return a :class:`ReadRecordingLake` appending one JSON line per table read to ``READS.jsonl``:
``{"reader": [asset keys of the step], "table": "group/table"}``. ``dhs demo`` runs every step in
this process (the in-process executor), so every asset step's reads are seen.
"""

from __future__ import annotations

import json
import sys

import dagster as dg

from lake_platform.lake import Lake


class ReadRecordingLake(Lake):
    """A lake that appends one JSON line per table read inside an asset step to ``read_log``."""

    read_log: str

    def _record(self, group: str, asset: str) -> None:
        try:
            context = dg.AssetExecutionContext.get()
        except Exception:  # not inside an asset step (a sensor, the CLI, a Spark executor): nothing to check
            return
        keys = sorted(k.to_user_string() for k in context.assets_def.keys)
        with open(self.read_log, "a") as f:
            f.write(json.dumps({"reader": keys, "table": f"{group}/{asset}"}) + "\n")

    def read_table(self, group, asset, *args, **kwargs):
        self._record(group, asset)
        return super().read_table(group, asset, *args, **kwargs)

    def dataset(self, group, asset, *args, **kwargs):
        self._record(group, asset)
        return super().dataset(group, asset, *args, **kwargs)

    def iter_batches(self, group, asset, *args, **kwargs):
        self._record(group, asset)
        return super().iter_batches(group, asset, *args, **kwargs)

    def read_schema(self, group, asset, *args, **kwargs):
        self._record(group, asset)
        return super().read_schema(group, asset, *args, **kwargs)

    def read_bytes(self, group, asset, *args, **kwargs):
        self._record(group, asset)
        return super().read_bytes(group, asset, *args, **kwargs)

    def partitions(self, group, asset):
        self._record(group, asset)
        return super().partitions(group, asset)

    def part_uris(self, group, asset):
        self._record(group, asset)
        return super().part_uris(group, asset)

    def exists(self, group, asset, partition=None):
        self._record(group, asset)
        return super().exists(group, asset, partition)


def record_reads(read_log: str) -> None:
    """Wrap the lake factory so that every lake it opens from now on records its reads to ``read_log``."""
    from resources import storage

    opened = storage.open_lake

    def open_recording_lake(*args, **kwargs) -> Lake:
        lake = opened(*args, **kwargs)
        lake.__class__ = ReadRecordingLake
        lake.read_log = read_log
        return lake

    storage.open_lake = open_recording_lake


def main(argv: list[str]) -> int:
    from dhs.main import main as dhs

    record_reads(argv[0])
    return dhs(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
