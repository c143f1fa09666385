"""The catalog stage: negative pools N1/N2, positives cross-match, HEALPix splits, training catalog.

In-process functions work on pyarrow tables (vectorised, no per-row Python); ``catalog.spark``
applies the same functions per partition with Spark's ``mapInArrow``; ``catalog.verify`` holds
independent re-checks (astropy, DuckDB) behind the asset checks. pyspark is imported only by
``catalog.spark``.
"""

from .confusers import CATEGORIES as CONFUSER_CATEGORIES
from .confusers import ConfuserConfig, classify_confusers
from .crossmatch import POSITIVE_SCHEMA, crossmatch_positives
from .cuts import (
    CUT_STEPS,
    NEGATIVE_SCHEMA,
    KnownLensIndex,
    NegativeSelectionConfig,
    funnel_table,
    merge_funnels,
    select_negatives,
)
from .sampling import CATALOG_SCHEMA, STRATA_SCHEMA, build_training_catalog

__all__ = [
    "CATALOG_SCHEMA",
    "CONFUSER_CATEGORIES",
    "CUT_STEPS",
    "ConfuserConfig",
    "KnownLensIndex",
    "NEGATIVE_SCHEMA",
    "NegativeSelectionConfig",
    "POSITIVE_SCHEMA",
    "STRATA_SCHEMA",
    "build_training_catalog",
    "classify_confusers",
    "crossmatch_positives",
    "funnel_table",
    "merge_funnels",
    "select_negatives",
]
