"""Benchmark: lens-finder training throughput vs data-loader throughput on CPU (101x101x3, batch 64).

For each model (bottleneck_resnet, resnet18) it times full optimizer steps (forward, weighted BCE,
backward, clipping, AdamW) on preprocessed batches, and separately the data path alone (augmented,
preprocessed batches from AugmentedStampDataset with hard negatives and core dropout switched on).
Baseline in the same run: the loader fetching sample by sample (``__getitem__``) instead of one
vectorised ``__getitems__`` call per batch. Target: loader >= 5x what the model consumes.

    python benchmarks/bench_training.py [--threads 1] [--loader-batches 8] [--steps-bottleneck 4] [--steps-resnet18 2]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from darkhaloscope.training.data import synthetic_arrays  # noqa: E402
from darkhaloscope.training.dataset import AugmentedStampDataset, batches_for_plan  # noqa: E402
from darkhaloscope.training.models import build_model, count_parameters  # noqa: E402
from darkhaloscope.training.preprocess import PreprocessSpec  # noqa: E402

BATCH = 64
SIZE = 101


def loader_rate(ds: AugmentedStampDataset, n_batches: int, per_sample: bool) -> float:
    batches = batches_for_plan(ds.epoch_plan(0), 0, BATCH)[:n_batches]
    t = time.perf_counter()
    n = 0
    for keys in batches:
        if per_sample:
            items = [ds[k] for k in keys]
            x = torch.stack([i[0] for i in items])
        else:
            x = ds.__getitems__(keys)[0]
        n += x.shape[0]
    return n / (time.perf_counter() - t)


def train_rate(arch: str, x: torch.Tensor, y: torch.Tensor, steps: int) -> tuple[float, int]:
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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--loader-batches", type=int, default=8)
    ap.add_argument("--steps-bottleneck", type=int, default=4)
    ap.add_argument("--steps-resnet18", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    arrays = synthetic_arrays(BATCH * args.loader_batches + BATCH, SIZE, seed="bench")
    spec = PreprocessSpec()
    ds = AugmentedStampDataset(arrays, spec, seed=0, core_dropout_prob=0.5, hard_negative_prob=0.3)
    loader_rate(ds, 1, per_sample=False)  # warm caches (radial index tables)
    batched = loader_rate(ds, args.loader_batches, per_sample=False)
    per_sample = loader_rate(ds, max(args.loader_batches // 3, 1), per_sample=True)
    ds_res = AugmentedStampDataset(arrays, PreprocessSpec(residual="append"), seed=0, core_dropout_prob=0.5, hard_negative_prob=0.3)
    batched_residual = loader_rate(ds_res, max(args.loader_batches // 3, 1), per_sample=False)

    x, y, _ = ds.__getitems__([(0, i) for i in range(BATCH)])
    out = {
        "bench": "training", "device": "cpu", "threads": args.threads, "batch": BATCH, "stamp": [3, SIZE, SIZE],
        "loader_images_per_s": round(batched, 1),
        "loader_per_sample_baseline_images_per_s": round(per_sample, 1),
        "loader_batched_vs_per_sample": round(batched / per_sample, 2),
        "loader_residual_append_images_per_s": round(batched_residual, 1),
    }
    for arch, steps in (("bottleneck_resnet", args.steps_bottleneck), ("resnet18", args.steps_resnet18)):
        rate, n_params = train_rate(arch, x, y, steps)
        out[f"{arch}_params"] = n_params
        out[f"{arch}_train_images_per_s"] = round(rate, 2)
        out[f"{arch}_steps"] = steps
        out[f"{arch}_loader_over_model"] = round(batched / rate, 1)
        out[f"{arch}_target_5x_met"] = bool(batched / rate >= 5.0)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
