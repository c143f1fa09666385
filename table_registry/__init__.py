"""The tables registry: every lake table once (key, contract, partitioning, audits)."""

from .tables import TABLES, Table, by_key

__all__ = ["TABLES", "Table", "by_key"]
