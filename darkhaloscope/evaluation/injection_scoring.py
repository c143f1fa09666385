"""Render and score an injection batch in one streamed pass, no stamp of the batch stored.

The bank's path renders a whole batch (:func:`lensing.bank.render_injection_batch`), stores its
injected stamps and their paired controls in the lake, and the score asset reads them back and
scores them (:func:`.scoring.score_batches`). :func:`render_and_score` renders the batch in the
bank's own render chunks (:func:`lensing.bank.render_arc_chunks`) and scores every ``chunk`` task
rows, injections and their controls, as soon as their arcs are rendered (:func:`.scoring.score_rows`),
as the survey search cuts and scores bricks (:mod:`darkhaloscope.search.streaming`). It holds the
batch's host stamps (its input) and at most one score chunk and one render chunk of arcs; the
score rows are those the bank's path publishes, from the same renders and the same scoring.
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from ..lensing.bank import (
    InjectionConfig,
    RenderedArcs,
    RenderTally,
    bank_columns,
    host_failures,
    injected_stamps,
    render_arc_chunks,
)
from .scoring import INJECTION_META, score_rows

#: Task rows per scored chunk: the record batch in which :func:`.scoring.score_batches` reads a bank.
SCORE_CHUNK = 256


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
) -> Iterator[pa.RecordBatch]:
    """Score rows of ``tasks``' injections (``kind = 'injection'``) and paired controls (``kind =
    'control'``, the bare host, scored once per host), ``chunk`` task rows at a time, injection rows
    then control rows of each chunk; the columns are ``injection_scores``' (:data:`.scoring.INJECTION_META`
    and the score columns). ``host_images``, ``host_invvar``: (N, 3, S, S) [nmgy/pixel], [1/nmgy^2];
    ``model``, ``spec``: the lens finder and its checkpoint spec; ``progress(done, total)`` follows
    each chunk [task rows]."""
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
        yield score_rows(meta, INJECTION_META, injected, "injection", model, spec, device, seen)
        yield score_rows(meta, INJECTION_META, host, "control", model, spec, device, seen)
        if progress is not None:
            progress(stop, n)
