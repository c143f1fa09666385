"""Per-partition manifests: what a commit recorded, checked before a reader serves a row.

Every committed partition has a manifest, ``<lake>/_manifests/<group>/<table>/[<dim>=<key>/...]
manifest.json``, naming its part files with their sizes (bytes) and sha256 digests. It lives
outside the table's folder, so that folder still holds only Parquet and opens as one dataset in
any Parquet reader. A writer moves the manifest into place after the part (the manifest is the
commit record); a reader takes only the parts the manifests name and verifies them: a file the
manifests do not name (a stray backup, a file of an unfinished copy), a part they name that is
missing, or a part whose size or digest differs from the record is named in an InputError and
never read.

A partition's manifest and its folder can go together (an operator's ``rm -r`` of both, a sync
that skipped them): then no manifest names what is gone. So every commit also records, after its
manifest, an empty *commit record* ``<lake>/_manifests/<group>/<table>/_committed/[<dim>=<key>/
...]committed``: the table's list of its committed partitions, one object per partition (writers of
different partitions never rewrite a shared file, so concurrent commits cannot lose one another's).
A partition with a commit record but neither a manifest nor a file is named as gone. The records
lie inside the table's manifest folder, so the listing a reader already makes finds them (no extra
request). A manifest without a commit record (a lake written before commit records, or a commit
stopped between the two) is read as before; ``dhs verify`` names it and ``--adopt`` records it.

sha256 rather than a cheaper checksum: it is the digest the rest of the lake already uses (data
versions, landed grades), it detects deliberate edits as well as bit rot, and hashing costs a
fraction of decoding the same file (``benchmarks/bench_integrity.py``; BENCHMARKS.md, row
*integrity on read*).
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Mapping

import pyarrow.fs as pafs

from darkhaloscope.errors import InputError

#: Folder (under the lake root) of the manifests: not a table (its name starts with ``_``).
MANIFEST_DIR = "_manifests"
MANIFEST_FILE = "manifest.json"
FORMAT = "dhs-manifest-1"
#: Folder (under a table's manifest folder) of its commit records, and a record's file name. A
#: partition dimension cannot be named so (dimensions start with a letter).
RECORD_DIR = "_committed"
RECORD_FILE = "committed"
#: Threads reading manifests and hashing parts at once (object-store latency, not CPU, bounds it).
_WORKERS = 8
_CHUNK = 1 << 22


def file_sha256(fs: pafs.FileSystem, path: str) -> str:
    """Hex sha256 of a file's bytes, streamed in 4 MiB chunks."""
    h = hashlib.sha256()
    with fs.open_input_stream(path) as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def manifest_bytes(table: str, partition: Mapping[str, str] | None, parts: list[dict]) -> bytes:
    """The manifest of one partition: ``parts`` as ``[{"name", "bytes", "sha256"}]``. Holds no
    time stamp, so equal data gives equal manifests (the data version does not depend on when)."""
    record = {"format": FORMAT, "table": table, "partition": dict(partition or {}), "parts": parts}
    return json.dumps(record, sort_keys=True, indent=1).encode()


def _parts_of(payload: bytes, part_name: Callable[[str], bool]) -> list[dict]:
    """The ``parts`` of a manifest's bytes; ValueError when they are not a manifest or name a
    file that is not a part of its own folder (``part_name``; no path may leave the folder)."""
    record = json.loads(payload)
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} record")
    parts = record["parts"]
    for p in parts:
        if not (isinstance(p["name"], str) and isinstance(p["bytes"], int) and isinstance(p["sha256"], str)):
            raise ValueError("a part lacks its name, bytes or sha256")
        if "/" in p["name"] or not part_name(p["name"]):
            raise ValueError(f"{p['name']!r} is not a part file of its folder")
    return parts


@dataclass(frozen=True)
class Check:
    """What checking one table found: the verified part paths (sorted), the folders (relative to
    the table's, ``""`` for the table's own) that hold a manifest, each problem as ``(relative
    file, what is wrong)``, and the manifest folders that have no commit record (``unrecorded``;
    read all the same)."""

    parts: list[str]
    recorded_folders: list[str]
    problems: list[tuple[str, str]]
    unrecorded: list[str] = field(default_factory=list)

    def message(self, label: str) -> str:
        """``<label>: <file>: <problem>`` of the first problem, counting the rest."""
        rel, what = self.problems[0]
        more = len(self.problems) - 1
        extra = f" (and {more} more: `dhs verify` lists them)" if more else ""
        return f"{label}: {rel}: {what}{extra}"


def _listing(fs: pafs.FileSystem, folder: str) -> dict[str, int]:
    infos = fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    return {i.path: i.size or 0 for i in infos if i.type == pafs.FileType.File}


