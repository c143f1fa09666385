"""Scoring tables with the published lens finder, and the evaluation's inputs derived from them.

:func:`score_batches` streams stamps from a table (a dataset: cutouts or an injection bank
partition) through the lens finder and yields score rows with the metadata columns carried over;
stamps that cannot be scored are kept with ``valid = false`` and a reason, never scored as zero.
:func:`published_lens_finder` opens the checkpoint the score assets read.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..lensing.priors import SOURCE_PARAMETERS
from ..stamps import from_tensor_column
from ..storage import PartitionedTable

CUTOUT_META = [
    "object_id",
    "label",
    "split",
    "pool",
    "confuser_category",
    "tier",
    "name",
    "in_training_catalog",
    "psfsize_r",
    "psfdepth_r",
]
INJECTION_META = [
    "injection_id",
    "theta_e_arcsec",
    "z_l",
    "z_s",
    "sigma_v_kms",
    "success",
    "failure_reason",
    "psf_fwhm_r",
    "psfdepth_r",
    *SOURCE_PARAMETERS,
    "lens_q",
    "shear_g1",
    "shear_g2",
    "lensed_mag_r",
    "arc_snr",
    "magnification",
    "host_object_id",
    "lens_mag_z",
    "host_z",
    "z_l_bin",
    "host_z_source",
    "sigma_v_source",
]
#: The partition of the ``lens_finder`` table that holds the published checkpoint's files.
CHECKPOINT_PARTITION = {"artifact": "checkpoint"}


@contextmanager
def published_lens_finder(lens_finder: PartitionedTable, device: str):
    """(model, checkpoint spec) of the lens finder published in the ``lens_finder`` table, on
    ``device``; a checkpoint on remote storage is read from a temporary local copy."""
    from ..training.checkpoint import load_checkpoint

    with lens_finder.local_folder(CHECKPOINT_PARTITION) as path:
        yield load_checkpoint(path, "best", device=device)


def score_batches(
    stamps: ds.Dataset, meta: list[str], image_column: str, kind: str, model, spec, device: str
) -> Iterator[pa.RecordBatch]:
    """Score rows of every stamp in ``stamps`` (256 at a time): ``meta`` columns, ``kind``,
    ``score`` (float64 calibrated probability, null when unscorable), for a stacked ensemble one
    ``score_<member>`` column per member, ``valid`` and ``invalid_reason``. ``spec`` is the
    checkpoint's spec (preprocessing and calibration temperature). For injections
    (``kind = 'injection'``) a failed render holds the bare host: it is no lens, so it is never
    scored as one."""
    seen: dict[int, tuple] = {}  # a control is its bare host: each host's stamp is scored once
    for batch in stamps.to_batches(columns=meta + [image_column], batch_size=256):
        if batch.num_rows == 0:
            continue
        images = from_tensor_column(batch.column(image_column), name=image_column)
        yield score_rows(batch, meta, images, kind, model, spec, device, seen)


def score_rows(
    batch: pa.RecordBatch, meta: list[str], images: np.ndarray, kind: str, model, spec, device: str, seen: dict
) -> pa.RecordBatch:
    """The score rows (as :func:`score_batches`) of the stamps ``images`` (N, 3, S, S) [nmgy/pixel] of
    the rows of ``batch`` (which holds the ``meta`` columns). ``seen``: the control results of the
    hosts scored so far (filled here), so that a control, its bare host, is scored once per host."""
    from ..training.inference import SCORE_BATCH, score_with_members
    from .comparison import MEMBER_SCORE_PREFIX

    batch_size = SCORE_BATCH.get(device, 16)
    if kind == "control" and "host_object_id" in batch.column_names:
        scores, valid, reason, members = _score_hosts_once(
            seen, batch.column("host_object_id").to_numpy(), images, model, spec, device, batch_size
        )
    else:
        scores, valid, reason, members = score_with_members(model, spec, images, device=device, batch_size=batch_size)
    if kind == "injection":
        failed = ~batch.column("success").to_numpy(zero_copy_only=False).astype(bool)
        valid = valid & ~failed
        reason = np.where(failed, "injection_failed", np.asarray(reason, dtype=object))
    cols = {name: batch.column(name) for name in meta}
    cols["kind"] = pa.array([kind] * batch.num_rows)
    cols["score"] = pa.array(np.where(valid, scores, np.nan), pa.float64(), mask=~valid)
    for name, member in members.items():
        cols[MEMBER_SCORE_PREFIX + name] = pa.array(np.where(valid, member, np.nan), pa.float64(), mask=~valid)
    cols["valid"] = pa.array(valid)
    cols["invalid_reason"] = pa.array(np.asarray(reason, dtype=object).astype(str))
    return pa.RecordBatch.from_pydict(cols)


def _score_hosts_once(seen: dict, hosts: np.ndarray, images: np.ndarray, model, spec, device: str, batch_size: int):
    """Scores of control rows whose stamps are their hosts' (rows of one host hold the same pixels):
    the hosts not in ``seen`` are scored, once, and every row takes its host's result. Returns what
    ``score_with_members`` returns, row by row."""
    from ..training.inference import score_with_members

    new, pending = [], set()
    for i, h in enumerate(hosts.tolist()):
        if h not in seen and h not in pending:
            new.append(i)
            pending.add(h)
    if new:
        sc, va, re, mem = score_with_members(model, spec, images[new], device=device, batch_size=batch_size)
        for j, i in enumerate(new):
            seen[int(hosts[i])] = (sc[j], va[j], np.asarray(re, dtype=object)[j], {k: v[j] for k, v in mem.items()})
    rows = [seen[int(h)] for h in hosts]
    names = list(rows[0][3])
    return (
        np.array([r[0] for r in rows]),
        np.array([r[1] for r in rows], dtype=bool),
        np.array([r[2] for r in rows], dtype=object),
        {k: np.array([r[3][k] for r in rows]) for k in names},
    )


def held_out_negatives(cutout_scores: pa.Table, graded_lenses=()) -> pa.Table:
    """Scores of negatives the lens finder never saw: the test split, and every pool negative that
    is not in the training catalog. Val negatives of the catalog chose the best epoch and ran the
    gates, so they are not held out. ``graded_lenses``: object ids a visual grade calls a lens
    (:func:`search.grades.graded_lens_ids`); a pool "negative" that is in fact a lens would set the
    false-positive thresholds at the scores of true lenses, so inspected ones leave the sample."""
    s = cutout_scores
    unseen = pc.or_(
        pc.equal(s.column("split"), "test"), pc.invert(pc.fill_null(s.column("in_training_catalog"), False))
    )
    lens = pc.is_in(s.column("object_id"), pa.array(np.asarray(graded_lenses, np.int64)))
    return s.filter(pc.and_(pc.and_(pc.equal(s.column("label"), 0), unseen), pc.invert(lens)))


def injection_rows(injection_scores: ds.Dataset | pa.Table, kind: str) -> pa.Table:
    """Injection scores of one kind ('injection' or 'control')."""
    if isinstance(injection_scores, ds.Dataset):
        return injection_scores.to_table(filter=pc.field("kind") == kind)
    return injection_scores.filter(pc.equal(injection_scores.column("kind"), kind))
