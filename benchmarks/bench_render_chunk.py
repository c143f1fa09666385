"""The stream's render of one chunk of systems (``stream.render_arcs``, the ``full`` profile's
render numerics) at several elementwise chunk sizes of ``lensing.render``, on one device.

    python -m benchmarks.bench_render_chunk [--device cuda|cpu] [--systems 1024] [--seconds 8]

Per chunk size [points]: systems/s (warm-up excluded, the device synchronised around the timing),
the device's peak memory [GiB] on CUDA, and whether the arcs are the same bytes as at the smallest
size (a chunk size that changed them would break determinism across devices' defaults). Then the
largest relative difference between the device's arcs and the CPU's. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from benchmarks.bench_training import synthetic_hosts
from benchmarks.gpu_check import render, sync, systems_on
from darkhaloscope.lensing import render as render_module
from darkhaloscope.lensing.stream import window_of
from darkhaloscope.training.profiles import training_profile

SIZES = (1 << 16, 1 << 20, 1 << 22, 1 << 24)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--systems", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    device, n = torch.device(args.device), args.systems
    cfg = training_profile("full").stream.config
    invvar = synthetic_hosts(8, seed=2)[2]
    iv = np.ascontiguousarray(window_of(np.resize(invvar, (n, *invvar.shape[1:])), cfg.render.n_pix))
    lens, src, fwhm = systems_on(device, n)
    chunks = render_module._CHUNK_POINTS
    default = chunks.get(device.type)
    out, first = {"device": str(device), "systems": n, "default_points": default, "sizes": {}}, None
    try:
        for points in SIZES:
            chunks[device.type] = points
            render(device, lens, src, fwhm, iv, cfg)  # warm-up
            sync(device)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            t0, k = time.perf_counter(), 0
            while k < 2 or time.perf_counter() - t0 < args.seconds:
                arcs = render(device, lens, src, fwhm, iv, cfg)
                k += 1
            sync(device)
            seconds = time.perf_counter() - t0
            first = arcs if first is None else first
            out["sizes"][points] = {
                "systems_per_s": round(n * k / seconds, 1),
                "peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
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
    print(json.dumps(out))


if __name__ == "__main__":
    main()
