"""Object identifiers shared by every table.

A Tractor source is unique by (RELEASE, BRICKID, OBJID) (the Legacy Surveys sweep data model;
the row-parallel sweep companions match rows on the same triple).
``object_id`` packs the three into one int64 so joins, hashes and seeds use one key.
"""

from __future__ import annotations

import numpy as np

from .errors import InputError

_BRICKID_BITS = 24  # BRICKID <= 662174 < 2**20; room to spare
_OBJID_BITS = 20  # OBJID < 2**20 per brick


def object_id(release, brickid, objid) -> np.ndarray:
    """int64 id = release << 44 | brickid << 20 | objid (vectorised)."""
    rel = np.asarray(release, dtype=np.int64)
    bid = np.asarray(brickid, dtype=np.int64)
    oid = np.asarray(objid, dtype=np.int64)
    for name, arr, bits in (("brickid", bid, _BRICKID_BITS), ("objid", oid, _OBJID_BITS), ("release", rel, 19)):
        bad = (arr < 0) | (arr >= (1 << bits))
        if np.any(bad):
            raise InputError(f"{name} value {arr[bad].flat[0]} out of range [0, 2**{bits}) for object_id")
    return (rel << (_BRICKID_BITS + _OBJID_BITS)) | (bid << _OBJID_BITS) | oid


def split_object_id(oid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inverse of ``object_id``: (release, brickid, objid) arrays."""
    o = np.asarray(oid, dtype=np.int64)
    return (
        o >> (_BRICKID_BITS + _OBJID_BITS),
        (o >> _OBJID_BITS) & ((1 << _BRICKID_BITS) - 1),
        o & ((1 << _OBJID_BITS) - 1),
    )
