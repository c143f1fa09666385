"""The catalog stage's tables (``lens_assets/catalog.py``): each with its contract and audits."""

from __future__ import annotations

import pyarrow as pa

from darkhaloscope.catalog.crossmatch import POSITIVE_SCHEMA
from darkhaloscope.catalog.cuts import FUNNEL_SCHEMA, NEGATIVE_SCHEMA, SELECTION_COLUMN
from darkhaloscope.catalog.sampling import CATALOG_SCHEMA, STRATA_SCHEMA
from darkhaloscope.survey.sweeps import SWEEP_DIM
from lake_platform.audits import Audit
from lake_platform.contracts import Column, Contract, Range

from .columns import ARCSEC, DEG, SPLITS, from_schema, optional
from .table import Table

_LENS_MATCH = {
    "lens_index": ("", "row of the lens in known_lenses"),
    "lens_ra": (DEG, "right ascension of the catalogued lens"),
    "lens_dec": (DEG, "declination of the catalogued lens"),
    "grade": ("", "lenscat grading: confident or probable"),
    "kind": ("", "lenscat type of the lens (galaxy: only galaxy-scale lenses are positives)"),
    "reference": ("", "lenscat reference(s) of the discovery"),
    "tier": ("", "training tier: A (lenscat confident) or B (probable)"),
    "separation_arcsec": (ARCSEC, "separation between the catalogued lens and the sweep source matched to it"),
    "in_negative_footprint": ("", "whether the source lies inside the negatives' declination footprint"),
    "passes_negative_cuts": ("", "whether the source passes the negatives' quality cuts (type, maskbits, nobs, z mag)"),
    "failed_cuts": ("", "the quality cuts the source fails, comma-separated (empty when it passes)"),
}

NEGATIVES_CONTRACT = Audit("negatives_contract", "schema, unique object ids, pools and splits match the contract")

NEGATIVES_EXCLUSION = Audit(
    "negatives_exclusion", "no negative within the exclusion radius of a known lens (independent astropy cross-match)"
)

NEGATIVES_PASS_CUTS = Audit(
    "negatives_pass_cuts", "every negative passes every cut, re-verified with DuckDB SQL over the staged table"
)

NEGATIVES = Table(
    "catalog",
    "negatives",
    "N1 (representative) and N2 (confuser) negative pools, one partition per sweep file",
    Contract(
        table="negatives",
        columns=from_schema(NEGATIVE_SCHEMA),
        key=("object_id",),
        ranges=(Range("dec", -90.0, 90.0), Range("ra", 0.0, 360.0, hi_inclusive=False)),
        allowed_values={"pool": ("N1", "N2"), "split": SPLITS},
    ),
    SWEEP_DIM,
    (NEGATIVES_CONTRACT, NEGATIVES_EXCLUSION, NEGATIVES_PASS_CUTS),
)

SELECTION_FUNNEL_CONTRACT = Audit(
    "selection_funnel_contract", "one funnel row per (sweep file, cut step), counts consistent, selection recorded"
)

SELECTION_FUNNEL = Table(
    "catalog",
    "selection_funnel",
    "rows removed and remaining per cut step and sweep file, with the selection as run",
    Contract(
        table="selection_funnel",
        columns=(
            *from_schema(
                FUNNEL_SCHEMA,
                {
                    "step_index": ("", "position of the cut in the funnel (0 = the file as read)"),
                    "step": ("", "cut name: dec_footprint, type, maskbits, nobs, zmag, known_lens"),
                    "n_removed": ("", "rows this cut removed"),
                    "n_remaining": ("", "rows left after this cut"),
                },
            ),
            Column(SELECTION_COLUMN, pa.string(), "", "the negative selection the funnel was run with (JSON)"),
        ),
        key=("sweep_file", "step_index"),
        ranges=(Range("n_removed", 0, None), Range("n_remaining", 0, None)),
    ),
    SWEEP_DIM,
    (SELECTION_FUNNEL_CONTRACT,),
)

