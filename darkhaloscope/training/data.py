"""Training data: the training_set table as in-memory arrays (real positives, catalog negatives and
the injection hosts with their inverse variance), synthetic data for tests and benchmarks.

The training set stores no rendered injections: its negatives marked ``host`` carry their inverse
variance and the host columns the injection engine reads, and its schema metadata carries the
injection stream's spec (``darkhaloscope.lensing.stream.StreamSpec``), from which training draws
fresh arcs every epoch (see ``dataset``) and a fixed validation set (``validation_arrays``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InputError
from ..lensing.bank import HOST_COLUMNS
from ..lensing.stream import StreamDraw, StreamSpec, add_window, draw_injections
from ..seeding import rng_for, unit_hash_array
from ..stamps import STAMP_SHAPE, from_tensor_column
from .inference import validate_stamps

SPLITS = ("train", "val", "test")
#: Row kinds: catalog rows (real positives, negatives) and, in validation arrays, the stream's
#: injections (whose paired controls, their hosts, are negatives of the same set).
KINDS = ("real_positive", "injected_positive", "negative")
REQUIRED_COLUMNS = ("object_id", "label", "weight", "split", "kind", "image")
#: Schema-metadata keys of the injection stream's and the preprocessing specs in the training_set table.
STREAM_SPEC_KEY = b"dhs.injection_stream"
PREPROCESS_SPEC_KEY = b"dhs.preprocess_spec"


@dataclass
class TrainingArrays:
    """Rows of the training_set table as numpy arrays (row i of every per-row field is the same object).

    image: (N, 3, H, W) float32 nanomaggies. label: (N,) int8 0/1. weight: (N,) float32 loss weight.
    control: (M, 3, H, W) float32 paired hosts without the arc; control_index: (N,) int64 row of
    ``control`` for row i, or -1. kind/tier/pool/split: (N,) str ('' where null).
    theta_e_arcsec, arc_snr, psfsize_r: (N,) float32 (arcsec, r-band S/N; NaN where not an injection).
    Injection hosts: host_index (N,) int64 row of ``invvar`` and ``host_columns`` for a host, else
    -1; invvar (K, 3, H, W) float32 [1/nmgy^2]; host_columns: pa.Table of HOST_COLUMNS (K rows).
    stream: the spec of the injection stream these hosts feed (None: no injections).
    """

    object_id: np.ndarray
    image: np.ndarray
    label: np.ndarray
    weight: np.ndarray
    kind: np.ndarray
    split: np.ndarray
    tier: np.ndarray
    pool: np.ndarray
    theta_e_arcsec: np.ndarray
    psfsize_r: np.ndarray
    control: np.ndarray
    control_index: np.ndarray
    arc_snr: np.ndarray | None = None
    host_index: np.ndarray | None = None
    invvar: np.ndarray | None = None
    host_columns: pa.Table | None = None
    stream: StreamSpec | None = None
    source: str = "<arrays>"
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self)
        if self.arc_snr is None:
            self.arc_snr = np.full(n, np.nan, np.float32)
        if self.host_index is None:
            self.host_index = np.full(n, -1, np.int64)
            self.invvar = np.zeros((0, *self.image.shape[1:]), np.float32)
            self.host_columns = None

    def __len__(self) -> int:
        return int(self.label.shape[0])

    @property
    def n_hosts(self) -> int:
        return int((self.host_index >= 0).sum())

    def subset(self, rows: np.ndarray) -> "TrainingArrays":
        """The rows ``rows`` (int indices or bool mask), with controls and hosts re-indexed compactly."""
        rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows, dtype=np.int64)
        per_row = {
            f.name: getattr(self, f.name)[rows]
            for f in fields(self)
            if isinstance(getattr(self, f.name), np.ndarray)
            and f.name not in ("control", "invvar")
            and getattr(self, f.name).shape[:1] == (len(self),)
        }
        ci, hi = self.control_index[rows], self.host_index[rows]
        per_row["control_index"] = _compact(ci)
        per_row["host_index"] = _compact(hi)
        hosts = hi[hi >= 0]
        return TrainingArrays(
            **per_row,
            control=self.control[ci[ci >= 0]],
            invvar=self.invvar[hosts],
            host_columns=None
            if self.host_columns is None or not hosts.size
            else self.host_columns.take(pa.array(hosts)),
            stream=self.stream,
            source=self.source,
            meta=dict(self.meta),
        )

    def split_rows(self, split: str) -> "TrainingArrays":
        if split not in SPLITS:
            raise InputError(f"unknown split {split!r}; expected one of {SPLITS}")
        return self.subset(self.split == split)

    def controls_for(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows), 3, H, W) controls of ``rows``, which must all have one."""
        ci = self.control_index[rows]
        if np.any(ci < 0):
            raise InputError(f"{self.source}: rows without a control were asked for their control")
        return self.control[ci]

    def host_rows(self) -> np.ndarray:
        """Row index of each host, in host order (row ``host_rows()[k]`` is host k)."""
        rows = np.flatnonzero(self.host_index >= 0)
        return rows[np.argsort(self.host_index[rows], kind="stable")]


