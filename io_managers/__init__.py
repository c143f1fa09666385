"""IO managers of the lakehouse."""

from .parquet import LakeIOManager, partition_for_key

__all__ = ["LakeIOManager", "partition_for_key"]
