"""Write–audit–publish: a run stages its tables, audits them, then publishes or rejects them.

Where things live in a lake (folders starting with ``_`` are never tables: ``Lake.tables`` and
every reader skip them):

``<lake>/_staging/<owner>/<group>/<table>/[<dim>=<key>/]...``
    what a run has written and not yet published, with ``<lake>/_staging/<owner>/owner.json``
    (run id, pid, host, start time). ``<owner>`` is the Dagster run id (or any id a caller
    chooses). Audits read the staged data from here; nothing else does.
``<lake>/_staging/w-<host>-<pid>-<start>-<token>...``
    a writer's temporary object while :meth:`Lake.write_table` streams it (moved onto its target
    when complete).
``<lake>/_rejected/<owner>/<group>/<table>/[<dim>=<key>/]...``
    staged data that failed a blocking audit, kept for inspection with ``reason.json`` (the failed
    audits, the run, the time). Removed by :func:`sweep_orphans` once older than the retention
    (``DHS_REJECTED_KEEP_DAYS``, default 7 days), or by hand (``rm -r`` / ``aws s3 rm --recursive``).

Publication moves each staged file onto its published path — a rename on a local disk, a
server-side copy on S3 (an object appears whole or not at all) — with ``part-0.parquet`` last, so
a reader that sees the new table also sees its artifacts. A reader of a published table therefore
sees the previous version or the new one, never staged data.

:func:`sweep_orphans` removes what killed runs and writers left in ``_staging``: entries older than
the sweeping run's start whose owner is not alive (a callback decides for run ids; for writers,
the process id on this host, or an age of a day for another host).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Mapping

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from darkhaloscope.errors import InputError

from .lake import (
    FILES_SUFFIX,
    PART_FILE,
    STAGING_DIR,
    WRITER_PREFIX,
    CommitInfo,
    Lake,
    host_tag,
    translate_storage_error,
    validate_partition_key,
)
from .manifest import MANIFEST_FILE

REJECTED_DIR = "_rejected"
OWNER_FILE = "owner.json"
REASON_FILE = "reason.json"
#: Days a rejected table is kept for inspection before :func:`sweep_orphans` removes it.
DEFAULT_REJECTED_KEEP_DAYS = 7.0
#: Age after which a writer's temporary object from another host counts as orphaned (its process
#: cannot be checked from here; no single write takes this long).
FOREIGN_WRITER_MAX_AGE_S = 24 * 3600.0


@dataclass(frozen=True)
class StageOwner:
    """Who staged the data: the run, its process and host, and when the stage was opened (epoch s)."""

    run_id: str
    pid: int
    host: str
    started_at: float

    @classmethod
    def current(cls, run_id: str, started_at: float | None = None) -> "StageOwner":
        return cls(run_id=run_id, pid=os.getpid(), host=socket.gethostname(), started_at=started_at or time.time())

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, payload: bytes) -> "StageOwner":
        d = json.loads(payload)
        return cls(run_id=str(d["run_id"]), pid=int(d["pid"]), host=str(d["host"]), started_at=float(d["started_at"]))


def process_alive(pid: int) -> bool:
    """True when a process with ``pid`` exists on this host (a recycled pid reads as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_process_alive(owner: StageOwner) -> bool:
    """Liveness by process: alive when on this host and its pid exists; another host's owner is
    presumed alive (its process cannot be checked from here)."""
    return owner.host != socket.gethostname() or process_alive(owner.pid)


def _files_under(lake: Lake, folder: str) -> list[str]:
    """Every file below ``folder`` of ``lake`` (none when it does not exist)."""
    try:
        infos = lake.fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise translate_storage_error(exc, lake.full_uri(folder)) from exc
    return [i.path for i in infos if i.type == pafs.FileType.File]


def _part_key(path: str) -> tuple[int, str]:
    # part-0.parquet is published after its artifacts, and its manifest (the commit record) last
    return (2 if path.endswith("/" + MANIFEST_FILE) else 1 if path.endswith("/" + PART_FILE) else 0, path)


@dataclass
class StagedTable:
    """One staged table, or one partition of it, in a run's staging area.

    ``lake`` is the published lake, ``area`` the run's staging area (a subtree of it)."""

    lake: Lake
    area: Lake
    owner: str
    group: str
    table: str
    partition: dict[str, str] | None = None
    files: list[str] = field(default_factory=list, repr=False)

    @property
    def staged_folder(self) -> str:
        return self.area.partition_path(self.group, self.table, self.partition)

    @property
    def published_folder(self) -> str:
        return self.lake.partition_path(self.group, self.table, self.partition)

    def published_uri(self, name: str | None = None, subfolder: Mapping[str, str] | None = None) -> str:
        """Where the file ``name`` staged with :meth:`write_bytes` (or, without ``name``, the files
        folder of the table, partition or ``subfolder``: ``Lake.files_path``) is once published: a
        URI a user can paste (an absolute path, or ``s3://...``)."""
        part = {**(self.partition or {}), **(subfolder or {})}
        folder = self.lake.files_path(self.group, self.table, part or None)
        return self.lake.full_uri(f"{folder}/{name}" if name else folder)

    @property
    def staged_files_folder(self) -> str:
        """Where the table's other files are staged (beside the staged table: ``Lake.files_path``)."""
        return self.area.files_path(self.group, self.table, self.partition)

    @property
    def published_files_folder(self) -> str:
        """Where the table's other files are published (beside its folder: ``Lake.files_path``)."""
        return self.lake.files_path(self.group, self.table, self.partition)

    def _folders(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """((staged, published) table folder, (staged, published) files folder)."""
        return (self.staged_folder, self.published_folder), (self.staged_files_folder, self.published_files_folder)

    @property
    def label(self) -> str:
        """``group/table`` plus the partition, for messages."""
        part = "".join(f" [{k}={v}]" for k, v in (self.partition or {}).items())
        return f"{self.group}/{self.table}{part}"

    # ------------------------------------------------------------- writing
    def write(
        self, data: pa.Table | Iterable[pa.RecordBatch], schema: pa.Schema | None = None, row_group_size: int = 64_000
    ):
        """Stage the table's Parquet file (streamed like :meth:`Lake.write_table`)."""
        return self.area.write_table(
            self.group, self.table, data, schema=schema, partition=self.partition, row_group_size=row_group_size
        )

    def write_bytes(self, name: str, payload: bytes, subfolder: Mapping[str, str] | None = None) -> str:
        """Stage a file of the table other than Parquet (a figure, a report, a JSON summary) in its
        files folder, beside the table's (``Lake.files_path``); ``subfolder`` is a ``{dim: key}``
        folder below it (e.g. ``{"artifact": "figures"}``), ``name`` may hold ``/`` (``stamps/1.png``)."""
        part = {**(self.partition or {}), **(subfolder or {})}
        return self.area.write_bytes(self.group, self.table, name, payload, partition=part or None)

    # ------------------------------------------------------------- reading
    def read(self, columns: list[str] | None = None, filter: ds.Expression | None = None) -> pa.Table:
        """The staged table (or partition) itself, as an audit sees it."""
        if self.partition:
            return self.area.read_table(
                self.group, self.table, partition=self.partition, columns=columns, filter=filter
            )
        return self.area.read_table(self.group, self.table, columns=columns, filter=filter)

    def dataset(self) -> ds.Dataset:
        """A pyarrow dataset over the staged Parquet file, with the columns its writer gave
        (bounded-memory audits of large tables)."""
        path = f"{self.staged_folder}/{PART_FILE}"
        if not self.partition:
            try:
                return ds.dataset(path, filesystem=self.area.fs, format="parquet")
            except FileNotFoundError as exc:
                raise InputError(f"{self.label} has nothing staged at {self.area.full_uri(path)}") from exc
        try:
            return self.area.partition_dataset(self.group, self.table, self.partition)
        except InputError as exc:
            raise InputError(f"{self.label} has nothing staged at {self.area.full_uri(path)}") from exc

    def schema(self) -> pa.Schema:
        return self.dataset().schema

    def num_rows(self) -> int:
        return pq.ParquetFile(f"{self.staged_folder}/{PART_FILE}", filesystem=self.area.fs).metadata.num_rows

    def read_bytes(self, name: str, subfolder: Mapping[str, str] | None = None) -> bytes:
        part = {**(self.partition or {}), **(subfolder or {})}
        return self.area.read_bytes(self.group, self.table, name, partition=part or None)

    @property
    def staged_manifest(self) -> str:
        return self.area.manifest_path(self.group, self.table, self.partition)

    def staged_files(self) -> list[str]:
        """Every staged file of this table (or partition), its other files included, ``part-0.parquet``
        and then its manifest last."""
        files = [f for folder, _ in self._folders() for f in _files_under(self.area, folder)]
        manifest = [
            m for m in _files_under(self.area, self.staged_manifest.rsplit("/", 1)[0]) if m == self.staged_manifest
        ]
        return sorted(files + manifest, key=_part_key)

    def _relative(self, path: str) -> str:
        """A staged file's path relative to its folder, files of the files folder marked as such."""
        (data, _), (files, _) = self._folders()
        if path.startswith(files + "/"):
            return FILES_SUFFIX + path[len(files) :]
        return path[len(data) :]

    def _destination(self, path: str, target: Lake) -> str:
        """Where the staged file ``path`` goes in ``target`` (the lake, or a rejected area)."""
        if path == self.staged_manifest:
            return target.manifest_path(self.group, self.table, self.partition)
        (data, _), (files, _) = self._folders()
        if path.startswith(files + "/"):
            return target.files_path(self.group, self.table, self.partition) + path[len(files) :]
        return target.partition_path(self.group, self.table, self.partition) + path[len(data) :]

    def content_hash(self) -> str:
        """sha256 (16 hex digits) of the staged files' relative paths and bytes (the manifest, made
        from them, left out): the data version."""
        h = hashlib.sha256()
        for path in self.staged_files():
            if path == self.staged_manifest:
                continue
            h.update(self._relative(path).encode() + b"\0")
            with self.area.fs.open_input_stream(path) as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
        return h.hexdigest()[:16]

    # ----------------------------------------------------- publish or reject
    def publish(self) -> CommitInfo:
        """Move every staged file onto its published path, ``part-0.parquet`` last, then delete the
        files of the previous version that this one does not have (a superseded checkpoint, a
        figure no longer drawn); returns where it landed. Raises InputError when nothing is staged."""
        files = self.staged_files()
        if not any(f.endswith("/" + PART_FILE) for f in files):
            raise InputError(f"{self.label}: nothing staged at {self.area.full_uri(self.staged_folder)} to publish")
        dest = (self.published_folder, self.published_files_folder)
        size = 0
        for src in files:
            target = self._destination(src, self.lake)
            try:
                self.lake.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
                size += 0 if src == self.staged_manifest else self.area.fs.get_file_info(src).size or 0
                self.lake.fs.move(src, target)
            except OSError as exc:
                raise translate_storage_error(exc, self.lake.full_uri(target)) from exc
        published = {self._destination(src, self.lake) for src in files}
        for folder in dest:
            for stale in _files_under(self.lake, folder):
                if stale not in published:
                    try:
                        self.lake.fs.delete_file(stale)
                    except OSError as exc:
                        raise translate_storage_error(exc, self.lake.full_uri(stale)) from exc
        if self.staged_manifest not in files:  # staged by other means than Lake.write_table
            self.lake._record_manifest(self.group, self.table, self.partition)
        else:
            self.lake._record_commit(self.group, self.table, self.partition)
        part = f"{dest[0]}/{PART_FILE}"
        rows = pq.ParquetFile(part, filesystem=self.lake.fs).metadata.num_rows
        return CommitInfo(uri=self.lake.full_uri(part), rows=rows, bytes=size, partition=self.partition)

    def reject(self, reason: Mapping) -> str:
        """Move the staged files to ``_rejected/<owner>/...`` with ``reason.json``; returns the
        URI of that folder. The published version is not touched."""
        rejected = self.lake.subtree(f"{REJECTED_DIR}/{self.owner}")
        dest = rejected.partition_path(self.group, self.table, self.partition)
        for src in self.staged_files():
            target = self._destination(src, rejected)
            try:
                self.lake.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
                self.lake.fs.move(src, target)
            except OSError as exc:
                raise translate_storage_error(exc, self.lake.full_uri(target)) from exc
        record = {
            "table": f"{self.group}/{self.table}",
            "partition": self.partition,
            "owner": self.owner,
            "rejected_at": time.time(),
            **reason,
        }
        with self.lake.fs.open_output_stream(f"{dest}/{REASON_FILE}") as out:
            out.write(json.dumps(record, indent=1, sort_keys=True, default=str).encode())
        return self.lake.full_uri(dest)


class Stage:
    """A run's staging area ``<lake>/_staging/<owner>/`` (opened with :meth:`open`)."""

    def __init__(self, lake: Lake, owner: str):
        validate_partition_key(owner)
        self.lake = lake
        self.owner = owner
        self.area = lake.subtree(f"{STAGING_DIR}/{owner}")
        self.area.ranges_on_read = False

    @property
    def owner_path(self) -> str:
        return f"{self.area.root}/{OWNER_FILE}"

    def is_open(self) -> bool:
        try:
            return self.lake.fs.get_file_info(self.owner_path).type == pafs.FileType.File
        except OSError as exc:
            raise translate_storage_error(exc, self.lake.full_uri(self.owner_path)) from exc

    def open(self, owner: StageOwner) -> "Stage":
        """Record the owner (once per run: a later step of the same run keeps the first record)."""
        if not self.is_open():
            try:
                self.lake.fs.create_dir(self.area.root, recursive=True)
                with self.lake.fs.open_output_stream(self.owner_path) as out:
                    out.write(owner.to_json())
            except OSError as exc:
                raise translate_storage_error(exc, self.lake.full_uri(self.owner_path)) from exc
        return self

    def table(self, group: str, table: str, partition: Mapping[str, str] | None = None) -> StagedTable:
        return StagedTable(self.lake, self.area, self.owner, group, table, dict(partition) if partition else None)

    def discard(self) -> None:
        """Remove the whole staging area (after a run published or rejected everything)."""
        try:
            self.lake.fs.delete_dir(self.area.root)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise translate_storage_error(exc, self.lake.full_uri(self.area.root)) from exc


@dataclass
class SweepReport:
    """What :func:`sweep_orphans` removed (lake paths) and what it kept because its owner is alive."""

    removed: list[str] = field(default_factory=list)
    kept_live: list[str] = field(default_factory=list)


def _writer_owner(name: str) -> tuple[str, int, float] | None:
    """(host, pid, start) encoded in a writer's temporary object name, None if it is not one."""
    if not name.startswith(WRITER_PREFIX):
        return None
    parts = name[len(WRITER_PREFIX) :].split("-")
    try:
        return "-".join(parts[:-3]), int(parts[-3]), float(parts[-2])
    except (ValueError, IndexError):
        return None


def _read_owner(lake: Lake, folder: str) -> StageOwner | None:
    try:
        with lake.fs.open_input_stream(f"{folder}/{OWNER_FILE}") as f:
            return StageOwner.from_json(f.read())
    except (FileNotFoundError, ValueError, KeyError):
        return None


def _delete(lake: Lake, info: pafs.FileInfo) -> None:
    try:
        if info.type == pafs.FileType.Directory:
            lake.fs.delete_dir(info.path)
        else:
            lake.fs.delete_file(info.path)
    except FileNotFoundError:
        pass


def sweep_orphans(
    lake: Lake,
    before: float,
    run_alive: Callable[[StageOwner], bool] = owner_process_alive,
    rejected_keep_days: float = DEFAULT_REJECTED_KEEP_DAYS,
) -> SweepReport:
    """Remove staging left by dead runs and writers, and rejected tables past their retention.

    ``before`` (epoch s): only entries that began earlier are candidates (the sweeping run's
    start). A run's staging area goes when ``run_alive(owner)`` is false (a folder without a
    readable owner record counts as dead); a writer's temporary object when its process is gone
    (this host) or it is older than a day (another host). Rejected tables go once older than
    ``rejected_keep_days`` (the lake resource passes ``DHS_REJECTED_KEEP_DAYS``).
    """
    keep_days = rejected_keep_days
    report = SweepReport()
    here = host_tag()
    for info in _children(lake, f"{lake.root}/{STAGING_DIR}"):
        writer = _writer_owner(info.base_name)
        if writer is not None:
            host, pid, start = writer
            dead = (not process_alive(pid)) if host == here else (before - start > FOREIGN_WRITER_MAX_AGE_S)
            if start < before and dead:
                _delete(lake, info)
                report.removed.append(info.path)
            continue
        if info.type != pafs.FileType.Directory:
            continue
        owner = _read_owner(lake, info.path)
        if owner is not None and (owner.started_at >= before or run_alive(owner)):
            report.kept_live.append(info.path)
            continue
        _delete(lake, info)
        report.removed.append(info.path)
    horizon = before - keep_days * 86400.0
    for info in _children(lake, f"{lake.root}/{REJECTED_DIR}"):
        stamps = [i.mtime.timestamp() for i in _walk(lake, info.path) if i.mtime is not None]
        if stamps and max(stamps) < horizon:
            _delete(lake, info)
            report.removed.append(info.path)
    return report


def _children(lake: Lake, folder: str) -> list[pafs.FileInfo]:
    try:
        return lake.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    except OSError as exc:
        raise translate_storage_error(exc, lake.full_uri(folder)) from exc


def _walk(lake: Lake, folder: str) -> list[pafs.FileInfo]:
    return [
        i
        for i in lake.fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
        if i.type == pafs.FileType.File
    ]


def rejected(lake: Lake) -> list[dict]:
    """Every rejected table kept in the lake: its reason record plus ``uri``."""
    out = []
    for info in _walk(lake, f"{lake.root}/{REJECTED_DIR}"):
        if info.base_name == REASON_FILE:
            with lake.fs.open_input_stream(info.path) as f:
                out.append({**json.loads(f.read()), "uri": lake.full_uri(info.path.rsplit("/", 1)[0])})
    return sorted(out, key=lambda r: r.get("rejected_at", 0))
