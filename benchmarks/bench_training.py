"""Benchmark: is the on-the-fly injection renderer the bottleneck of training on a CPU?

Measured in one run, with the demo profile's settings (``darkhaloscope.training.profiles``):

* the stream: accepted injections per second (``lensing.stream.draw_injections``: arcs in the
  central window, S/N acceptance with re-draws) into 101 px hosts, and the render of
  the same systems the injection bank's way (whole 101 px stamp, with μ) as the baseline;
* the data path: augmented, preprocessed batches per second from the epoch dataset over an epoch
  (catalog rows and injections, the profile's preprocessing), its catalog rows preprocessed once
  (what training does) against every batch preprocessing them again (the baseline);
* the validation every epoch: validation stamps scored per second (one view, as the training loop
  picks its epoch), preprocessed once when training starts (what training does) against
  preprocessing them at every epoch (the baseline);
* the model: optimizer steps per second (forward, weighted BCE, backward, clipping, AdamW) of the
  demo's strided ResNet on the profile's input, and of the full profile's bottleneck ResNet on
  101 px.

The renderer is not the bottleneck when the render time an epoch needs (its injections) is small
next to the time its training steps take: ``render_share_of_epoch`` = render time / (render time +
step time) for the demo's epoch (one injection per host, hosts ~ 80 % of the rows).

    python -m benchmarks.bench_training [--threads 2] [--hosts 128] [--steps 6] [--stream '{"faint_fraction": 0}']

``--stream`` overrides fields of the demo profile's stream (the threshold mix against one threshold).

Prints one JSON line (with the load average: compare ratios, not absolute rates, on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F

from darkhaloscope.lensing.bank import _build_tasks, _col, task_batches
from darkhaloscope.lensing.priors import draw_system_parameters
from darkhaloscope.lensing.render import RenderConfig, render_lensed_sources
from darkhaloscope.lensing.stream import draw_injections
from darkhaloscope.training import dataset as dataset_module
from darkhaloscope.training.data import make_arrays, with_hosts
from darkhaloscope.training.dataset import AugmentedStampDataset, batches_for_plan
from darkhaloscope.training.inference import PreprocessedStamps, stamp_logits
from darkhaloscope.training.models import build_model, count_parameters
from darkhaloscope.training.profiles import training_profile

SIZE = 101
#: r-band noise of a DR10 coadd pixel [nmgy] (psfdepth_r ~ 1000 / nmgy^2 at 1.2" seeing)
SIGMA = 0.0045


def epoch_loader_rate(arrays, spec, draw, batch_size: int) -> tuple[float, float, list, AugmentedStampDataset]:
    """(augmented, preprocessed images per second over one epoch's batches, seconds the dataset took
    to set up (its catalog rows preprocessed once, when they fit), the batches, the dataset) of the
    epoch dataset with the epoch's injections ``draw``."""
    t = time.perf_counter()
    ds = AugmentedStampDataset(arrays, spec, seed=0)
    setup_s = time.perf_counter() - t
    ds._draw = (0, draw)  # the epoch's injections, rendered by the caller
    batches = batches_for_plan(ds.epoch_plan(0), 0, batch_size)
    t = time.perf_counter()
    xs = [ds.__getitems__(b) for b in batches]
    return sum(x[0].shape[0] for x in xs) / (time.perf_counter() - t), setup_s, xs, ds


def validation_rate(images, spec, batch_size: int, once: bool, repeats: int = 3) -> tuple[float, float]:
    """(validation stamps scored per second by a demo network, seconds the one-off preprocessing
    took) with the stamps preprocessed once (``once``) or at each validation."""
    torch.manual_seed(0)
    net = build_model("strided_resnet", spec.out_channels(3)).eval()
    t = time.perf_counter()
    stamps = PreprocessedStamps(images, spec, torch.device("cpu"), batch_size) if once else images
    setup_s = time.perf_counter() - t
    stamp_logits(net, spec, stamps, "cpu", batch_size)  # warm-up
    t = time.perf_counter()
    for _ in range(repeats):
        stamp_logits(net, spec, stamps, "cpu", batch_size)
    return repeats * len(images) / (time.perf_counter() - t), setup_s


