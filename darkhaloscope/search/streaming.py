"""Cut and score in one stream: the search never holds more than two chunks of stamps.

Targets (brick-ordered, :mod:`.targets`) are cut from an :class:`~darkhaloscope.imaging.sources.ImageSource`
``chunk`` at a time and scored with the published lens finder (its preprocessing and calibration,
:func:`training.inference.score_with_members`) while the next chunk is cut. Each chunk yields its
score rows and the stamps of the rows scoring at least ``keep_threshold``; every other stamp is
dropped, so what a search stores grows with its candidates, not with the survey.

A row that cannot be scored is kept, unscored, with the reason (``;``-joined tokens):
``fetch_failed: <message>`` (the source could not cut it), ``no_data`` (no pixel in any band),
``missing_band_<b>`` (no image of band b), ``masked_centre_<b>`` (the target's own pixel has no
data in band b while the stamp has some), and the scorer's ``nonfinite_<b>`` / ``zero_<b>``.

Every row records the model's content hash (``model_version``, the checkpoint spec's ``data_version``),
so a new model re-scores rather than mixing versions. Each scored chunk is committed to a scratch
store the caller gives (the lake's ``_inflight/`` area), keyed by sweep file, model and chunk
(:class:`InflightSearch`); a rerun after a crash scores only the chunks that are missing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import torch

from ..constants import BANDS, SPLIT_NSIDE, STAMP_SIZE
from ..errors import InputError
from ..imaging.batch import BAND_MISSING_BIT, CutoutBatch
from ..stamps import tensor_type, to_tensor_array
from ..storage import TableStore

#: Target columns carried into every score row.
CARRIED = (
    "object_id",
    "sweep_file",
    "brickid",
    "brickname",
    "ra",
    "dec",
    "type",
    "mag_g",
    "mag_r",
    "mag_z",
    # the galaxy's half-light radius [arcsec]: the gallery's size filter
    "shape_r",
    f"healpix_{SPLIT_NSIDE}",
    "split",
)
_STRING = pa.string()
SCORE_FIELDS = (
    pa.field("score", pa.float64()),
    pa.field("valid", pa.bool_(), nullable=False),
    pa.field("invalid_reason", _STRING, nullable=False),
    pa.field("model_version", _STRING, nullable=False),
    pa.field("stamp_kept", pa.bool_(), nullable=False),
)
#: Columns of the stamps kept for high-scoring rows (``search_stamps``).
STAMP_SCHEMA = pa.schema(
    [
        pa.field("object_id", pa.int64(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("model_version", _STRING, nullable=False),
        pa.field("image", tensor_type()),
    ]
)
#: The scratch tables of the in-flight chunks (score rows, kept stamps).
SCORE_CHUNKS, STAMP_CHUNKS = ("search", "score_chunks"), ("search", "stamp_chunks")


def score_schema(targets: pa.Schema) -> pa.Schema:
    """Schema of the score rows of targets with schema ``targets``."""
    return pa.schema([targets.field(c) for c in CARRIED] + list(SCORE_FIELDS))


@dataclass(frozen=True)
class SearchSettings:
    """chunk: targets per image-source request (and per scoring call); keep_threshold: a row's stamp
    is kept when its calibrated score is >= this; size: stamp side in pixels.

    The keep-threshold is meant to sit below the operating threshold (the thresholds table's
    fpr=1e-2 row), so that a candidate's stamp is kept, and far above the bulk of the negatives'
    scores, so that storage follows the candidates, not the survey (what the default was set
    against: BENCHMARKS.md, *Projection: the full DR10 search*). The gallery cuts any missing stamp
    again from the image source."""

    chunk: int = 256
    keep_threshold: float = 0.9
    size: int = STAMP_SIZE

    def __post_init__(self) -> None:
        if self.chunk < 1:
            raise InputError(f"search chunk must be >= 1 target, got {self.chunk}")
        if not 0.0 <= self.keep_threshold <= 1.0:
            raise InputError(f"keep_threshold must be a probability in [0, 1], got {self.keep_threshold}")


def unscorable_reasons(batch: CutoutBatch, failed: np.ndarray) -> np.ndarray:
    """(N,) reasons (module doc; '' = cut and usable) of a cut batch and its failure messages."""
    n = len(batch)
    tokens: list[list[str]] = [[] for _ in range(n)]
    failed = np.asarray(failed, dtype=object)
    has_data = batch.has_data()
    c = batch.image.shape[-1] // 2
    if batch.invvar_centre_only:  # every band whose file exists was read at the centre
        has_invvar = np.stack([(batch.band_missing & BAND_MISSING_BIT[b]) == 0 for b in BANDS], axis=1)
    else:  # a source without inverse variances (a cutout service may send none) cannot say a pixel is masked
        has_invvar = (batch.invvar > 0).reshape(n, len(BANDS), -1).any(axis=-1)
    centre_empty = has_invvar & (batch.invvar[:, :, c, c] <= 0)
    for i in range(n):
        if failed[i]:
            tokens[i].append(f"fetch_failed: {failed[i]}")
        elif not has_data[i]:
            tokens[i].append("no_data")
        else:
            tokens[i] += [f"missing_band_{b}" for b in BANDS if batch.band_missing[i] & BAND_MISSING_BIT[b]]
            tokens[i] += [f"masked_centre_{b}" for j, b in enumerate(BANDS) if centre_empty[i, j]]
    return np.array([";".join(t) for t in tokens], dtype=object)


def cut_chunk(targets: pa.Table, source, settings: SearchSettings) -> tuple[CutoutBatch, np.ndarray]:
    """(stamps, per-target failure messages) of one chunk of targets, cut from ``source``."""
    return source.cutouts(targets.column("ra").to_numpy(), targets.column("dec").to_numpy(), settings.size)


def score_chunk(
    targets: pa.Table,
    source,
    model,
    spec,
    device: str,
    settings: SearchSettings,
    batch_size: int = 16,
    cut: tuple[CutoutBatch, np.ndarray] | None = None,
) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """(score rows, kept stamps) of one chunk of targets: cut (unless ``cut`` holds its
    :func:`cut_chunk` already), check, score the usable stamps."""
    from ..training.inference import score_with_members

    n = targets.num_rows
    batch, failed = cut if cut is not None else cut_chunk(targets, source, settings)
    reason = unscorable_reasons(batch, failed)
    usable = np.flatnonzero(reason == "")
    score = np.full(n, np.nan)
    if usable.size:
        s, ok, why, _ = score_with_members(model, spec, batch.image[usable], device=device, batch_size=batch_size)
        score[usable] = np.where(ok, s, np.nan)
        reason[usable] = np.asarray(why, dtype=object)
    valid = reason == ""
    kept = valid & (score >= settings.keep_threshold)
    version = spec.data_version
    cols = {name: targets.column(name).combine_chunks() for name in CARRIED}
    cols.update(
        score=pa.array(score, pa.float64(), mask=~valid),
        valid=pa.array(valid),
        invalid_reason=pa.array(reason.tolist(), _STRING),
        model_version=pa.array([version] * n, _STRING),
        stamp_kept=pa.array(kept),
    )
    rows = pa.RecordBatch.from_pydict(cols, schema=score_schema(targets.schema))
    idx = np.flatnonzero(kept)
    if idx.size == 0:
        return rows, pa.RecordBatch.from_pylist([], schema=STAMP_SCHEMA)
    stamps = pa.RecordBatch.from_pydict(
        {
            "object_id": targets.column("object_id").take(pa.array(idx)).combine_chunks(),
            "score": pa.array(score[idx], pa.float64()),
            "model_version": pa.array([version] * idx.size, _STRING),
            "image": to_tensor_array(batch.image[idx]),
        },
        schema=STAMP_SCHEMA,
    )
    return rows, stamps


class InflightSearch:
    """The scored chunks of one sweep file under one model, committed as they finish to ``area``
    (a scratch :class:`~darkhaloscope.storage.TableStore`; module doc)."""

    def __init__(self, area: TableStore, sweep_file: str, model_version: str):
        self.scores, self.stamps = area.table(*SCORE_CHUNKS), area.table(*STAMP_CHUNKS)
        self.key = {"sweep_file": sweep_file, "model": model_version[:16]}

    def _part(self, index: int) -> dict:
        return {**self.key, "chunk": f"{index:08d}"}

    def done(self, index: int, object_ids: pa.Array) -> bool:
        """The chunk was committed for exactly these targets (a changed target list re-scores it)."""
        part = self._part(index)
        if not self.scores.exists(part):
            return False
        return self.scores.read(part, columns=["object_id"]).column("object_id").combine_chunks().equals(object_ids)

    def commit(self, index: int, rows: pa.RecordBatch, stamps: pa.RecordBatch) -> None:
        """Stamps first, then the score rows (whose presence marks the chunk as done)."""
        self.stamps.write(pa.Table.from_batches([stamps]), partition=self._part(index))
        self.scores.write(pa.Table.from_batches([rows]), partition=self._part(index))

    def batches(self, kind: str, n_chunks: int) -> Iterator[pa.RecordBatch]:
        """Record batches of chunks 0 .. n_chunks-1 of the score rows (``kind`` "scores") or the
        kept stamps ("stamps"), in order."""
        table = {"scores": self.scores, "stamps": self.stamps}[kind]
        for i in range(n_chunks):
            yield from table.read(self._part(i)).to_batches()

    def clear(self) -> None:
        """Drop this sweep file's chunks (every model) once its partition is published."""
        for table in (self.scores, self.stamps):
            table.delete({"sweep_file": self.key["sweep_file"]})