POSITIVES_CONTRACT = Audit(
    "positives_contract", "schema, unique lens names, tiers, separations within the match radius"
)

POSITIVES = Table(
    "catalog",
    "positives",
    "known galaxy-scale lenses cross-matched to their sweep source, tier A/B, flagged outside the cuts",
    Contract(
        table="positives",
        columns=from_schema(POSITIVE_SCHEMA, _LENS_MATCH),
        key=("object_id",),
        ranges=(Range("separation_arcsec", 0.0, 5.0),),
        allowed_values={"tier": ("A", "B"), "split": SPLITS},
    ),
    None,
    (POSITIVES_CONTRACT,),
)

TRAINING_CATALOG_CONTRACT = Audit("training_catalog_contract", "schema, unique object ids, labels and splits")

SPLITS_DISJOINT = Audit(
    "splits_disjoint",
    "no HEALPix pixel in two splits (pixels recomputed from ra/dec) across negatives, positives and the catalog",
)

SPLIT_FRACTIONS = Audit(
    "split_fractions",
    "split fractions of the negative pool within 3 sd of 70/15/15, the sd from its HEALPix pixels (warning)",
    blocking=False,
)

STRATA_HAVE_NEGATIVES = Audit("strata_have_negatives", "every stratum of the positives has negatives")

TRAINING_CATALOG = Table(
    "catalog",
    "training_catalog",
    "positives plus negatives sampled per (nobs_z_bin, type_bin) stratum",
    Contract(
        table="training_catalog",
        columns=from_schema(
            CATALOG_SCHEMA,
            {
                "role": ("", "positive or negative"),
                "stratum": ("", "(nobs_z_bin, type_bin) stratum the row was sampled in"),
                "pool": ("", "N1 or N2 for a negative; the positives' pool name for a lens"),
                "lens_name": ("", "lenscat name of a positive, null for a negative"),
                "z_lens": ("", "lens redshift of a positive from lenscat, null where unknown"),
                "sample_hash": ("", "the stable hash in [0, 1) that orders the negatives of a stratum for sampling"),
            },
        ),
        key=("object_id",),
        allowed_values={"split": SPLITS},
    ),
    None,
    (TRAINING_CATALOG_CONTRACT, SPLITS_DISJOINT, SPLIT_FRACTIONS, STRATA_HAVE_NEGATIVES),
)

TRAINING_STRATA_CONTRACT = Audit("training_strata_contract", "one row per stratum, non-negative counts")

TRAINING_STRATA = Table(
    "catalog",
    "training_strata",
    "per-stratum targets, availability and actual counts of the training catalog",
    Contract(
        table="training_strata",
        columns=optional(
            from_schema(
                STRATA_SCHEMA,
                {
                    "stratum": ("", "(nobs_z_bin, type_bin) stratum"),
                    "n_positives": ("", "positives in the stratum"),
                    "target": ("", "negatives wanted in the stratum (the class ratio times n_positives)"),
                    "n1_target": ("", "N1 negatives wanted (85 % of target)"),
                    "n2_target": ("", "N2 negatives wanted (15 % of target)"),
                    "n1_actual": ("", "N1 negatives sampled"),
                    "n2_actual": ("", "N2 negatives sampled"),
                    "backfilled": ("", "negatives taken from the other pool where one ran short"),
                    "n1_available": ("", "N1 negatives in the stratum"),
                    "n2_available": ("", "N2 negatives in the stratum"),
                    "available": ("", "negatives in the stratum"),
                },
            ),
            "stratum",
            "n_positives",
            "n1_actual",
            "n2_actual",
        ),
        key=("stratum",),
        ranges=(Range("n_positives", 0, None), Range("n1_actual", 0, None), Range("n2_actual", 0, None)),
    ),
    None,
    (TRAINING_STRATA_CONTRACT,),
)

#: The catalog stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    NEGATIVES,
    SELECTION_FUNNEL,
    POSITIVES,
    TRAINING_CATALOG,
    TRAINING_STRATA,
)
