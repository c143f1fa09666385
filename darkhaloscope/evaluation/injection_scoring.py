"""Render and score an injection batch in one streamed pass, no stamp of the batch stored.

:func:`render_and_score` renders the batch in the bank's render chunks
(:func:`lensing.bank.render_arc_chunks`) and scores every ``chunk`` task rows, injections and
their controls, as soon as their arcs are rendered (:func:`.scoring.score_rows`), as the survey
search cuts and scores bricks (:mod:`darkhaloscope.search.streaming`). It holds the batch's host
stamps (its input) and at most one score chunk and one render chunk of arcs. The score rows are
those of the stored path — render the whole batch (:func:`lensing.bank.render_injection_batch`),
store its stamps and controls (:func:`lensing.bank.bank_table`), read them back and score them
(:func:`.scoring.score_batches`) — from the same renders and the same scoring, bit for bit; the
stored path is kept for the benchmark that compares them and for re-rendering a few stamps
(:func:`injection_images`), which is how a reader of the bank gets an injection's pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..errors import InputError
from ..lensing.bank import (
    InjectionConfig,
    RenderedArcs,
    RenderTally,
    bank_columns,
    host_failures,
    injected_stamps,
    render_arc_chunks,
    render_injection_batch,
)
from .scoring import INJECTION_META, score_rows

#: Task rows per scored chunk: the record batch in which :func:`.scoring.score_batches` reads a bank.
SCORE_CHUNK = 256


@dataclass(frozen=True)
class ScoredChunk:
    """One chunk of the fused pass: ``bank``, the injection bank's rows of its tasks without stamps
    (:func:`lensing.bank.bank_columns`), and ``scores``, its score rows (injections, then controls)."""

    bank: pa.Table
    scores: tuple[pa.RecordBatch, pa.RecordBatch]


def render_and_score(
    tasks: pa.Table,
    host_images: np.ndarray,
    host_invvar: np.ndarray,
    model,
    spec,
    device: str = "cpu",
    config: InjectionConfig = InjectionConfig(),
    chunk: int = SCORE_CHUNK,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[ScoredChunk]:
    """The bank rows and the score rows of ``tasks``' injections (``kind = 'injection'``) and paired
    controls (``kind = 'control'``, the bare host, scored once per host), ``chunk`` task rows at a
    time (:class:`ScoredChunk`); the score columns are ``injection_scores``'
    (:data:`.scoring.INJECTION_META` and the score columns). ``host_images``, ``host_invvar``:
    (N, 3, S, S) [nmgy/pixel], [1/nmgy^2]; ``model``, ``spec``: the lens finder and its checkpoint
    spec; ``progress(done, total)`` follows each chunk [task rows]."""
    img, iv, reason = host_failures(tasks, host_images, host_invvar, config)
    ok = reason == ""
    rows = np.flatnonzero(ok)
    n, tally, seen = tasks.num_rows, RenderTally(tasks.num_rows), {}
    arcs = render_arc_chunks(tasks, iv, rows, device, config)
    held: list[RenderedArcs] = []
    rendered = 0
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        while rendered < np.searchsorted(rows, stop):
            held.append(next(arcs))
            tally.add(held[-1])
            rendered += len(held[-1].rows)
        arc = np.zeros((stop - start, *img.shape[1:]), np.float32)
        for part in held:
            inside = (part.rows >= start) & (part.rows < stop)
            arc[part.rows[inside] - start] = part.arc[inside]
        held = [part for part in held if part.rows[-1] >= stop]
        columns = bank_columns(tasks.slice(start, stop - start), tally.params(tasks, reason, start, stop))
        meta = pa.RecordBatch.from_arrays(
            [columns.column(c).combine_chunks() for c in INJECTION_META], names=list(INJECTION_META)
        )
        host = np.asarray(img[start:stop], dtype=np.float32)
        injected = injected_stamps(host, arc, ok[start:stop])
        yield ScoredChunk(
            columns,
            (
                score_rows(meta, INJECTION_META, injected, "injection", model, spec, device, seen),
                score_rows(meta, INJECTION_META, host, "control", model, spec, device, seen),
            ),
        )
        if progress is not None:
            progress(stop, n)


def host_stamps(cutouts: ds.Dataset, tasks: pa.Table, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The host stamps of ``tasks`` (image [nmgy/pixel], invvar [1/nmgy^2], row by row) from the
    cutouts table; a host missing there is an error naming ``what`` it was wanted for."""
    # imported here: the imaging package needs astropy, which a bare GPU host running the fused
    # pass alone (``benchmarks/gpu_check.py``) does not have
    from ..imaging.cutout_table import load_stamps

    host_ids = tasks.column("host_object_id").to_numpy()
    (images, invvar), found = load_stamps(cutouts, host_ids, ("image", "invvar"))
    if not found.all():
        raise InputError(f"hosts {host_ids[~found][:5].tolist()} of {what} are not in the cutouts table")
    return images, invvar


def injection_images(injection_plan: pa.Table, cutouts: ds.Dataset, injection_ids, device: str = "cpu") -> dict:
    """{injection id: injected stamp (3, H, W) [nmgy/pixel]} of ``injection_ids``, rendered again
    from their plan rows onto their hosts' cutouts (the bank stores no stamps; a task renders the
    same in any batch, ``lensing.bank.render_injection_batch``)."""
    if not injection_ids:
        return {}
    wanted = pa.array(list(injection_ids), pa.int64())
    tasks = injection_plan.filter(pc.is_in(injection_plan.column("injection_id"), wanted))
    missing = set(injection_ids) - set(tasks.column("injection_id").to_pylist())
    if missing:
        raise InputError(f"injection ids {sorted(missing)[:5]} are not in injection_plan")
    images, invvar = host_stamps(cutouts, tasks, "the re-rendered injections")
    injected, _, _ = render_injection_batch(tasks, images, invvar, device=device)
    return dict(zip(tasks.column("injection_id").to_pylist(), injected))
