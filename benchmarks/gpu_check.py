"""Prepared GPU check: the full profile's training, injection rendering and scoring, timed on CUDA
and on the CPU in one run, on a small training set that the check writes and reads back itself.

Runs on a bare GPU host that has torch, numpy, pyarrow and scipy (the renderer sizes its FFTs with
``scipy.fft.next_fast_len``) and this repository's code: no lake, no scikit-learn, safetensors,
astropy, matplotlib or dagster (tests/test_gpu_check.py holds it to that). pyarrow must be the
project's (>= 26, ``pyproject.toml``): pyarrow 25 cannot read back the training set's nullable
fixed-size-list stamps; carry its wheel to a host whose image is older.

    python3 -m benchmarks.gpu_check [--device cpu|cuda|both] [--steps 20] [--budget-s 420] [--tiny]
                                    [--batch-size N] [--threads N] [--render-chunks 4]
    python3 -m benchmarks.gpu_check --render-chunk-sweep [--device cuda|cpu] [--tiny]

``--device`` defaults to both when CUDA is available, else cpu. Per device, warm-up excluded and
``torch.cuda.synchronize()`` around every CUDA timing:

* training, each member of ``training_profile('full')``: optimizer steps of the training loop
  (``loop._Run.step``: the profile's AdamW, warm-up + cosine LR, bf16 autocast on CUDA, gradient
  clipping, under the loop's deterministic settings) on batches of the profile's size from the
  epoch dataset (the profile's preprocessing of 101 px stamps, augmentation, core dropout, hard
  negatives) -> ``images_per_s``; and the epoch dataset's DataLoader with the profile's worker
  processes, its rows preprocessed in every batch as a survey-scale training set's are ->
  ``loader_images_per_s``. The loop's once-per-epoch validation and checkpoints are not timed.
* injection rendering: the stream's render of a chunk (``stream.render_arcs``: the profile's
  window, render numerics and chunk, arc S/N against the host noise) -> ``systems_per_s``. The
  stream's CPU side (prior draws, σ_v from the cosmology, re-draws below the S/N threshold) is not
  timed: it needs scipy and astropy, and benchmarks/bench_training.py times it.
* scoring: the stacked ensemble of the two members just trained, each member's logit averaged over
  the profile's dihedral views before the meta-learner, in the score assets' batch for the device
  (``inference.stamp_logits``) -> ``stamps_per_s``.
* the injection bank's fused pass (``evaluation.injection_scoring.render_and_score``: render and
  score chunk by chunk, no stamp stored) against its render -> store (zstd Parquet) -> score path,
  with that ensemble, best of one pass each on a batch of synthetic tasks
  (``bench_injection_scoring.compare``) -> ``fused_injections_per_s``, ``stored_injections_per_s``,
  ``fused_over_stored`` and ``same_rows`` (the two paths' score rows are the same bytes).

The training set: synthetic 101 px hosts (``bench_training.synthetic_hosts``), each also the
paired control of one injection rendered by the same engine (systems of
``bench_injection._systems``), written as a training_set Parquet table and read back with the
trainer's reader (``data.load_training_set``). Every timed loop stops at its share of the hard
budget ``--budget-s`` (after one timed iteration at least); a watchdog ends the run with an error
line past the budget. ``--tiny``: a few stamps and batches, for CI on a CPU.

``--render-chunk-sweep`` instead times the render of one chunk (``render_chunk`` systems, 8 s per
size) at each elementwise chunk size of ``lensing.render`` in :data:`CHUNK_SWEEP` [points] on one
device (``--device``, default CUDA when present), with the device's peak memory and whether the
arcs are the same bytes as at the smallest size, then their largest difference from the CPU's
relative to the peak arc: what ``lensing.render._CHUNK_POINTS`` is chosen by.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from benchmarks.bench_injection import _systems
from benchmarks.bench_injection_scoring import bench_bank, compare, parquet_writer, profile_finder
from benchmarks.bench_training import synthetic_hosts
from darkhaloscope.lensing import render as render_module
from darkhaloscope.lensing.sie import LensBatch
from darkhaloscope.lensing.source import SourceBatch
from darkhaloscope.lensing.stream import add_window, render_arcs, window_of
from darkhaloscope.stamps import to_tensor_array
from darkhaloscope.training import dataset as dataset_module
from darkhaloscope.training.checkpoint import CheckpointSpec
from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.dataset import batches_for_plan
from darkhaloscope.training.inference import SCORE_BATCH, stamp_logits
from darkhaloscope.training.loop import _deterministic, _Run
from darkhaloscope.training.models import StackedEnsemble, count_parameters
from darkhaloscope.training.profiles import training_profile
from darkhaloscope.training.training_set import _nullable_tensor

#: Sizes of the run: hosts (the training set holds each host and its injection), injections
#: rendered per timed chunk (None: the profile's render chunk), stamps scored per timed pass,
#: epochs of batches the loader is timed over, and the batch (None: the profile's).
FULL = {
    "hosts": 320,
    "render_chunk": None,
    "score_stamps": 2048,
    "loader_epochs": 4,
    "batch_size": None,
    "fused_injections": 1024,
    "fused_hosts": 128,
}
TINY = {
    "hosts": 12,
    "render_chunk": 16,
    "score_stamps": 16,
    "loader_epochs": 2,
    "batch_size": 12,
    "fused_injections": 8,
    "fused_hosts": 4,
}
#: Untimed optimizer steps before the timed ones, by device (allocator, cuDNN / oneDNN kernel choice).
WARMUP_STEPS = {"cuda": 2, "cpu": 1}
#: Elementwise chunk sizes [points] of ``lensing.render`` that ``--render-chunk-sweep`` times.
CHUNK_SWEEP = (1 << 16, 1 << 20, 1 << 22, 1 << 24)
#: Part of the budget the timed loops share; the rest is for the untimed work (the training set,
#: warm-ups, worker start-up) and a loop's last iteration.
TIMED_PART = 0.5


class Budget:
    """The run's hard time budget: each timed phase's share of what is left, and a watchdog that
    prints what was measured so far with an error and ends the process once the budget has passed."""

    def __init__(self, seconds: float, phases: int, out: dict):
        self.t0, self.deadline, self.phases, self.out = time.monotonic(), time.monotonic() + seconds, phases, out
        self.folder: str | None = None  # the run's temporary folder, removed when the watchdog ends the run
        self.watchdog = threading.Timer(seconds, self._expire)
        self.watchdog.daemon = True
        self.watchdog.start()

    def _expire(self) -> None:
        error = {"error": "over the time budget (--budget-s)", "elapsed_s": self.elapsed()}
        print(json.dumps({**self.out, **error}), flush=True)
        try:
            if self.folder:
                shutil.rmtree(self.folder)
        except OSError as exc:
            print(f"gpu_check: could not remove {self.folder}: {exc}", file=sys.stderr, flush=True)
        os._exit(3)

    def elapsed(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def say(self, message: str) -> None:
        print(f"gpu_check {self.elapsed():7.1f} s  {message}", file=sys.stderr, flush=True)

    def share(self) -> float:
        """Seconds the next timed phase may take (its part of what is left); counts it off."""
        left = max(self.deadline - time.monotonic(), 0.0)
        share = TIMED_PART * left / max(self.phases, 1)
        self.phases -= 1
        return share


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, share_s: float, work, max_iterations: int) -> tuple[float, int]:
    """(seconds, iterations) of ``work()`` run up to ``max_iterations`` times, the first always, a
    later one only when the mean so far says it ends inside ``share_s``; CUDA synchronised around it."""
    sync(device)
    t0, n = time.perf_counter(), 0
    while n < max_iterations:
        elapsed = time.perf_counter() - t0
        if n and elapsed + elapsed / n > share_s:
            break
        work()
        n += 1
    sync(device)
    return time.perf_counter() - t0, n


def systems_on(device: torch.device, n: int):
    """(lens batch, source batch, PSF FWHM (n, 3) [arcsec]) of ``n`` synthetic systems on ``device``."""
    lens, src, flux, fwhm = _systems(n)
    return (
        LensBatch.from_arrays(device=device, **lens),
        SourceBatch.from_arrays(flux=flux, device=device, **src),
        np.ascontiguousarray(fwhm),
    )


def render(device: torch.device, lens, src, fwhm, invvar_window, cfg) -> np.ndarray:
    """Arcs (n, 3, W, W) of the systems, rendered by the stream's engine on ``device``."""
    arcs, _ = render_arcs(lens, src, fwhm, invvar_window, np.arange(len(fwhm), dtype=np.int64), cfg, device)
    return arcs


