"""The lake: Parquet tables on a local folder or on S3, committed atomically per partition.

Layout: ``<lake>/<group>/<asset>/[<dim>=<key>/...]part-0.parquet`` (zstd). Every partition is one
Parquet file. A write streams record batches into a hidden staging object under
``<lake>/_staging/`` (named ``w-<host>-<pid>-<start>-<token>``, so that an orphan left by a killed
writer can be traced to its process; see :mod:`lake_platform.staging`) and then moves it onto
``part-0.parquet`` in one step: a rename on a local disk, a server-side copy on S3 (an S3 object
becomes visible whole or not at all). A reader therefore sees the previous version or the new one,
never half a partition, and a write that fails or is killed leaves the previous version readable.
Top-level folders whose names start with ``_`` (staging, rejected data, in-flight fetches,
manifests) are not tables: :meth:`Lake.tables` and every reader skip them.

After the part, a commit records its manifest (part name, size, sha256) under ``<lake>/_manifests/``
(:mod:`lake_platform.manifest`); readers take only the parts the manifests record and verify them
first, so a stray, missing or altered file is named in an InputError and never read. Last, the
commit adds the partition to the table's commit records, so that a partition deleted together
with its manifest is named as gone rather than served as a smaller table.

A table's other files (PNG figures, the HTML report and gallery, checkpoints) live beside its
folder, in ``<lake>/<group>/<asset>.files/[<dim>=<key>/...]`` (:meth:`Lake.files_path`), so a
table's folder holds only Parquet and opens as one dataset in any Parquet reader
(``pyarrow.dataset``, ``pandas.read_parquet``, DuckDB, Spark); they use the same commit rule
through ``write_bytes``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from darkhaloscope import s3_retries
from darkhaloscope.errors import CredentialError, InputError, StorageError

from . import manifest
from .contracts import Contract, described_schema
from .manifest import MANIFEST_DIR, MANIFEST_FILE

PART_FILE = "part-0.parquet"
#: Schema metadata key of a file's partition columns that its writer's rows held (JSON {name:
#: place}): they live in the folder names only, and a reader puts them back in their place.
PARTITION_COLUMNS_KEY = b"dhs.partition_columns"
#: Suffix of the folder beside a table's that holds its files other than Parquet (not a table name:
#: a table's name is snake_case).
FILES_SUFFIX = ".files"
#: Folder (under the lake root) of everything not yet published: writers' temporary objects and
#: each run's staged tables (:mod:`lake_platform.staging`).
STAGING_DIR = "_staging"
#: Folder (under the lake root) of the scratch tables of resumable work in progress (chunks a
#: search scored or a cutout service delivered so far); not a table, dropped once published.
INFLIGHT_DIR = "_inflight"
#: Prefix of a writer's temporary object in STAGING_DIR: ``w-<host>-<pid>-<start s>-<token>``.
WRITER_PREFIX = "w-"
#: Seconds a reader waits before checking a table's manifests once more (a publish in progress).
_RECHECK_S = 0.2
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+\-]*$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def validate_partition_key(value: str) -> str:
    """Return ``value`` if it is safe as one path segment; InputError otherwise.

    Refuses empty keys, path separators, ``..``, leading dots/underscores and other characters
    outside ``[A-Za-z0-9._+-]``, so a partition key can never address a path outside its table.
    """
    if not isinstance(value, str) or not _KEY_RE.match(value) or ".." in value:
        raise InputError(
            f"partition key {value!r} is not allowed: use letters, digits, '.', '_', '+', '-' "
            "(no path separators, no '..', not starting with '.' or '_')"
        )
    return value


def host_tag() -> str:
    """This host's name as used in staging names: letters, digits and dots only (no '-')."""
    return re.sub(r"[^A-Za-z0-9.]", ".", socket.gethostname())[:64] or "host"


def partition_columns(schema: pa.Schema) -> dict[str, dict]:
    """{partition column: {"index": its place among the writer's columns, "nullable": its field's
    nullability}} of a file's schema: the partition columns its writer's rows held, which live in
    the folder names only (:data:`PARTITION_COLUMNS_KEY`)."""
    return json.loads((schema.metadata or {}).get(PARTITION_COLUMNS_KEY, b"{}"))


def _without_partition_columns(
    batch: pa.RecordBatch, partition: Mapping[str, str], moved: Mapping[str, dict], where: str
) -> pa.RecordBatch:
    """``batch`` without its partition columns, each checked to hold its partition's key."""
    for name in moved:
        column = batch.column(name)
        wrong = pc.invert(pc.fill_null(pc.equal(column, partition[name]), False))
        if pc.any(wrong).as_py():
            value = column.filter(wrong)[0].as_py()
            raise InputError(f"{where}: a row has {name}={value!r}, but the partition is {name}={partition[name]!r}")
    return batch.drop_columns(list(moved))


def _string_lengths(table: pa.Table) -> dict[bytes, bytes]:
    """astropy's ``table::len::<column>`` schema metadata (the longest value, in characters, of each
    string column), which its Parquet reader sizes a string column by (it warns and scans without)."""
    out = {}
    for name, column in zip(table.column_names, table.columns):
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            longest = pc.max(pc.utf8_length(column)).as_py() if len(column) else 0
            out[f"table::len::{name}".encode()] = str(max(int(longest or 0), 1)).encode()
    return out


