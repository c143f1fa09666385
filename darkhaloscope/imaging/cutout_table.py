"""The ``cutouts`` table: which targets a sweep file contributes, their stamps as record batches,
chunk-level resume of fetches from a cutout service, and loading stamps back by object id.

Rows carry the target's catalog columns, the stamps as Arrow fixed-shape tensors (float32
``[band, y, x]``, bands g, r, z, nanomaggies; invvar; maskbits where the source has them), the
target's sub-pixel offset from the stamp's centre pixel and per-cutout quality metrics.

Fetches from a cutout service are slow and can die mid-partition, so each chunk of stamps is
committed as it arrives to a scratch store the caller gives, the lake's in-flight area
(``<lake>/_inflight/imaging/cutout_fetches/sweep_file=<f>/chunk=<id>/``, :class:`InflightFetches`;
``_inflight`` is not a table: readers and ``dhs tables`` skip it). A
rerun asks the service only for targets that are neither in the published partition nor in those
chunks; the chunks of a sweep file are dropped once its partition is published.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..constants import STAMP_SIZE
from ..stamps import from_tensor_column, to_tensor_array
from ..storage import TableStore
from .quality import quality_metrics

#: Target columns carried from the catalog into each cutout row.
TARGET_COLUMNS = [
    "object_id",
    "ra",
    "dec",
    "type",
    "split",
    "sweep_file",
    "psfsize_g",
    "psfsize_r",
    "psfsize_z",
    "psfdepth_g",
    "psfdepth_r",
    "psfdepth_z",
    "nobs_z_bin",
    "type_bin",
]
#: Targets per source request (and per record batch of the table).
CHUNK = 256
#: Per-pixel columns of the cutouts table (everything else is one scalar per cutout).
STAMP_COLUMNS = ("image", "invvar", "maskbits")
#: The scratch table of the chunks fetched so far.
FETCHES = ("imaging", "cutout_fetches")


def cutout_targets(
    negatives: pa.Table, positives: pa.Table, training_ids: pa.Array | pa.ChunkedArray, sweep_file: str
) -> pa.Table:
    """Targets of one sweep file: its negatives (label 0; ``negatives`` is that file's partition)
    and its matched positives (label 1), flagged ``in_training_catalog``, sorted by object id."""
    neg = negatives.select(TARGET_COLUMNS + ["pool", "confuser_category"]).append_column(
        "label", pa.array(np.zeros(negatives.num_rows, np.int8))
    )
    neg = neg.append_column("tier", pa.nulls(neg.num_rows, pa.string())).append_column(
        "name", pa.nulls(neg.num_rows, pa.string())
    )
    pos = positives.filter(pc.equal(positives.column("sweep_file"), sweep_file)).select(
        TARGET_COLUMNS + ["tier", "name"]
    )
    pos = pos.append_column("pool", pa.array(["positive"] * pos.num_rows, pa.string()))
    pos = pos.append_column("confuser_category", pa.nulls(pos.num_rows, pa.string()))
    pos = pos.append_column("label", pa.array(np.ones(pos.num_rows, np.int8)))
    both = pa.concat_tables([neg, pos.select(neg.column_names)], promote_options="permissive")
    both = both.append_column("in_training_catalog", pc.is_in(both.column("object_id"), training_ids))
    # positives win when an object is both (it cannot be a negative: the exclusion radius)
    return both.sort_by([("object_id", "ascending"), ("label", "descending")])


def cutout_batches(targets: pa.Table, source, size: int = STAMP_SIZE) -> Iterator[pa.RecordBatch]:
    """Record batches of cutouts + quality metrics for ``targets``, CHUNK targets at a time.

    ``source`` is an :class:`~darkhaloscope.imaging.sources.ImageSource`; targets it failed to cut
    (a cutout service's per-target errors) are kept with ``fetch_error`` and ``quality_ok`` false."""
    for start in range(0, targets.num_rows, CHUNK):
        t = targets.slice(start, CHUNK)
        batch, failed = source.cutouts(t.column("ra").to_numpy(), t.column("dec").to_numpy(), size)
        q = quality_metrics(batch.image, batch.invvar, batch.maskbits)
        cols = {name: t.column(name).combine_chunks() for name in t.column_names}
        cols["image"] = to_tensor_array(batch.image)
        cols["invvar"] = to_tensor_array(batch.invvar)
        if batch.maskbits is not None:
            cols["maskbits"] = to_tensor_array(batch.maskbits, pa.int32())
        # sub-pixel offset of the target from the stamp's centre pixel (0 for a resampling cutout service)
        cols["dx_pix"] = pa.array(batch.dx.astype(np.float32))
        cols["dy_pix"] = pa.array(batch.dy.astype(np.float32))
        cols["band_missing"] = pa.array(batch.band_missing.astype(np.uint8))
        cols["edge_padded"] = pa.array(batch.edge_padded.astype(bool))
        cols["fetch_error"] = pa.array(failed.astype(str), pa.string())
        for name in q.column_names:
            cols[name] = q.column(name).combine_chunks()
        if (failed != "").any():
            cols["quality_ok"] = pc.and_(cols["quality_ok"], pa.array(failed == ""))
        yield pa.RecordBatch.from_pydict(cols)


class InflightFetches:
    """The chunks of one sweep file fetched so far from a cutout service, in the scratch store
    ``area`` (see the module doc)."""

    def __init__(self, area: TableStore, sweep_file: str):
        self.fetches = area.table(*FETCHES)
        self.sweep_file = sweep_file

    def _chunks(self) -> list[dict]:
        return sorted(
            (p for p in self.fetches.partitions() if p.get("sweep_file") == self.sweep_file), key=lambda p: p["chunk"]
        )

    def tables(self) -> list[pa.Table]:
        """The committed chunks, in object-id order of their first rows."""
        return [self.fetches.read(p) for p in self._chunks()]

    def recording(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Pass ``batches`` through, committing each first (keyed by its first object id)."""
        for batch in batches:
            chunk = f"{int(batch.column('object_id')[0].as_py()):020d}"
            self.fetches.write(
                pa.Table.from_batches([batch]), partition={"sweep_file": self.sweep_file, "chunk": chunk}
            )
            yield batch

    def clear(self) -> None:
        """Drop this sweep file's chunks (once its partition is published)."""
        self.fetches.delete({"sweep_file": self.sweep_file})


def reusable_cutouts(parts: list[pa.Table], targets: pa.Table) -> pa.Table | None:
    """Cutouts fetched without error, for targets still wanted, from ``parts`` (the published
    partition and the in-flight chunks); each object once. None when ``parts`` is empty."""
    if not parts:
        return None
    old = pa.concat_tables(parts, promote_options="permissive")
    keep = pc.and_(
        pc.equal(old.column("fetch_error"), ""), pc.is_in(old.column("object_id"), targets.column("object_id"))
    )
    old = old.filter(keep)
    # an object fetched in two runs (published, then re-fetched before a crash) is kept once
    _, first = np.unique(old.column("object_id").to_numpy(), return_index=True)
    return old.take(pa.array(np.sort(first)))


def load_stamps(
    cutouts: ds.Dataset, object_ids, columns: tuple[str, ...] = ("image",)
) -> tuple[list[np.ndarray], np.ndarray]:
    """([stamps (N, 3, 101, 101) per column], found mask) for ``object_ids`` from the cutouts
    table, in the given order (ids may repeat), reading the requested stamp columns in one scan;
    rows of ids not found are zeros."""
    ids = pa.array(np.asarray(object_ids, dtype=np.int64))
    tbl = cutouts.to_table(columns=["object_id", *columns], filter=pc.field("object_id").isin(ids))
    pos = pc.index_in(ids, tbl.column("object_id"))
    found = pos.is_valid().to_numpy(zero_copy_only=False)
    rows = pos.filter(pos.is_valid()).to_numpy()
    out = []
    for column in columns:
        stamps = from_tensor_column(tbl.column(column), name=column)
        full = np.zeros((len(ids), *stamps.shape[1:]), np.float32)
        full[found] = stamps[rows]
        out.append(full)
    return out, found
