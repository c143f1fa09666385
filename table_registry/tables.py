"""Every table of the lake, once: its key (group, name), contract, partitioning and audits.

The Dagster layer builds each asset's key, partitions and check specs from these entries, and
its one publish path runs a table's contract audit from them; library code that reads or writes
a table receives it from the caller (a table handle of the lake), never by spelling its key.
"""

from __future__ import annotations

from dataclasses import dataclass

from darkhaloscope.search.gallery import GALLERY_FILE
from darkhaloscope.survey.sweeps import SWEEP_DIM
from darkhaloscope.training.gates import GATES
from lake_platform.audits import Audit
from lake_platform.contracts import Contract

from . import audits as au
from . import contracts as c

#: Partition dimension of the injection bank and its scores (one partition per batch of the plan).
INJECTION_BATCH_DIM = "injection_batch"


@dataclass(frozen=True, eq=False)
class Table:
    """A lake table: ``group`` and ``name`` (its asset key and its folder ``<lake>/<group>/<name>/``),
    what it holds, its ``contract`` (None for a table without one), the partition dimension it is
    split by (None: one table) and its ``audits`` (one asset check each, run before publication)."""

    group: str
    name: str
    description: str
    contract: Contract | None = None
    partitioned_by: str | None = None
    audits: tuple[Audit, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.name)

    # a table is its key: the registry holds one entry per key
    def __eq__(self, other) -> bool:
        return isinstance(other, Table) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def path(self) -> str:
        """The asset key as Dagster writes it (``group/name``)."""
        return f"{self.group}/{self.name}"

    @property
    def contract_audit(self) -> Audit | None:
        """The audit that checks the contract (``<name>_contract``), when the table has both."""
        if self.contract is None:
            return None
        return next((a for a in self.audits if a.name == f"{self.name}_contract"), None)

    def audit(self, name: str) -> Audit:
        """The audit named ``name`` (KeyError naming the table's audits otherwise)."""
        for a in self.audits:
            if a.name == name:
                return a
        raise KeyError(f"{self.path} has no audit {name!r}; its audits: {[a.name for a in self.audits]}")


SWEEP_FILES = Table(
    "survey",
    "sweep_files",
    "manifest of the survey's sweep files (name, sky box, size) and which survey they come from",
    c.SWEEP_FILES,
    None,
    (au.SWEEP_FILES_CONTRACT,),
)
SWEEPS = Table(
    "survey",
    "sweeps",
    "one sweep file read into Arrow: lower-case DR10 columns, HEALPix indices, provenance",
    c.SWEEPS,
    SWEEP_DIM,
    (au.SWEEPS_CONTRACT, au.SWEEPS_ROW_COUNT, au.SWEEPS_INSIDE_BOX, au.SWEEPS_UNIQUE_ACROSS_PARTITIONS),
)
PHOTO_Z = Table(
    "survey",
    "photo_z",
    "photo-zs of one sweep file from its row-matched DR10 photo-z sweep (null where none), with Z_SPEC",
    c.PHOTO_Z,
    SWEEP_DIM,
    (au.PHOTO_Z_CONTRACT, au.PHOTO_Z_COVERS_SWEEP),
)
SPECTRA = Table(
    "survey",
    "spectra",
    "SDSS DR16 spectra (Z, ZWARNING, CLASS, VDISP) matched to DR10 sources, one per source",
    c.SPECTRA,
    None,
    (au.SPECTRA_CONTRACT,),
)
KNOWN_LENSES = Table(
    "survey",
    "known_lenses",
    "the lenscat catalog of known strong lenses, normalised",
    c.KNOWN_LENSES,
    None,
    (au.KNOWN_LENSES_CONTRACT,),
)

NEGATIVES = Table(
    "catalog",
    "negatives",
    "N1 (representative) and N2 (confuser) negative pools, one partition per sweep file",
    c.NEGATIVES,
    SWEEP_DIM,
    (au.NEGATIVES_CONTRACT, au.NEGATIVES_EXCLUSION, au.NEGATIVES_PASS_CUTS),
)
SELECTION_FUNNEL = Table(
    "catalog",
    "selection_funnel",
    "rows removed and remaining per cut step and sweep file, with the selection as run",
    c.SELECTION_FUNNEL,
    SWEEP_DIM,
    (au.SELECTION_FUNNEL_CONTRACT,),
)
POSITIVES = Table(
    "catalog",
    "positives",
    "known galaxy-scale lenses cross-matched to their sweep source, tier A/B, flagged outside the cuts",
    c.POSITIVES,
    None,
    (au.POSITIVES_CONTRACT,),
)
TRAINING_CATALOG = Table(
    "catalog",
    "training_catalog",
    "positives plus negatives sampled per (nobs_z_bin, type_bin) stratum",
    c.TRAINING_CATALOG,
    None,
    (au.TRAINING_CATALOG_CONTRACT, au.SPLITS_DISJOINT, au.SPLIT_FRACTIONS, au.STRATA_HAVE_NEGATIVES),
)
TRAINING_STRATA = Table(
    "catalog",
    "training_strata",
    "per-stratum targets, availability and actual counts of the training catalog",
    c.TRAINING_STRATA,
    None,
    (au.TRAINING_STRATA_CONTRACT,),
)

