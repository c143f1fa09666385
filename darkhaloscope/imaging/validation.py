"""Validation of the cutouts table: quality-gate pass fractions and the shortcut scan.

The shortcut scan computes ~25 simple image features of the training-catalog cutouts that pass
the quality gate and the AUC with which each separates positives from negatives (bootstrap
intervals, red > 0.70 / yellow > 0.60 flags, :mod:`.shortcuts`): a core-brightness feature that
separates them would let a lens finder learn the host's core instead of the arcs.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..errors import InputError
from ..stamps import from_tensor_column
from .shortcuts import feature_aucs, shortcut_features

#: Negatives that must pass the quality gate (fraction).
NEGATIVES_VALID_MIN = 0.98


def quality_fractions(cutouts: ds.Dataset) -> dict:
    """Positives and negatives and the fraction of each passing the quality gate (NaN when none)."""
    q = cutouts.to_table(columns=["label", "quality_ok"])
    label = q.column("label").to_numpy()
    ok = q.column("quality_ok").to_numpy(zero_copy_only=False)
    return {
        "n_positives": int((label == 1).sum()),
        "positives_valid_fraction": float(ok[label == 1].mean()) if (label == 1).any() else float("nan"),
        "n_negatives": int((label == 0).sum()),
        "negatives_valid_fraction": float(ok[label == 0].mean()) if (label == 0).any() else float("nan"),
    }


def shortcut_scan(cutouts: ds.Dataset, seed_key=("cutout_validation", "shortcut-scan")) -> pa.Table:
    """AUC per image feature (training-catalog cutouts passing the quality gate), with a
    ``scope`` column; InputError naming the table when it holds no such cutouts."""
    with_maskbits = "maskbits" in cutouts.schema.names
    columns = ["image", "label", "quality_ok"] + (["maskbits"] if with_maskbits else [])
    feats, labels = [], []
    for batch in cutouts.to_batches(columns=columns, filter=pc.field("in_training_catalog"), batch_size=512):
        if batch.num_rows == 0:
            continue
        ok = batch.column("quality_ok").to_numpy(zero_copy_only=False)
        img = from_tensor_column(batch.column("image"))[ok]
        mb = batch.column("maskbits") if with_maskbits else None
        # coadd bricks and the mock sky carry maskbits stamps (saturation feature); a cutout service does not
        mask = (
            from_tensor_column(mb, expected_shape=None, name="maskbits")[ok]
            if mb is not None and mb.null_count == 0
            else None
        )
        feats.append(shortcut_features(img, mask))
        labels.append(batch.column("label").to_numpy()[ok])
    if not feats:
        raise InputError(
            "the cutouts table holds no training-catalog cutouts: materialize training_catalog and cutouts first"
        )
    aucs = feature_aucs(pa.concat_tables(feats), np.concatenate(labels), seed_key=seed_key)
    return aucs.append_column("scope", pa.array(["training_catalog"] * aucs.num_rows))


def worst_core_feature(aucs: pa.Table) -> dict | None:
    """The core-brightness feature with the highest lower AUC bound (None when none was scanned)."""
    core = [r for r in aucs.to_pylist() if r["core_feature"]]
    return max(core, key=lambda r: r["separation_lo"]) if core else None