def write_training_set(folder: Path, n_hosts: int, device: torch.device, cfg) -> Path:
    """A training_set table of ``n_hosts`` hosts (label 0) and as many injections (label 1) with their
    hosts as controls, 1 in 8 of each in the val split; written as Parquet under ``folder``."""
    cols, images, invvar = synthetic_hosts(n_hosts, seed=1)
    lens, src, fwhm = systems_on(device, n_hosts)
    window = cfg.render.n_pix
    arcs = render(device, lens, src, fwhm, window_of(invvar, window), cfg)
    stamps = np.concatenate([images, add_window(images, arcs)])
    n = 2 * n_hosts
    split = np.where(np.arange(n) % n_hosts % 8 == 7, "val", "train")
    table = pa.table(
        {
            "object_id": pa.array(np.arange(1, n + 1), pa.int64()),
            "label": pa.array(np.repeat([0, 1], n_hosts), pa.int8()),
            "weight": pa.array(np.ones(n, np.float32)),
            "split": split,
            "kind": np.repeat(["negative", "injected_positive"], n_hosts),
            "tier": pa.nulls(n, pa.string()),
            "image": to_tensor_array(stamps),
            "control": _nullable_tensor(np.concatenate([images, images]), np.repeat([False, True], n_hosts)),
            "theta_e_arcsec": pa.array(np.r_[np.full(n_hosts, np.nan), lens.theta_e.cpu().numpy()], pa.float32()),
            "psfsize_r": pa.array(np.r_[cols.column("psfsize_r").to_numpy(), fwhm[:, 1]], pa.float32()),
        }
    )
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "part-0.parquet")
    return folder


