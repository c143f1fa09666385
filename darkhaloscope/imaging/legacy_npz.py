"""Decoder for stamp blobs of the earlier DR10 lens-finding pipeline: NPZ archives in Parquet rows.

Formats met in the old Parquet/NPZ outputs, all in nanomaggies per pixel:

- ``image_g``, ``image_r``, ``image_z``: one (H, W) array per band; any band may be missing
  (r-only stamps exist, and assuming three bands raises a bare KeyError on them), so the decoder
  returns the bands present and their bandset.
- ``img``: a legacy single array, (C, H, W) or (H, W, C) or (H, W) holding ``legacy_img_bands``.
- ``cutout``: the later per-galaxy NPZ files' (H, W, 3) HWC array, channels g, r, z.

A blob may be gzip-wrapped around the NPZ (magic ``1f 8b``). Nothing is ever unpickled.
"""

from __future__ import annotations

import gzip
import io
import zipfile
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..constants import BANDS
from ..errors import InputError

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_BAND_KEYS = tuple((b, f"image_{b}") for b in BANDS)
_GRZ = "".join(BANDS)


def _as_bytes(blob, name: str) -> bytes:
    if isinstance(blob, (bytes, bytearray, memoryview)):
        data = bytes(blob)
    else:
        raise InputError(f"{name}: expected bytes, got {type(blob).__name__}")
    if not data:
        raise InputError(f"{name}: empty blob")
    return data


def _check_band_array(a, key: str, name: str) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        # NpzFile hands back raw bytes for members that are not .npy files.
        raise InputError(f"{name}: member {key!r} is not a .npy array")
    if a.dtype.kind not in "fiu":
        raise InputError(f"{name}: array {key!r} has dtype {a.dtype}, expected a real number type")
    return a.astype(np.float32, copy=False)


def _bandset_of(bands: str, name: str) -> str:
    if (
        not bands
        or any(b not in _GRZ for b in bands)
        or len(set(bands)) != len(bands)
        or "".join(b for b in _GRZ if b in bands) != bands
    ):
        raise InputError(f"{name}: bandset {bands!r} is not a subset of {_GRZ!r} in that order")
    return bands


def _npz_arrays(blob, name: str) -> dict[str, np.ndarray]:
    """The stamp members (``image_*``, ``img``, ``cutout``) of an NPZ blob, gzip wrapper removed;
    object arrays are never unpickled."""
    data = _as_bytes(blob, name)
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(f"{name}: gzip wrapper is corrupt ({e})") from e
        if not data:
            raise InputError(f"{name}: gzip wrapper holds an empty payload")
    if data[:4] not in _ZIP_MAGICS:
        raise InputError(f"{name}: not an NPZ archive (starts {data[:8]!r})")
    arrays: dict[str, np.ndarray] = {}
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            for key in z.files:
                if key in ("img", "cutout") or key.startswith("image_"):
                    arrays[key] = z[key]
    except ValueError as e:
        # numpy refuses object arrays without allow_pickle with a ValueError; say so plainly.
        raise InputError(f"{name}: refused to load ({e}); object/pickled arrays are never loaded") from e
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, KeyError) as e:
        raise InputError(f"{name}: corrupt NPZ ({type(e).__name__}: {e})") from e
    return arrays


def _stamp_from_arrays(arrays: dict[str, np.ndarray], legacy_img_bands: str, name: str) -> tuple[np.ndarray, str]:
    """(float32 (C, H, W) array, bandset) from the per-band ``image_*`` arrays or the one whole-stamp
    array (``img`` in ``legacy_img_bands``, ``cutout`` in g, r, z), whichever the blob holds."""
    per_band = [(b, k) for b, k in _BAND_KEYS if k in arrays]
    whole = [k for k in ("img", "cutout") if k in arrays]
    unknown = sorted(k for k in arrays if k.startswith("image_") and k not in dict(_BAND_KEYS).values())
    if unknown:
        raise InputError(f"{name}: unexpected band arrays {unknown}; only {[k for _, k in _BAND_KEYS]} are known")
    if per_band and whole or len(whole) > 1:
        raise InputError(f"{name}: ambiguous stamp, holds both {[k for _, k in per_band] + whole}")
    if per_band:
        planes = []
        for b, k in per_band:
            a = _check_band_array(arrays[k], k, name)
            if a.ndim != 2:
                raise InputError(f"{name}: {k!r} has shape {a.shape}, expected (H, W)")
            planes.append(a)
        shapes = {p.shape for p in planes}
        if len(shapes) != 1:
            raise InputError(f"{name}: band arrays differ in shape: {[(k, arrays[k].shape) for _, k in per_band]}")
        arr = np.stack(planes, axis=0)
        bandset = "".join(b for b, _ in per_band)
    elif whole:
        key = whole[0]
        a = _check_band_array(arrays[key], key, name)
        bandset = _GRZ if key == "cutout" else _bandset_of(legacy_img_bands, name)
        nb = len(bandset)
        if a.ndim == 2 and nb == 1:
            arr = a[None]
        elif a.ndim == 3 and key == "img" and a.shape[0] == nb:
            arr = a
        elif a.ndim == 3 and a.shape[-1] == nb:
            arr = np.moveaxis(a, -1, 0)  # HWC -> CHW
        else:
            raise InputError(f"{name}: {key!r} has shape {a.shape}, which does not hold the {nb} band(s) {bandset!r}")
        arr = np.ascontiguousarray(arr)
    else:
        raise InputError(
            f"{name}: no stamp arrays; expected image_g/image_r/image_z, 'img' or 'cutout', found {sorted(arrays)}"
        )
    return arr, bandset