def _relative_name(name: str) -> str:
    """``name`` if each of its ``/``-separated segments is a safe path segment; InputError otherwise."""
    for segment in str(name).split("/"):
        validate_partition_key(segment)
    return name


def _partition_of(rel_folder: str) -> dict[str, str]:
    """``{dim: key}`` of a partition folder relative to its table's (``dim=key/...``)."""
    return dict(seg.split("=", 1) for seg in rel_folder.split("/") if seg)


def _validate_name(kind: str, value: str) -> str:
    if not _NAME_RE.match(value):
        raise InputError(f"{kind} name {value!r} must be lower-case snake_case")
    return value


@dataclass(frozen=True)
class CommitInfo:
    """What a committed partition write produced."""

    uri: str
    rows: int
    bytes: int
    partition: dict[str, str] | None


#: Local file-system errors that the same call would meet again: a file where a folder should be
#: (or the reverse), a read-only file system, missing permission, a full disk or quota.
_PERMANENT_ERRNOS = {
    errno.ENOTDIR: "a file stands where the lake needs a folder (is DHS_LAKE, or a folder in it, a file?)",
    errno.EEXIST: "a file stands where the lake needs a folder (is DHS_LAKE, or a folder in it, a file?)",
    errno.EISDIR: "a folder stands where the lake needs a file",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied for this user",
    errno.EPERM: "operation not permitted for this user",
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.ENAMETOOLONG: "the path name is too long",
}


def translate_storage_error(exc: BaseException, where: str) -> BaseException:
    """Classify a pyarrow/AWS/OS storage error: CredentialError, InputError or StorageError (all
    permanent: no layer retries them) with a clear message naming ``where``; an S3 endpoint the
    SDK could not reach through its retries is a StorageError naming it. Anything else (a
    transient S3 fault the SDK already retried) is returned unchanged."""
    reason = _PERMANENT_ERRNOS.get(getattr(exc, "errno", None) or -1) if isinstance(exc, OSError) else None
    if reason is not None:
        return StorageError(f"cannot use {where}: {reason} ({exc})")
    text = str(exc)
    credential_codes = (
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "TokenRefreshRequired",
        # pyarrow 26 reports the AWS SDK's enum names
        "INVALID_ACCESS_KEY_ID",
        "SIGNATURE_DOES_NOT_MATCH",
        "EXPIRED_TOKEN",
        "INVALID_CLIENT_TOKEN_ID",
    )
    if any(m in text for m in credential_codes):
        return CredentialError(
            f"S3 rejected the credentials while accessing {where}: the access key is invalid or expired "
            "(refresh AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or the AWS profile)"
        )
    if "ACCESS_DENIED" in text or "AccessDenied" in text or "HTTP status 403" in text:
        return CredentialError(f"S3 denied access to {where}: missing or insufficient credentials")
    if "NoSuchBucket" in text or "NO_SUCH_BUCKET" in text or re.search(r"Bucket '[^']*' not found", text):
        return InputError(f"S3 bucket of {where} does not exist")
    if "curlCode: 7," in text or "curlCode: 6," in text:  # connection refused, host unknown (not a timeout)
        # after the SDK's own retries: the endpoint is down or wrong (DHS_S3_ENDPOINT), not a blip
        return StorageError(
            f"cannot reach the S3 endpoint while accessing {where} (is DHS_S3_ENDPOINT right and the "
            f"server up?): {text}"
        )
    if "curlCode: 28," in text:  # the SDK's timeout, after its retries: the server accepts and does not answer
        return StorageError(
            f"the S3 endpoint did not answer in time while accessing {where} (each attempt waits "
            f"DHS_S3_CONNECT_TIMEOUT_S to connect and DHS_S3_REQUEST_TIMEOUT_S for an answer; is the server up?): "
            f"{text}"
        )
    return exc


