"""Standalone lens-finder trainer: runs under Dagster Pipes or on its own.

Under Pipes (launched by a ``PipesSubprocessClient`` or another Pipes client) it reads its parameters
from the extras, logs progress through ``pipes.log``, and reports the checkpoint with
``report_asset_materialization(metadata=..., data_version=<sha256 of the best weights>)``.
Without Dagster it takes the same parameters as command-line flags and prints one JSON object.

Parameters (extras key = flag):
  training_set_uri  --training-set   training_set Parquet file or folder (local path or s3://)
  out_dir           --out-dir        local checkpoint folder: the published checkpoint, and its runs/
  checkpoint_uri    --checkpoint-uri optional s3:// destination the published checkpoint is copied to
  config            --config         TrainConfig as a JSON object (or a dict in the extras)
  preprocess        --preprocess     PreprocessSpec as a JSON object (default: PreprocessSpec())
  training_set_version --training-set-version  data version of the input (default: sha256 of its files)
  report_checks     --report-checks  also report each gate as an asset check named after it
  core_threshold    --core-threshold blocking threshold of the core-only LR gate (default 0.65)
  time_budget_final --time-budget-final  stopping at ``max_minutes`` ends the run with the best epoch
                                     so far (exit 0) instead of asking for a resume (exit 3); the
                                     budget then joins the run key

Runs and publication. Every run trains in its own folder ``<out_dir>/runs/<key>/``, where ``key`` is
``darkhaloscope.training.loop.run_key``: a hash of the config fields that shape the weights, the
preprocessing spec and the training set's data version. So a call with

* new inputs or another config trains a new model from scratch (no resume refusal to clear by hand);
* the inputs of a run that stopped before completing (killed, or at ``max_minutes`` when that is not
  final) resumes it from its checkpoint ``last``;
* the inputs of a completed run (finished, or final by its time budget: ``runs/<key>/complete.json``)
  trains nothing: it reuses that run's ``best`` and only runs the gates again.

Only a completed run is published into ``out_dir`` itself: ``best`` (content-addressed safetensors
first, its spec ``best.json`` last, by the commit rule of darkhaloscope.training.checkpoint; the spec
holds the full validation metrics), then ``metrics.json``, ``gates.json`` and ``training_curves.png``.
Readers of ``out_dir/best`` therefore never see a half-written checkpoint while a new run trains.
With ``checkpoint_uri`` the published files (never ``runs/``) are uploaded in the same order.

Exit status: 0 when training is complete; 3 when it stopped at ``max_minutes`` (rerun to resume).
Imports only dagster_pipes (never dagster) and darkhaloscope.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a path: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from darkhaloscope.errors import InputError  # noqa: E402
from darkhaloscope.lake import Lake  # noqa: E402
from darkhaloscope.training.checkpoint import (  # noqa: E402
    CheckpointSpec, atomic_write_bytes, load_checkpoint, publish_checkpoint, remove_checkpoint, tensor_files_of,
)
from darkhaloscope.training.data import load_training_set  # noqa: E402
from darkhaloscope.training.gates import run_gates  # noqa: E402
from darkhaloscope.training.inference import resolve_device  # noqa: E402
from darkhaloscope.training.loop import TrainConfig, mark_run_complete, read_run_complete, run_key, train  # noqa: E402
from darkhaloscope.training.metrics import json_safe  # noqa: E402
from darkhaloscope.training.preprocess import PreprocessSpec  # noqa: E402

EXIT_TIME_LIMIT = 3
#: Sub-folder of ``out_dir`` that holds one folder per run (never published or uploaded).
RUNS = "runs"
#: Files published beside ``best``: those of the run folder, and the gates of this call.
RUN_FILES = ("metrics.json", "training_curves.png")
SIDE_FILES = RUN_FILES + ("gates.json",)


def _as_dict(value, what: str) -> dict:
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return value
    try:
        d = json.loads(value)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(d, dict):
        raise InputError(f"{what} must be a JSON object, got {type(d).__name__}")
    return d


def _s3(uri: str):
    """(filesystem, path) of an s3:// URI, with the lake's endpoint handling (DHS_S3_ENDPOINT)."""
    lake = Lake(uri, s3_endpoint=os.environ.get("DHS_S3_ENDPOINT") or None)
    return lake.fs, lake.root


