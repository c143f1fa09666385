"""Benchmark: scoring throughput (cutouts/s) of the compact lens finder, streaming ``score_stamps``
at several batch sizes against the obvious baseline (one cutout per forward call), in one run.
On a CPU the 101×101 activations of the early stride-1 layers make large batches memory-bound,
so the score assets use small batches there and large ones on a GPU.

    python -m benchmarks.bench_scoring [--n 512] [--threads 2] [--device cpu|cuda]

Prints one JSON line.
"""

import argparse
import json
import time

import numpy as np
import torch

from darkhaloscope.training.data import synthetic_arrays
from darkhaloscope.training.inference import score_stamps
from darkhaloscope.training.models import build_model
from darkhaloscope.training.preprocess import PreprocessSpec, preprocess


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--baseline-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    arrays = synthetic_arrays(args.n, size=101, seed="bench-scoring")
    images = arrays.image
    spec = PreprocessSpec()
    model = build_model("bottleneck_resnet", 3).to(args.device).eval()
    score_stamps(model, spec, images[:64], device=args.device, batch_size=64)  # warm-up
    batched = {}
    for bs in (16, 64, 256):
        t0 = time.perf_counter()
        scores, valid, _ = score_stamps(model, spec, images, device=args.device, batch_size=bs)
        batched[bs] = args.n / (time.perf_counter() - t0)
    best_bs = max(batched, key=batched.get)
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(args.baseline_n):
            torch.sigmoid(model(preprocess(images[i : i + 1], spec).to(args.device)))
    single = args.baseline_n / (time.perf_counter() - t0)
    print(
        json.dumps(
            {
                "benchmark": "scoring",
                "device": args.device,
                "threads": args.threads,
                "n": args.n,
                "streamed_cutouts_per_s_by_batch": {str(k): round(v, 1) for k, v in batched.items()},
                "best_batch": best_bs,
                "one_by_one_cutouts_per_s": round(single, 1),
                "speedup_best_batch": round(batched[best_bs] / single, 2),
                "all_valid": bool(np.all(valid)),
            }
        )
    )


if __name__ == "__main__":
    main()
