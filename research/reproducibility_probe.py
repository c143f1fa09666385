"""What in the machine changes the demo's numbers? One short training of the demo's lens finder (its
first member, one epoch, on 600 rows of the lake's training set) and two probes, each printed as a
SHA-256 prefix with the torch build, kernel instruction set and thread count it ran on: the
checkpoint's weights, the weight gradient of a 5 × 5 convolution over a 64 × 3 × 101 × 101 batch,
and a transcendental expression over 100,001 values (the lensing engine's kind of operation).
Run it under different environments (``OMP_NUM_THREADS=1``, ``ATEN_CPU_CAPABILITY=avx2``, …) and
compare; docs/results.md, "Reproducibility", has the results.

    python -m research.reproducibility_probe --lake <lake>
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.loop import train
from darkhaloscope.training.preprocess import PreprocessSpec
from darkhaloscope.training.profiles import training_profile
from darkhaloscope.training.runs import split_for_training
from lake_platform.lake import Lake

ENVIRONMENT = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lake", required=True, help="a lake the demo materialized")
    ap.add_argument("--rows", type=int, default=600, help="training rows (a fixed sample)")
    args = ap.parse_args()
    arrays = load_training_set(Lake(args.lake).table("training", "training_set").files()[0])
    tr, va = split_for_training(arrays, "cpu")
    tr = tr.subset(np.sort(np.random.default_rng(0).choice(len(tr), size=min(args.rows, len(tr)), replace=False)))
    config = replace(training_profile("demo").members[0], device="cpu", epochs=1)
    spec = PreprocessSpec.from_dict(arrays.meta.get("preprocess_spec") or {})
    with tempfile.TemporaryDirectory() as out:
        result = train(tr, va, config, out, spec, {"training_set": "probe"})
        weights = _digest(b"".join(p.read_bytes() for p in sorted(Path(out).glob("*.safetensors"))))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, 101, 101, generator=g)
    conv = torch.nn.Conv2d(3, 32, 5)
    torch.nn.init.normal_(conv.weight, generator=g)
    conv(x).square().mean().backward()
    t = torch.linspace(-3, 3, 100_001, dtype=torch.float32)
    transcendental = torch.exp(t) * torch.sin(t) + torch.pow(t.abs() + 1, 0.37)
    print(
        json.dumps(
            {
                "environment": {k: os.environ[k] for k in ENVIRONMENT if k in os.environ},
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "kernels": torch.backends.cpu.get_cpu_capability(),
                "weights": weights,
                "conv_grad": _digest(conv.weight.grad.numpy().tobytes()),
                "transcendental": _digest(transcendental.numpy().tobytes()),
                "val_auroc": (result.val_metrics or {}).get("auroc"),
            }
        )
    )


if __name__ == "__main__":
    main()