def _compact(index: np.ndarray) -> np.ndarray:
    out = np.full(index.shape, -1, dtype=np.int64)
    has = index >= 0
    out[has] = np.arange(int(has.sum()))
    return out


def make_arrays(
    image: np.ndarray,
    label: np.ndarray,
    weight: np.ndarray | None = None,
    control: np.ndarray | None = None,
    kind: np.ndarray | None = None,
    tier: np.ndarray | None = None,
    split: np.ndarray | None = None,
    object_id: np.ndarray | None = None,
) -> TrainingArrays:
    """TrainingArrays from plain arrays (synthetic data, tests, benchmarks).

    control: optional (N, 3, H, W); an all-NaN row means "no control". Rows with a control are the
    injected positives' pairs (paired hosts without the arc).
    """
    image = np.ascontiguousarray(image, dtype=np.float32)
    n = image.shape[0]
    label = np.asarray(label, dtype=np.int8)
    ci = np.full(n, -1, dtype=np.int64)
    ctrl = np.zeros((0, *image.shape[1:]), dtype=np.float32)
    if control is not None:
        control = np.asarray(control, dtype=np.float32)
        has = ~np.all(np.isnan(control.reshape(n, -1)), axis=1)
        ci[has] = np.arange(int(has.sum()))
        ctrl = np.ascontiguousarray(control[has])
    if kind is None:
        kind = np.where(label == 1, np.where(ci >= 0, "injected_positive", "real_positive"), "negative")
    empty = np.full(n, "", dtype=object)
    return TrainingArrays(
        object_id=np.arange(n, dtype=np.int64) if object_id is None else np.asarray(object_id, dtype=np.int64),
        image=image,
        label=label,
        weight=np.ones(n, np.float32) if weight is None else np.asarray(weight, dtype=np.float32),
        kind=np.asarray(kind, dtype=object),
        split=np.full(n, "train", dtype=object) if split is None else np.asarray(split, dtype=object),
        tier=empty.copy() if tier is None else np.asarray(tier, dtype=object),
        pool=empty.copy(),
        theta_e_arcsec=np.full(n, np.nan, np.float32),
        psfsize_r=np.full(n, np.nan, np.float32),
        control=ctrl,
        control_index=ci,
    )


def with_hosts(
    arrays: TrainingArrays, rows: np.ndarray, invvar: np.ndarray, host_columns: pa.Table, stream: StreamSpec
) -> TrainingArrays:
    """``arrays`` whose rows ``rows`` host the injections of ``stream`` (invvar (K, 3, H, W) and
    host_columns, K rows with HOST_COLUMNS, in the order of ``rows``)."""
    rows = np.asarray(rows, dtype=np.int64)
    if invvar.shape != (rows.size, *arrays.image.shape[1:]) or host_columns.num_rows != rows.size:
        raise InputError(
            f"hosts: {rows.size} rows, invvar {invvar.shape} and {host_columns.num_rows} host columns disagree"
        )
    if np.any(arrays.label[rows] != 0):
        raise InputError("injection hosts must be negatives (label 0)")
    hi = np.full(len(arrays), -1, np.int64)
    hi[rows] = np.arange(rows.size)
    return replace(
        arrays, host_index=hi, invvar=np.ascontiguousarray(invvar, np.float32), host_columns=host_columns, stream=stream
    )


