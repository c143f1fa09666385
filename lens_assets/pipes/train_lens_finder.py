"""Standalone lens-finder trainer: runs under Dagster Pipes or on its own. It trains and audits;
it never publishes (the lens_finder asset publishes a run whose blocking gates passed, with
``darkhaloscope.training.runs.publish_run``).

Under Pipes (launched by a ``PipesSubprocessClient``, through ``DHS_LAUNCH_PREFIX`` on another host,
or by another Pipes client; ``lens_assets.pipes.session``) it reads its parameters from the
extras, logs progress through ``pipes.log``, reports each gate as an asset check and the trained
run with ``report_asset_materialization(metadata=..., data_version=<sha256 of the weights>)``.
Without Dagster it takes the same parameters as command-line flags and prints one JSON object.

Parameters (extras key = flag):
  training_set_uri  --training-set   training_set Parquet file or folder (local path or s3://)
  out_dir           --out-dir        folder of the training runs (runs/<key>/): a local path, or
                                     s3://... (the runs train in a temporary folder of this host
                                     and follow every checkpoint to storage, ``run_mirror``)
  s3_endpoint       --s3-endpoint    S3 endpoint of the s3:// URIs (default: the AWS SDK's)
  members           --members        list of TrainConfig JSON objects (two or more: a stacked ensemble)
  preprocess        --preprocess     PreprocessSpec JSON object (default: the one the training set records)
  training_set_version --training-set-version  data version of the input (default: sha256 of its files)
  gate_thresholds   --gate-thresholds  per-gate threshold overrides, JSON object by gate name
  ensemble_hidden   --ensemble-hidden  hidden nodes of the stacked ensemble's meta-learner (300)
  report_checks     --report-checks  report each gate as an asset check named after it
  injection_models  --injection-models  {"source_model": ..., "nuisance": ...}: the injection
                                     stream's source and nuisance models instead of those the
                                     training set records (an arm of the realism ablation; the
                                     models join the training set's version, so each arm is its
                                     own run)

Runs are folders ``<out_dir>/runs/<key>/`` (``darkhaloscope.training.runs``): new inputs train
anew, an interrupted run resumes (on any host, from its copy in storage), a completed run is reused
and only audited again. The reported ``run_dir`` is where the run is in ``out_dir``.

Exit status: 0 when training is complete; 3 when it stopped at a per-call ``max_minutes`` (rerun to
resume). Imports only dagster_pipes (never dagster), darkhaloscope and the lake's storage.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from darkhaloscope.errors import InputError
from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.loop import TrainConfig
from darkhaloscope.training.preprocess import PreprocessSpec
from darkhaloscope.training.run_mirror import RunMirror
from darkhaloscope.training.runs import dataset_version, train_lens_finder

EXIT_TIME_LIMIT = 3


def _json(value, what: str, kind=dict):
    if value is None or value == "":
        return kind()
    if isinstance(value, kind):
        return value
    try:
        d = json.loads(value)
    except (json.JSONDecodeError, TypeError) as exc:
        raise InputError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(d, kind):
        raise InputError(f"{what} must be a JSON {kind.__name__}, got {type(d).__name__}")
    return d


def with_injection_models(arrays, version: str, models: dict):
    """(arrays, version) whose injection stream renders with ``models`` (keys ``source_model``,
    ``nuisance``) and whose version names them; unchanged for an empty ``models`` or the models the
    training set records. InputError for
    another key or a training set without an injection stream."""
    if not models:
        return arrays, version
    unknown = sorted(set(models) - {"source_model", "nuisance"})
    if unknown:
        raise InputError(f"injection_models takes source_model and nuisance, not {unknown}")
    if arrays.stream is None:
        raise InputError(
            f"injection_models {models} needs a training set with an injection stream; {arrays.source} has none"
        )
    stream = replace(arrays.stream, injection=replace(arrays.stream.injection, **models))
    if stream == arrays.stream:  # the recorded models: the lens finder's own run, reused when complete
        return arrays, version
    inj = stream.injection
    return replace(arrays, stream=stream), f"{version}+{inj.source_model}/{inj.nuisance}"


def _filesystem(uri: str, s3_endpoint: str | None):
    """The pyarrow filesystem of an s3:// URI (the lake's: its endpoint, retries and timeouts), None
    for a local path."""
    if not uri.startswith("s3://"):
        return None
    from resources.storage import open_lake

    return open_lake(uri, s3_endpoint).fs


def run(params: dict, log=None, progress=None, scratch: str | None = None) -> dict:
    """Train (or resume, or reuse) every member, audit, and summarise; returns the JSON-able summary.
    ``scratch``: the local folder the runs train in when ``out_dir`` is in object storage."""
    say = log.info if log is not None else (lambda m: print(m, file=sys.stderr))
    uri, out_dir = params.get("training_set_uri"), params.get("out_dir")
    if not uri or not out_dir:
        raise InputError("training_set_uri (--training-set) and out_dir (--out-dir) are required")
    uri, out_dir, endpoint = str(uri), str(out_dir), params.get("s3_endpoint")
    members = [
        TrainConfig.from_dict(_json(c, "a member config")) for c in _json(params.get("members"), "members", list)
    ]
    say(f"loading training set {uri}")
    fs = _filesystem(uri, endpoint)
    arrays = load_training_set(uri, filesystem=fs)
    recorded = arrays.meta.get("preprocess_spec")
    spec = PreprocessSpec.from_dict(_json(params.get("preprocess"), "preprocess") or recorded or {})
    version = params.get("training_set_version") or dataset_version(uri.split("://", 1)[-1], fs)
    arrays, version = with_injection_models(arrays, version, _json(params.get("injection_models"), "injection_models"))
    runs_fs = _filesystem(out_dir, endpoint)
    mirror = None
    if runs_fs is not None:
        if scratch is None:
            raise InputError(f"training runs in {out_dir} need a local scratch folder to train in")
        mirror = RunMirror(out_dir, runs_fs, scratch)
        say(f"training runs in {out_dir}, trained in {scratch}")

    def on_progress(ev: dict) -> None:
        if ev["event"] == "epoch":
            line = (
                f"lens_finder epoch {ev['epoch']}: loss {ev['train_loss']:.4f}, val AUROC {ev['val_auroc']:.4f} "
                f"(best {ev['best_val_auroc']:.4f} @ {ev['best_epoch']}), {ev['seconds']:.0f} s"
            )
            say(line)
            if log is not None:  # and the console: dhs keeps Dagster's at WARNING; this step's stderr is the terminal's
                print(line, file=sys.stderr, flush=True)
        if progress is not None:
            progress(ev)

    summary = train_lens_finder(
        arrays,
        members,
        spec,
        out_dir if mirror is None else scratch,
        version,
        _json(params.get("gate_thresholds"), "gate_thresholds"),
        int(params.get("ensemble_hidden") or 300),
        say,
        on_progress,
        mirror,
    )
    if mirror is not None:  # report where the runs are in storage; the figure is read from here
        summary = {**summary, "local_run_dir": summary["run_dir"], "run_dir": mirror.location(summary["run_dir"])}
        if "ensemble" in summary:
            chosen = mirror.location(summary["ensemble"]["published_run_dir"])
            summary["ensemble"] = {**summary["ensemble"], "published_run_dir": chosen}
    return {**summary, "out_dir": out_dir}


def pipes_metadata(summary: dict) -> dict:
    """Materialization metadata of a finished summary (raw values and Pipes-typed JSON/markdown)."""
    vm = summary["val_metrics"]
    md = {
        k: summary[k]
        for k in (
            "architecture",
            "param_count",
            "best_epoch",
            "epochs_run",
            "stopped_reason",
            "training_set_version",
            "blocking_gates_passed",
            "run_key",
            "run_dir",
            "reused",
            "temperature",
            "dihedral_views",
        )
    }
    md["gates"] = {"raw_value": summary["gates"], "type": "json"}
    md["val_metrics"] = {"raw_value": vm, "type": "json"}
    md["calibration"] = {"raw_value": summary.get("calibration", {}), "type": "json"}
    if "ensemble" in summary:
        md["ensemble"] = {"raw_value": summary["ensemble"], "type": "json"}
    tier_recalls = sorted(k for k in vm if k.startswith("recall_at_0.5_tier_"))
    keys = (
        "auroc",
        "average_precision",
        "tpr_at_fpr_1e-2",
        "tpr_at_fpr_1e-3",
        "tpr_at_fpr_1e-4",
        "ece_15",
        "ece_15_uncalibrated",
        "recall_at_0.5",
        "auroc_injections_vs_negatives",
        "auroc_real_vs_negatives",
        *tier_recalls,
    )
    for k in keys:
        if vm.get(k) is not None:
            md[f"val_{k}"] = vm[k]
    curves = Path(summary.get("local_run_dir", summary["run_dir"])) / "training_curves.png"
    if curves.is_file():  # shown in the UI with the materialization
        b64 = base64.b64encode(curves.read_bytes()).decode()
        md["training_curves"] = {"raw_value": f"![training curves](data:image/png;base64,{b64})", "type": "md"}
    return md


def _parse(argv) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--training-set", dest="training_set_uri", required=True)
    ap.add_argument("--out-dir", dest="out_dir", required=True)
    ap.add_argument("--s3-endpoint", dest="s3_endpoint")
    ap.add_argument("--members", default="[]")
    ap.add_argument("--preprocess", default="")
    ap.add_argument("--training-set-version", dest="training_set_version")
    ap.add_argument("--gate-thresholds", dest="gate_thresholds", default="{}")
    ap.add_argument("--ensemble-hidden", dest="ensemble_hidden", type=int, default=300)
    ap.add_argument("--injection-models", dest="injection_models", default="{}")
    ap.add_argument("--report-checks", dest="report_checks", action="store_true")
    return vars(ap.parse_args(argv))


def main(argv=None) -> int:
    from lens_assets.pipes.session import is_launched_step, open_step_pipes

    with tempfile.TemporaryDirectory(prefix="dhs_lens_finder_") as scratch:  # this host's own
        if is_launched_step():
            with open_step_pipes() as pipes:
                summary = run(dict(pipes.extras), log=pipes.log, scratch=scratch)
                if not summary["finished"]:
                    pipes.log.warning("training stopped at its per-call time limit; rerun the asset to resume")
                    return EXIT_TIME_LIMIT
                if pipes.extras.get("report_checks"):
                    for g in summary["gates"]:
                        pipes.report_asset_check(
                            check_name=g["name"],
                            passed=bool(g["passed"]),
                            severity="ERROR" if g["blocking"] else "WARN",
                            metadata={"value": g["value"], "threshold": g["threshold"]},
                        )
                metadata = pipes_metadata(summary)
                pipes.report_asset_materialization(metadata=metadata, data_version=summary["data_version"])
            return 0
        summary = run(_parse(argv), scratch=scratch)
    print(json.dumps(summary, sort_keys=True))
    return 0 if summary["finished"] else EXIT_TIME_LIMIT


if __name__ == "__main__":
    sys.exit(main())