def dataset_version(uri: str) -> str:
    """sha256 over the (sorted) Parquet files of a training set: its data version."""
    h = hashlib.sha256()
    if uri.startswith("s3://"):
        from pyarrow import fs as pafs

        fs, path = _s3(uri)
        info = fs.get_file_info(path)
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True)) if info.type == pafs.FileType.Directory else [info]
        for i in sorted((i for i in infos if i.path.endswith(".parquet")), key=lambda i: i.path):
            h.update(i.path[len(path):].encode())
            with fs.open_input_stream(i.path) as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        return h.hexdigest()
    p = Path(uri)
    files = sorted(p.rglob("*.parquet")) if p.is_dir() else [p]
    if not files or not all(f.is_file() for f in files):
        raise InputError(f"training set {uri!r} has no Parquet files")
    for f in files:
        h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _publish(run_dir: Path, out_dir: Path, gates: list) -> CheckpointSpec:
    """Publish the completed run's 'best' into ``out_dir`` (tensors, then spec), then its side files."""
    best = publish_checkpoint(run_dir, out_dir, "best")
    for name in RUN_FILES:
        if (run_dir / name).is_file():
            atomic_write_bytes(out_dir / name, (run_dir / name).read_bytes())
    atomic_write_bytes(out_dir / "gates.json", json.dumps(json_safe(gates), indent=1).encode("utf-8"))
    remove_checkpoint(out_dir, "last")  # a resume checkpoint of the old single-folder layout: never read now
    return best


def _upload(out_dir: Path, best: CheckpointSpec, uri: str) -> None:
    """Copy the published checkpoint to ``uri`` (s3://) by the commit rule: tensors, side files,
    the spec last; then the superseded tensor files there (and any old 'last') are deleted."""
    from pyarrow import fs as pafs

    fs, dest = _s3(uri)
    local = pafs.LocalFileSystem()
    fs.create_dir(dest, recursive=True)
    names = [best.weights_file] + [n for n in SIDE_FILES if (out_dir / n).is_file()] + ["best.json"]
    for name in names:
        pafs.copy_files(str(out_dir / name), f"{dest}/{name}", source_filesystem=local, destination_filesystem=fs)
    there = [i.base_name for i in fs.get_file_info(pafs.FileSelector(dest, allow_not_found=True)) if i.type == pafs.FileType.File]
    if "last.json" in there:
        fs.delete_file(f"{dest}/last.json")
    for name in tensor_files_of("best", there, keep={best.weights_file}) + tensor_files_of("last", there):
        fs.delete_file(f"{dest}/{name}")


def run(params: dict, log=None, progress=None) -> dict:
    """Train (or resume, or reuse a completed run), gate, publish and summarise; returns the
    JSON-able summary (metrics, gates, checkpoint). See the module docstring for the run folders."""
    say = (log.info if log is not None else (lambda m: print(m, file=sys.stderr)))
    uri = params.get("training_set_uri")
    if not uri:
        raise InputError("training_set_uri (--training-set) is required")
    ckpt_uri = params.get("checkpoint_uri")
    out_dir = params.get("out_dir")
    if not out_dir:
        if ckpt_uri and not str(ckpt_uri).startswith("s3://"):
            out_dir = ckpt_uri
        else:
            raise InputError("out_dir (--out-dir) is required (a local folder; checkpoint_uri may add an s3:// copy)")
    out = Path(out_dir)
    config = TrainConfig.from_dict(_as_dict(params.get("config"), "config"))
    spec = PreprocessSpec.from_dict(_as_dict(params.get("preprocess"), "preprocess"))
    version = params.get("training_set_version") or dataset_version(str(uri))
    data_versions = {"training_set": version}
    budget_final = bool(params.get("time_budget_final"))
    key = run_key(config, spec, data_versions, budget_is_final=budget_final)
    run_dir = out / RUNS / key

    say(f"loading training set {uri}")
    arrays = load_training_set(str(uri))
    tr, va = arrays.split_rows("train"), arrays.split_rows("val")
    say(f"train {len(tr)} rows ({int(tr.label.sum())} positive), val {len(va)} rows ({int(va.label.sum())} positive)")

    def on_progress(ev: dict) -> None:
        if ev["event"] == "epoch":
            say(f"epoch {ev['epoch']}: loss {ev['train_loss']:.4f}, val AUROC {ev['val_auroc']:.4f} (best {ev['best_val_auroc']:.4f} @ {ev['best_epoch']})")
        if progress is not None:
            progress(ev)

    done = read_run_complete(run_dir)
    reused = done is not None
    if reused:
        say(f"run {key} is complete ({done['final_by']}, {done['stopped_reason']}); reusing its best checkpoint, no training")
        device, resumed = resolve_device(config.device), False
    else:
        say(f"run {key} in {run_dir}")
        result = train(tr, va, config, run_dir, spec, data_versions, progress_cb=on_progress)
        # a fixed time budget (the demo profile) ends training with the best epoch so far
        final_by = "finished" if result.finished else (
            "time_budget" if budget_final and result.stopped_reason == "time_limit" and result.best is not None else None)
        if final_by is None:
            say(f"stopped ({result.stopped_reason}) after {result.global_step} steps; rerun with the same inputs to resume run {key}")
            return json_safe({
                "finished": False, "stopped_reason": result.stopped_reason, "out_dir": str(out), "run_dir": str(run_dir),
                "run_key": key, "resumed": result.resumed, "reused": False, "global_step": result.global_step,
            })
        done = mark_run_complete(run_dir, result, final_by, run_key=key, training_set_version=version)
        device, resumed = result.device, result.resumed

    model, best = load_checkpoint(run_dir, "best")
    gates = run_gates(model, best, va, core_threshold=float(params.get("core_threshold", 0.65)), seed=config.seed, device=device)
    for g in gates:
        say(f"gate {g['name']}: {g['value']:.4f} (threshold {g['threshold']}, {'pass' if g['passed'] else 'FAIL'}{', blocking' if g['blocking'] else ''})")
    published = _publish(run_dir, out, gates)
    final_uri = str(out.resolve())
    if ckpt_uri and str(ckpt_uri).startswith("s3://"):
        _upload(out, published, str(ckpt_uri))
        final_uri = str(ckpt_uri)
    summary = {
        "finished": True, "stopped_reason": done["stopped_reason"], "final_by": done["final_by"], "out_dir": str(out),
        "run_dir": str(run_dir), "run_key": key, "resumed": resumed, "reused": reused,
        "global_step": done["global_step"], "checkpoint_uri": final_uri, "data_version": published.weights_sha256,
        "best_epoch": done["best_epoch"], "epochs_run": done["epochs_run"], "architecture": published.architecture,
        "param_count": published.param_count, "training_set_version": version, "val_metrics": done["val_metrics"],
        "gates": gates, "blocking_gates_passed": all(g["passed"] for g in gates if g["blocking"]),
    }
    return json_safe(summary)