def negatives_per_positive_mask(
    label: np.ndarray, split: np.ndarray, object_id: np.ndarray, ratio: float
) -> np.ndarray:
    """Rows to keep so that each split has at most ``ratio`` negatives (label 0) per positive.

    Every positive is kept; within a split the negatives kept are those of lowest stable hash of
    ``object_id`` (deterministic, independent of row order). ``ratio <= 0`` keeps every row.
    """
    label, split, object_id = np.asarray(label), np.asarray(split, dtype=object), np.asarray(object_id, dtype=np.int64)
    keep = np.ones(len(label), dtype=bool)
    if ratio <= 0:
        return keep
    h = unit_hash_array(object_id, salt="training-set-class-ratio")
    for s in np.unique(split):
        neg = np.flatnonzero((split == s) & (label == 0))
        cap = int(np.floor(ratio * int(((split == s) & (label == 1)).sum())))
        if len(neg) > cap:
            keep[neg[np.lexsort((object_id[neg], h[neg]))[cap:]]] = False
    return keep


def _read_table(path_or_table, columns=None, filesystem=None) -> tuple[pa.Table, str]:
    if isinstance(path_or_table, pa.Table):
        return path_or_table, "<table>"
    src = str(path_or_table)
    if filesystem is not None:
        return pq.read_table(src.split("://", 1)[-1], filesystem=filesystem, columns=columns), src
    if src.startswith("s3://"):
        raise InputError(f"training set {src!r} is on S3: pass the filesystem it lives on (the lake's)")
    if not os.path.exists(src):
        raise InputError(f"training set {src!r} does not exist")
    return pq.read_table(src, columns=columns), src


def _str_col(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, "", dtype=object)
    return np.asarray(pc.fill_null(table[name].cast(pa.string()), "").to_numpy(zero_copy_only=False), dtype=object)


def _float_col(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan, np.float32)
    return pc.fill_null(table[name].cast(pa.float32()), float("nan")).to_numpy(zero_copy_only=False)


def _nullable_stamps(table: pa.Table, name: str, shape) -> tuple[np.ndarray, np.ndarray]:
    """(stamps of the non-null rows, (N,) int64 index into them or -1) of a nullable tensor column."""
    index = np.full(table.num_rows, -1, dtype=np.int64)
    if name not in table.column_names:
        return np.zeros((0, *shape), np.float32), index
    valid = pc.is_valid(table[name])
    rows = np.flatnonzero(valid.to_numpy(zero_copy_only=False))
    if not rows.size:
        return np.zeros((0, *shape), np.float32), index
    index[rows] = np.arange(rows.size)
    return from_tensor_column(table[name].filter(valid), expected_shape=shape, name=name), index


def _validate_columns(table: pa.Table, src: str) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise InputError(f"training set {src}: missing columns {missing}")
    for col in ("object_id", "label", "weight", "split", "kind"):
        if table[col].null_count:
            raise InputError(f"training set {src}: column {col!r} has {table[col].null_count} nulls")
    label = table["label"].to_numpy()
    if not np.all((label == 0) | (label == 1)):
        raise InputError(
            f"training set {src}: column 'label' holds values other than 0/1: {sorted(set(np.unique(label)) - {0, 1})}"
        )
    weight = table["weight"].cast(pa.float32()).to_numpy()
    if not np.all(np.isfinite(weight) & (weight >= 0)):
        raise InputError(f"training set {src}: column 'weight' has negative or non-finite values")
    for col, allowed in (("split", SPLITS), ("kind", KINDS)):
        bad = set(np.unique(_str_col(table, col))) - set(allowed)
        if bad:
            raise InputError(f"training set {src}: column {col!r} has unknown values {sorted(bad)}")
    if np.any((_str_col(table, "kind") == "negative") != (label == 0)):
        raise InputError(f"training set {src}: 'kind' and 'label' disagree (negatives must have label 0)")


def _stream_spec(table: pa.Table, src: str) -> StreamSpec | None:
    meta = table.schema.metadata or {}
    if STREAM_SPEC_KEY not in meta:
        return None
    try:
        return StreamSpec.from_dict(json.loads(meta[STREAM_SPEC_KEY].decode()))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"training set {src}: injection stream spec is not valid JSON: {exc}") from exc


