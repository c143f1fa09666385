"""Training runs and their publication (write, audit, publish for the lens finder).

Write: every run trains in its own folder ``<out_dir>/runs/<key>/``, where ``key`` is
:func:`loop.run_key` (the config fields that shape the weights, the preprocessing and the training
set's data version). So a call with new inputs trains a new model from scratch; the inputs of a
run that stopped before completing (killed, or at a per-call ``max_minutes``) resume it from
checkpoint ``last``; the inputs of a completed run (``complete.json``) train nothing and reuse its
``best``.

Audit: the shortcut gates run on the completed run's ``best`` and are written to the run folder
(``gates.json``), every call (so a changed threshold re-audits a reused run).

Publish: :func:`published_files` gives the files of a completed, audited run that the caller
publishes (the lens finder asset stages them, its gates audit them, and only then are they moved
where the score assets read them): ``best`` (content-addressed safetensors, sha256-verified, then
its spec ``best.json`` without the optimizer state, by the commit rule of ``checkpoint``), then
``metrics.json``, ``gates.json``, ``training_curves.png``. Training never publishes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..errors import InputError
from .checkpoint import atomic_write_bytes, load_checkpoint, read_spec, spec_bytes
from .data import TrainingArrays, validation_arrays
from .gates import BLOCKING_GATES, run_gates
from .inference import resolve_device
from .loop import TrainConfig, mark_run_complete, read_run_complete, run_key, train
from .metrics import json_safe
from .preprocess import PreprocessSpec

#: Sub-folder of ``out_dir`` that holds one folder per run (never published or uploaded).
RUNS = "runs"
#: The audit of a run: the gate results of its last call.
GATES_FILE = "gates.json"
#: Files published beside ``best``, from the run folder.
SIDE_FILES = ("metrics.json", "training_curves.png", GATES_FILE)


def dataset_version(path: str, filesystem=None) -> str:
    """sha256 over the (sorted) Parquet files of a training set at ``path`` (a file or a folder) of
    ``filesystem`` (a pyarrow filesystem; default the local one): its data version."""
    from pyarrow import fs as pafs

    h = hashlib.sha256()
    fs = filesystem or pafs.LocalFileSystem()
    if isinstance(fs, pafs.LocalFileSystem):
        path = str(Path(path).resolve())
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.Directory:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
        files = sorted((i.path for i in infos if i.path.endswith(".parquet") and i.type == pafs.FileType.File))
    else:
        files = [path] if info.type == pafs.FileType.File else []
    if not files:
        raise InputError(f"training set {path!r} has no Parquet files")
    for f in files:
        h.update((f[len(path) :] if f != path else os.path.basename(f)).lstrip("/").encode())
        with fs.open_input_stream(f) as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def blocking_gates_passed(gates: list[dict]) -> bool:
    """True when every blocking gate of ``gates`` passed (and every blocking gate is there)."""
    seen = {g["name"]: g for g in gates}
    return all(n in seen and seen[n]["passed"] for n in BLOCKING_GATES)


def audit_run(
    run_dir,
    val: TrainingArrays,
    gate_thresholds: dict | None = None,
    seed: object = 0,
    device=None,
    say: Callable[[str], None] = print,
) -> list[dict]:
    """Run the gates on the 'best' of ``run_dir`` with the validation set ``val``; writes
    ``gates.json`` into the run folder and returns the gate results."""
    device = resolve_device(device)
    model, best = load_checkpoint(run_dir, "best", device=device)
    gates = run_gates(model, best, val, thresholds=gate_thresholds, seed=seed, device=device)
    atomic_write_bytes(Path(run_dir) / GATES_FILE, json.dumps(json_safe(gates), indent=1).encode("utf-8"))
    for g in gates:
        say(
            f"gate {g['name']}: {g['value']:.4f} (threshold {g['threshold']}, {'pass' if g['passed'] else 'FAIL'}"
            f"{', blocking' if g['blocking'] else ''})"
        )
    return gates


def run_summary(run_dir, done: dict, gates: list[dict], version: str, **extra) -> dict:
    """JSON-able summary of a completed, audited run (what the trainer reports)."""
    best = read_spec(run_dir, "best")
    return json_safe(
        {
            "finished": True,
            "stopped_reason": done["stopped_reason"],
            "run_dir": str(run_dir),
            "run_key": Path(run_dir).name,
            "global_step": done["global_step"],
            "data_version": best.data_version,
            "best_epoch": done["best_epoch"],
            "epochs_run": done["epochs_run"],
            "architecture": best.architecture,
            "param_count": best.param_count,
            "temperature": best.temperature,
            "dihedral_views": best.dihedral_views,
            "training_set_version": version,
            "val_metrics": best.metrics.get("validation", {}),
            "calibration": best.metrics.get("calibration", {}),
            "history": best.training_state.get("history", []),
            "gates": gates,
            "blocking_gates_passed": blocking_gates_passed(gates),
            **extra,
        }
    )


def train_run(
    arrays: TrainingArrays,
    val: TrainingArrays,
    config: TrainConfig,
    spec: PreprocessSpec,
    out_dir,
    version: str,
    gate_thresholds: dict | None = None,
    say: Callable[[str], None] = print,
    progress=None,
    mirror=None,
) -> dict:
    """Train (or resume, or reuse) the run of ``config`` on the train split ``arrays`` with the
    validation set ``val``, audit it with the gates and return its summary. Never publishes.

    ``mirror`` (a ``run_mirror.RunMirror`` whose scratch is ``out_dir``): the run's copy in storage,
    pulled before the run trains and pushed after every checkpoint and the audit.

    A run that stopped before completing returns ``{"finished": False, ...}`` (call again to resume).
    """
    key = run_key(config, spec, {"training_set": version})
    run_dir = Path(out_dir) / RUNS / key
    if mirror is not None:
        mirror.pull(run_dir)

        def on_checkpoint(ev: dict, user=progress) -> None:  # every event follows a checkpoint of 'last'
            mirror.push(run_dir)
            if user is not None:
                user(ev)

        progress = on_checkpoint
    done = read_run_complete(run_dir)
    reused, resumed = done is not None, False
    if reused:
        say(f"run {key} is complete ({done['stopped_reason']}); reusing its best checkpoint, no training")
    else:
        say(f"run {key} in {run_dir}")
        result = train(arrays, val, config, run_dir, spec, {"training_set": version}, progress_cb=progress)
        if mirror is not None:
            mirror.push(run_dir)
        if not result.finished:
            say(
                f"stopped ({result.stopped_reason}) after {result.global_step} steps; rerun with the same inputs to "
                f"resume run {key}"
            )
            return json_safe(
                {
                    "finished": False,
                    "stopped_reason": result.stopped_reason,
                    "run_dir": str(run_dir),
                    "run_key": key,
                    "resumed": result.resumed,
                    "reused": False,
                    "global_step": result.global_step,
                }
            )
        done = mark_run_complete(run_dir, result, run_key=key, training_set_version=version)
        resumed = result.resumed
    gates = audit_run(run_dir, val, gate_thresholds, config.seed, config.device, say)
    if mirror is not None:
        mirror.push(run_dir)
    return run_summary(run_dir, done, gates, version, reused=reused, resumed=resumed)


def train_lens_finder(
    arrays: TrainingArrays,
    members: list[TrainConfig],
    spec: PreprocessSpec,
    out_dir,
    version: str,
    gate_thresholds: dict | None = None,
    ensemble_hidden: int = 300,
    say: Callable[[str], None] = print,
    progress=None,
    mirror=None,
) -> dict:
    """Train and audit every member on the loaded training set ``arrays`` (train split; the
    validation set with its fixed injections from the val split); with two or more members, stack
    them (``ensemble.stack_runs``) and choose the model to publish on the validation set. Returns
    the summary of the chosen run (``run_dir`` is what :func:`publish_run` publishes), with the
    members' summaries and the ensemble comparison. Never publishes. ``mirror``: the runs' copy in
    storage (:func:`train_run`); the ensemble's run is pulled and pushed too."""
    from .ensemble import stack_runs

    if not members:
        raise InputError("the lens finder needs at least one member training config")
    tr, val = split_for_training(arrays, members[0].device)
    say(
        f"train {len(tr)} rows ({int(tr.label.sum())} positive, {tr.n_hosts} injection hosts), validation {len(val)} "
        "rows "
        f"({int(val.label.sum())} positive)"
    )
    runs = [train_run(tr, val, c, spec, out_dir, version, gate_thresholds, say, progress, mirror) for c in members]
    pending = [r for r in runs if not r["finished"]]
    if pending or len(runs) == 1:
        return pending[0] if pending else runs[0]
    keys = [r["run_key"] for r in runs]
    ens_dir = (
        Path(out_dir)
        / RUNS
        / hashlib.sha256(json.dumps({"stack": keys, "hidden": ensemble_hidden}).encode()).hexdigest()[:16]
    )
    if mirror is not None:
        mirror.pull(ens_dir)
    choice = stack_runs([r["run_dir"] for r in runs], val, ens_dir, ensemble_hidden, members[0].seed, members[0].device)
    if mirror is not None:
        mirror.push(ens_dir)
    say(f"published model: {choice['published']} ({choice['reason']})")
    chosen = Path(choice["published_run_dir"])
    members_brief = [
        {k: r[k] for k in ("run_key", "architecture", "param_count", "best_epoch", "val_metrics", "gates")}
        for r in runs
    ]
    if chosen != ens_dir:
        return {**runs[[r["run_dir"] for r in runs].index(str(chosen))], "ensemble": choice, "members": members_brief}
    gates = audit_run(ens_dir, val, gate_thresholds, members[0].seed, members[0].device, say)
    if mirror is not None:
        mirror.push(ens_dir)
    done = read_run_complete(ens_dir)
    return run_summary(
        ens_dir, done, gates, version, ensemble=choice, members=members_brief, reused=False, resumed=False
    )