def chunk_count(n_targets: int, settings: SearchSettings) -> int:
    """Number of chunks of ``settings.chunk`` targets that ``n_targets`` targets make."""
    return -(-n_targets // settings.chunk)


def search_partition(
    targets: pa.Table,
    source,
    model,
    spec,
    device: str,
    settings: SearchSettings,
    inflight: InflightSearch,
    batch_size: int = 16,
    chunks: Sequence[int] | None = None,
    progress: Callable[[int, int, bool], None] | None = None,
) -> dict:
    """Score every chunk of ``targets`` (or the chunks numbered ``chunks``) not already in
    ``inflight`` and commit it there; ``progress(index, n_chunks, resumed)`` follows each chunk.
    Returns ``{"n_chunks", "n_scored_now", "n_resumed"}`` of the chunks handled; read the rows back
    with ``inflight.batches(table, chunk_count(targets.num_rows, settings))``."""
    total = chunk_count(targets.num_rows, settings)
    indices = range(total) if chunks is None else list(chunks)
    for i in indices:
        if not 0 <= i < total:
            raise InputError(
                f"chunk {i} of {inflight.key['sweep_file']}: it has {total} chunks of {settings.chunk} targets"
            )
    parts = {i: targets.slice(i * settings.chunk, settings.chunk) for i in indices}
    done = {i: inflight.done(i, parts[i].column("object_id").combine_chunks()) for i in indices}
    todo = [i for i in indices if not done[i]]
    if progress is not None:
        for i in indices:
            if done[i]:
                progress(i, total, True)
    # The next chunk is cut in a thread while this one is scored, and the scoring leaves that
    # thread a core: on 2 cores that is faster than cutting and scoring in turn, while scoring on
    # every core beside the cutter is not (BENCHMARKS.md, summary table, row *survey search*).
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, torch_threads - 1))
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="search-cut") as cutter:
            ahead = cutter.submit(cut_chunk, parts[todo[0]], source, settings) if todo else None
            for k, i in enumerate(todo):
                cut = ahead.result()
                if k + 1 < len(todo):
                    ahead = cutter.submit(cut_chunk, parts[todo[k + 1]], source, settings)
                inflight.commit(i, *score_chunk(parts[i], source, model, spec, device, settings, batch_size, cut=cut))
                if progress is not None:
                    progress(i, total, False)
    finally:
        torch.set_num_threads(torch_threads)
    resumed = sum(done.values())
    return {"n_chunks": len(indices), "n_scored_now": len(indices) - resumed, "n_resumed": resumed}


def coverage_problems(scores: pa.Table, target_ids, model_version: str) -> dict[str, int]:
    """Counts of what breaks "one row per target, from this model": targets without a row, rows
    of no target, object ids with several rows, rows of another model, invalid rows without a reason."""
    ids = scores.column("object_id").to_numpy()
    wanted = np.asarray(target_ids)
    invalid = ~scores.column("valid").to_numpy(zero_copy_only=False)
    reasons = np.asarray(scores.column("invalid_reason").to_pylist(), dtype=object)
    return {
        "targets_without_row": int(np.sum(~np.isin(wanted, ids))),
        "rows_of_no_target": int(np.sum(~np.isin(ids, wanted))),
        "duplicate_rows": int(ids.size - np.unique(ids).size),
        "rows_of_another_model": int(
            np.sum(np.asarray(scores.column("model_version").to_pylist(), dtype=object) != model_version)
        ),
        "unscorable_without_reason": int(np.sum(invalid & (reasons == ""))),
    }
