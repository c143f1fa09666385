"""Image stamps as Arrow fixed-shape tensors: float32 [band, y, x], loaded without per-row Python."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .constants import BANDS, STAMP_SIZE
from .errors import InputError

#: Shape of one grz stamp: (band, y, x).
STAMP_SHAPE = (len(BANDS), STAMP_SIZE, STAMP_SIZE)


def tensor_type(shape: tuple[int, ...] = STAMP_SHAPE, dtype: pa.DataType = pa.float32()) -> pa.DataType:
    """Arrow fixed-shape tensor extension type for stamps of ``shape`` (row-major)."""
    return pa.fixed_shape_tensor(dtype, list(shape))


def to_tensor_array(stamps: np.ndarray, dtype: pa.DataType = pa.float32()) -> pa.ExtensionArray:
    """``(N, *shape)`` numpy array -> Arrow FixedShapeTensorArray (one copy at most, no per-row Python)."""
    arr = np.ascontiguousarray(stamps, dtype=dtype.to_pandas_dtype())
    if arr.ndim < 2:
        raise InputError(f"stamps must be (N, ...) with at least 2 dimensions, got shape {arr.shape}")
    return pa.FixedShapeTensorArray.from_numpy_ndarray(arr)


def from_tensor_column(column, expected_shape: tuple[int, ...] | None = STAMP_SHAPE, name: str = "image") -> np.ndarray:
    """Arrow tensor column (Array or ChunkedArray) -> ``(N, *shape)`` numpy array, without per-row Python.

    Raises InputError naming ``name`` when the column is not a fixed-shape tensor, holds nulls,
    or has another shape than ``expected_shape``.
    """
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if not isinstance(column.type, pa.FixedShapeTensorType):
        raise InputError(f"column {name!r} is {column.type}, not a fixed-shape tensor")
    shape = tuple(column.type.shape)
    if expected_shape is not None and shape != tuple(expected_shape):
        raise InputError(f"column {name!r} holds stamps of shape {shape}, expected {tuple(expected_shape)}")
    if column.null_count:
        raise InputError(f"column {name!r} has {column.null_count} null stamps")
    parts = [c.to_numpy_ndarray() for c in chunks if len(c)]
    if not parts:
        return np.zeros((0, *shape), dtype=column.type.value_type.to_pandas_dtype())
    return np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
