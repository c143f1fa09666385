"""Assembly of the training_set table from cutout rows: plain inputs in, an Arrow table out.

Rows: the training catalog's real positives (tier weights, A 1.0 and B 0.5 by default) and
negatives of the train and val splits (test stays untouched), optionally capped at
``negatives_per_positive`` per split, and the visually graded search candidates of those splits
(:func:`with_graded`): graded lenses are positives with their grade as tier, graded non-lenses
labelled negatives, each row with the round of its grade. Negatives of the listed host types with a PSF size and some
r-band inverse variance are injection hosts: they carry their inverse variance (a nullable tensor
column, null elsewhere) and the host columns the injection engine reads. No injection is stored:
the schema metadata records the injection stream's spec (priors, render numerics, counts, the S/N
acceptance) and the preprocessing spec, from which the trainer renders fresh arcs every epoch and
the fixed validation injections (``darkhaloscope.lensing.stream``).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..lensing.bank import HOST_COLUMNS
from ..lensing.stream import StreamSpec
from ..search.grades import LENS_GRADES
from ..stamps import STAMP_SHAPE, from_tensor_column, tensor_type, to_tensor_array
from .data import PREPROCESS_SPEC_KEY, STREAM_SPEC_KEY, negatives_per_positive_mask
from .preprocess import PreprocessSpec

#: Splits the training set holds (test is never trained on, nor used to choose a model).
FIT_SPLITS = ("train", "val")
#: Loss weight of a positive by tier: confident (A) lenses count fully, probable (B) ones half,
#: because a share of tier B are not lenses at all, and possible ones (C, a visual grade only) a quarter.
TIER_WEIGHTS = {"A": 1.0, "B": 0.5, "C": 0.25}
#: Pool of a graded candidate that was not in the training catalog.
GRADED_POOL = "graded"
GRADES_KEY = b"dhs.grades"
#: Columns of the cutouts table the training set is built from.
CUTOUT_COLUMNS = tuple(
    dict.fromkeys(
        ("object_id", "label", "split", "tier", "pool", "psfsize_r", "quality_ok", "in_training_catalog", *HOST_COLUMNS)
    )
)


def training_rows(cutouts: pa.Table) -> pa.Table:
    """The quality-checked training-catalog cutouts of the train and val splits."""
    missing = [c for c in CUTOUT_COLUMNS if c not in cutouts.column_names]
    if missing:
        raise InputError(f"cutouts lack the columns {missing} the training set needs")
    keep = pc.and_(
        pc.and_(cutouts.column("quality_ok"), cutouts.column("in_training_catalog")),
        pc.is_in(cutouts.column("split"), pa.array(list(FIT_SPLITS))),
    )
    return cutouts.filter(keep)


def _nullable_tensor(stamps: np.ndarray, valid: np.ndarray) -> pa.ExtensionArray:
    """Fixed-shape tensor column with nulls where ``valid`` is False."""
    flat = pa.array(np.ascontiguousarray(stamps, np.float32).reshape(-1))
    storage = pa.FixedSizeListArray.from_arrays(flat, int(np.prod(STAMP_SHAPE)), mask=pa.array(~valid))
    return pa.ExtensionArray.from_storage(tensor_type(), storage)


def injection_hosts(rows: pa.Table, invvar: np.ndarray, host_types) -> np.ndarray:
    """(N,) bool: negatives of ``host_types`` with an r-band PSF size and positive r-band invvar."""
    label = rows.column("label").to_numpy(zero_copy_only=False)
    types = np.asarray(rows.column("type").to_pylist(), dtype=object)
    psf = pc.fill_null(rows.column("psfsize_r").cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False)
    has_iv = (np.nan_to_num(invvar[:, 1]) > 0).any(axis=(1, 2))
    return (label == 0) & np.isin(types, list(host_types)) & np.isfinite(psf) & (psf > 0) & has_iv


def with_graded(
    rows: pa.Table,
    images: np.ndarray,
    invvar: np.ndarray,
    graded: pa.Table,
    new_cutouts: pa.Table | None,
    awaiting: np.ndarray | None = None,
) -> tuple[pa.Table, np.ndarray, np.ndarray, dict]:
    """Training ``rows`` (with ``images``, ``invvar``) labelled by visual grades and extended by the
    graded objects they lack, plus a ``grade_round`` column (null for ungraded rows), without the
    catalog negatives awaiting inspection.

    ``graded``: (object_id, grade, round), one per object, and ``awaiting``: ids shown to a grader
    and not graded (:func:`search.grades.grades_for_training`). ``new_cutouts``: cutouts rows
    (stamps + quality) of the graded objects not in ``rows``. A grade overrides a catalog label
    only openly: the row keeps its pool and gains its grade round, and the returned counts say how
    many labels changed. A negative awaiting inspection scored high enough to be shown and may be
    a lens: it is left out until graded (counted), as the published recipe takes high-scoring
    negatives out of training; a positive awaiting it stays. Graded objects of the test split stay
    out, and graded rows host no injection (their inverse variance is not carried: zeroed in
    ``invvar``, in place, which holds a stamp set the size of the training set)."""
    held = np.zeros(rows.num_rows, bool)
    if awaiting is not None and awaiting.size:
        held = pc.is_in(rows.column("object_id"), pa.array(awaiting, pa.int64())).to_numpy(zero_copy_only=False)
        held &= rows.column("label").to_numpy(zero_copy_only=False) == 0
        if held.any():
            rows, images, invvar = rows.filter(pa.array(~held)), images[~held], invvar[~held]
    n_catalog = rows.num_rows
    if new_cutouts is not None and new_cutouts.num_rows:
        new_cutouts = new_cutouts.filter(pc.is_in(new_cutouts.column("split"), pa.array(list(FIT_SPLITS))))
        bad = new_cutouts.filter(pc.invert(new_cutouts.column("quality_ok"))).column("object_id").to_pylist()
        if bad:
            raise InputError(
                f"graded objects {bad[:5]} could not be cut with usable stamps ({len(bad)} in all): fix the imaging or grade again"
            )
        n = new_cutouts.num_rows
        extra = new_cutouts.select(
            [c for c in CUTOUT_COLUMNS if c not in ("label", "tier", "pool", "in_training_catalog")]
        )
        extra = extra.append_column("label", pa.array(np.zeros(n, np.int8))).append_column(
            "tier", pa.nulls(n, pa.string())
        )
        extra = extra.append_column("pool", pa.array([GRADED_POOL] * n, pa.string()))
        extra = extra.append_column("in_training_catalog", pa.array(np.zeros(n, bool)))
        images = np.concatenate([images, from_tensor_column(new_cutouts.column("image"))])
        invvar = np.concatenate([invvar, np.zeros((n, *STAMP_SHAPE), np.float32)])
        rows = pa.concat_tables([rows, extra.select(rows.column_names).cast(rows.schema)])
    pos = pc.index_in(rows.column("object_id"), graded.column("object_id"))
    graded_rows = pos.is_valid().to_numpy(zero_copy_only=False)
    grade = (
        graded.column("grade").take(pc.fill_null(pos, 0)) if graded.num_rows else pa.nulls(rows.num_rows, pa.string())
    )
    is_lens = graded_rows & pc.is_in(grade, pa.array(list(LENS_GRADES))).to_numpy(zero_copy_only=False)
    old_label = rows.column("label").to_numpy(zero_copy_only=False).astype(np.int8)
    label = np.where(graded_rows, is_lens, old_label).astype(np.int8)
    tier = pc.if_else(
        pa.array(graded_rows), pc.if_else(pa.array(is_lens), grade, pa.scalar(None, pa.string())), rows.column("tier")
    )
    invvar[graded_rows] = 0.0
    rows = rows.set_column(rows.column_names.index("label"), "label", pa.array(label, rows.schema.field("label").type))
    rows = rows.set_column(rows.column_names.index("tier"), "tier", tier.cast(pa.string()))
    rnd = graded.column("round").take(pc.fill_null(pos, 0)) if graded.num_rows else pa.nulls(rows.num_rows, pa.int64())
    rows = rows.append_column("grade_round", pc.if_else(pa.array(graded_rows), rnd, pa.scalar(None, pa.int64())))
    counts = {
        "n_graded_rows": int(graded_rows.sum()),
        "n_graded_added": 0 if new_cutouts is None else int(new_cutouts.num_rows),
        "n_relabelled": int(np.sum((graded_rows & (label != old_label))[:n_catalog])),
        "n_graded_outside_train_val": graded.num_rows - int(graded_rows.sum()),
        "n_negatives_awaiting_inspection_left_out": int(held.sum()),
    }
    return rows, images, invvar, counts


def assemble_training_set(
    rows: pa.Table,
    images: np.ndarray,
    invvar: np.ndarray,
    *,
    preprocess: PreprocessSpec,
    stream: StreamSpec | None,
    tier_weights: dict | None = None,
    negatives_per_positive: float = 0.0,
    host_types=("DEV", "SER", "REX", "EXP"),
    grades: dict | None = None,
) -> pa.Table:
    """The training_set table of cutout ``rows`` (see :func:`training_rows`, optionally
    :func:`with_graded`) with their stamps ``images`` and ``invvar`` (N, 3, 101, 101) [nmgy/pixel,
    1/nmgy^2]. ``stream`` None: no injection hosts (catalog rows only). ``grades``: the record of
    the visual grades used (rounds, hash, counts), kept in the schema metadata."""
    if images.shape != (rows.num_rows, *STAMP_SHAPE) or invvar.shape != images.shape:
        raise InputError(f"{rows.num_rows} rows but stamps {images.shape} and invvar {invvar.shape}")
    if rows.num_rows == 0:
        raise InputError("no quality-checked train/val training-catalog cutouts to build the training set from")
    weights = {**TIER_WEIGHTS, **(tier_weights or {})}
    label = rows.column("label").to_numpy(zero_copy_only=False).astype(np.int8)
    split = np.asarray(rows.column("split").to_pylist(), dtype=object)
    object_id = rows.column("object_id").to_numpy(zero_copy_only=False).astype(np.int64)
    keep = negatives_per_positive_mask(label, split, object_id, negatives_per_positive)
    rows, images, invvar, label = rows.filter(pa.array(keep)), images[keep], invvar[keep], label[keep]
    tiers = np.asarray(rows.column("tier").to_pylist(), dtype=object)
    weight = np.where(label == 1, [weights.get(t, weights["B"]) for t in tiers], 1.0).astype(np.float32)
    host = injection_hosts(rows, invvar, host_types) if stream is not None else np.zeros(rows.num_rows, bool)
    if stream is not None and not host.any():
        raise InputError(f"no negative of types {list(host_types)} with a PSF size can host injections")
    cols = {
        "label": pa.array(label, pa.int8()),
        "weight": pa.array(weight, pa.float32()),
        "kind": pa.array(np.where(label == 1, "real_positive", "negative"), pa.string()),
    }
    table = rows.select([c for c in CUTOUT_COLUMNS if c not in ("label", "quality_ok", "in_training_catalog")])
    for name, col in cols.items():
        table = table.append_column(name, col)
    rnd = rows.column("grade_round") if "grade_round" in rows.column_names else pa.nulls(rows.num_rows, pa.int64())
    table = table.append_column("grade_round", rnd)
    table = table.append_column("image", to_tensor_array(images)).append_column(
        "invvar", _nullable_tensor(invvar, host)
    )
    meta = {
        PREPROCESS_SPEC_KEY: preprocess.to_json().encode(),
        GRADES_KEY: json.dumps(grades or {"rounds": []}, sort_keys=True).encode(),
    }
    if stream is not None:
        meta[STREAM_SPEC_KEY] = json.dumps(stream.to_dict(), sort_keys=True).encode()
    return table.replace_schema_metadata(meta)


def recorded_specs(schema: pa.Schema, where: str = "training_set") -> tuple[PreprocessSpec, StreamSpec | None]:
    """The preprocessing and injection-stream specs a training_set table was built with (its schema
    metadata): the lens finder trains with exactly those, whatever the profile says now."""
    meta = schema.metadata or {}
    if PREPROCESS_SPEC_KEY not in meta:
        raise InputError(f"{where} records no preprocessing spec: materialize training_set again")
    stream = StreamSpec.from_dict(json.loads(meta[STREAM_SPEC_KEY].decode())) if STREAM_SPEC_KEY in meta else None
    return PreprocessSpec.from_json(meta[PREPROCESS_SPEC_KEY].decode()), stream


def counts_by_split_and_kind(table: pa.Table) -> dict:
    """{'<split>/<kind>': rows} plus {'<split>/injection_host': rows} of a training_set table."""
    out: dict = {}
    split = table.column("split").to_pylist()
    host = (
        pc.is_valid(table.column("invvar")).to_pylist() if "invvar" in table.column_names else [False] * table.num_rows
    )
    for s, k, h in zip(split, table.column("kind").to_pylist(), host):
        out[f"{s}/{k}"] = out.get(f"{s}/{k}", 0) + 1
        if h:
            out[f"{s}/injection_host"] = out.get(f"{s}/injection_host", 0) + 1
    return out
