"""A small cutouts table for the training stage's tests: 101 px noise stamps with the columns the
training set and the score assets read (labels, splits, tiers, pools, the host columns of the
injection engine and the inverse variance), so the training set, the lens finder and its scores
can be built from it as from a lake's."""

import numpy as np
import pyarrow as pa

from darkhaloscope.stamps import to_tensor_array

#: The default: 4 positives (A, B in train; A in val; A in test) and 20 negatives spread over the splits.
POSITIVES = (("train", "A"), ("train", "B"), ("val", "A"), ("test", "A"))
NEGATIVES = (("train", 10), ("val", 6), ("test", 4))


def cutouts_table(
    positives=POSITIVES, negatives=NEGATIVES, seed: int = 3, psfsize_r: float = 1.2, no_psf: tuple[int, ...] = (5,)
) -> pa.Table:
    """Cutout rows: ``positives`` as (split, tier) and ``negatives`` as (split, count), object ids
    1..N in that order, g, r, z noise stamps of sigma 0.02 nmgy (invvar 2500 / nmgy²), host types
    DEV, SER, REX, EXP in turn, r-band PSF size ``psfsize_r`` [arcsec] except on the rows
    ``no_psf`` (0-based; such a negative cannot host injections)."""
    split = [s for s, _ in positives] + [s for s, k in negatives for _ in range(k)]
    n, n_pos = len(split), len(positives)
    rng = np.random.default_rng(seed)
    psf = np.full(n, psfsize_r)
    psf[list(no_psf)] = 0.0
    return pa.table(
        {
            "object_id": pa.array(np.arange(1, n + 1), pa.int64()),
            "label": pa.array([1] * n_pos + [0] * (n - n_pos), pa.int8()),
            "split": split,
            "tier": [t for _, t in positives] + [None] * (n - n_pos),
            "pool": ["positive"] * n_pos + ["N1"] * (n - n_pos),
            "confuser_category": pa.nulls(n, pa.string()),
            "name": pa.nulls(n, pa.string()),
            "psfsize_r": pa.array(psf, pa.float32()),
            "quality_ok": [True] * n,
            "in_training_catalog": [True] * n,
            "ra": np.linspace(30, 31, n),
            "dec": np.zeros(n),
            "type": [("DEV", "SER", "REX", "EXP")[i % 4] for i in range(n)],
            "psfsize_g": np.full(n, 1.3, np.float32),
            "psfsize_z": np.full(n, 1.1, np.float32),
            "psfdepth_g": np.full(n, 2e3, np.float32),
            "psfdepth_r": np.full(n, 1e3, np.float32),
            "psfdepth_z": np.full(n, 2e2, np.float32),
            "dx_pix": np.zeros(n, np.float32),
            "dy_pix": np.zeros(n, np.float32),
            "image": to_tensor_array(rng.normal(0, 0.02, (n, 3, 101, 101)).astype(np.float32)),
            "invvar": to_tensor_array(np.full((n, 3, 101, 101), 2500.0, np.float32)),
        }
    )