def train_member(member, device: torch.device, train, val, spec, steps: int, sizes: dict, budget: Budget, out: Path):
    """(timings of one member on ``device``, its trained model)."""
    batch = {"batch_size": sizes["batch_size"]} if sizes["batch_size"] else {}
    cfg = replace(member, device=device.type, epochs=1, **batch)
    with _deterministic(device):
        run = _Run(train, val, cfg, out, spec, {"training_set": "gpu_check"}, None)
        run.model.train()
        batches = [
            b for e in range(sizes["loader_epochs"]) for b in batches_for_plan(run.ds.epoch_plan(e), e, cfg.batch_size)
        ]
        t0 = time.perf_counter()
        loaded = iter(run.loader(batches))
        first = next(loaded)  # worker start-up
        start_s = time.perf_counter() - t0
        loader_s, n_batches = timed(torch.device("cpu"), budget.share(), lambda: next(loaded), len(batches) - 1)
        loaded = None  # the last reference: its worker processes end
        budget.say(f"{device.type}: {cfg.arch} loader done, optimizer steps")
        images = sum(len(b) for b in batches[1 : 1 + n_batches])
        x, y, w = first  # pinned by the loader on CUDA, as in training
        for _ in range(WARMUP_STEPS[device.type]):
            run.step(x, y, w, 0, 0)
        step_s, n_steps = timed(device, budget.share(), lambda: run.step(x, y, w, 0, 0), steps)
    return {
        "images_per_s": round(n_steps * x.shape[0] / step_s, 1),
        "steps": n_steps,
        "batch_size": int(x.shape[0]),
        "params": count_parameters(run.model),
        "amp_bf16": run.amp,
        "loader_images_per_s": round(images / loader_s, 1),
        "loader_batches": n_batches,
        "loader_workers": run.loader([]).num_workers,
        "loader_start_s": round(start_s, 2),
    }, run.model


