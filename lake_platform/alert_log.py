"""The alert log in the lake: de-duplication, history and backlog of alerts.

``<lake>/ops/alerts.files/alerts.jsonl`` (the file of the ``alerts`` table, beside it) holds one
JSON object per alert: its fields, the sinks it reached (``delivered_to``), the latest error of
each sink it still owes (``delivery_errors``), the delivery rounds tried (``attempts``),
``last_attempt_at`` and ``status``: ``done``, ``pending`` (a sink is still owed: the next delivery
sends it again) or ``given_up`` (pushed out of the bounded backlog). The Parquet table
``ops/alerts`` is rebuilt from that file on every write, so it is always a complete, queryable
copy (``dhs query "select * from alerts"``). Both are committed atomically through
:class:`~lake_platform.lake.Lake` (read-modify-write).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from typing import Any, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from darkhaloscope.errors import InputError

from .alerts import STATUS_DONE, STATUS_GIVEN_UP, STATUS_PENDING, owed_sinks, redact
from .lake import Lake, translate_storage_error

log = logging.getLogger(__name__)

ALERTS_SCHEMA = pa.schema(
    [
        ("dedup_key", pa.string()),
        ("kind", pa.string()),
        ("asset", pa.string()),
        ("check", pa.string()),
        ("partition", pa.string()),
        ("severity", pa.string()),
        ("description", pa.string()),
        ("metadata_json", pa.string()),
        ("run_id", pa.string()),
        ("run_url", pa.string()),
        ("created_at", pa.string()),
        ("delivered_to", pa.list_(pa.string())),
        ("delivery_errors_json", pa.string()),
        ("status", pa.string()),
        ("attempts", pa.int32()),
        ("last_attempt_at", pa.string()),
    ]
)
_PLAIN = (
    "dedup_key",
    "kind",
    "asset",
    "check",
    "partition",
    "severity",
    "description",
    "run_id",
    "run_url",
    "created_at",
    "status",
    "last_attempt_at",
)

_LOCAL_LOCKS: dict[str, threading.Lock] = {}
_LOCAL_LOCKS_GUARD = threading.Lock()


class JsonlAlertLog:
    """The alert log of one lake (see the module doc).

    Concurrency: the lock (:meth:`locked`) is held only to read, merge and write the log, never
    while an alert is being sent. Within one process a thread lock serialises writers; for a
    local lake an ``flock`` on ``<lake>/ops/alerts.files/.lock`` serialises processes too (the daemon
    and ``dhs materialize``). On S3 two processes writing in the same instant can lose one write
    (S3 through pyarrow has no compare-and-swap); the entries lost are sent again by a later round.
    """

    GROUP, LOG_ASSET, FILE, TABLE = "ops", "alerts", "alerts.jsonl", "alerts"

    def __init__(self, lake: Lake):
        self.lake = lake

    def __repr__(self) -> str:
        return f"JsonlAlertLog({self.lake.describe()})"

    @property
    def uri(self) -> str:
        return self.lake.full_uri(self._path)

    @property
    def _path(self) -> str:
        return f"{self.lake.files_path(self.GROUP, self.LOG_ASSET)}/{self.FILE}"

    def entries(self) -> list[dict]:
        """Every recorded entry, oldest first (empty when the log does not exist yet)."""
        try:
            missing = self.lake.fs.get_file_info(self._path).type != pafs.FileType.File
        except OSError as exc:
            raise translate_storage_error(exc, self.uri) from exc
        if missing:
            return []
        raw = self.lake.read_bytes(self.GROUP, self.LOG_ASSET, self.FILE)
        out = []
        for n, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(f"line {n} of {self.uri} is not JSON: {exc}") from exc
        return out

    def seen_keys(self) -> set[str]:
        """Dedup keys already recorded."""
        return {e["dedup_key"] for e in self.entries()}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the log's lock (thread lock, plus a file lock for a local lake)."""
        with _LOCAL_LOCKS_GUARD:
            lock = _LOCAL_LOCKS.setdefault(self.lake.uri, threading.Lock())
        with lock:
            if self.lake.is_s3:
                yield
                return
            import fcntl

            folder = self.lake.files_path(self.GROUP, self.LOG_ASSET)
            try:
                os.makedirs(folder, exist_ok=True)
                fh = open(os.path.join(folder, ".lock"), "a+")
            except OSError as exc:
                raise translate_storage_error(exc, self.uri) from exc
            with fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)

    def record(self, entries: Sequence[Mapping[str, Any]], max_backlog: int) -> None:
        """Merge ``entries`` (from :func:`lake_platform.alerts.merged_entry`) into the log and write it.

        An entry whose key is already recorded replaces it, keeping every sink either one reached;
        then, when more than ``max_backlog`` entries are pending, the oldest are marked ``given_up``
        (logged as an error: they are no longer retried, but stay in the log and the table).
        """
        if not entries:
            return
        with self.locked():
            current = {e["dedup_key"]: e for e in self.entries()}
            for e in entries:
                current[e["dedup_key"]] = _merge(current.get(e["dedup_key"]), dict(e))
            _bound_backlog(list(current.values()), max_backlog)
            rows = list(current.values())
            payload = "".join(json.dumps(e, sort_keys=True, allow_nan=False) + "\n" for e in rows).encode("utf-8")
            self.lake.write_bytes(self.GROUP, self.LOG_ASSET, self.FILE, payload)
            self.lake.write_table(self.GROUP, self.TABLE, _entries_table(rows), schema=ALERTS_SCHEMA)


def _merge(old: Mapping[str, Any] | None, new: dict) -> dict:
    """``new`` with the sinks ``old`` had reached (a concurrent deliverer may have recorded it first)."""
    if old is None:
        return new
    reached = sorted(set(old.get("delivered_to") or ()) | set(new.get("delivered_to") or ()))
    new["delivered_to"] = reached
    new["delivery_errors"] = {k: v for k, v in (new.get("delivery_errors") or {}).items() if k not in reached}
    new["attempts"] = max(int(old.get("attempts") or 0), int(new.get("attempts") or 0))
    if new.get("status") == STATUS_PENDING and not owed_sinks(new):
        new["status"] = STATUS_DONE
    return new


def _bound_backlog(entries: list[dict], max_backlog: int) -> None:
    pending = [e for e in entries if e.get("status") == STATUS_PENDING]
    pending.sort(key=lambda e: (e.get("created_at") or "", e["dedup_key"]))
    for e in pending[: max(0, len(pending) - max_backlog)]:
        e["status"] = STATUS_GIVEN_UP
        log.error(
            "alert %s given up: the backlog holds more than %d undelivered alerts; still owed to %s",
            e["dedup_key"],
            max_backlog,
            owed_sinks(e),
        )


def _entries_table(entries: Sequence[dict]) -> pa.Table:
    cols: dict[str, list] = {f.name: [] for f in ALERTS_SCHEMA}
    for e in entries:
        for k in _PLAIN:
            cols[k].append(e.get(k))
        cols["metadata_json"].append(json.dumps(e.get("metadata") or {}, sort_keys=True))
        cols["delivered_to"].append(list(e.get("delivered_to") or []))
        cols["delivery_errors_json"].append(json.dumps(redact(e.get("delivery_errors") or {}), sort_keys=True))
        cols["attempts"].append(int(e.get("attempts") or 1))
    return pa.table(cols, schema=ALERTS_SCHEMA)