def synthetic_hosts(n: int, seed: int = 0):
    """(host columns, images, invvar) of n lens-like hosts: de Vaucouleurs-ish cores plus noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:SIZE, :SIZE] - (SIZE - 1) / 2
    r = np.hypot(xx, yy)
    amp = rng.uniform(0.5, 5.0, n)
    img = (
        amp[:, None, None, None]
        * np.exp(-7.67 * ((r + 0.5) / 6.0) ** 0.25)[None, None]
        * np.array([0.3, 0.6, 1.0])[None, :, None, None]
    )
    images = (img + rng.normal(0, SIGMA, (n, 3, SIZE, SIZE))).astype(np.float32)
    cols = pa.table(
        {
            "object_id": np.arange(n, dtype=np.int64),
            "ra": np.zeros(n),
            "dec": np.zeros(n),
            "split": ["train"] * n,
            "type": ["DEV"] * n,
            "psfsize_g": rng.uniform(1.1, 1.8, n),
            "psfsize_r": rng.uniform(1.0, 1.6, n),
            "psfsize_z": rng.uniform(0.9, 1.5, n),
            "psfdepth_g": np.full(n, 2e3),
            "psfdepth_r": np.full(n, 1e3),
            "psfdepth_z": np.full(n, 2e2),
            "dx_pix": rng.uniform(-0.5, 0.5, n).astype(np.float32),
            "dy_pix": rng.uniform(-0.5, 0.5, n).astype(np.float32),
        }
    )
    return cols, images, np.full_like(images, 1.0 / SIGMA**2)


def bank_style_rate(cols: pa.Table, draw, spec) -> float:
    """Systems/s of the same systems rendered the injection bank's way: 101 px stamp, with μ."""
    cfg = spec.config
    params = draw_system_parameters(draw.seed, cfg.priors, extra=("theta_e_arcsec", "z_l"))
    n = len(draw)
    tasks, _ = _build_tasks(
        cols,
        params["theta_e_arcsec"],
        params["z_l"],
        draw.seed,
        np.zeros(n, np.int64),
        draw.candidate,
        np.full(n, -1),
        "training",
        cfg,
        params,
        host_row=draw.host_row,
    )
    lens, src = task_batches(tasks, "cpu", torch.float32, cfg.priors)
    psf = torch.as_tensor(np.stack([_col(tasks, f"psf_fwhm_{b}") for b in "grz"], axis=1), dtype=torch.float32)
    t = time.perf_counter()
    for s in range(0, n, spec.render_chunk):
        idx = torch.arange(s, min(n, s + spec.render_chunk))
        render_lensed_sources(lens.index(idx), src.index(idx), psf[idx], RenderConfig(n_pix=SIZE))
    return n / (time.perf_counter() - t)


