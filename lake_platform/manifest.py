"""Per-partition manifests: what a commit recorded, checked before a reader serves a row.

Every committed partition has a manifest, ``<lake>/_manifests/<group>/<table>/[<dim>=<key>/...]
manifest.json``, naming its part files with their sizes (bytes) and sha256 digests. It lives
outside the table's folder, so that folder still holds only Parquet and opens as one dataset in
any Parquet reader. A writer moves the manifest into place after the part (the manifest is the
commit record); a reader takes only the parts the manifests name and verifies them: a file the
manifests do not name (a stray backup, a file of an unfinished copy), a part they name that is
missing, or a part whose size or digest differs from the record is named in an InputError and
never read.

sha256 rather than a cheaper checksum: it is the digest the rest of the lake already uses (data
versions, landed grades), it detects deliberate edits as well as bit rot, and hashing costs a
fraction of decoding the same file (``benchmarks/bench_integrity.py``; BENCHMARKS.md, row
*integrity on read*).
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping

import pyarrow.fs as pafs

from darkhaloscope.errors import InputError

#: Folder (under the lake root) of the manifests: not a table (its name starts with ``_``).
MANIFEST_DIR = "_manifests"
MANIFEST_FILE = "manifest.json"
FORMAT = "dhs-manifest-1"
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
    the table's, ``""`` for the table's own) that hold a manifest, and each problem as
    ``(relative file, what is wrong)``."""

    parts: list[str]
    recorded_folders: list[str]
    problems: list[tuple[str, str]]

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


def check_table(
    fs: pafs.FileSystem, table_folder: str, manifest_folder: str, content: bool, part_name: Callable[[str], bool]
) -> Check:
    """Compare a table's files (under ``table_folder``) with its manifests (under
    ``manifest_folder``): sizes always, sha256 digests too when ``content``. ``part_name(base
    name)`` says which names are parts (the only files a table folder may hold). Storage errors
    propagate (the caller translates them)."""
    files = _listing(fs, table_folder)
    manifests = sorted(p for p in _listing(fs, manifest_folder) if p.endswith("/" + MANIFEST_FILE))
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
    return Check(sorted(good), sorted(folders), problems)


def require(check: Check, label: str) -> list[str]:
    """The verified parts of ``check``; InputError naming the first problem otherwise."""
    if check.problems:
        raise InputError(check.message(label))
    return check.parts