def _read(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as f:
        return f.read()


def record_path(manifest_folder: str, rel_folder: str) -> str:
    """Path of the commit record of the partition ``rel_folder`` (relative to the table's folder,
    ``""`` for an unpartitioned table) in the table's ``manifest_folder``."""
    return f"{manifest_folder}/{RECORD_DIR}/{rel_folder + '/' if rel_folder else ''}{RECORD_FILE}"


def _committed(listing: Mapping[str, int], manifest_folder: str) -> set[str]:
    """The partition folders (relative) that the commit records under ``manifest_folder`` list."""
    prefix, suffix = f"{manifest_folder}/{RECORD_DIR}/", RECORD_FILE
    return {p[len(prefix) : -len(suffix)].rstrip("/") for p in listing if p.startswith(prefix) and p.endswith(suffix)}


def _gone(
    committed: set[str], folders: list[str], files: Mapping[str, int], table_folder: str
) -> list[tuple[str, str]]:
    """Problems of the committed partitions that hold neither a manifest nor a file."""
    held = {p[len(table_folder) + 1 :].rpartition("/")[0] for p in files}
    gone = sorted(f for f in committed - set(folders) if not any(h == f or h.startswith(f + "/") for h in held))
    return [
        (f or ".", "gone: the table's commit record lists this partition, its manifest and parts are missing")
        for f in gone
    ]


def check_table(
    fs: pafs.FileSystem,
    table_folder: str,
    manifest_folder: str,
    content: bool,
    part_name: Callable[[str], bool],
    records: bool = True,
) -> Check:
    """Compare a table's files (under ``table_folder``) with its manifests (under
    ``manifest_folder``): sizes always, sha256 digests too when ``content``; with ``records``
    (a whole table's check: the records lie in its manifest folder), a partition its commit
    records list that is gone is a problem too. ``part_name(base name)`` says which names are
    parts (the only files a table folder may hold). Storage errors propagate (the caller
    translates them)."""
    files = _listing(fs, table_folder)
    listing = _listing(fs, manifest_folder)
    manifests = sorted(p for p in listing if p.endswith("/" + MANIFEST_FILE))
    with ThreadPoolExecutor(_WORKERS) as pool:
        payloads = list(pool.map(lambda p: _read(fs, p), manifests))
    problems: list[tuple[str, str]] = []
    recorded: dict[str, dict] = {}
    folders = []
    for path, payload in zip(manifests, payloads):
        rel_folder = path[len(manifest_folder) + 1 : -len(MANIFEST_FILE)].rstrip("/")
        folders.append(rel_folder)
        try:
            parts = _parts_of(payload, part_name)
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(
                (
                    f"{MANIFEST_DIR}/.../{rel_folder + '/' if rel_folder else ''}{MANIFEST_FILE}",
                    f"unreadable manifest ({exc})",
                )
            )
            continue
        for p in parts:
            recorded[f"{table_folder}/{rel_folder + '/' if rel_folder else ''}{p['name']}"] = p
    good = []
    for path, p in sorted(recorded.items()):
        rel = path[len(table_folder) + 1 :]
        if path not in files:
            problems.append((rel, f"missing: the manifest records it ({p['bytes']} bytes)"))
        elif files[path] != p["bytes"]:
            problems.append(
                (rel, f"is {files[path]} bytes, the manifest records {p['bytes']}: truncated or altered, not read")
            )
        else:
            good.append(path)
    if content and good:
        with ThreadPoolExecutor(_WORKERS) as pool:
            digests = list(pool.map(lambda p: file_sha256(fs, p), good))
        for path, digest in zip(list(good), digests):
            if digest != recorded[path]["sha256"]:
                problems.append(
                    (path[len(table_folder) + 1 :], "its sha256 differs from the manifest's: altered, not read")
                )
                good.remove(path)
    for path in sorted(set(files) - set(recorded)):
        rel = path[len(table_folder) + 1 :]
        folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
        if folder in folders or not part_name(path.rsplit("/", 1)[-1]):
            problems.append((rel, "not in any manifest (a stray file), not read"))
        else:
            problems.append(
                (
                    rel,
                    "no manifest records it (a stray file, or a lake written before manifests: "
                    "`dhs verify --adopt` records them), not read",
                )
            )
    if not records:
        return Check(sorted(good), sorted(folders), problems)
    committed = _committed(listing, manifest_folder)
    problems += _gone(committed, folders, files, table_folder)
    return Check(sorted(good), sorted(folders), problems, sorted(set(folders) - committed))


def require(check: Check, label: str) -> list[str]:
    """The verified parts of ``check``; InputError naming the first problem otherwise."""
    if check.problems:
        raise InputError(check.message(label))
    return check.parts
