"""Audits: what a staged table must satisfy before it is published.

An :class:`Audit` names a rule and says whether its failure blocks publication (severity ERROR)
or only warns (WARN). Each audit function takes plain inputs (a staged table or dataset, the
values it is compared with) and returns an :class:`AuditOutcome`; nothing here knows about
Dagster. The asset layer declares one asset check per audit and reports each outcome as that
check's result. Table contracts (columns, keys, ranges) are in :mod:`darkhaloscope.contracts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from .contracts import Contract, schema_problems, value_problems

ERROR, WARN = "ERROR", "WARN"


@dataclass(frozen=True)
class AuditOutcome:
    """The result of one audit on one staged table (or partition)."""

    name: str
    passed: bool
    blocking: bool
    severity: str
    metadata: dict[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True)
class Audit:
    """An audit's identity: ``name`` (the asset check's name), what it checks, whether a failure
    blocks publication (blocking audits fail with severity ERROR, the others warn)."""

    name: str
    description: str
    blocking: bool = True

    @property
    def severity(self) -> str:
        return ERROR if self.blocking else WARN

    def outcome(self, passed: bool, metadata: dict | None = None, problem: str = "") -> AuditOutcome:
        """The outcome; ``problem`` describes a failure (the audit's description when it passed)."""
        return AuditOutcome(
            name=self.name,
            passed=bool(passed),
            blocking=self.blocking,
            severity=self.severity,
            metadata=dict(metadata or {}),
            description=self.description if passed else (problem or f"{self.name} failed: {self.description}"),
        )


def blocking_failures(outcomes: list[AuditOutcome]) -> list[AuditOutcome]:
    """The outcomes that stop publication."""
    return [o for o in outcomes if o.blocking and not o.passed]


def combine(outcomes: list[AuditOutcome], labels: list[str]) -> list[AuditOutcome]:
    """One outcome per audit name over several partitions (``labels[i]`` names the partition of
    ``outcomes[i]``): passed when every partition passed, metadata and failures per partition."""
    by_name: dict[str, list[tuple[str, AuditOutcome]]] = {}
    for label, o in zip(labels, outcomes):
        by_name.setdefault(o.name, []).append((label, o))
    out = []
    for name, pairs in by_name.items():
        if len(pairs) == 1:
            out.append(pairs[0][1])
            continue
        first = pairs[0][1]
        failed = [(label, o) for label, o in pairs if not o.passed]
        description = "; ".join(f"{label}: {o.description}" for label, o in failed) if failed else first.description
        out.append(AuditOutcome(name=name, passed=not failed, blocking=first.blocking, severity=first.severity,
                                metadata={"by_partition": {label: o.metadata for label, o in pairs}}, description=description))
    return out


def contract_audit(audit: Audit, data: pa.Table | ds.Dataset, contract: Contract) -> AuditOutcome:
    """Schema (from the data's schema) and then keys, ranges and allowed values (DuckDB over Arrow)."""
    problems = schema_problems(data.schema, contract)
    if not problems:
        problems = value_problems(data, contract)
    return audit.outcome(not problems, {"problems": problems, "n_problems": len(problems)}, problems[0] if problems else "")


def equal_counts_audit(audit: Audit, expected: int, got: int, what: str) -> AuditOutcome:
    """``got`` rows staged where ``expected`` were read (e.g. a sweep file's NAXIS2)."""
    return audit.outcome(expected == got, {"expected_rows": int(expected), "staged_rows": int(got)},
                         f"{what}: {got} rows staged, {expected} expected")


def inside_box_audit(audit: Audit, coords: pa.Table, ra_min: float, ra_max: float, dec_min: float, dec_max: float) -> AuditOutcome:
    """Every row's (ra, dec) [deg] lies in [ra_min, ra_max) x [dec_min, dec_max)."""
    ra = coords.column("ra").to_numpy(zero_copy_only=False)
    dec = coords.column("dec").to_numpy(zero_copy_only=False)
    outside = ~((ra >= ra_min) & (ra < ra_max) & (dec >= dec_min) & (dec < dec_max))
    n_out = int(outside.sum())
    examples = [[float(a), float(b)] for a, b in zip(ra[outside][:5], dec[outside][:5])]
    box = {"ra_min": ra_min, "ra_max": ra_max, "dec_min": dec_min, "dec_max": dec_max}
    return audit.outcome(n_out == 0, {"rows_outside_box": n_out, "box": box, "examples": examples},
                         f"{n_out} rows outside the sweep box {box}, e.g. (ra, dec) = {examples}")


def threshold_audit(audit: Audit, value: float, bound: float, at_least: bool, what: str, extra: dict | None = None) -> AuditOutcome:
    """``value`` >= ``bound`` (``at_least``) or <= it; NaN fails."""
    ok = (value >= bound) if at_least else (value <= bound)
    ok = bool(ok) and not math.isnan(value)
    rel = ">=" if at_least else "<="
    return audit.outcome(ok, {"value": value, "bound": bound, **(extra or {})}, f"{what} = {value:.4g}, required {rel} {bound}")


def count_audit(audit: Audit, n_bad: int, what: str, metadata: dict | None = None) -> AuditOutcome:
    """No rows of a kind (``n_bad`` of them found)."""
    return audit.outcome(n_bad == 0, {"n_violations": int(n_bad), **(metadata or {})}, f"{n_bad} {what}")


def report_audit(audit: Audit, report: dict, ok_key: str = "ok") -> AuditOutcome:
    """An audit over a verification report that carries its own verdict (``report[ok_key]``)."""
    ok = bool(report[ok_key])
    detail = report.get("warnings") or report.get("missing") or report
    return audit.outcome(ok, report, f"{audit.name}: {detail}")


# ------------------------------------------------------------------ score tables
def scores_audit(audit: Audit, scores: pa.Table | ds.Dataset) -> AuditOutcome:
    """Valid rows carry a finite probability in [0, 1]; invalid rows carry no score and a reason."""
    t = scores.to_table(columns=["score", "valid", "invalid_reason"]) if isinstance(scores, ds.Dataset) else scores
    valid = t.column("valid").to_numpy(zero_copy_only=False).astype(bool)
    score = t.column("score").to_numpy(zero_copy_only=False).astype(float)
    reason = np.asarray(t.column("invalid_reason").to_pylist(), dtype=object)
    bad_valid = valid & ~((score >= 0.0) & (score <= 1.0))
    bad_invalid = ~valid & (~np.isnan(score) | (reason == "") | (reason == None))  # noqa: E711
    n_bad = int(bad_valid.sum() + bad_invalid.sum())
    return audit.outcome(n_bad == 0, {"n_rows": int(t.num_rows), "n_valid": int(valid.sum()), "n_bad_valid": int(bad_valid.sum()),
                                      "n_bad_invalid": int(bad_invalid.sum())},
                         f"{int(bad_valid.sum())} valid rows with a score outside [0, 1]; {int(bad_invalid.sum())} invalid rows with a score or without a reason")


def nonempty_cells_audit(audit: Audit, selection: pa.Table) -> AuditOutcome:
    """Every (θ_E, z_l) cell of the first threshold has at least one valid injection (a warning:
    a small demo grid can leave a cell empty)."""
    first = selection.column("threshold_name")[0].as_py() if selection.num_rows else None
    one = selection.filter(pc.equal(selection.column("threshold_name"), first)) if first else selection
    n = one.column("n_valid").to_numpy()
    empty = int((n == 0).sum())
    return audit.outcome(bool(n.size) and empty == 0,
                         {"cells": int(n.size), "nonempty": int((n > 0).sum()), "sufficient": int(pc.sum(one.column("sufficient")).as_py() or 0)},
                         f"{empty} of {n.size} (θ_E, z_l) cells have no valid injection")


# ------------------------------------------------------------------ the audits of each table
# One Audit per asset check: its name, what it checks, whether a failure blocks publication.
SWEEP_FILES_CONTRACT = Audit("sweep_files_contract", "unique sweep file names with valid sky boxes (contract)")
SWEEPS_CONTRACT = Audit("sweeps_contract", "schema, types, key uniqueness and coordinate ranges match the sweeps contract")
SWEEPS_ROW_COUNT = Audit("sweeps_row_count", "row count equals the FITS row count")
SWEEPS_INSIDE_BOX = Audit("sweeps_inside_box", "every row lies inside the sky box in its file name")
SWEEPS_UNIQUE_ACROSS_PARTITIONS = Audit("sweeps_unique_across_partitions", "no object of this sweep file is also in another sweep file's partition")
KNOWN_LENSES_CONTRACT = Audit("known_lenses_contract", "schema, unique names and valid coordinates")
NEGATIVES_CONTRACT = Audit("negatives_contract", "schema, unique object ids, pools and splits match the contract")
NEGATIVES_EXCLUSION = Audit("negatives_exclusion", "no negative within the exclusion radius of a known lens (independent astropy cross-match)")
NEGATIVES_PASS_CUTS = Audit("negatives_pass_cuts", "every negative passes every cut, re-verified with DuckDB SQL over the staged table")
SELECTION_FUNNEL_CONTRACT = Audit("selection_funnel_contract", "one funnel row per (sweep file, cut step), counts consistent, selection recorded")
POSITIVES_CONTRACT = Audit("positives_contract", "schema, unique lens names, tiers, separations within the match radius")
TRAINING_CATALOG_CONTRACT = Audit("training_catalog_contract", "schema, unique object ids, labels and splits")
SPLITS_DISJOINT = Audit("splits_disjoint", "no HEALPix pixel in two splits (pixels recomputed from ra/dec) across negatives, positives and the catalog")
SPLIT_FRACTIONS = Audit("split_fractions", "split fractions of the negative pool within tolerance of 70/15/15 (warning: small areas are lumpy)", blocking=False)
STRATA_HAVE_NEGATIVES = Audit("strata_have_negatives", "every stratum of the positives has negatives")
TRAINING_STRATA_CONTRACT = Audit("training_strata_contract", "one row per stratum, non-negative counts")
CUTOUTS_CONTRACT = Audit("cutouts_contract", "schema (101×101 grz tensors), unique object ids, splits")
CUTOUT_VALIDATION_CONTRACT = Audit("cutout_validation_contract", "one AUC row per shortcut feature, AUCs in [0, 1]")
POSITIVES_ALL_VALID = Audit("positives_all_valid", "every positive cutout passes the quality gate")
NEGATIVES_MOSTLY_VALID = Audit("negatives_mostly_valid", ">= 98% of negative cutouts pass the quality gate")
NO_CORE_BRIGHTNESS_SHORTCUT = Audit("no_core_brightness_shortcut", "no core-brightness feature separates positives from negatives (AUC lower bound <= 0.70)")
INJECTION_PLAN_CONTRACT = Audit("injection_plan_contract", "unique injection ids, grid values and seeds present, batches assigned")
INJECTION_MATCHES_LENSTRONOMY = Audit("injection_matches_lenstronomy", "a sample re-rendered with lenstronomy's ImageModel matches (pixels within 1% of peak, flux within 0.5%)")
INJECTION_PHYSICS_VALID = Audit("injection_physics_valid", "every prior-drawn parameter within its prior's range, μ >= 1, all pixels finite, arc flux in the stamp = source flux × μ")
CUTOUT_SCORES_CONTRACT = Audit("cutout_scores_contract", "one row per cutout; valid rows scored in [0, 1], invalid rows unscored with a reason")
INJECTION_SCORES_CONTRACT = Audit("injection_scores_contract", "injections and controls; valid rows scored in [0, 1], invalid rows unscored with a reason")
THRESHOLDS_CONTRACT = Audit("thresholds_contract", "one row per threshold with its number of negatives")
SELECTION_FUNCTION_CONTRACT = Audit("selection_function_contract", "completeness and its intervals in [0, 1], counts consistent")
SELECTION_FUNCTION_COVERAGE = Audit("selection_function_coverage", "cells with at least one valid injection cover the grid (warning when a cell is empty)", blocking=False)
SELECTION_MARGINALS_CONTRACT = Audit("selection_marginals_contract", "completeness in [0, 1] per marginal bin")
REAL_LENS_RECALL_CONTRACT = Audit("real_lens_recall_contract", "recall and its intervals in [0, 1] per tier and threshold")
FPR_BY_CONFUSER_CONTRACT = Audit("fpr_by_confuser_contract", "false-positive rates in [0, 1] per confuser category")
EVALUATION_REPORT_CONTRACT = Audit("evaluation_report_contract", "the report exists and embeds its figures")
SEARCH_TARGETS_CONTRACT = Audit("search_targets_contract", "schema, unique object ids, coordinates and splits")
SEARCH_TARGETS_IN_FUNNEL = Audit("search_targets_in_funnel", "targets of each sweep file = the funnel's rows remaining before the known-lens exclusion")
SEARCH_SCORES_CONTRACT = Audit("search_scores_contract", "one row per target; valid rows scored in [0, 1], invalid rows unscored with a reason")
SEARCH_SCORES_COVER_TARGETS = Audit("search_scores_cover_targets", "every target has exactly one row (scored or with its reason), all from the published model")
SEARCH_STAMPS_CONTRACT = Audit("search_stamps_contract", "kept stamps: unique object ids, exactly the rows marked stamp_kept")
CANDIDATES_CONTRACT = Audit("candidates_contract", "unique candidates ranked 1..n, scores, percentiles and completeness in range")
CANDIDATES_ONE_MODEL = Audit("candidates_one_model", "every candidate was scored by one model, the published lens finder")
CANDIDATE_GALLERY_CONTRACT = Audit("candidate_gallery_contract", "the page exists and shows one stamp per candidate shown")
VISUAL_GRADES_CONTRACT = Audit("visual_grades_contract", "one row per (round, object), grades in A/B/C/not_a_lens/ungraded")
VISUAL_GRADES_ROUNDS_KEPT = Audit("visual_grades_rounds_kept", "every earlier round is kept unchanged")
ALERTS_CONTRACT = Audit("alerts_contract", "one row per delivered alert with kind, asset and severity")
