"""Training data: the training_set table as in-memory arrays, and the augmented, epoch-aware dataset.

Determinism without process state: every random choice for a sample (flip, rotation, core dropout,
whether its hard negative is emitted, the shuffle permutation) is a stable hash of
``(seed, epoch, virtual index, purpose)``. The same sample therefore gets a different augmentation
each epoch (a fixed per-sample seed made the seed system memorise one augmented set, lesson 50) and
the result does not depend on which DataLoader worker fetched it, so worker sharding cannot duplicate
or reorder randomness (lesson 48).

Labelled hard negatives (seed_system §5 item 4): for an injected positive with a paired control,
``control + azimuthal_shuffle(image - control)`` keeps the arc's flux at the same radii but destroys
its tangential shape; it is emitted as an EXTRA sample with label 0, never as a relabelled positive.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from ..errors import InputError
from ..seeding import rng_for, stable_hash64, unit_hash_array
from ..stamps import STAMP_SHAPE, from_tensor_column
from .inference import validate_stamps
from .preprocess import PreprocessSpec, core_mask, preprocess, radial_bins

SPLITS = ("train", "val", "test")
KINDS = ("real_positive", "injected_positive", "negative")
REQUIRED_COLUMNS = ("object_id", "label", "weight", "split", "kind", "image")
#: Radial bin width (px) of the azimuthal shuffle used for hard negatives and the hard-negative gate.
SHUFFLE_BIN_PX = 2.0


@dataclass
class TrainingArrays:
    """Rows of the training_set table as numpy arrays (row i of every field is the same object).

    image: (N, 3, H, W) float32 nanomaggies. label: (N,) int8 0/1. weight: (N,) float32 loss weight.
    control: (M, 3, H, W) float32 paired hosts without the arc; control_index: (N,) int64 row of
    ``control`` for row i, or -1. kind/tier/pool/split: (N,) str ('' where null).
    theta_e_arcsec, psfsize_r: (N,) float32 arcsec (NaN where null).
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
    source: str = "<arrays>"
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def subset(self, rows: np.ndarray) -> "TrainingArrays":
        """The rows ``rows`` (int indices or bool mask), with controls re-indexed compactly."""
        rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows, dtype=np.int64)
        ci = self.control_index[rows]
        has = ci >= 0
        new_ci = np.full(rows.shape, -1, dtype=np.int64)
        new_ci[has] = np.arange(int(has.sum()))
        return TrainingArrays(
            object_id=self.object_id[rows],
            image=self.image[rows],
            label=self.label[rows],
            weight=self.weight[rows],
            kind=self.kind[rows],
            split=self.split[rows],
            tier=self.tier[rows],
            pool=self.pool[rows],
            theta_e_arcsec=self.theta_e_arcsec[rows],
            psfsize_r=self.psfsize_r[rows],
            control=self.control[ci[has]],
            control_index=new_ci,
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


def negatives_per_positive_mask(label: np.ndarray, split: np.ndarray, object_id: np.ndarray, ratio: float) -> np.ndarray:
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


def _read_table(path_or_table, columns=None) -> tuple[pa.Table, str]:
    if isinstance(path_or_table, pa.Table):
        return path_or_table, "<table>"
    src = str(path_or_table)
    if src.startswith("s3://"):
        from pyarrow import fs as pafs

        s3 = pafs.S3FileSystem(endpoint_override=os.environ.get("DHS_S3_ENDPOINT") or None)
        return pq.read_table(src[len("s3://") :], filesystem=s3, columns=columns), src
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


def load_training_set(path_or_table, on_invalid: str = "raise") -> TrainingArrays:
    """Read the training_set table (a Parquet file, a folder of them, an s3:// URI or a pa.Table).

    Stamps load through darkhaloscope.stamps.from_tensor_column (no per-row Python). Validates the
    columns, labels, splits, kinds and weights, and the stamps themselves: a stamp with a non-finite
    pixel or an all-zero band (a failed cutout, lesson 24/72) raises InputError naming the object ids,
    or with ``on_invalid='drop'`` is dropped and its object_id recorded in ``meta['dropped_object_ids']``.
    """
    if on_invalid not in ("raise", "drop"):
        raise InputError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    table, src = _read_table(path_or_table)
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise InputError(f"training set {src}: missing columns {missing}")
    for col in ("object_id", "label", "weight", "split", "kind"):
        if table[col].null_count:
            raise InputError(f"training set {src}: column {col!r} has {table[col].null_count} nulls")
    label = table["label"].to_numpy().astype(np.int8)
    if not np.all((label == 0) | (label == 1)):
        raise InputError(f"training set {src}: column 'label' holds values other than 0/1: {sorted(set(np.unique(label)) - {0, 1})}")
    weight = table["weight"].cast(pa.float32()).to_numpy()
    if not np.all(np.isfinite(weight) & (weight >= 0)):
        raise InputError(f"training set {src}: column 'weight' has negative or non-finite values")
    split = _str_col(table, "split")
    bad = set(np.unique(split)) - set(SPLITS)
    if bad:
        raise InputError(f"training set {src}: column 'split' has unknown values {sorted(bad)}")
    kind = _str_col(table, "kind")
    bad = set(np.unique(kind)) - set(KINDS)
    if bad:
        raise InputError(f"training set {src}: column 'kind' has unknown values {sorted(bad)}")
    if np.any((kind == "negative") != (label == 0)):
        raise InputError(f"training set {src}: 'kind' and 'label' disagree (negatives must have label 0)")
    image = from_tensor_column(table["image"], expected_shape=None, name="image")
    if image.ndim != 4 or image.shape[1] != STAMP_SHAPE[0]:
        raise InputError(f"training set {src}: column 'image' holds stamps of shape {image.shape[1:]}, expected (3, H, W)")
    n = table.num_rows
    ci = np.full(n, -1, dtype=np.int64)
    control = np.zeros((0, *image.shape[1:]), dtype=np.float32)
    if "control" in table.column_names:
        valid = pc.is_valid(table["control"])
        rows = np.flatnonzero(valid.to_numpy(zero_copy_only=False))
        if rows.size:
            control = from_tensor_column(table["control"].filter(valid), expected_shape=image.shape[1:], name="control")
            ci[rows] = np.arange(rows.size)
    arrays = TrainingArrays(
        object_id=table["object_id"].to_numpy().astype(np.int64),
        image=image,
        label=label,
        weight=weight,
        kind=kind,
        split=split,
        tier=_str_col(table, "tier"),
        pool=_str_col(table, "pool"),
        theta_e_arcsec=_float_col(table, "theta_e_arcsec"),
        psfsize_r=_float_col(table, "psfsize_r"),
        control=control,
        control_index=ci,
        source=src,
    )
    ok, reason = validate_stamps(image)
    if control.shape[0]:
        cok, _ = validate_stamps(control)
        ok[ci >= 0] &= cok[ci[ci >= 0]]
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


# ----------------------------------------------------------------------------- augmentation


def dihedral(x: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """Apply one of the 8 flips/90° rotations per image. x (N, C, H, W) square; code (N,) int in 0..7
    (bits 0-1: number of 90° rotations, bit 2: horizontal flip)."""
    out = x.clone()
    for c in range(8):
        sel = torch.nonzero(code == c).flatten()
        if sel.numel() == 0 or c == 0:
            continue
        y = x[sel]
        if c & 4:
            y = torch.flip(y, dims=(-1,))
        out[sel] = torch.rot90(y, k=c & 3, dims=(-2, -1))
    return out


def azimuthal_shuffle(x: np.ndarray, rng: np.random.Generator, bin_px: float = SHUFFLE_BIN_PX) -> np.ndarray:
    """Permute the pixels of (C, H, W) ``x`` within radial bins of ``bin_px`` px, the same permutation
    for every band: the radial profile per band (and colours) is kept, the tangential shape is destroyed."""
    c, h, w = x.shape
    b = radial_bins(h, w, bin_px).ravel()
    key = b + rng.random(b.size)  # sort key stays inside each bin: bin + U[0, 1)
    src = np.argsort(key, kind="stable")
    dst = np.argsort(b, kind="stable")
    flat = x.reshape(c, h * w)
    out = np.empty_like(flat)
    out[:, dst] = flat[:, src]
    return out.reshape(c, h, w)


def hard_negative(image: np.ndarray, control: np.ndarray, rng: np.random.Generator, bin_px: float = SHUFFLE_BIN_PX) -> np.ndarray:
    """``control + azimuthal_shuffle(image - control)``: (C, H, W) float32, to be labelled 0."""
    return (control + azimuthal_shuffle(image - control, rng, bin_px)).astype(np.float32)


class AugmentedStampDataset(torch.utils.data.Dataset):
    """Augmented, preprocessed training samples keyed by (epoch, virtual index).

    Virtual indices 0..N-1 are the rows; N+k is the hard negative of the k-th row having a control
    (active in an epoch with probability ``hard_negative_prob``, decided by a stable hash). Use
    :meth:`epoch_plan` for the shuffled list of an epoch's virtual indices and fetch batches with
    ``__getitems__([(epoch, v), ...])`` -> (x (B, C, H', W') float32, y (B,) float32, w (B,) float32).
    """

    def __init__(
        self,
        arrays: TrainingArrays,
        spec: PreprocessSpec,
        seed: int,
        augment: bool = True,
        core_dropout_prob: float = 0.0,
        core_dropout_radius: float = 5.0,
        hard_negative_prob: float = 0.0,
    ):
        for name, p in (("core_dropout_prob", core_dropout_prob), ("hard_negative_prob", hard_negative_prob)):
            if not 0.0 <= p <= 1.0:
                raise InputError(f"{name} must be in [0, 1], got {p}")
        if arrays.image.shape[-1] != arrays.image.shape[-2]:
            raise InputError(f"{arrays.source}: stamps must be square for rotations, got {arrays.image.shape[-2:]}")
        self.a = arrays
        self.spec = spec
        self.seed = int(seed)
        self.augment = augment
        self.core_dropout_prob = float(core_dropout_prob)
        self.core_dropout_radius = float(core_dropout_radius)
        self.hard_negative_prob = float(hard_negative_prob)
        self.n = len(arrays)
        self.hn_rows = np.flatnonzero((arrays.control_index >= 0) & (arrays.label == 1))

    def __len__(self) -> int:
        return self.n + self.hn_rows.size

    def _u(self, epoch: int, v: np.ndarray, purpose: str) -> np.ndarray:
        return unit_hash_array(v, salt=(self.seed, epoch, purpose))

    def epoch_plan(self, epoch: int) -> np.ndarray:
        """Shuffled virtual indices of ``epoch`` (rows plus the hard negatives active in that epoch)."""
        hn = np.arange(self.n, self.n + self.hn_rows.size, dtype=np.int64)
        hn = hn[self._u(epoch, hn, "hard_negative") < self.hard_negative_prob]
        v = np.concatenate([np.arange(self.n, dtype=np.int64), hn])
        return v[rng_for(self.seed, epoch, "plan").permutation(v.size)]

    def __getitem__(self, key):
        x, y, w = self.__getitems__([key])
        return x[0], y[0], w[0]

    def __getitems__(self, keys):
        epochs = np.array([int(k[0]) for k in keys], dtype=np.int64)
        v = np.array([int(k[1]) for k in keys], dtype=np.int64)
        if np.any((v < 0) | (v >= len(self))):
            raise InputError(f"virtual index out of range 0..{len(self) - 1}")
        is_hn = v >= self.n
        rows = np.where(is_hn, self.hn_rows[np.clip(v - self.n, 0, max(self.hn_rows.size - 1, 0))] if self.hn_rows.size else 0, v)
        raw = self.a.image[rows]  # fancy indexing copies; hard negatives overwrite their rows below
        for j in np.flatnonzero(is_hn):
            r = rows[j]
            raw[j] = hard_negative(self.a.image[r], self.a.control[self.a.control_index[r]], rng_for(self.seed, int(epochs[j]), int(v[j]), "shuffle"))
        y = np.where(is_hn, 0.0, self.a.label[rows].astype(np.float32)).astype(np.float32)
        w = np.where(is_hn, 1.0, self.a.weight[rows]).astype(np.float32)
        x = preprocess(raw, self.spec)
        if self.augment:
            # one hash per (epoch, sample) and purpose; keys vary with the epoch so augmentations do too
            code = np.empty(v.size, dtype=np.int64)
            drop = np.empty(v.size, dtype=bool)
            for e in np.unique(epochs):
                m = epochs == e
                code[m] = np.minimum((self._u(int(e), v[m], "dihedral") * 8).astype(np.int64), 7)
                drop[m] = self._u(int(e), v[m], "core_dropout") < self.core_dropout_prob
            x = dihedral(x, torch.from_numpy(code))
            if drop.any():
                h, wd = x.shape[-2:]
                core = torch.from_numpy(core_mask(h, wd, self.core_dropout_radius))
                # zero is the annulus median after normalisation: the core looks like empty sky
                x[torch.from_numpy(drop)] = x[torch.from_numpy(drop)].masked_fill(core, 0.0)
        return x, torch.from_numpy(y), torch.from_numpy(w)


def collate_prebatched(batch):
    """DataLoader collate_fn for datasets whose ``__getitems__`` already returns a batch."""
    return batch


def batches_for_plan(plan: np.ndarray, epoch: int, batch_size: int, min_last: int = 2) -> list[list[tuple[int, int]]]:
    """Split an epoch plan into batches of (epoch, virtual index) keys; a final batch smaller than
    ``min_last`` is dropped (BatchNorm cannot train on one sample)."""
    out = [[(epoch, int(v)) for v in plan[i : i + batch_size]] for i in range(0, plan.size, batch_size)]
    if out and len(out[-1]) < min_last:
        out.pop()
    return out


def seed_int(*keys) -> int:
    """A 63-bit integer seed from a stable hash of ``keys`` (for torch.manual_seed)."""
    return stable_hash64(*keys) & 0x7FFF_FFFF_FFFF_FFFF


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
    control = host[:, None] * host_colour[None, :, None, None] + rng.standard_normal((n, 3, size, size)).astype(np.float32)
    image = control.copy()
    if mode == "arc":
        half = (size - 1) / 2.0
        rad = rng.uniform(0.44, 0.53, n) * half
        ang = rng.uniform(-np.pi, np.pi, n)
        dphi = np.angle(np.exp(1j * (phi[None] - ang[:, None, None])))
        arc = np.exp(-0.5 * ((r[None] - rad[:, None, None]) / 0.8) ** 2) * (np.abs(dphi) < np.pi / 3)
        arc_colour = np.array([1.2, 1.0, 0.7], np.float32)  # blue source
        image += (label[:, None, None, None] * arc_amplitude * arc[:, None] * arc_colour[None, :, None, None]).astype(np.float32)
    ctrl = np.where((label == 1)[:, None, None, None], control, np.nan) if mode == "arc" else None
    split = np.where(rng.random(n) < 0.7, "train", "val").astype(object)
    return make_arrays(image.astype(np.float32), label, control=ctrl, split=split,
                       tier=np.where(label == 1, np.where(rng.random(n) < 0.5, "A", "B"), "").astype(object))
