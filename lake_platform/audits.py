"""Audits: what a staged table must satisfy before it is published.

An :class:`Audit` names a rule and says whether its failure blocks publication (severity ERROR)
or only warns (WARN). Each audit function takes plain inputs (a staged table or dataset, the
values it is compared with) and returns an :class:`AuditOutcome`; nothing here knows about
Dagster. The asset layer declares one asset check per audit and reports each outcome as that
check's result. Table contracts (columns, keys, ranges) are in :mod:`lake_platform.contracts`; every
table's own audits are declared in ``table_registry``.
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
        out.append(
            AuditOutcome(
                name=name,
                passed=not failed,
                blocking=first.blocking,
                severity=first.severity,
                metadata={"by_partition": {label: o.metadata for label, o in pairs}},
                description=description,
            )
        )
    return out


def contract_audit(audit: Audit, data: pa.Table | ds.Dataset, contract: Contract) -> AuditOutcome:
    """Schema (from the data's schema) and then keys, ranges and allowed values (DuckDB over Arrow)."""
    problems = schema_problems(data.schema, contract)
    if not problems:
        problems = value_problems(data, contract)
    return audit.outcome(
        not problems, {"problems": problems, "n_problems": len(problems)}, problems[0] if problems else ""
    )


def equal_counts_audit(audit: Audit, expected: int, got: int, what: str) -> AuditOutcome:
    """``got`` rows staged where ``expected`` were read (e.g. a sweep file's NAXIS2)."""
    return audit.outcome(
        expected == got,
        {"expected_rows": int(expected), "staged_rows": int(got)},
        f"{what}: {got} rows staged, {expected} expected",
    )


def inside_box_audit(
    audit: Audit, coords: pa.Table, ra_min: float, ra_max: float, dec_min: float, dec_max: float
) -> AuditOutcome:
    """Every row's (ra, dec) [deg] lies in [ra_min, ra_max) x [dec_min, dec_max)."""
    ra = coords.column("ra").to_numpy(zero_copy_only=False)
    dec = coords.column("dec").to_numpy(zero_copy_only=False)
    outside = ~((ra >= ra_min) & (ra < ra_max) & (dec >= dec_min) & (dec < dec_max))
    n_out = int(outside.sum())
    examples = [[float(a), float(b)] for a, b in zip(ra[outside][:5], dec[outside][:5])]
    box = {"ra_min": ra_min, "ra_max": ra_max, "dec_min": dec_min, "dec_max": dec_max}
    return audit.outcome(
        n_out == 0,
        {"rows_outside_box": n_out, "box": box, "examples": examples},
        f"{n_out} rows outside the sweep box {box}, e.g. (ra, dec) = {examples}",
    )


def threshold_audit(
    audit: Audit, value: float, bound: float, at_least: bool, what: str, extra: dict | None = None
) -> AuditOutcome:
    """``value`` >= ``bound`` (``at_least``) or <= it; NaN fails."""
    ok = (value >= bound) if at_least else (value <= bound)
    ok = bool(ok) and not math.isnan(value)
    rel = ">=" if at_least else "<="
    return audit.outcome(
        ok, {"value": value, "bound": bound, **(extra or {})}, f"{what} = {value:.4g}, required {rel} {bound}"
    )


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
    return audit.outcome(
        n_bad == 0,
        {
            "n_rows": int(t.num_rows),
            "n_valid": int(valid.sum()),
            "n_bad_valid": int(bad_valid.sum()),
            "n_bad_invalid": int(bad_invalid.sum()),
        },
        f"{int(bad_valid.sum())} valid rows with a score outside [0, 1]; "
        f"{int(bad_invalid.sum())} invalid rows with a score or without a reason",
    )


def nonempty_cells_audit(audit: Audit, selection: pa.Table) -> AuditOutcome:
    """Every (θ_E, z_l) cell of the first threshold has at least one valid injection (a warning:
    a small demo grid can leave a cell empty)."""
    first = selection.column("threshold_name")[0].as_py() if selection.num_rows else None
    one = selection.filter(pc.equal(selection.column("threshold_name"), first)) if first else selection
    n = one.column("n_valid").to_numpy()
    empty = int((n == 0).sum())
    return audit.outcome(
        bool(n.size) and empty == 0,
        {
            "cells": int(n.size),
            "nonempty": int((n > 0).sum()),
            "sufficient": int(pc.sum(one.column("sufficient")).as_py() or 0),
        },
        f"{empty} of {n.size} (θ_E, z_l) cells have no valid injection",
    )
