"""Deterministic randomness: every seed comes from a stable hash of keys, never from process state.

One implementation for the whole project. ``hash()`` of Python strings is salted per process,
so it must never be used for seeds or splits; BLAKE2b over the keys' text is stable across
processes, machines and Python versions.
"""

from __future__ import annotations

import hashlib

import numpy as np

_SEP = "\x1f"


def stable_hash64(*keys: object) -> int:
    """Unsigned 64-bit integer hash of ``keys`` (each converted with ``str``), stable everywhere."""
    text = _SEP.join(str(k) for k in keys)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def rng_for(*keys: object) -> np.random.Generator:
    """A numpy Generator seeded from a stable hash of ``keys``."""
    return np.random.default_rng(stable_hash64(*keys))


def torch_generator_for(*keys: object, device: str = "cpu"):
    """A torch.Generator seeded from a stable hash of ``keys`` (63-bit seed)."""
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(stable_hash64(*keys) & 0x7FFF_FFFF_FFFF_FFFF)
    return gen


def unit_hash_array(values: np.ndarray, salt: object = "") -> np.ndarray:
    """Vectorised stable hash of integer ``values`` to floats in [0, 1).

    Uses the SplitMix64 finaliser on ``value ^ stable_hash64(salt)``: stable, fast (no per-row
    Python) and well mixed, so it is usable for split assignment and deterministic ordering.
    """
    x = np.asarray(values).astype(np.uint64) ^ np.uint64(stable_hash64(salt))
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)
