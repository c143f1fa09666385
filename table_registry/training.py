"""The training stage's tables (``lens_assets/training.py``): each with its contract and audits."""

from __future__ import annotations

import pyarrow as pa

from darkhaloscope.training.gates import GATES
from lake_platform.audits import Audit
from lake_platform.contracts import Column, Contract, Range

from .columns import BANDS, F32, F64, I64, STAMP, STR, col, optional
from .table import Table

TRAINING_SET_CONTRACT = Audit(
    "training_set_contract", "schema, unique object ids, labels, weights, kinds and the train/val splits only"
)

TRAINING_SET = Table(
    "training",
    "training_set",
    "catalog rows and injection hosts of the train and val splits",
    Contract(
        table="training_set",
        columns=optional(
            (
                col("object_id", I64),
                col("split", STR, description="train or val (test rows never enter the training set)"),
                col("tier", STR, description="A or B (lenscat) or A/B/C (a visual grade) for a positive; weights it"),
                col("pool", STR, description="N1, N2 or graded (a visually graded candidate)"),
                col("ra", F64),
                col("dec", F64),
                col("type", STR),
                *(col(f"{k}_{b}", F32) for k in ("psfsize", "psfdepth") for b in BANDS),
                col("dx_pix", F32),
                col("dy_pix", F32),
                col("label", pa.int8()),
                Column(
                    "weight", F32, "", "loss weight: a positive's tier weight (A 1.0, B 0.5, C 0.25), 1 for a negative"
                ),
                Column("kind", STR, "", "real_positive or negative"),
                Column("grade_round", I64, "", "visual-grade round that labelled the row, null when no grade did"),
                col("image", STAMP),
                Column(
                    "invvar",
                    STAMP,
                    "pixel^2/nanomaggy^2",
                    "inverse variance of an injection host's stamp (null for rows that host no injection)",
                ),
            ),
            "object_id",
            "split",
            "label",
            "weight",
            "kind",
            "image",
        ),
        key=("object_id",),
        ranges=(Range("label", 0, 1), Range("weight", 0.0, None)),
        allowed_values={"split": ("train", "val"), "kind": ("real_positive", "negative")},
    ),
    None,
    (TRAINING_SET_CONTRACT,),
)

LENS_FINDER = Table(
    "training",
    "lens_finder",
    "the published lens finder: its registry row and checkpoint (artifact=checkpoint)",
    Contract(
        table="lens_finder",
        columns=(
            Column("checkpoint_uri", STR, "", "folder of the published checkpoint (safetensors + JSON spec)"),
            Column("data_version", STR, "", "the checkpoint's data version: its weights sha256 (and views averaged)"),
            Column("val_auroc", F64, "", "validation AUROC of the published model"),
            Column("metrics", STR, "", "the training run's metrics and gates (JSON)"),
        ),
    ),
    None,
    tuple(Audit(g.name, g.description, g.blocking) for g in GATES.values()),
)

#: The training stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    TRAINING_SET,
    LENS_FINDER,
)