class Lake:
    """Parquet tables under a root URI: a local folder or ``s3://bucket/prefix``.

    ``s3_endpoint`` overrides the S3 endpoint (``http://127.0.0.1:9000`` for a local server;
    pyarrow ignores AWS_ENDPOINT_URL, so it must be passed explicitly). Credentials come from the
    environment or AWS profiles through the AWS SDK's default chain; they are never logged.

    ``contracts(group, table)`` gives a table's contract (or None): every Parquet file written
    carries its columns' units and descriptions in its field metadata and astropy's table header
    (:func:`~lake_platform.contracts.described_schema`), so astropy, pandas, DuckDB or TOPCAT users
    read them from the file itself.
    """

    def __init__(
        self,
        uri: str,
        s3_endpoint: str | None = None,
        s3_region: str = "us-east-1",
        s3_max_attempts: int = 5,
        s3_connect_timeout_s: float = 5.0,
        s3_request_timeout_s: float = 30.0,
        contracts: Callable[[str, str], Contract | None] | None = None,
    ):
        self.uri = uri.rstrip("/") if uri != "/" else uri
        self.s3_endpoint = s3_endpoint
        self.contracts = contracts
        #: Readers refuse a part whose footer statistics break its contract's ranges; off in a
        #: run's staging area, whose audits report such rows and reject the table.
        self.ranges_on_read = True
        if self.uri.startswith("s3://"):
            bucket_prefix = self.uri[len("s3://") :]
            if not bucket_prefix:
                raise InputError(f"lake URI {uri!r} names no bucket")
            self._s3_options: dict = dict(
                region=s3_region,
                max_attempts=s3_max_attempts,
                connect_timeout=s3_connect_timeout_s,
                request_timeout=s3_request_timeout_s,
            )
            if s3_endpoint:
                scheme, _, host = s3_endpoint.partition("://")
                if not host:
                    scheme, host = "https", s3_endpoint
                self._s3_options.update(endpoint_override=host, scheme=scheme)
            self.fs: pafs.FileSystem = self._s3_filesystem()
            self.root = bucket_prefix.rstrip("/")
            self.is_s3 = True
        else:
            path = uri[len("file://") :] if uri.startswith("file://") else uri
            self.fs = pafs.LocalFileSystem()
            self.root = os.path.abspath(path)
            self.is_s3 = False

    def _s3_filesystem(self) -> pafs.S3FileSystem:
        s3_retries.start()  # before S3 support initialises, so the SDK's retries are counted
        options = dict(self._s3_options)
        attempts = options.pop("max_attempts")
        return pafs.S3FileSystem(retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=attempts), **options)

    def __getstate__(self) -> dict:
        # A pickled S3FileSystem comes back with the default retry strategy (pyarrow's __reduce__
        # leaves it out), so a lake shipped to a Spark executor is rebuilt from its own settings.
        state = dict(self.__dict__)
        if self.is_s3:
            del state["fs"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.is_s3:
            self.fs = self._s3_filesystem()

    # ---------------------------------------------------------------- paths
    def table_path(self, group: str, asset: str) -> str:
        """Filesystem path (no scheme) of a table's folder."""
        return f"{self.root}/{_validate_name('group', group)}/{_validate_name('asset', asset)}"

    def partition_path(self, group: str, asset: str, partition: Mapping[str, str] | None = None) -> str:
        """Filesystem path of a partition's folder: hive style ``dim=key`` segments in the order given."""
        path = self.table_path(group, asset)
        for dim, key in (partition or {}).items():
            path += f"/{_validate_name('partition dimension', dim)}={validate_partition_key(key)}"
        return path

    def files_path(self, group: str, asset: str, partition: Mapping[str, str] | None = None) -> str:
        """Filesystem path of the folder of a table's (or a partition's) files other than Parquet:
        ``<group>/<asset>.files/[<dim>=<key>/...]``, beside the table's folder."""
        path = f"{self.table_path(group, asset)}{FILES_SUFFIX}"
        for dim, key in (partition or {}).items():
            path += f"/{_validate_name('partition dimension', dim)}={validate_partition_key(key)}"
        return path

    def manifest_path(self, group: str, asset: str, partition: Mapping[str, str] | None = None) -> str:
        """Filesystem path of a partition's manifest (:mod:`lake_platform.manifest`):
        ``<lake>/_manifests/<group>/<asset>/[<dim>=<key>/...]manifest.json``."""
        rel = self.partition_path(group, asset, partition)[len(self.root) + 1 :]
        return f"{self.root}/{MANIFEST_DIR}/{rel}/{MANIFEST_FILE}"

    def record_path(self, group: str, asset: str, partition: Mapping[str, str] | None = None) -> str:
        """Filesystem path of a partition's commit record (:mod:`lake_platform.manifest`):
        ``<lake>/_manifests/<group>/<asset>/_committed/[<dim>=<key>/...]committed``."""
        base = self.table_path(group, asset)
        rel = self.partition_path(group, asset, partition)[len(base) + 1 :]
        return manifest.record_path(self.manifest_path(group, asset).rsplit("/", 1)[0], rel)

    def full_uri(self, path: str) -> str:
        """URI of a filesystem path, with the scheme a user can paste (s3://... or an absolute path)."""
        return f"s3://{path}" if self.is_s3 else path

    # --------------------------------------------------------------- writes
    def _commit(self, staging: str, final: str, where: str) -> None:
        try:
            self.fs.move(staging, final)
        except OSError as exc:
            self._discard(staging)
            raise translate_storage_error(exc, where) from exc

    def _discard(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass

    def _staging_path(self, folder: str, suffix: str) -> str:
        """A fresh temporary object in the lake's staging folder, named after its writer process
        (``folder`` is the target's folder: only its filesystem matters)."""
        name = f"{WRITER_PREFIX}{host_tag()}-{os.getpid()}-{int(time.time())}-{secrets.token_hex(8)}{suffix}"
        return f"{self.root}/{STAGING_DIR}/{name}"

    def subtree(self, relative: str) -> "Lake":
        """A lake over the same storage rooted at ``<root>/<relative>`` (e.g. a run's staging area)."""
        sub = object.__new__(Lake)
        sub.__dict__.update(self.__dict__)
        sub.uri = f"{self.uri}/{relative}"
        sub.root = f"{self.root}/{relative}"
        return sub

    def write_table(
        self,
        group: str,
        asset: str,
        data: pa.Table | Iterable[pa.RecordBatch],
        schema: pa.Schema | None = None,
        partition: Mapping[str, str] | None = None,
        row_group_size: int = 64_000,
    ) -> CommitInfo:
        """Write one partition (or the whole unpartitioned table) and commit it in one step.

        ``data`` is a Table or an iterable of RecordBatches (streamed; memory stays bounded).
        ``schema`` is required for an iterable. On any error the staging object is removed and
        the previous version of the partition is untouched.
        """
        folder = self.partition_path(group, asset, partition)
        final = f"{folder}/{PART_FILE}"
        where = self.full_uri(final)
        if isinstance(data, pa.Table):
            schema = schema or data.schema
            batches: Iterable[pa.RecordBatch] = data.to_batches(max_chunksize=row_group_size)
        elif schema is None:
            raise ValueError("schema is required when data is an iterable of record batches")
        else:
            batches = data
        # a partition column lives in the folder names only (the hive layout every Parquet reader
        # expects): a copy in the file would give readers the column twice, in two types
        moved = {
            d: {"index": schema.get_field_index(d), "nullable": schema.field(d).nullable}
            for d in (partition or {})
            if d in schema.names and pa.types.is_string(schema.field(d).type)
        }
        stored = pa.schema([f for f in schema if f.name not in moved], metadata=schema.metadata)
        file_schema = described_schema(stored, self.contracts(group, asset) if self.contracts else None)
        extra = {PARTITION_COLUMNS_KEY: json.dumps(moved).encode()} if moved else {}
        if isinstance(data, pa.Table):
            extra.update(_string_lengths(data.drop_columns(list(moved))))
        file_schema = file_schema.with_metadata({**file_schema.metadata, **extra})
        staging = self._staging_path(folder, ".parquet")
        try:
            self.fs.create_dir(folder, recursive=True)
            self.fs.create_dir(staging.rsplit("/", 1)[0], recursive=True)
        except OSError as exc:
            raise translate_storage_error(exc, where) from exc
        rows = 0
        try:
            with self.fs.open_output_stream(staging) as sink:
                # Dictionary encoding only for strings: on float columns it is attempted, overflows
                # and falls back per page, which costs write time and yields larger files
                # (BENCHMARKS.md, summary table, row *sweep ingestion*).
                strings = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
                with pq.ParquetWriter(
                    sink, file_schema, compression="zstd", write_statistics=True, use_dictionary=strings
                ) as writer:
                    for batch in batches:
                        if batch.schema != schema:
                            batch = batch.cast(schema)
                        if moved:
                            batch = _without_partition_columns(batch, partition, moved, where)
                        batch = batch.replace_schema_metadata(file_schema.metadata)
                        rows += batch.num_rows
                        writer.write_batch(batch, row_group_size=row_group_size)
        except BaseException as exc:
            self._discard(staging)
            if isinstance(exc, OSError):
                raise translate_storage_error(exc, where) from exc
            raise
        self._commit(staging, final, where)
        size = self._record_manifest(group, asset, partition)
        return CommitInfo(uri=where, rows=rows, bytes=size, partition=dict(partition) if partition else None)

    def _record_manifest(self, group: str, asset: str, partition: Mapping[str, str] | None) -> int:
        """Record the manifest of a partition's committed part (its size and sha256), committed
        like the part itself; returns the part's size in bytes."""
        part = f"{self.partition_path(group, asset, partition)}/{PART_FILE}"
        path = self.manifest_path(group, asset, partition)
        try:
            size = self.fs.get_file_info(part).size or 0
            entry = {"name": PART_FILE, "bytes": size, "sha256": manifest.file_sha256(self.fs, part)}
            payload = manifest.manifest_bytes(f"{group}/{asset}", partition, [entry])
            staging = self._staging_path(path, ".json")
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with self.fs.open_output_stream(staging) as out:
                out.write(payload)
        except OSError as exc:
            raise translate_storage_error(exc, self.full_uri(path)) from exc
        self._commit(staging, path, self.full_uri(path))
        self._record_commit(group, asset, partition)
        return size

    def _record_commit(self, group: str, asset: str, partition: Mapping[str, str] | None) -> None:
        """Add the partition to the table's commit records (after its manifest: a record names a
        partition whose commit finished). An empty object: that it exists is the record."""
        path = self.record_path(group, asset, partition)
        try:
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with self.fs.open_output_stream(path) as out:
                out.write(b"")
        except OSError as exc:
            raise translate_storage_error(exc, self.full_uri(path)) from exc

    def write_bytes(
        self, group: str, asset: str, name: str, payload: bytes, partition: Mapping[str, str] | None = None
    ) -> str:
        """Commit a file of a table other than Parquet (PNG, HTML, JSON, checkpoint file) atomically
        into its files folder (:meth:`files_path`); ``name`` may hold ``/``-separated folders
        (``stamps/12.png``). Returns its URI."""
        final = f"{self.files_path(group, asset, partition)}/{_relative_name(name)}"
        folder = final.rsplit("/", 1)[0]
        where = self.full_uri(final)
        staging = self._staging_path(folder, "")
        try:
            self.fs.create_dir(folder, recursive=True)
            self.fs.create_dir(staging.rsplit("/", 1)[0], recursive=True)
            with self.fs.open_output_stream(staging) as out:
                out.write(payload)
        except OSError as exc:
            raise translate_storage_error(exc, where) from exc
        self._commit(staging, final, where)
        return where

    def read_bytes(self, group: str, asset: str, name: str, partition: Mapping[str, str] | None = None) -> bytes:
        """Read a file written by ``write_bytes``."""
        path = f"{self.files_path(group, asset, partition)}/{_relative_name(name)}"
        try:
            with self.fs.open_input_stream(path) as f:
                return f.read()
        except OSError as exc:
            raise translate_storage_error(exc, self.full_uri(path)) from exc

    def delete_partition(self, group: str, asset: str, partition: Mapping[str, str]) -> None:
        """Remove one partition folder and its files folder (used to drop partitions that no longer
        exist upstream)."""
        # the records first (those of the partitions below one of fewer dimensions too): a reader
        # meanwhile sees a partition without a record (read as before), never one gone
        records = self.record_path(group, asset, partition).rsplit("/", 1)[0]
        manifests = self.manifest_path(group, asset, partition).rsplit("/", 1)[0]
        for folder in (
            records,
            self.partition_path(group, asset, partition),
            self.files_path(group, asset, partition),
            manifests,
        ):
            try:
                self.fs.delete_dir(folder)
            except FileNotFoundError:
                pass

    # ---------------------------------------------------------------- reads
    def check(
        self, group: str, asset: str, content: bool = True, partition: Mapping[str, str] | None = None
    ) -> manifest.Check:
        """Compare a table's (or one partition's) files with their manifests (sizes; sha256
        digests too when ``content``); problems name files relative to the table's folder."""
        base = self.table_path(group, asset)
        folder = self.partition_path(group, asset, partition)
        manifests = self.manifest_path(group, asset, partition).rsplit("/", 1)[0]
        try:
            found = manifest.check_table(
                self.fs, folder, manifests, content, lambda name: name == PART_FILE, records=partition is None
            )
        except OSError as exc:
            raise translate_storage_error(exc, self.full_uri(folder)) from exc
        prefix = folder[len(base) + 1 :]
        if not prefix:
            return found
        return manifest.Check(
            found.parts,
            [f"{prefix}/{f}".rstrip("/") for f in found.recorded_folders],
            [(f"{prefix}/{rel}", what) for rel, what in found.problems],
        )

    def _part_files(
        self, group: str, asset: str, content: bool = False, partition: Mapping[str, str] | None = None
    ) -> list[str]:
        """The part files of a table (or one partition) that its manifests record, checked (sizes;
        digests when ``content``); InputError ``<group>/<asset>: <file>: <problem>`` otherwise.
        One recheck after a short pause, so that a reader racing a publish (the part moved, its
        manifest not yet) sees the finished commit."""
        found = self.check(group, asset, content, partition)
        if found.problems:
            time.sleep(_RECHECK_S)
            found = self.check(group, asset, content, partition)
        return manifest.require(found, f"{group}/{asset}")

    def verify(self, group: str, asset: str, adopt: bool = False) -> list[str]:
        """Every problem of a table (``<group>/<asset>: <file>: <problem>``), digests checked. With
        ``adopt``, a partition whose part no manifest records (a lake written before manifests)
        first gets one recorded from its bytes as they are, and one whose manifest no commit
        record lists (written before commit records) gets its record."""
        base = self.table_path(group, asset)
        if adopt:
            found = self.check(group, asset, content=False)
            for path in self._unrecorded_parts(found, base):
                self._record_manifest(group, asset, _partition_of(path[len(base) + 1 : -len(PART_FILE) - 1]))
            for rel in found.unrecorded:
                self._record_commit(group, asset, _partition_of(rel))
        found = self.check(group, asset, content=True)
        unrecorded = [
            (rel or ".", "not in the table's commit records (written before them: `dhs verify --adopt` records it)")
            for rel in found.unrecorded
        ]
        return [f"{group}/{asset}: {rel}: {what}" for rel, what in found.problems + unrecorded]

    def _unrecorded_parts(self, found: manifest.Check, base: str) -> list[str]:
        """Part files (paths) in hive partition folders that hold no manifest."""
        out = []
        for rel, _ in found.problems:
            folder, _, name = rel.rpartition("/")
            segments = [s for s in folder.split("/") if s]
            hive = all("=" in s for s in segments)
            if name == PART_FILE and hive and folder not in found.recorded_folders:
                out.append(f"{base}/{rel}")
        return out

    def part_uris(self, group: str, asset: str) -> list[str]:
        """URIs of every committed partition file (``file://`` or ``s3://``), e.g. for Spark readers:
        those the manifests record, sizes checked (the digests would read the whole table in the
        driver)."""
        return [f"s3://{p}" if self.is_s3 else f"file://{p}" for p in self._part_files(group, asset)]

    def exists(self, group: str, asset: str, partition: Mapping[str, str] | None = None) -> bool:
        """True when the table (or the given partition) has committed data."""
        if partition is not None:
            path = f"{self.partition_path(group, asset, partition)}/{PART_FILE}"
            try:
                return self.fs.get_file_info(path).type == pafs.FileType.File
            except OSError as exc:
                raise translate_storage_error(exc, self.full_uri(path)) from exc
        return bool(self._part_files(group, asset))

    def partitions(self, group: str, asset: str) -> list[dict[str, str]]:
        """Committed partitions of a table as ``{dim: key}`` dicts (empty dict for an unpartitioned table)."""
        base = self.table_path(group, asset)
        return [_partition_of(f[len(base) + 1 : -len(PART_FILE) - 1]) for f in self._part_files(group, asset)]

    def dataset(self, group: str, asset: str, partitions: Iterable[Mapping[str, str]] | None = None) -> ds.Dataset:
        """A pyarrow dataset over every committed partition (or the ``partitions`` given, each of
        which must exist), with hive partition columns (strings; where the writer's rows held the
        column, at its place among their columns). Only the parts the manifests record, each
        verified (size and sha256) first."""
        if partitions is None:
            files = self._part_files(group, asset, content=True)
        else:
            files, missing = [], []
            for p in partitions:
                got = self._part_files(group, asset, content=True, partition=p)
                files += got
                missing += [] if got else [f"{self.partition_path(group, asset, p)}/{PART_FILE}"]
            if missing:
                raise InputError(
                    f"table {group}/{asset} lacks {len(missing)} requested partition(s), "
                    f"e.g. {self.full_uri(missing[0])}"
                )
        return self.dataset_of(group, asset, files)

    def dataset_of(self, group: str, asset: str, files: list[str]) -> ds.Dataset:
        """A pyarrow dataset (as :meth:`dataset`) over part files already checked (``check``)."""
        if not files:
            where = self.full_uri(self.table_path(group, asset))
            raise InputError(f"table {group}/{asset} has no committed data in the lake at {where}")
        return self._open_dataset(group, asset, files, every_dimension=True)

    def partition_dataset(
        self, group: str, asset: str, partition: Mapping[str, str], content: bool = True
    ) -> ds.Dataset:
        """A pyarrow dataset over one committed partition, holding the columns its writer gave
        (a partition column the writer's rows held comes back as a column; one they did not, not);
        its part verified against its manifest first (the sha256 too when ``content``)."""
        with self._reading_partition(group, asset, partition) as path:
            files = self._part_files(group, asset, content, partition)
            if not files:
                raise FileNotFoundError(path)
            return self._open_dataset(group, asset, files, every_dimension=False)

    def _open_dataset(self, group: str, asset: str, files: list[str], every_dimension: bool) -> ds.Dataset:
        base = self.table_path(group, asset)
        try:
            footers = [self._footer(group, asset, f) for f in files]
            self._check_ranges(group, asset, files, footers)
            schemas = [m.schema.to_arrow_schema() for m in footers]
            # partitions of one table may hold different column sets (e.g. scores per source): unify
            file_schema = pa.unify_schemas(schemas, promote_options="permissive")
            places: dict[str, dict] = {}
            for schema in schemas:
                places.update(partition_columns(schema))
            dims = [seg.split("=", 1)[0] for seg in files[0][len(base) + 1 :].split("/")[:-1]]
            # a column some files moved into the folder names comes from the names for every file
            # (one written before still holds it: the same value); a dimension no writer's rows
            # held is a column of the whole table's dataset only
            added = [d for d in dims if d in places or (every_dimension and d not in file_schema.names)]
            fields = [f for f in file_schema if f.name not in added]
            last = {"index": len(fields) + len(added), "nullable": True}
            for d in sorted(added, key=lambda d: places.get(d, last)["index"]):
                place = places.get(d, last)
                fields.insert(min(place["index"], len(fields)), pa.field(d, pa.string(), nullable=place["nullable"]))
            part_schema = pa.schema([(d, pa.string()) for d in added])
            return ds.dataset(
                files,
                schema=pa.schema(fields, metadata=file_schema.metadata),
                filesystem=self.fs,
                format="parquet",
                partitioning=ds.partitioning(part_schema, flavor="hive") if added else None,
                partition_base_dir=base,
            )
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise translate_storage_error(exc, self.full_uri(base)) from exc

    def _footer(self, group: str, asset: str, path: str) -> pq.FileMetaData:
        """A part's Parquet footer; InputError naming the file when it does not parse."""
        try:
            return pq.read_metadata(path, filesystem=self.fs)
        except (pa.ArrowInvalid, OSError) as exc:
            # pyarrow reports a footer that does not parse as an OSError ("Couldn't deserialize
            # thrift") or ArrowInvalid ("Parquet magic bytes not found"); storage faults stay theirs
            if isinstance(exc, OSError) and "thrift" not in str(exc) and "Parquet" not in str(exc):
                raise
            rel = path[len(self.table_path(group, asset)) + 1 :]
            raise InputError(f"{group}/{asset}: {rel}: unreadable Parquet footer ({exc}): not read") from exc

    def _check_ranges(self, group: str, asset: str, files: list[str], footers: list[pq.FileMetaData]) -> None:
        """Refuse a part whose footer statistics (each row group's min and max) put a value
        outside a range of the table's contract (a score outside [0, 1]): InputError naming the
        file, the column and the value. Costs no data read; NaN, which Parquet statistics leave
        out, is the audits' to find."""
        contract = self.contracts(group, asset) if self.contracts and self.ranges_on_read else None
        if contract is None or not contract.ranges:
            return
        base = self.table_path(group, asset)
        for path, meta in zip(files, footers):
            names = [meta.schema.column(i).path for i in range(meta.num_columns)]
            for rule in contract.ranges:
                if rule.column not in names:
                    continue
                column = names.index(rule.column)
                for rg in range(meta.num_row_groups):
                    stats = meta.row_group(rg).column(column).statistics
                    if stats is None or not stats.has_min_max:
                        continue
                    low = rule.lo is not None and (
                        stats.min < rule.lo or (not rule.lo_inclusive and stats.min == rule.lo)
                    )
                    high = rule.hi is not None and (
                        stats.max > rule.hi or (not rule.hi_inclusive and stats.max == rule.hi)
                    )
                    if low or high:
                        raise InputError(
                            f"{group}/{asset}: {path[len(base) + 1 :]}: column {rule.column} holds "
                            f"{stats.min if low else stats.max!r} (row group {rg}), outside the contract's "
                            f"[{rule.lo}, {rule.hi}]: not read"
                        )

    @contextmanager
    def _reading_partition(self, group: str, asset: str, partition: Mapping[str, str]) -> Iterator[str]:
        """Path of a committed partition file; a missing one or a storage failure while reading it
        becomes InputError / CredentialError naming the partition."""
        path = f"{self.partition_path(group, asset, partition)}/{PART_FILE}"
        try:
            yield path
        except FileNotFoundError as exc:
            raise InputError(
                f"partition {dict(partition)} of {group}/{asset} is not in the lake ({self.full_uri(path)})"
            ) from exc
        except OSError as exc:
            raise translate_storage_error(exc, self.full_uri(path)) from exc

    def read_table(
        self,
        group: str,
        asset: str,
        partition: Mapping[str, str] | None = None,
        columns: list[str] | None = None,
        filter: ds.Expression | None = None,
    ) -> pa.Table:
        """Read a whole table, or one partition (the columns its writer gave, :meth:`partition_dataset`)."""
        if partition is None:
            return self.dataset(group, asset).to_table(columns=columns, filter=filter)
        with self._reading_partition(group, asset, partition):
            return self.partition_dataset(group, asset, partition).to_table(columns=columns, filter=filter)

    def iter_batches(
        self,
        group: str,
        asset: str,
        columns: list[str] | None = None,
        filter: ds.Expression | None = None,
        batch_size: int = 4096,
        partition: Mapping[str, str] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Stream a table's (or one partition's: the columns its writer gave) record batches with
        bounded memory."""
        if partition is None:
            yield from self.dataset(group, asset).to_batches(columns=columns, filter=filter, batch_size=batch_size)
            return
        with self._reading_partition(group, asset, partition):
            data = self.partition_dataset(group, asset, partition)
            yield from data.to_batches(columns=columns, filter=filter, batch_size=batch_size)

    def read_schema(self, group: str, asset: str, partition: Mapping[str, str] | None = None) -> pa.Schema:
        """Schema of a table (or one partition) from Parquet footers (no data read)."""
        if partition is not None:
            return self.partition_dataset(group, asset, partition, content=False).schema
        files = self._part_files(group, asset)
        if not files:
            raise InputError(f"table {group}/{asset} has no committed data")
        return self._open_dataset(group, asset, files[:1], every_dimension=False).schema

    def count_rows(self, group: str, asset: str) -> int:
        """Row count from Parquet footers."""
        files = self._part_files(group, asset)
        try:
            return sum(self._footer(group, asset, f).num_rows for f in files)
        except OSError as exc:
            raise translate_storage_error(exc, self.full_uri(self.table_path(group, asset))) from exc

    def tables(self) -> list[tuple[str, str]]:
        """(group, asset) of every table with committed data, or with a manifest (a table whose
        parts went missing is listed, so that its readers name what is missing)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True, allow_not_found=True))
        except OSError as exc:
            raise translate_storage_error(exc, self.full_uri(self.root)) from exc
        found = set()
        for i in infos:
            rel = i.path[len(self.root) + 1 :].split("/")
            if i.type == pafs.FileType.File and i.base_name == PART_FILE:
                if len(rel) >= 3 and not rel[0].startswith("_"):
                    found.add((rel[0], rel[1]))
            elif i.type == pafs.FileType.File and i.base_name in (MANIFEST_FILE, manifest.RECORD_FILE):
                if len(rel) >= 4 and rel[0] == MANIFEST_DIR:
                    found.add((rel[1], rel[2]))
        return sorted(found)

    def remove_partitions(self, dimension: str, keep: Iterable[str], probe: tuple[str, str]) -> list[dict]:
        """Delete, from every table partitioned by ``dimension``, the partitions whose key is not in
        ``keep`` (e.g. the partitions of sweep files that left the survey, which must not keep
        feeding readers of the whole table). ``probe`` (group, table) is listed first: when all its
        partitions are kept nothing else is listed. Returns ``[{"table": "<group>/<table>",
        "partition": {...}}]`` of what was removed."""
        keep = set(keep)
        if all(p.get(dimension) in keep for p in self.partitions(*probe)):
            return []
        removed = []
        for group, asset in self.tables():
            for part in self.partitions(group, asset):
                if dimension in part and part[dimension] not in keep:
                    self.delete_partition(group, asset, part)
                    removed.append({"table": f"{group}/{asset}", "partition": part})
        return removed

    def describe(self) -> str:
        """The lake's URI and endpoint, without credentials."""
        return json.dumps({"uri": self.uri, "s3_endpoint": self.s3_endpoint})

    def inflight(self) -> "Lake":
        """The lake's in-flight area (:data:`INFLIGHT_DIR`), a scratch store for resumable work."""
        return self.subtree(INFLIGHT_DIR)

    def table(self, group: str, name: str) -> "LakeTable":
        """A handle on the table ``group/name`` (the science library's ``PartitionedTable``)."""
        return LakeTable(self, _validate_name("group", group), _validate_name("asset", name))

    @contextmanager
    def local_folder(
        self, group: str, asset: str, partition: Mapping[str, str], subfolder: str | None = None
    ) -> Iterator[str]:
        """A local path holding the files (:meth:`files_path`) of ``partition`` (e.g. the lens
        finder's ``{"artifact": "checkpoint"}``), or those of ``subfolder``, a relative folder below
        it: the folder itself on a local lake, a temporary copy of it (removed afterwards) on S3."""
        path = self.files_path(group, asset, partition)
        if subfolder:
            path = f"{path}/{_relative_name(subfolder.strip('/'))}"
        if not self.is_s3:
            yield path
            return
        local = tempfile.mkdtemp(prefix="dhs_lake_")
        try:
            try:
                pafs.copy_files(path, local, source_filesystem=self.fs, destination_filesystem=pafs.LocalFileSystem())
            except OSError as exc:
                raise translate_storage_error(exc, self.full_uri(path)) from exc
            yield local
        finally:
            shutil.rmtree(local, ignore_errors=True)


