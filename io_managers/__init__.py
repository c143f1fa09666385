"""IO managers of the lakehouse."""

from .parquet import ParquetIOManager, partition_for_key

__all__ = ["ParquetIOManager", "partition_for_key"]
