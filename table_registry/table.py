"""A lake table's registry entry: its key (group, name), contract, partitioning and audits.

The Dagster layer builds each asset's key, partitions and check specs from these entries, and
its one publish path runs a table's contract audit from them; library code that reads or writes
a table receives it from the caller (a table handle of the lake), never by spelling its key.
"""

from __future__ import annotations

from dataclasses import dataclass

from lake_platform.audits import Audit
from lake_platform.contracts import Contract


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