def load_training_set(path_or_table, on_invalid: str = "raise", filesystem=None) -> TrainingArrays:
    """Read the training_set table (a Parquet file, a folder of them, an s3:// URI or a pa.Table);
    ``filesystem``: the pyarrow filesystem of the URI (an s3:// URI needs it: the caller's
    ``S3FileSystem`` with its endpoint).

    Stamps load through darkhaloscope.stamps.from_tensor_column (no per-row Python). Validates the
    columns, labels, splits, kinds and weights, and the stamps themselves: a stamp with a non-finite
    pixel or an all-zero band (a failed cutout) raises InputError naming the object ids, or with
    ``on_invalid='drop'`` is dropped and its object_id recorded in ``meta['dropped_object_ids']``.
    Rows with a non-null ``invvar`` are injection hosts (with the HOST_COLUMNS the engine reads).
    """
    if on_invalid not in ("raise", "drop"):
        raise InputError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    table, src = _read_table(path_or_table, filesystem=filesystem)
    _validate_columns(table, src)
    image = from_tensor_column(table["image"], expected_shape=None, name="image")
    if image.ndim != 4 or image.shape[1] != STAMP_SHAPE[0]:
        raise InputError(
            f"training set {src}: column 'image' holds stamps of shape {image.shape[1:]}, expected (3, H, W)"
        )
    control, ci = _nullable_stamps(table, "control", image.shape[1:])
    invvar, hi = _nullable_stamps(table, "invvar", image.shape[1:])
    stream = _stream_spec(table, src)
    host_columns = None
    if (hi >= 0).any():
        missing = [c for c in HOST_COLUMNS if c not in table.column_names]
        if missing or stream is None:
            raise InputError(
                f"training set {src}: injection hosts need the columns {missing} and an injection stream spec"
            )
        host_columns = table.select(list(HOST_COLUMNS)).filter(pa.array(hi >= 0))
    arrays = TrainingArrays(
        object_id=table["object_id"].to_numpy().astype(np.int64),
        image=image,
        label=table["label"].to_numpy().astype(np.int8),
        weight=table["weight"].cast(pa.float32()).to_numpy(),
        kind=_str_col(table, "kind"),
        split=_str_col(table, "split"),
        tier=_str_col(table, "tier"),
        pool=_str_col(table, "pool"),
        theta_e_arcsec=_float_col(table, "theta_e_arcsec"),
        psfsize_r=_float_col(table, "psfsize_r"),
        control=control,
        control_index=ci,
        arc_snr=_float_col(table, "arc_snr"),
        host_index=hi,
        invvar=invvar,
        host_columns=host_columns,
        stream=stream,
        source=src,
    )
    meta = table.schema.metadata or {}
    if PREPROCESS_SPEC_KEY in meta:
        arrays.meta["preprocess_spec"] = json.loads(meta[PREPROCESS_SPEC_KEY].decode())
    if arrays.n_hosts and np.any(arrays.label[hi >= 0] != 0):
        raise InputError(f"training set {src}: injection hosts (rows with invvar) must be negatives")
    ok, reason = validate_stamps(image)
    if control.shape[0]:
        ok[ci >= 0] &= validate_stamps(control)[0][ci[ci >= 0]]
    if not ok.all():
        bad_ids = arrays.object_id[~ok]
        if on_invalid == "raise":
            raise InputError(
                f"training set {src}: {bad_ids.size} stamps (or their controls) are unusable "
                f"(non-finite pixels or an all-zero band), e.g. object_id {bad_ids[:5].tolist()} "
                f"({[r for r in reason[~ok][:5]]})"
            )
        arrays = arrays.subset(ok)
        arrays.meta["dropped_object_ids"] = bad_ids.tolist()
    return arrays


def injected_arrays(arrays: TrainingArrays, draw: StreamDraw) -> TrainingArrays:
    """The injections of ``draw`` into the hosts of ``arrays`` as TrainingArrays (label 1), each with
    its paired control (the host without the arc) as its ``control``. Injections get object_id
    -(k + 1) for draw row k (never a catalog id)."""
    rows = arrays.host_rows()[draw.host_row]
    hosts = arrays.image[rows]
    n = len(draw)
    out = make_arrays(
        add_window(hosts, draw.arcs),
        np.ones(n, np.int8),
        control=hosts,
        kind=np.full(n, "injected_positive", object),
        split=arrays.split[rows],
        object_id=-(np.arange(n, dtype=np.int64) + 1),
    )
    out.theta_e_arcsec = draw.theta_e_arcsec.astype(np.float32)
    out.arc_snr = draw.arc_snr.astype(np.float32)
    out.psfsize_r = arrays.psfsize_r[rows].astype(np.float32)
    out.source = arrays.source
    return out