def _pipes_metadata(summary: dict) -> dict:
    vm = summary["val_metrics"]
    md = {
        "dagster/uri": summary["checkpoint_uri"], "architecture": summary["architecture"],
        "param_count": summary["param_count"], "best_epoch": summary["best_epoch"], "epochs_run": summary["epochs_run"],
        "stopped_reason": summary["stopped_reason"], "training_set_version": summary["training_set_version"],
        "blocking_gates_passed": summary["blocking_gates_passed"], "run_key": summary["run_key"],
        "reused_completed_run": summary["reused"],
        "gates": {"raw_value": summary["gates"], "type": "json"},
        "val_metrics": {"raw_value": vm, "type": "json"},
    }
    tier_recalls = sorted(k for k in vm if k.startswith("recall_at_0.5_tier_"))
    for k in ("auroc", "average_precision", "tpr_at_fpr_1e-2", "tpr_at_fpr_1e-3", "tpr_at_fpr_1e-4", "ece_15", "recall_at_0.5", *tier_recalls):
        if vm.get(k) is not None:
            md[f"val_{k}"] = vm[k]
    curves = Path(summary["out_dir"]) / "training_curves.png"
    if curves.is_file():  # shown in the UI with the materialization
        b64 = base64.b64encode(curves.read_bytes()).decode()
        md["training_curves"] = {"raw_value": f"![training curves](data:image/png;base64,{b64})", "type": "md"}
    return md


def _parse(argv) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--training-set", dest="training_set_uri", required=True)
    ap.add_argument("--out-dir", dest="out_dir")
    ap.add_argument("--checkpoint-uri", dest="checkpoint_uri")
    ap.add_argument("--config", default="{}")
    ap.add_argument("--preprocess", default="{}")
    ap.add_argument("--training-set-version", dest="training_set_version")
    ap.add_argument("--core-threshold", dest="core_threshold", type=float, default=0.65)
    ap.add_argument("--time-budget-final", dest="time_budget_final", action="store_true")
    ap.add_argument("--report-checks", dest="report_checks", action="store_true")
    return vars(ap.parse_args(argv))


def main(argv=None) -> int:
    from dagster_pipes import PipesEnvVarParamsLoader, open_dagster_pipes

    if PipesEnvVarParamsLoader().is_dagster_pipes_process():
        with open_dagster_pipes() as pipes:
            summary = run(dict(pipes.extras), log=pipes.log)
            if not summary["finished"]:
                pipes.log.warning("training stopped at its time budget; rerun the asset to resume")
                return EXIT_TIME_LIMIT
            if pipes.extras.get("report_checks"):
                for g in summary["gates"]:
                    pipes.report_asset_check(
                        check_name=g["name"], passed=bool(g["passed"]), severity="ERROR" if g["blocking"] else "WARN",
                        metadata={"value": g["value"], "threshold": g["threshold"]},
                    )
            pipes.report_asset_materialization(metadata=_pipes_metadata(summary), data_version=summary["data_version"])
        return 0
    summary = run(_parse(argv))
    print(json.dumps(summary, sort_keys=True))
    return 0 if summary["finished"] else EXIT_TIME_LIMIT


if __name__ == "__main__":
    sys.exit(main())