def score(models: dict, device: torch.device, images: np.ndarray, sizes: dict, budget: Budget) -> dict:
    """Scoring timings of the stacked ensemble of ``models`` (architecture -> trained member) on ``device``."""
    full = training_profile("full")
    in_ch = full.preprocess.out_channels(3)
    ens = StackedEnsemble(in_ch, tuple(models), full.ensemble_hidden)
    for m, trained in zip(ens.members, models.values()):
        m.load_state_dict(trained.state_dict())
    views = full.members[0].dihedral_views
    spec = CheckpointSpec(
        name="gpu_check",
        architecture="stacked_ensemble",
        in_channels=in_ch,
        preprocess=full.preprocess,
        param_count=count_parameters(ens),
        param_shapes={},
        weights_file="-",
        weights_sha256="-",
        dihedral_views=views,
        arch_args={"members": list(models), "hidden": full.ensemble_hidden},
    )
    batch = SCORE_BATCH[device.type]
    stamps = np.resize(images, (sizes["score_stamps"], *images.shape[1:]))  # the set's stamps, repeated
    stamp_logits(ens, spec, stamps[:batch], device, batch)  # warm-up
    group = 4 * batch
    parts = [stamps[i : i + group] for i in range(0, len(stamps), group)]
    it = iter(parts)
    seconds, n = timed(device, budget.share(), lambda: stamp_logits(ens, spec, next(it), device, batch), len(parts))
    scored = int(sum(len(p) for p in parts[:n]))
    return {
        "stamps_per_s": round(scored / seconds, 1),
        "stamps": scored,
        "batch_size": batch,
        "dihedral_views": views,
        "members": list(models),
    }


def fused_rate(models: dict, device: torch.device, sizes: dict, folder: str) -> dict:
    """The injection bank's fused pass against its render -> store -> score path, in the same run on
    ``device`` (``bench_injection_scoring.compare``: one untimed pass of each on a few tasks first),
    with the stacked ensemble of ``models``; the bank is stored as the lake stores it, under ``folder``."""
    tasks, images, invvar = bench_bank(sizes["fused_injections"], sizes["fused_hosts"])
    model, spec = profile_finder("full", models)
    return compare(tasks, images, invvar, model, spec, device.type, parquet_writer(folder), repeat=1)


def render_rate(device: torch.device, invvar: np.ndarray, cfg, chunk: int, budget: Budget, chunks: int) -> dict:
    """Injection-rendering timings on ``device``: chunks of ``chunk`` systems, one untimed first."""
    lens, src, fwhm = systems_on(device, chunk)
    iv = np.ascontiguousarray(window_of(np.resize(invvar, (chunk, *invvar.shape[1:])), cfg.render.n_pix))
    render(device, lens, src, fwhm, iv, cfg)  # warm-up (FFT plans, allocator)
    seconds, n = timed(device, budget.share(), lambda: render(device, lens, src, fwhm, iv, cfg), chunks)
    return {
        "systems_per_s": round(n * chunk / seconds, 1),
        "systems": n * chunk,
        "render_chunk": chunk,
        "window_px": cfg.render.n_pix,
        "supersample": cfg.render.supersample,
    }