def read_gates(run_dir) -> list[dict]:
    """The gate results of the run in ``run_dir`` (InputError when it was never audited)."""
    path = Path(run_dir) / GATES_FILE
    if not path.is_file():
        raise InputError(f"run {run_dir} has no {GATES_FILE}: it was never audited, so it cannot be published")
    return json.loads(path.read_text("utf-8"))


def published_files(run_dir) -> list[tuple[str, bytes]]:
    """(file name, bytes) of what publishing the completed, audited run in ``run_dir`` writes, in
    the order of the commit rule: the weights of 'best' (sha256-verified), its spec without the
    optimizer state, then the side files. InputError when the run is incomplete, was never
    audited or a tensor file fails its sha256."""
    run_dir = Path(run_dir)
    if read_run_complete(run_dir) is None:
        raise InputError(f"run {run_dir} is not complete; nothing to publish")
    read_gates(run_dir)
    spec = read_spec(run_dir, "best")
    data = (run_dir / spec.weights_file).read_bytes() if (run_dir / spec.weights_file).is_file() else None
    if data is None or hashlib.sha256(data).hexdigest() != spec.weights_sha256:
        raise InputError(
            f"checkpoint {run_dir / 'best.json'}: tensor file {spec.weights_file} is missing or fails its sha256"
        )
    bare = replace(spec, optimizer_file=None, optimizer_sha256=None, optimizer_meta=None)
    files = [(spec.weights_file, data), ("best.json", spec_bytes(bare))]
    return files + [(name, (run_dir / name).read_bytes()) for name in SIDE_FILES if (run_dir / name).is_file()]


def split_for_training(arrays: TrainingArrays, device=None) -> tuple[TrainingArrays, TrainingArrays]:
    """(train split, validation set with its fixed injections) of a loaded training set."""
    return arrays.split_rows("train"), validation_arrays(arrays.split_rows("val"), resolve_device(device))
