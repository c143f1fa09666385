"""The tables registry: every lake table once, in the module of the stage that makes it.

``table_registry/<stage>.py`` mirrors ``lens_assets/<stage>.py``: each table's
:class:`~table_registry.table.Table` entry (key, partitioning), its contract (each column with its
Arrow type, unit and description, the unique key and the value rules) and its audits (one
:class:`~lake_platform.audits.Audit` per asset check: its name, what it checks, whether a failure
blocks publication) stand together. Where a science-library module builds a table from an Arrow
schema, the types come from that schema (:func:`~table_registry.columns.from_schema`) and the units
and descriptions from ``table_registry/columns.py`` (the columns several tables share) or from the
table's own entries; the rules are stated once per table. A column that is not required may be
absent (an older data model or another configuration lacks it) but has its type when present.

This package exposes every table by name (``from table_registry import NEGATIVES``), the registry
in the order of the pipeline (:data:`TABLES`) and :func:`by_key`; an asset module takes its
audits from its stage's module (``from table_registry import catalog as checks``).
"""

from lake_platform.contracts import Contract

from . import catalog, closure, evaluation, imaging, injection, ops, search, selection, survey, training, validation
from .catalog import NEGATIVES, POSITIVES, SELECTION_FUNNEL, TRAINING_CATALOG, TRAINING_STRATA
from .closure import LENS_FORECAST, SELECTION_CLOSURE
from .evaluation import (
    CUTOUT_SCORES,
    EVALUATION_REPORT,
    FPR_BY_CONFUSER,
    INJECTION_SCORES,
    REAL_LENS_RECALL,
    REALISM_ABLATION,
    REALISM_PROBE,
    THRESHOLDS,
)
from .imaging import CUTOUT_VALIDATION, CUTOUTS
from .injection import INJECTION_BANK, INJECTION_BATCH_DIM, INJECTION_PLAN
from .ops import ALERTS
from .search import CANDIDATE_GALLERY, CANDIDATES, SEARCH_SCORES, SEARCH_STAMPS, SEARCH_TARGETS, VISUAL_GRADES
from .selection import (
    SELECTION_CALIBRATION,
    SELECTION_FUNCTION,
    SELECTION_MARGINALS,
    SELECTION_MODEL,
    SELECTION_POPULATIONS,
)
from .survey import KNOWN_LENSES, PHOTO_Z, SPECTRA, SWEEP_FILES, SWEEPS
from .table import Table
from .training import LENS_FINDER, TRAINING_SET
from .validation import REAL_LENS_VALIDATION

#: Every table, in the order of the pipeline (stage by stage).
TABLES: tuple[Table, ...] = (
    *survey.TABLES,
    *catalog.TABLES,
    *imaging.TABLES,
    *injection.TABLES,
    *training.TABLES,
    *evaluation.TABLES,
    *selection.TABLES,
    *closure.TABLES,
    *validation.TABLES,
    *search.TABLES,
    *ops.TABLES,
)


def by_key(group: str, name: str) -> Table:
    """The table of asset key (``group``, ``name``); KeyError naming it otherwise."""
    for t in TABLES:
        if t.key == (group, name):
            return t
    raise KeyError(f"no table {group}/{name} in the registry")


def contract_of(group: str, name: str) -> Contract | None:
    """The contract of table ``group/name`` (None for a table the registry does not hold, such as
    a scratch table of work in flight): what :class:`~lake_platform.lake.Lake` writes into every
    Parquet file's field metadata (``Lake(contracts=contract_of)``)."""
    for t in TABLES:
        if t.key == (group, name):
            return t.contract
    return None


__all__ = [
    "ALERTS",
    "CANDIDATE_GALLERY",
    "CANDIDATES",
    "CUTOUT_SCORES",
    "CUTOUT_VALIDATION",
    "CUTOUTS",
    "EVALUATION_REPORT",
    "FPR_BY_CONFUSER",
    "INJECTION_BANK",
    "INJECTION_BATCH_DIM",
    "INJECTION_PLAN",
    "INJECTION_SCORES",
    "KNOWN_LENSES",
    "LENS_FINDER",
    "LENS_FORECAST",
    "NEGATIVES",
    "PHOTO_Z",
    "POSITIVES",
    "REAL_LENS_RECALL",
    "REALISM_ABLATION",
    "REALISM_PROBE",
    "REAL_LENS_VALIDATION",
    "SEARCH_SCORES",
    "SEARCH_STAMPS",
    "SEARCH_TARGETS",
    "SELECTION_CLOSURE",
    "SELECTION_FUNCTION",
    "SELECTION_FUNNEL",
    "SELECTION_MARGINALS",
    "SELECTION_MODEL",
    "SELECTION_POPULATIONS",
    "SELECTION_CALIBRATION",
    "SPECTRA",
    "SWEEP_FILES",
    "SWEEPS",
    "TABLES",
    "THRESHOLDS",
    "TRAINING_CATALOG",
    "TRAINING_SET",
    "TRAINING_STRATA",
    "VISUAL_GRADES",
    "Table",
    "by_key",
    "contract_of",
    "catalog",
    "closure",
    "evaluation",
    "imaging",
    "injection",
    "ops",
    "search",
    "survey",
    "training",
]
