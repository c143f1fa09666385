"""Ablation of the lens finder's recipe on a demo lake: one change to the demo profile per run.

Trains on the lake's ``training_set`` (its hosts, injection stream and preprocessing, as the
``lens_finder`` asset does), with the demo profile's member config, preprocessing and stream
overridden by the flags, then scores the test rows the way the evaluation assets do and prints one
JSON line: validation AUROC (best epoch), the blocking and warning gates, test AUROC of injections
against their paired controls and of test-split known lenses against held-out negatives, the
1e-2 FPR threshold from held-out negatives, completeness by arc S/N and recall of test-split known
lenses at it, seconds per epoch and the load average (compare ratios on a shared machine).
Without overrides it trains the lake's published model again, to the same bytes on the same
machine (the end-to-end test checks its threshold, best epoch and gates), so each row differs
from the published recipe by its one change only.

    python benchmarks/ablate_lens_finder.py --lake lakehouse --name epochs20 --member '{"epochs": 20}'
    python benchmarks/ablate_lens_finder.py --lake lakehouse --name clip --preprocess '{"stretch": "clip", "residual": "none"}'

``--fixed-arcs`` trains on the same injections every epoch (what a stored injection table gives).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import torch  # noqa: E402

from benchmarks.demo_headline import SNR_BINS, auroc_of  # noqa: E402
from darkhaloscope.evaluation.scoring import held_out_negatives  # noqa: E402
from darkhaloscope.evaluation.thresholds import order_statistic_threshold  # noqa: E402
from darkhaloscope.search.grades import published_graded_lens_ids  # noqa: E402
from darkhaloscope.stamps import from_tensor_column  # noqa: E402
from darkhaloscope.training.checkpoint import load_checkpoint  # noqa: E402
from darkhaloscope.training.data import load_training_set  # noqa: E402
from darkhaloscope.training.gates import run_gates  # noqa: E402
from darkhaloscope.training.inference import score_stamps  # noqa: E402
from darkhaloscope.training.loop import train  # noqa: E402
from darkhaloscope.training.profiles import training_profile  # noqa: E402
from darkhaloscope.training.runs import split_for_training  # noqa: E402
from lakehouse.lake import Lake  # noqa: E402


def bank_table(lake: Lake, columns: tuple = ()):
    """The injection bank's successful rows (the selection-function injections, test-split hosts)
    with ``arc_snr``, ``image``, ``control`` and any more columns named."""
    bank = lake.read_table(
        "injection", "injection_bank", columns=list(dict.fromkeys(["success", "arc_snr", "image", "control", *columns]))
    )
    return bank.filter(bank.column("success"))


def held_out_tables(lake: Lake, cutout_columns: tuple = (), bank_columns: tuple = ()):
    """The test rows as tables, with their ``image`` (and ``control``) and any more columns named:
    held-out negatives (less those graded a lens), test-split known lenses, and :func:`bank_table`."""
    cut = lake.read_table(
        "imaging",
        "cutouts",
        columns=list(
            dict.fromkeys(
                ["object_id", "label", "split", "in_training_catalog", "quality_ok", "image", *cutout_columns]
            )
        ),
    )
    cut = cut.filter(cut.column("quality_ok"))
    real = pc.and_(pc.equal(cut.column("label"), 1), pc.equal(cut.column("split"), "test"))
    return held_out_negatives(cut, published_graded_lens_ids(lake)), cut.filter(real), bank_table(lake, bank_columns)


def _test_rows(lake: Lake):
    """Stamps of the :func:`held_out_tables` and the injections' arc S/N: (negatives, known lenses,
    injections, controls, arc S/N)."""
    neg, real, bank = held_out_tables(lake)
    return (
        from_tensor_column(neg.column("image")),
        from_tensor_column(real.column("image")),
        from_tensor_column(bank.column("image")),
        from_tensor_column(bank.column("control")),
        bank.column("arc_snr").to_numpy(),
    )


def parse_lake_args(ap: argparse.ArgumentParser) -> tuple[argparse.Namespace, Lake]:
    """Add the ablations' shared ``--lake`` and ``--threads``, parse, set torch's threads; (args, lake)."""
    ap.add_argument("--lake", default="lakehouse")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: torch's own, as the lens_finder asset runs, so the published model is reproduced)",
    )
    a = ap.parse_args()
    if a.threads is not None:
        torch.set_num_threads(a.threads)
    return a, Lake(a.lake)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--member", default="{}", help="TrainConfig fields over the demo member (JSON)")
    ap.add_argument("--preprocess", default="{}", help="PreprocessSpec fields over the recorded spec (JSON)")
    ap.add_argument("--stream", default="{}", help="StreamSpec fields over the recorded stream (JSON)")
    ap.add_argument("--fixed-arcs", action="store_true")
    ap.add_argument(
        "--scores",
        default=None,
        help="write the test rows' scores, the injections' arc S/N and the threshold here (.npz)",
    )
    a, lake = parse_lake_args(ap)
    profile = training_profile("demo")
    arrays = load_training_set(lake.dataset("training", "training_set").to_table())
    arrays = replace(arrays, stream=replace(arrays.stream, **json.loads(a.stream)))
    tr, va = split_for_training(arrays, "cpu")
    spec = replace(profile.preprocess, **json.loads(a.preprocess))
    cfg = replace(profile.members[0], device="cpu", **json.loads(a.member))
    if a.fixed_arcs:
        from darkhaloscope.training.dataset import AugmentedStampDataset

        first_epoch = AugmentedStampDataset.prepare_epoch
        AugmentedStampDataset.prepare_epoch = lambda self, epoch: first_epoch(self, 0)
    with tempfile.TemporaryDirectory(prefix="dhs_ablate_") as out:
        t0, c0 = time.time(), time.process_time()
        res = train(tr, va, cfg, out, spec, {"ablation": a.name})
        wall, cpu = time.time() - t0, time.process_time() - c0
        model, ck = load_checkpoint(out, "best")
        gates = {g["name"]: round(float(g["value"]), 4) for g in run_gates(model, ck, va, device="cpu")}
        neg, real, inj, ctrl, snr = _test_rows(lake)
        p_neg, p_real, p_inj, p_ctrl = (score_stamps(model, ck, x)[0] for x in (neg, real, inj, ctrl))
    thr, _ = order_statistic_threshold(np.sort(p_neg)[::-1], 1e-2)
    if a.scores:
        np.savez(
            a.scores,
            negatives=p_neg,
            known_lenses=p_real,
            injections=p_inj,
            controls=p_ctrl,
            arc_snr=snr,
            threshold=thr,
        )
    print(
        json.dumps(
            {
                "name": a.name,
                "member": json.loads(a.member),
                "preprocess": json.loads(a.preprocess),
                "stream": json.loads(a.stream),
                "fixed_arcs": a.fixed_arcs,
                "val_auroc": round(res.best_val_auroc, 4),
                "best_epoch": res.best_epoch,
                "gates": gates,
                "test_auroc_injections_vs_controls": auroc_of(p_inj, p_ctrl),
                "test_auroc_real_vs_negatives": auroc_of(p_real, p_neg),
                "threshold_fpr_1e-2": float(thr),
                "recall_test_known_lenses": round(float((p_real > thr).mean()), 4),
                "completeness_by_arc_snr": {
                    f"{lo}-{hi}": round(float((p_inj[(snr >= lo) & (snr < hi)] > thr).mean()), 4) for lo, hi in SNR_BINS
                },
                "s_per_epoch": round(wall / max(res.epochs_run, 1), 1),
                "cpu_s": round(cpu),
                "load": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