CUTOUTS = Table(
    "imaging",
    "cutouts",
    "101×101 g,r,z stamps (nanomaggies), invvar and quality of every catalog target",
    c.CUTOUTS,
    SWEEP_DIM,
    (au.CUTOUTS_CONTRACT,),
)
CUTOUT_VALIDATION = Table(
    "imaging",
    "cutout_validation",
    "quality gates and the shortcut scan of the cutouts",
    c.CUTOUT_VALIDATION,
    None,
    (au.CUTOUT_VALIDATION_CONTRACT, au.POSITIVES_ALL_VALID, au.NEGATIVES_MOSTLY_VALID, au.NO_CORE_BRIGHTNESS_SHORTCUT),
)

INJECTION_PLAN = Table(
    "injection",
    "injection_plan",
    "one task per injection over the (θ_E, z_l) grid, with its host and parameters",
    c.INJECTION_PLAN,
    None,
    (au.INJECTION_PLAN_CONTRACT,),
)
INJECTION_BANK = Table(
    "injection",
    "injection_bank",
    "injected stamps with their paired controls and every parameter, one partition per batch",
    c.INJECTION_BANK,
    INJECTION_BATCH_DIM,
    (au.INJECTION_MATCHES_LENSTRONOMY, au.INJECTION_PHYSICS_VALID, au.INJECTION_HOSTS_IN_BIN),
)

TRAINING_SET = Table(
    "training",
    "training_set",
    "catalog rows and injection hosts of the train and val splits",
    c.TRAINING_SET,
    None,
    (au.TRAINING_SET_CONTRACT,),
)
LENS_FINDER = Table(
    "training",
    "lens_finder",
    "the published lens finder: its registry row and checkpoint (artifact=checkpoint)",
    c.LENS_FINDER,
    None,
    tuple(Audit(g.name, g.description, g.blocking) for g in GATES.values()),
)

CUTOUT_SCORES = Table(
    "evaluation",
    "cutout_scores",
    "lens-finder score of every cutout, one partition per sweep file",
    c.scores_contract("cutout_scores"),
    SWEEP_DIM,
    (au.CUTOUT_SCORES_CONTRACT,),
)
INJECTION_SCORES = Table(
    "evaluation",
    "injection_scores",
    "lens-finder score of every injection and its paired control, one partition per batch",
    c.scores_contract("injection_scores"),
    INJECTION_BATCH_DIM,
    (au.INJECTION_SCORES_CONTRACT,),
)
THRESHOLDS = Table(
    "evaluation",
    "thresholds",
    "score thresholds at target false-positive rates from held-out negatives",
    c.THRESHOLDS,
    None,
    (au.THRESHOLDS_CONTRACT,),
)
SELECTION_FUNCTION = Table(
    "evaluation",
    "selection_function",
    "C(θ_E, z_l) per threshold on the injection plan's grid, with heatmaps",
    c.SELECTION_FUNCTION,
    None,
    (au.SELECTION_FUNCTION_CONTRACT, au.SELECTION_FUNCTION_COVERAGE),
)
SELECTION_MARGINALS = Table(
    "evaluation",
    "selection_marginals",
    "completeness against PSF, depth, source and lensed magnitude, arc S/N",
    c.SELECTION_MARGINALS,
    None,
    (au.SELECTION_MARGINALS_CONTRACT,),
)
SELECTION_MODEL = Table(
    "evaluation",
    "selection_model",
    "P(detected | θ_E, arc S/N, lens z mag) at the search's threshold: a logistic fit over the injections, "
    "with host-bootstrap refits",
    c.SELECTION_MODEL,
    None,
    (au.SELECTION_MODEL_CONTRACT,),
)
SELECTION_CLOSURE = Table(
    "evaluation",
    "selection_closure",
    "hidden lenses the search recovers against the number the selection model predicts, per θ_E bin (mock)",
    c.SELECTION_CLOSURE,
    None,
    (au.SELECTION_CLOSURE_CONTRACT,),
)
LENS_FORECAST = Table(
    "evaluation",
    "lens_forecast",
    "expected lenses the search finds per deg² and in the searched area: the selection model folded with a "
    "velocity dispersion function and source counts (and, on the mock, with its hidden lenses, against their truth)",
    c.LENS_FORECAST,
    None,
    (au.LENS_FORECAST_CONTRACT,),
)
REAL_LENS_RECALL = Table(
    "evaluation",
    "real_lens_recall",
    "recall of test-split known lenses by tier and threshold",
    c.REAL_LENS_RECALL,
    None,
    (au.REAL_LENS_RECALL_CONTRACT,),
)
FPR_BY_CONFUSER = Table(
    "evaluation",
    "fpr_by_confuser",
    "false-positive rate of held-out negatives by N2 confuser category",
    c.FPR_BY_CONFUSER,
    None,
    (au.FPR_BY_CONFUSER_CONTRACT,),
)
EVALUATION_REPORT = Table(
    "evaluation",
    "evaluation_report",
    "the static HTML evaluation report and its index row",
    c.EVALUATION_REPORT,
    None,
    (au.EVALUATION_REPORT_CONTRACT,),
)

