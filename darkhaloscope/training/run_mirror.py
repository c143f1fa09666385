"""Training runs kept in object storage: a run trains in a folder of the host that trains it, and its
copy in storage follows every checkpoint, so that the caller (the lens finder asset, on another
host) reads the completed, audited run from storage and a run stopped on one host resumes on
another.

:class:`RunMirror` pairs the runs folder ``root`` of a storage (``<root>/runs/<key>/``, a URI of a
pyarrow filesystem such as ``s3://bucket/lake/_inflight/training/lens_finder_runs.files``) with a local
scratch folder (``<scratch>/runs/<key>/``, where ``runs.train_run`` trains). :meth:`RunMirror.pull`
makes a local run folder the storage's copy (nothing when storage has none: the run starts
afresh); :meth:`RunMirror.push` writes what changed since, in the order of the checkpoint commit
rule (``checkpoint.write_spec``): tensor files (content-addressed, never rewritten) first, then
the figures, then the JSON files (the specs, metrics, gates), ``complete.json`` last, and then
removes what the run no longer holds (superseded tensor files). Every file is written whole (an S3
object is visible complete or not at all), so after every push the storage copy is a consistent
run, as a local folder is after every commit.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from ..errors import InputError
from .loop import RUN_COMPLETE
from .runs import RUNS

_TENSOR = re.compile(r".+-[0-9a-f]{16}\.safetensors")


def _order(name: str) -> int:
    """Rank of a run file in a push: tensors, figures, JSON, the completion record."""
    if _TENSOR.fullmatch(name):
        return 0
    if name == RUN_COMPLETE:
        return 3
    return 2 if name.endswith(".json") else 1


def _digest(path: Path) -> str:
    """What identifies a file's content: its name for a content-addressed tensor file, else its
    sha256."""
    if _TENSOR.fullmatch(path.name):
        return path.name
    return hashlib.sha256(path.read_bytes()).hexdigest()


class RunMirror:
    """The runs folder ``root`` (a URI: ``s3://bucket/prefix`` or a path of ``filesystem``) mirrored
    into the local folder ``scratch`` (module doc). ``filesystem``: the pyarrow filesystem of
    ``root`` (an ``S3FileSystem`` with the lake's endpoint and retries)."""

    def __init__(self, root: str, filesystem, scratch):
        self.root, self.fs, self.scratch = root.rstrip("/"), filesystem, Path(scratch)
        self._path = self.root.split("://", 1)[-1]
        self._stored: dict[str, dict[str, str]] = {}  # run key -> {file name: digest} in storage

    def local_dir(self, key: str) -> Path:
        """The local folder of run ``key``."""
        return self.scratch / RUNS / key

    def location(self, run_dir) -> str:
        """The storage URI of the local run folder ``run_dir``."""
        return f"{self.root}/{RUNS}/{self._key(run_dir)}"

    def _key(self, run_dir) -> str:
        run_dir = Path(run_dir)
        if run_dir.parent != self.scratch / RUNS:
            raise InputError(f"{run_dir} is not a run folder of {self.scratch / RUNS}")
        return run_dir.name

    def _stored_names(self, key: str) -> list[str]:
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(f"{self._path}/{RUNS}/{key}", allow_not_found=True)
        return sorted(i.base_name for i in self.fs.get_file_info(selector) if i.type == pafs.FileType.File)

    def pull(self, run_dir) -> None:
        """Make the local run folder ``run_dir`` the storage's copy of that run (an empty folder
        when storage has none)."""
        key, run_dir = self._key(run_dir), Path(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        stored = {}
        for name in self._stored_names(key):
            with self.fs.open_input_stream(f"{self._path}/{RUNS}/{key}/{name}") as f:
                (run_dir / name).write_bytes(f.read())
            stored[name] = _digest(run_dir / name)
        self._stored[key] = stored

    def push(self, run_dir) -> None:
        """Write to storage what changed in the local run folder ``run_dir`` since the last pull or
        push, in commit order, then remove from storage the files the run no longer holds."""
        key, run_dir = self._key(run_dir), Path(run_dir)
        stored = self._stored.get(key)
        if stored is None:
            stored = self._stored[key] = dict.fromkeys(self._stored_names(key), "")
        # hidden files are the atomic writes of a checkpoint in progress
        local = {p.name: _digest(p) for p in run_dir.iterdir() if p.is_file() and not p.name.startswith(".")}
        for name in sorted((n for n in local if stored.get(n) != local[n]), key=lambda n: (_order(n), n)):
            with self.fs.open_output_stream(f"{self._path}/{RUNS}/{key}/{name}") as out:
                out.write((run_dir / name).read_bytes())
            stored[name] = local[name]
        for name in sorted(set(stored) - set(local)):
            self.fs.delete_file(f"{self._path}/{RUNS}/{key}/{name}")
            del stored[name]