@dataclass(frozen=True)
class LakeTable:
    """One table of a :class:`Lake`: what the science library receives where it reads or writes a
    table (``darkhaloscope.storage.PartitionedTable``). Picklable, so it travels to Spark tasks."""

    lake: Lake
    group: str
    name: str

    def location(self, partition: Mapping[str, str] | None = None) -> str:
        return self.lake.full_uri(self.lake.partition_path(self.group, self.name, partition))

    def files_location(self, partition: Mapping[str, str] | None = None) -> str:
        return self.lake.full_uri(self.lake.files_path(self.group, self.name, partition))

    def partitions(self) -> list[dict[str, str]]:
        return self.lake.partitions(self.group, self.name)

    def exists(self, partition: Mapping[str, str] | None = None) -> bool:
        return self.lake.exists(self.group, self.name, partition)

    def schema(self, partition: Mapping[str, str] | None = None) -> pa.Schema:
        return self.lake.read_schema(self.group, self.name, partition)

    def read(
        self,
        partition: Mapping[str, str] | None = None,
        columns: list[str] | None = None,
        filter: ds.Expression | None = None,
    ) -> pa.Table:
        return self.lake.read_table(self.group, self.name, partition, columns, filter)

    def batches(
        self,
        columns: list[str] | None = None,
        filter: ds.Expression | None = None,
        batch_size: int = 4096,
        partition: Mapping[str, str] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        return self.lake.iter_batches(self.group, self.name, columns, filter, batch_size, partition)

    def dataset(self, partitions: Iterable[Mapping[str, str]] | None = None) -> ds.Dataset:
        return self.lake.dataset(self.group, self.name, partitions)

    def write(
        self,
        data: pa.Table | Iterable[pa.RecordBatch],
        schema: pa.Schema | None = None,
        partition: Mapping[str, str] | None = None,
        row_group_size: int = 64_000,
    ) -> CommitInfo:
        return self.lake.write_table(self.group, self.name, data, schema, partition, row_group_size)

    def delete(self, partition: Mapping[str, str]) -> None:
        self.lake.delete_partition(self.group, self.name, partition)

    def local_folder(self, partition: Mapping[str, str], subfolder: str | None = None):
        return self.lake.local_folder(self.group, self.name, partition, subfolder)

    def files(self) -> list[str]:
        """URIs of the table's part files, each verified against its manifest (size and sha256)
        first: what a reader in another process (the trainer) opens by itself."""
        return [self.lake.full_uri(p) for p in self.lake._part_files(self.group, self.name, content=True)]