SEARCH_TARGETS = Table(
    "search",
    "search_targets",
    "every galaxy the survey-wide search covers, one partition per sweep file",
    c.SEARCH_TARGETS,
    SWEEP_DIM,
    (au.SEARCH_TARGETS_CONTRACT, au.SEARCH_TARGETS_IN_FUNNEL),
)
SEARCH_SCORES = Table(
    "search",
    "search_scores",
    "lens-finder score of every search target (unscorable rows with their reason)",
    c.SEARCH_SCORES,
    SWEEP_DIM,
    (au.SEARCH_SCORES_CONTRACT, au.SEARCH_SCORES_COVER_TARGETS),
)
SEARCH_STAMPS = Table(
    "search",
    "search_stamps",
    "the stamps of search targets scoring at or above the keep-threshold",
    c.SEARCH_STAMPS,
    SWEEP_DIM,
    (au.SEARCH_STAMPS_CONTRACT,),
)
CANDIDATES = Table(
    "search",
    "candidates",
    "searched galaxies above a threshold, ranked, de-duplicated, matched to known lenses",
    c.CANDIDATES,
    None,
    (au.CANDIDATES_CONTRACT, au.CANDIDATES_ONE_MODEL),
)
CANDIDATE_GALLERY = Table(
    "search",
    "candidate_gallery",
    f"the offline HTML inspection page of the top candidates ({GALLERY_FILE})",
    c.CANDIDATE_GALLERY,
    None,
    (au.CANDIDATE_GALLERY_CONTRACT,),
)
VISUAL_GRADES = Table(
    "search",
    "visual_grades",
    "visual grades of candidates, one round per landed grades CSV",
    c.VISUAL_GRADES,
    None,
    (au.VISUAL_GRADES_CONTRACT, au.VISUAL_GRADES_ROUNDS_KEPT),
)

ALERTS = Table(
    "ops",
    "alerts",
    "every delivered alert (failed checks and failed runs) with the sinks it reached",
    c.ALERTS,
    None,
    (au.ALERTS_CONTRACT,),
)

#: Every table, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    SWEEP_FILES,
    SWEEPS,
    PHOTO_Z,
    SPECTRA,
    KNOWN_LENSES,
    NEGATIVES,
    SELECTION_FUNNEL,
    POSITIVES,
    TRAINING_CATALOG,
    TRAINING_STRATA,
    CUTOUTS,
    CUTOUT_VALIDATION,
    INJECTION_PLAN,
    INJECTION_BANK,
    TRAINING_SET,
    LENS_FINDER,
    CUTOUT_SCORES,
    INJECTION_SCORES,
    THRESHOLDS,
    SELECTION_FUNCTION,
    SELECTION_MARGINALS,
    SELECTION_MODEL,
    SELECTION_CLOSURE,
    LENS_FORECAST,
    REAL_LENS_RECALL,
    FPR_BY_CONFUSER,
    EVALUATION_REPORT,
    SEARCH_TARGETS,
    SEARCH_SCORES,
    SEARCH_STAMPS,
    CANDIDATES,
    CANDIDATE_GALLERY,
    VISUAL_GRADES,
    ALERTS,
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