def render_chunk_sweep(device: torch.device, cfg, n: int, seconds: float) -> dict:
    """Render timings of ``n`` systems on ``device`` at each elementwise chunk size of CHUNK_SWEEP."""
    invvar = synthetic_hosts(8, seed=2)[2]
    iv = np.ascontiguousarray(window_of(np.resize(invvar, (n, *invvar.shape[1:])), cfg.render.n_pix))
    lens, src, fwhm = systems_on(device, n)
    chunks = render_module._CHUNK_POINTS
    default = chunks.get(device.type)
    out, first = {"device": str(device), "systems": n, "default_points": default, "sizes": {}}, None
    try:
        for points in CHUNK_SWEEP:
            chunks[device.type] = points
            render(device, lens, src, fwhm, iv, cfg)  # warm-up
            sync(device)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            t0, k = time.perf_counter(), 0
            while k < 2 or time.perf_counter() - t0 < seconds:
                arcs = render(device, lens, src, fwhm, iv, cfg)
                k += 1
            sync(device)
            elapsed = time.perf_counter() - t0
            first = arcs if first is None else first
            out["sizes"][points] = {
                "systems_per_s": round(n * k / elapsed, 1),
                "peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
                if device.type == "cuda"
                else None,
                "same_bytes_as_smallest": bool(np.array_equal(arcs.view(np.uint32), first.view(np.uint32))),
            }
    finally:
        if default is None:
            chunks.pop(device.type, None)
        else:
            chunks[device.type] = default
    if device.type != "cpu":
        cpu = torch.device("cpu")
        on_cpu = render(cpu, *systems_on(cpu, n), iv, cfg)
        out["max_rel_diff_vs_cpu"] = float(np.abs(first - on_cpu).max() / np.abs(on_cpu).max())
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda", "both"), default=None)
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps per member and device (at most)")
    ap.add_argument("--render-chunks", type=int, default=4, help="timed render chunks per device (at most)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="hard limit of the whole run [s]")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--batch-size", type=int, default=0, help="training batch (0: the profile's; a CPU host: fewer)")
    ap.add_argument("--tiny", action="store_true", help="a few stamps and batches (CI on a CPU)")
    ap.add_argument("--render-chunk-sweep", action="store_true", help="time the render's chunk sizes (module doc)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    wanted = args.device or ("both" if cuda else "cpu")
    if wanted in ("cuda", "both") and not cuda:
        raise SystemExit("--device cuda: torch sees no CUDA device")
    devices = [torch.device(d) for d in (("cuda", "cpu") if wanted == "both" else (wanted,))]
    full = training_profile("full")
    sizes = {**(TINY if args.tiny else FULL), **({"batch_size": args.batch_size} if args.batch_size else {})}
    if args.render_chunk_sweep:
        n = sizes["render_chunk"] or full.stream.render_chunk
        out = render_chunk_sweep(devices[0], full.stream.config, n, 0.0 if args.tiny else 8.0)
        print(json.dumps(out), flush=True)
        return out
    out = {
        "bench": "gpu_check",
        "profile": "full",
        "tiny": args.tiny,
        "torch": torch.__version__,
        "cuda_device": torch.cuda.get_device_name(0) if cuda else None,
        "cpu_threads": torch.get_num_threads(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "budget_s": args.budget_s,
        "devices": {},
    }
    budget = Budget(args.budget_s, len(devices) * (2 * len(full.members) + 2), out)
    cfg = full.stream.config
    chunk = sizes["render_chunk"] or full.stream.render_chunk
    # survey-scale training sets exceed the bound on rows kept preprocessed: every batch preprocesses its rows
    dataset_module.PREPROCESSED_ROWS_MAX_BYTES = 0
    with tempfile.TemporaryDirectory(prefix="dhs_gpu_check_") as tmp:
        budget.folder = tmp
        budget.say(f"writing the training set ({sizes['hosts']} hosts, their injections on {devices[0].type})")
        t0 = time.perf_counter()
        folder = write_training_set(Path(tmp) / "training_set", sizes["hosts"], devices[0], cfg)
        arrays = load_training_set(str(folder))
        train, val = arrays.split_rows("train"), arrays.split_rows("val")
        out["training_set"] = {
            "rows": len(arrays),
            "train_rows": len(train),
            "stamp_px": int(arrays.image.shape[-1]),
            "built_on": devices[0].type,
            "build_s": round(time.perf_counter() - t0, 2),
        }
        hosts_invvar = synthetic_hosts(8, seed=2)[2]
        for device in devices:
            res, models = out["devices"].setdefault(device.type, {"train": {}}), {}
            for i, member in enumerate(full.members):
                budget.say(f"{device.type}: training {member.arch}")
                run_dir = Path(tmp) / f"run-{device.type}-{i}"
                res["train"][member.arch], models[member.arch] = train_member(
                    member, device, train, val, full.preprocess, args.steps, sizes, budget, run_dir
                )
            budget.say(f"{device.type}: rendering injections")
            res["injection"] = render_rate(device, hosts_invvar, cfg, chunk, budget, args.render_chunks)
            budget.say(f"{device.type}: scoring")
            res["scoring"] = score(models, device, train.image, sizes, budget)
            budget.say(f"{device.type}: the injection bank rendered and scored in one pass, and stored then scored")
            res["fused_injections"] = fused_rate(models, device, sizes, tmp)
    if len(devices) == 2:
        c, p = out["devices"]["cuda"], out["devices"]["cpu"]
        out["cuda_over_cpu"] = {
            **{
                f"train_{a}": round(c["train"][a]["images_per_s"] / p["train"][a]["images_per_s"], 1)
                for a in c["train"]
            },
            "injection": round(c["injection"]["systems_per_s"] / p["injection"]["systems_per_s"], 1),
            "scoring": round(c["scoring"]["stamps_per_s"] / p["scoring"]["stamps_per_s"], 1),
            "fused_injections": round(
                c["fused_injections"]["fused_injections_per_s"] / p["fused_injections"]["fused_injections_per_s"], 1
            ),
        }
    out["elapsed_s"] = budget.elapsed()
    budget.watchdog.cancel()
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main()