def concat_arrays(parts: list[TrainingArrays]) -> TrainingArrays:
    """Rows of ``parts`` one after the other (controls re-indexed; hosts are not carried)."""
    offsets = np.cumsum([0] + [p.control.shape[0] for p in parts[:-1]])
    ci = np.concatenate([np.where(p.control_index >= 0, p.control_index + o, -1) for p, o in zip(parts, offsets)])
    cat = {
        name: np.concatenate([getattr(p, name) for p in parts])
        for name in (
            "object_id",
            "image",
            "label",
            "weight",
            "kind",
            "split",
            "tier",
            "pool",
            "theta_e_arcsec",
            "psfsize_r",
            "arc_snr",
        )
    }
    return TrainingArrays(
        **cat,
        control=np.concatenate([p.control for p in parts]),
        control_index=ci,
        source=parts[0].source,
        meta=dict(parts[0].meta),
    )


#: Stream key of the fixed validation injections (independent of the training seed, so every
#: run on the same training set selects its epoch on the same validation set).
VAL_STREAM_KEY = ("val",)


def validation_arrays(val: TrainingArrays, device="cpu") -> TrainingArrays:
    """The validation set of model selection, gates and calibration: the val split's catalog rows
    (whose negatives are the hosts, i.e. the paired controls) plus, when it has injection hosts, the
    stream's fixed validation injections into them. The same training set always gives the same
    validation set."""
    if not val.n_hosts or val.stream is None:
        return val
    draw = draw_injections(
        val.host_columns, val.invvar, val.stream.validation, VAL_STREAM_KEY, val.stream.val_injections_per_host, device
    )
    return concat_arrays([val, injected_arrays(val, draw)])


def synthetic_arrays(
    n: int,
    size: int = 33,
    seed: object = 0,
    mode: str = "arc",
    arc_amplitude: float = 3.0,
    positive_fraction: float = 0.5,
) -> TrainingArrays:
    """Synthetic stamps with a known, learnable signal (tests, benchmarks, smoke runs).

    Every stamp is unit-variance noise (per band) plus a centred Gaussian host of random brightness.
    mode 'arc': positives add a tangential arc (120°, radius 0.44–0.53 of the half-width: on 33 px
    stamps between the r < 5 px core and the normalisation annulus; Gaussian radial width 0.8 px; bluer than
    the host) and carry their control (the same stamp without the arc). mode 'core': positives differ
    only by a 2x brighter host core (a planted shortcut), and carry no control. Units are arbitrary
    flux per pixel (think nanomaggies); images (n, 3, size, size) float32.
    """
    if mode not in ("arc", "core"):
        raise InputError(f"synthetic mode must be 'arc' or 'core', got {mode!r}")
    rng = rng_for("synthetic_arrays", seed, n, size, mode)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) - (size - 1) / 2.0
    r = np.hypot(yy, xx)
    phi = np.arctan2(yy, xx)
    label = (rng.random(n) < positive_fraction).astype(np.int8)
    host_amp = rng.uniform(2.0, 8.0, n).astype(np.float32)
    host_sigma = rng.uniform(1.5, 2.5, n).astype(np.float32)
    if mode == "core":
        host_amp = np.where(label == 1, 2.0 * host_amp, host_amp).astype(np.float32)
    host = host_amp[:, None, None] * np.exp(-0.5 * (r[None] / host_sigma[:, None, None]) ** 2)
    host_colour = np.array([0.5, 1.0, 1.4], np.float32)  # red host: g < r < z
    control = host[:, None] * host_colour[None, :, None, None] + rng.standard_normal((n, 3, size, size)).astype(
        np.float32
    )
    image = control.copy()
    if mode == "arc":
        half = (size - 1) / 2.0
        rad = rng.uniform(0.44, 0.53, n) * half
        ang = rng.uniform(-np.pi, np.pi, n)
        dphi = np.angle(np.exp(1j * (phi[None] - ang[:, None, None])))
        arc = np.exp(-0.5 * ((r[None] - rad[:, None, None]) / 0.8) ** 2) * (np.abs(dphi) < np.pi / 3)
        arc_colour = np.array([1.2, 1.0, 0.7], np.float32)  # blue source
        image += (label[:, None, None, None] * arc_amplitude * arc[:, None] * arc_colour[None, :, None, None]).astype(
            np.float32
        )
    ctrl = np.where((label == 1)[:, None, None, None], control, np.nan) if mode == "arc" else None
    split = np.where(rng.random(n) < 0.7, "train", "val").astype(object)
    return make_arrays(
        image.astype(np.float32),
        label,
        control=ctrl,
        split=split,
        tier=np.where(label == 1, np.where(rng.random(n) < 0.5, "A", "B"), "").astype(object),
    )
