"""Assembly of the training_set table from cutout rows: plain inputs in, an Arrow table out.

Rows: the training catalog's real positives (tier weights, A 1.0 and B 0.5 by default) and
negatives of the train and val splits (test stays untouched), optionally capped at
``negatives_per_positive`` per split. Negatives of the listed host types with a PSF size and some
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
from ..stamps import STAMP_SHAPE, tensor_type, to_tensor_array
from .data import PREPROCESS_SPEC_KEY, STREAM_SPEC_KEY, negatives_per_positive_mask
from .preprocess import PreprocessSpec
#: Splits the training set holds (test is never trained on, nor used to choose a model).
FIT_SPLITS = ("train", "val")
#: Loss weight of a positive by tier: confident (A) lenses count fully, probable (B) ones half,
#: because a share of tier B are not lenses at all.
TIER_WEIGHTS = {"A": 1.0, "B": 0.5}
#: Columns of the cutouts table the training set is built from.
CUTOUT_COLUMNS = tuple(dict.fromkeys(("object_id", "label", "split", "tier", "pool", "psfsize_r", "quality_ok",
                                      "in_training_catalog", *HOST_COLUMNS)))


def training_rows(cutouts: pa.Table) -> pa.Table:
    """The quality-checked training-catalog cutouts of the train and val splits."""
    missing = [c for c in CUTOUT_COLUMNS if c not in cutouts.column_names]
    if missing:
        raise InputError(f"cutouts lack the columns {missing} the training set needs")
    keep = pc.and_(pc.and_(cutouts.column("quality_ok"), cutouts.column("in_training_catalog")),
                   pc.is_in(cutouts.column("split"), pa.array(list(FIT_SPLITS))))
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


def assemble_training_set(rows: pa.Table, images: np.ndarray, invvar: np.ndarray, *, preprocess: PreprocessSpec,
                          stream: StreamSpec | None, tier_weights: dict | None = None, negatives_per_positive: float = 0.0,
                          host_types=("DEV", "SER", "REX", "EXP")) -> pa.Table:
    """The training_set table of cutout ``rows`` (see :func:`training_rows`) with their stamps
    ``images`` and ``invvar`` (N, 3, 101, 101) [nmgy/pixel, 1/nmgy^2]. ``stream`` None: no
    injection hosts (catalog rows only)."""
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
    cols = {"label": pa.array(label, pa.int8()), "weight": pa.array(weight, pa.float32()),
            "kind": pa.array(np.where(label == 1, "real_positive", "negative"), pa.string())}
    table = rows.select([c for c in CUTOUT_COLUMNS if c not in ("label", "quality_ok", "in_training_catalog")])
    for name, col in cols.items():
        table = table.append_column(name, col)
    table = table.append_column("image", to_tensor_array(images)).append_column("invvar", _nullable_tensor(invvar, host))
    meta = {PREPROCESS_SPEC_KEY: preprocess.to_json().encode()}
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
    host = pc.is_valid(table.column("invvar")).to_pylist() if "invvar" in table.column_names else [False] * table.num_rows
    for s, k, h in zip(split, table.column("kind").to_pylist(), host):
        out[f"{s}/{k}"] = out.get(f"{s}/{k}", 0) + 1
        if h:
            out[f"{s}/injection_host"] = out.get(f"{s}/injection_host", 0) + 1
    return out