def step_rate(arch: str, x: torch.Tensor, y: torch.Tensor, steps: int) -> tuple[float, int]:
    torch.manual_seed(0)
    model = build_model(arch, x.shape[1]).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)

    def step():
        loss = F.binary_cross_entropy_with_logits(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step()  # warm-up: allocator and oneDNN primitive caches
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * x.shape[0] / (time.perf_counter() - t), count_parameters(model)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hosts", type=int, default=128)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--stream", default="{}", help="StreamSpec fields over the demo profile's stream (JSON)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    demo, full = training_profile("demo"), training_profile("full")
    member = demo.members[0]
    if args.hosts + args.hosts // 4 < member.batch_size:
        ap.error(
            f"--hosts {args.hosts}: an epoch of hosts + hosts // 4 rows must fill one batch of {member.batch_size}"
        )
    stream = replace(demo.stream, **json.loads(args.stream))
    cols, images, invvar = synthetic_hosts(args.hosts)

    draw_injections(cols.slice(0, 8), invvar[:8], stream, ("warm-up",), 1)
    t = time.perf_counter()
    draw = draw_injections(cols, invvar, stream, ("train", 0, 0), 1)
    stream_rate = len(draw) / (time.perf_counter() - t)
    tries = float(draw.candidate.mean() + 1)
    bank_rate = bank_style_rate(cols, draw, stream)

    # the demo's epoch: 20 % real positives, 80 % negatives that host one injection each
    n_pos = args.hosts // 4
    arrays = make_arrays(
        np.concatenate([images[:n_pos], images]), np.r_[np.ones(n_pos), np.zeros(args.hosts)].astype(np.int8)
    )
    arrays = with_hosts(arrays, np.arange(n_pos, n_pos + args.hosts), invvar, cols, stream)
    loader_rate, setup_s, xs, ds = epoch_loader_rate(arrays, demo.preprocess, draw, member.batch_size)
    # the baseline: every batch preprocesses its catalog rows again (rows over the memory bound)
    max_bytes, dataset_module.PREPROCESSED_ROWS_MAX_BYTES = dataset_module.PREPROCESSED_ROWS_MAX_BYTES, 0
    every_batch_rate, _, _, _ = epoch_loader_rate(arrays, demo.preprocess, draw, member.batch_size)
    dataset_module.PREPROCESSED_ROWS_MAX_BYTES = max_bytes
    # the hosts twice stand in for the validation set (the demo's: its val rows and 2 fixed injections per val host)
    val_images = np.concatenate([images, images])
    val_once, val_setup_s = validation_rate(val_images, demo.preprocess, member.val_batch_size, once=True)
    val_each, _ = validation_rate(val_images, demo.preprocess, member.val_batch_size, once=False)
    x, y, _ = xs[0]
    demo_rate, demo_params = step_rate(member.arch, x, y, args.steps)
    xf = torch.randn(member.batch_size, full.preprocess.out_channels(3), SIZE, SIZE)
    full_rate, full_params = step_rate(full.members[0].arch, xf, y, max(args.steps // 3, 1))

    per_sample_injections = ds.m / len(ds.epoch_plan(0))
    render_s, step_s = per_sample_injections / stream_rate, 1.0 / demo_rate + 1.0 / loader_rate
    print(
        json.dumps(
            {
                "bench": "training",
                "stream": json.loads(args.stream),
                "device": "cpu",
                "threads": args.threads,
                "load_average_1min": os.getloadavg()[0],
                "stream_accepted_injections_per_s": round(stream_rate, 1),
                "stream_tries_per_injection": round(tries, 2),
                "bank_style_render_systems_per_s": round(bank_rate, 1),
                "stream_vs_bank_style_render": round(stream_rate * tries / bank_rate, 2),
                "loader_images_per_s": round(loader_rate, 1),
                "loader_rows_preprocessed_each_batch_images_per_s": round(every_batch_rate, 1),
                "loader_rows_once_vs_each_batch": round(loader_rate / every_batch_rate, 2),
                "loader_rows_preprocessing_once_s": round(setup_s, 3),
                "validation_stamps_per_s": round(val_once, 1),
                "validation_preprocessing_each_time_stamps_per_s": round(val_each, 1),
                "validation_once_vs_each_time": round(val_once / val_each, 2),
                "validation_preprocessing_once_s": round(val_setup_s, 3),
                f"{member.arch}_params": demo_params,
                f"{member.arch}_train_images_per_s": round(demo_rate, 1),
                f"{full.members[0].arch}_params": full_params,
                f"{full.members[0].arch}_101px_train_images_per_s": round(full_rate, 2),
                "injections_per_training_sample": round(per_sample_injections, 3),
                "render_share_of_epoch": round(render_s / (render_s + step_s), 3),
                "renderer_is_bottleneck": bool(render_s > step_s),
            }
        )
    )


if __name__ == "__main__":
    main()
