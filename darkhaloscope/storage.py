"""What the science library needs of storage, as protocols: the caller passes the storage in.

Library code that reads or writes tables (a sweep file's partition, the published lens finder,
the in-flight chunks of a resumable search) takes a :class:`PartitionedTable` or a
:class:`TableStore` as a parameter. The lakehouse platform's lake implements both (local folder
or S3); a test may pass anything that does. A table is a set of Parquet partitions, each named by
``{dimension: key}`` (``{}`` for an unpartitioned table); a partition may also hold files
(figures, a checkpoint) beside its Parquet part.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Iterable, Iterator, Mapping, Protocol

import pyarrow as pa
import pyarrow.dataset as ds

Partition = Mapping[str, str]


class PartitionedTable(Protocol):
    """One table of a store."""

    def location(self, partition: Partition | None = None) -> str:
        """URI of the table's (or a partition's) folder, for messages and links."""

    def files_location(self, partition: Partition | None = None) -> str:
        """URI of the folder of the table's (or a partition's) files other than Parquet, beside its
        folder: where a writer outside the store (a trainer on another host) puts them."""

    def partitions(self) -> list[dict[str, str]]:
        """The committed partitions (``[{}]`` for an unpartitioned table with data)."""

    def exists(self, partition: Partition | None = None) -> bool:
        """True when the table (or the partition) has committed data."""

    def schema(self, partition: Partition | None = None) -> pa.Schema:
        """The schema, from one Parquet footer."""

    def read(
        self, partition: Partition | None = None, columns: list[str] | None = None, filter: ds.Expression | None = None
    ) -> pa.Table:
        """The whole table, or one partition (without its partition columns)."""

    def batches(
        self,
        columns: list[str] | None = None,
        filter: ds.Expression | None = None,
        batch_size: int = 4096,
        partition: Partition | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Record batches of the table (or one partition), with bounded memory."""

    def dataset(self, partitions: Iterable[Partition] | None = None) -> ds.Dataset:
        """A lazy dataset over every partition (or the ones given), with hive partition columns."""

    def write(
        self,
        data: pa.Table | Iterable[pa.RecordBatch],
        schema: pa.Schema | None = None,
        partition: Partition | None = None,
        row_group_size: int = 64_000,
    ) -> Any:
        """Write one partition (or the unpartitioned table), committed in one step."""

    def delete(self, partition: Partition) -> None:
        """Remove a partition (and every partition below it)."""

    def local_folder(self, partition: Partition, subfolder: str | None = None) -> AbstractContextManager[str]:
        """A local path holding the table's files other than Parquet under ``partition`` (e.g. a
        checkpoint's), or those of ``subfolder``, a relative folder below it, for the duration of
        the context (the folder itself on a local store, a temporary copy otherwise)."""

    def files(self) -> list[str]:
        """URIs of the table's committed Parquet files (an absolute path or ``s3://...``), for a
        reader outside the store (a trainer on another host)."""


class TableStore(Protocol):
    """A store of tables named by (group, name), e.g. a scratch area for resumable work."""

    def table(self, group: str, name: str) -> PartitionedTable:
        """The table ``group/name`` of this store (it need not exist yet)."""
