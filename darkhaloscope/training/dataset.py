"""The epoch dataset: catalog rows plus injections rendered on the fly, augmented and preprocessed.

Determinism without process state: every random choice for a sample (flip, rotation, core dropout,
whether its hard negative is emitted, the shuffle permutation) is a stable hash of
``(seed, epoch, virtual index, purpose)``, and the epoch's injections are the stream keyed
``("train", seed, epoch)`` (``darkhaloscope.lensing.stream``). The same sample therefore gets a
different augmentation each epoch (a fixed per-sample seed lets a network memorise one augmented
set) and the result does not depend on which DataLoader worker fetched it.

An epoch holds, as virtual indices in this order:

* the N catalog rows (real positives, negatives; their label and weight). The negatives include
  every injection host: the paired control of each injection, the same host without the arc, is
  a negative of the same epoch, so a network that separates injections from their own hosts
  cannot lean on the hosts' properties;
* the hard negative of each row having a control (label 0), active with ``hard_negative_prob``;
* M = hosts x ``injections_per_host`` injections of the epoch (host + fresh arc, label 1);
* the M injections' hard negatives, host + azimuthally shuffled arc (label 0), active with
  ``hard_negative_prob``: the arc's flux at the same radii without its tangential shape.

Hard negatives (labelled, extra samples, never relabelled positives): ``control +
azimuthal_shuffle(image - control)`` keeps the arc's flux in each radial bin and its colours and
destroys its shape, so a network must use the shape to reject them.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import InputError
from ..lensing.stream import StreamDraw, add_window, draw_injections
from ..seeding import rng_for, stable_hash64, unit_hash_array
from .data import TrainingArrays
from .preprocess import (
    PreprocessSpec,
    arc_clears_core,
    core_mask,
    dihedral,
    preprocess,
    preprocess_in_batches,
    radial_bins,
)

#: Radial bin width (px) of the azimuthal shuffle used for hard negatives and the hard-negative gate.
SHUFFLE_BIN_PX = 2.0

#: Memory [bytes] the catalog rows' preprocessed stamps may take. A catalog row's network input
#: changes between epochs only by its augmentation, which follows the preprocessing, so up to this
#: size the rows are preprocessed once instead of in every batch of every epoch (the demo's 1,607
#: training rows: 108 MB; an eighth of an epoch's time on 2 CPU cores, BENCHMARKS.md).
PREPROCESSED_ROWS_MAX_BYTES = 1 << 30


def fits_preprocessed(images, spec: PreprocessSpec) -> bool:
    """Whether the float32 network input of stamps ``images`` (N, C, H, W) fits in
    :data:`PREPROCESSED_ROWS_MAX_BYTES`, the bound on stamps kept preprocessed across epochs (the
    training rows here, the validation stamps in the training loop)."""
    n, c, h, _ = images.shape
    return n * spec.out_channels(c) * spec.out_size(h) ** 2 * 4 <= PREPROCESSED_ROWS_MAX_BYTES


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


def hard_negative(
    image: np.ndarray, control: np.ndarray, rng: np.random.Generator, bin_px: float = SHUFFLE_BIN_PX
) -> np.ndarray:
    """``control + azimuthal_shuffle(image - control)``: (C, H, W) float32, to be labelled 0."""
    return (control + azimuthal_shuffle(image - control, rng, bin_px)).astype(np.float32)


class AugmentedStampDataset(torch.utils.data.Dataset):
    """Augmented, preprocessed training samples keyed by (epoch, virtual index) (module docstring).

    With hosts and a stream spec in ``arrays`` (and ``stream`` True), each epoch renders
    ``arrays.stream.injections_per_host`` fresh injections into every host; call :meth:`prepare_epoch` before
    DataLoader workers fork so that they share the epoch's arcs. The catalog rows are preprocessed once
    when the dataset is built, while they fit in :data:`PREPROCESSED_ROWS_MAX_BYTES`. Use :meth:`epoch_plan` for the
    shuffled list of an epoch's virtual indices and fetch batches with ``__getitems__([(epoch, v),
    ...])`` -> (x (B, C, H', W') float32, y (B,) float32, w (B,) float32).
    """

    def __init__(
        self,
        arrays: TrainingArrays,
        spec: PreprocessSpec,
        seed: int,
        augment: bool = True,
        core_dropout_prob: float = 0.0,
        core_dropout_radius: float = 5.0,
        core_dropout_spares_inner_arcs: bool = False,
        hard_negative_prob: float = 0.0,
        stream: bool = True,
        device="cpu",
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
        self.core_dropout_spares_inner_arcs = bool(core_dropout_spares_inner_arcs)
        self.hard_negative_prob = float(hard_negative_prob)
        self.device = device
        self.n = len(arrays)
        self.hn_rows = np.flatnonzero((arrays.control_index >= 0) & (arrays.label == 1))
        self.per_host = (
            arrays.stream.injections_per_host if (stream and arrays.stream is not None and arrays.n_hosts) else 0
        )
        self.m = self.per_host * arrays.n_hosts
        self.host_rows = arrays.host_rows()
        # virtual-index segments: rows, row hard negatives, injections, injection hard negatives
        self.first_injection = self.n + self.hn_rows.size
        self._draw: tuple[int, StreamDraw] | None = None
        size = spec.out_size(arrays.image.shape[-1])
        self._out_shape = (spec.out_channels(arrays.image.shape[1]), size, size)
        self._rows_x = self._preprocess_rows()

    def _preprocess_rows(self) -> torch.Tensor | None:
        """(N, C, H', W') float32 network input of the N catalog rows before augmentation, or None when it
        would exceed PREPROCESSED_ROWS_MAX_BYTES (every batch then preprocesses its rows)."""
        if not self.n or not fits_preprocessed(self.a.image, self.spec):
            return None
        return preprocess_in_batches(self.a.image, self.spec)

    def __len__(self) -> int:
        return self.first_injection + 2 * self.m

    def _u(self, epoch: int, v: np.ndarray, purpose: str) -> np.ndarray:
        return unit_hash_array(v, salt=(self.seed, epoch, purpose))

    def prepare_epoch(self, epoch: int) -> StreamDraw | None:
        """Render (once) and return the injections of ``epoch`` (None without a stream)."""
        if not self.m:
            return None
        if self._draw is None or self._draw[0] != epoch:
            a = self.a
            self._draw = (
                epoch,
                draw_injections(
                    a.host_columns, a.invvar, a.stream, ("train", self.seed, epoch), self.per_host, self.device
                ),
            )
        return self._draw[1]

    def epoch_plan(self, epoch: int) -> np.ndarray:
        """Shuffled virtual indices of ``epoch`` (rows and injections, and the hard negatives active in
        that epoch)."""
        f = self.first_injection
        hn = np.r_[np.arange(self.n, f), np.arange(f + self.m, f + 2 * self.m)].astype(np.int64)
        hn = hn[self._u(epoch, hn, "hard_negative") < self.hard_negative_prob]
        v = np.concatenate([np.arange(self.n, dtype=np.int64), np.arange(f, f + self.m, dtype=np.int64), hn])
        return v[rng_for(self.seed, epoch, "plan").permutation(v.size)]

    def __getitem__(self, key):
        x, y, w = self.__getitems__([key])
        return x[0], y[0], w[0]

    def _raw(self, epoch: int, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(raw stamps (B, 3, H, W) nanomaggies, labels (B,), weights (B,)) of virtual indices ``v``."""
        a, f, m = self.a, self.first_injection, self.m
        raw = np.empty((v.size, *a.image.shape[1:]), np.float32)
        y = np.zeros(v.size, np.float32)
        w = np.ones(v.size, np.float32)
        draw = self.prepare_epoch(epoch) if m and np.any(v >= f) else None
        for j, vi in enumerate(v.tolist()):
            if vi < self.n:
                raw[j], y[j], w[j] = a.image[vi], a.label[vi], a.weight[vi]
            elif vi < f:
                r = self.hn_rows[vi - self.n]
                raw[j] = hard_negative(
                    a.image[r], a.control[a.control_index[r]], rng_for(self.seed, epoch, vi, "shuffle")
                )
            else:
                k = (vi - f) % m
                host = a.image[self.host_rows[draw.host_row[k]]]
                if vi < f + m:
                    raw[j], y[j] = add_window(host[None], draw.arcs[k : k + 1])[0], 1.0
                else:
                    arc = azimuthal_shuffle(draw.arcs[k], rng_for(self.seed, epoch, vi, "shuffle"))
                    raw[j] = add_window(host[None], arc[None])[0]
        return raw, y, w

    def _arc_reaches_core(self, epoch: int, v: np.ndarray) -> np.ndarray:
        """(B,) bool: virtual indices that are injections whose arc reaches into the dropped core
        (their θ_E does not clear it by the host's PSF FWHM, ``arc_clears_core``)."""
        f = self.first_injection
        inj = (v >= f) & (v < f + self.m)
        out = np.zeros(v.size, bool)
        if inj.any():
            draw = self.prepare_epoch(epoch)
            k = v[inj] - f
            psf = self.a.psfsize_r[self.host_rows[draw.host_row[k]]]
            out[inj] = ~arc_clears_core(draw.theta_e_arcsec[k], psf, self.core_dropout_radius)
        return out

    def __getitems__(self, keys):
        epochs = np.array([int(k[0]) for k in keys], dtype=np.int64)
        v = np.array([int(k[1]) for k in keys], dtype=np.int64)
        if np.any((v < 0) | (v >= len(self))):
            raise InputError(f"virtual index out of range 0..{len(self) - 1}")
        if np.unique(epochs).size > 1:
            raise InputError("a batch must come from one epoch (see batches_for_plan)")
        epoch = int(epochs[0]) if epochs.size else 0
        cached = v < self.n
        if self._rows_x is None or not cached.any():
            raw, y, w = self._raw(epoch, v)
            x = preprocess(raw, self.spec)
        else:
            rows, fresh = v[cached], ~cached
            x = torch.empty((v.size, *self._out_shape), dtype=torch.float32)
            y, w = np.empty(v.size, np.float32), np.empty(v.size, np.float32)
            x[torch.from_numpy(cached)], y[cached], w[cached] = (
                self._rows_x[torch.from_numpy(rows)],
                self.a.label[rows],
                self.a.weight[rows],
            )
            if fresh.any():
                raw, y[fresh], w[fresh] = self._raw(epoch, v[fresh])
                x[torch.from_numpy(fresh)] = preprocess(raw, self.spec)
        if self.augment:
            # one hash per (epoch, sample) and purpose; keys vary with the epoch so augmentations do too
            code = np.minimum((self._u(epoch, v, "dihedral") * 8).astype(np.int64), 7)
            x = dihedral(x, torch.from_numpy(code))
            drop = self._u(epoch, v, "core_dropout") < self.core_dropout_prob
            if self.core_dropout_spares_inner_arcs:
                drop &= ~self._arc_reaches_core(epoch, v)
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