def decode_stamp_npz(
    blob: bytes,
    expected_shape: tuple[int, ...] | None = None,
    *,
    legacy_img_bands: str = _GRZ,
    allow_nonfinite: bool = True,
    name: str = "stamp_npz",
) -> tuple[np.ndarray, str]:
    """Decode one stamp blob to (array float32 (C, H, W) nanomaggies, bandset such as ``'grz'`` or ``'rz'``).

    Bands come in g, r, z order, only those present. ``expected_shape`` is (H, W), or (C, H, W)
    to also require C bands. Non-finite pixels are kept (quality metrics report them) unless
    ``allow_nonfinite`` is False. Raises InputError naming ``name`` and the problem for empty,
    corrupt, pickled, non-numeric, ambiguous or wrongly shaped content.
    """
    arrays = _npz_arrays(blob, name)
    arr, bandset = _stamp_from_arrays(arrays, legacy_img_bands, name)
    if arr.shape[1] == 0 or arr.shape[2] == 0:
        raise InputError(f"{name}: empty stamp of shape {arr.shape}")
    if expected_shape is not None:
        exp = tuple(int(x) for x in expected_shape)
        got = arr.shape if len(exp) == 3 else arr.shape[1:]
        if len(exp) not in (2, 3) or got != exp:
            raise InputError(f"{name}: stamp has shape {arr.shape} (bands {bandset!r}), expected {exp}")
    if not allow_nonfinite:
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        if bad:
            raise InputError(f"{name}: {bad} non-finite pixel values in bands {bandset!r}")
    return arr, bandset


def pad_to_grz(array: np.ndarray, bandset: str) -> tuple[np.ndarray, np.ndarray]:
    """(C, H, W) bands of ``bandset`` -> ((3, H, W) float32 in g, r, z order with absent bands zero, presence bool (3,)).

    Zeros mark "no data" only together with the presence mask; never feed the padded array to a
    model without it.
    """
    bandset = _bandset_of(bandset, "pad_to_grz")
    a = np.asarray(array)
    if a.ndim != 3 or a.shape[0] != len(bandset):
        raise InputError(f"pad_to_grz: array of shape {a.shape} does not hold the {len(bandset)} band(s) {bandset!r}")
    present = np.array([b in bandset for b in _GRZ])
    out = np.zeros((len(_GRZ), a.shape[1], a.shape[2]), dtype=np.float32)
    out[present] = a
    return out, present


@dataclass(frozen=True)
class LegacyStampBatch:
    """Decoded blob column: images (N, 3, H, W) float32 nanomaggies (absent bands zero),
    band_present (N, 3) bool, nonfinite_frac (N,) float64 over the present bands' pixels."""

    images: np.ndarray
    band_present: np.ndarray
    nonfinite_frac: np.ndarray

    @property
    def bandsets(self) -> list[str]:
        """Bandset text per row, e.g. 'grz' or 'r'."""
        letters = np.array(list(_GRZ))
        return ["".join(letters[row]) for row in self.band_present]


def decode_stamp_column(blobs: Sequence, expected_shape: tuple[int, int], name: str = "stamp_npz") -> LegacyStampBatch:
    """Decode a column of blobs (list or pyarrow binary array) of (H, W) stamps; InputError names the row.

    Each blob is its own archive, so decoding loops over rows; everything after it is vectorised.
    """
    if hasattr(blobs, "to_pylist"):
        blobs = blobs.to_pylist()
    n = len(blobs)
    h, w = (int(x) for x in expected_shape)
    images = np.zeros((n, len(_GRZ), h, w), dtype=np.float32)
    present = np.zeros((n, len(_GRZ)), dtype=bool)
    for i, blob in enumerate(blobs):
        if blob is None:
            raise InputError(f"{name} row {i}: null blob")
        arr, bandset = decode_stamp_npz(blob, (h, w), name=f"{name} row {i}")
        images[i], present[i] = pad_to_grz(arr, bandset)
    nonfinite = ~np.isfinite(images) & present[:, :, None, None]
    n_pix = np.maximum(present.sum(axis=1) * h * w, 1)
    return LegacyStampBatch(images, present, nonfinite.sum(axis=(1, 2, 3)) / n_pix)
