"""Ablation of the lens finder's recipe on a demo lake: one change to the demo profile per run.

Trains on the lake's ``training_set`` (its hosts, injection stream and preprocessing, as the
``lens_finder`` asset does), with the demo profile's member config, preprocessing and stream
overridden by the flags, then scores the test rows the way the evaluation assets do and prints one
JSON line: validation AUROC (best epoch), the blocking and warning gates, test AUROC of injections
against their paired controls and of test-split known lenses against held-out negatives, the
1e-2 FPR threshold from held-out negatives, completeness by arc S/N and recall of test-split known
lenses at it, seconds per epoch and the load average (compare ratios on a shared machine).
Without overrides it trains the lake's published model again, to the same bytes on the same
machine (``research/tests/test_on_demo_lake.py`` checks its threshold, best epoch and gates), so
each row differs from the published recipe by its one change only.

    python -m research.ablate_lens_finder --lake lakehouse --name epochs20 --member '{"epochs": 20}'
    python -m research.ablate_lens_finder --lake lakehouse --name clip --preprocess '{"stretch": "clip", "residual":
    "none"}'

``--fixed-arcs`` trains on the same injections every epoch (what a stored injection table gives).
``--plant core|red|halo`` gives every real positive of the training set (train and val) a tell-tale
the negatives lack, a shortcut to learn: ``core`` doubles its light within the PSF's core (a
centred Gaussian of 1.5 px with each band's mean flux of the r < 2 px centre), ``red`` adds the
same in z alone, ``halo`` 0.15 of it in a Gaussian of 8 px. ``--catalog-only`` trains on the
catalog rows alone (real lenses against negatives, no injection): the lenses' hosts are then the
tell-tale. The shortcut gates (BENCHMARKS.md, *The catalog gates*) must fail on these.
Results: BENCHMARKS.md, *Lens finder recipe (demo profile): ablations*.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace

import numpy as np

import table_registry as T
from darkhaloscope.evaluation.headline import auroc_of, completeness_by_snr, detected_fraction
from darkhaloscope.training.checkpoint import load_checkpoint
from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.gates import run_gates
from darkhaloscope.training.inference import score_stamps
from darkhaloscope.training.loop import train
from darkhaloscope.training.preprocess import radius_grid
from darkhaloscope.training.profiles import training_profile
from darkhaloscope.training.runs import split_for_training
from mock_survey.sky import structured_host
from research.common import bank_table, held_out_stamps, parse_lake_args, threshold_at

#: The tell-tales of ``--plant``: (Gaussian sigma [px], share of the centre's flux, bands).
PLANTS = {"core": (1.5, 1.0, (0, 1, 2)), "red": (1.5, 1.0, (2,)), "halo": (8.0, 0.15, (0, 1, 2))}


def plant_shortcut(arrays, plant: str):
    """``arrays`` with the tell-tale ``plant`` (:data:`PLANTS`) added, in place, to every real
    positive's stamp: per band b, share x the mean flux [nmgy/pixel] of the stamp's r < 2 px centre
    x a centred Gaussian of peak 1."""
    sigma, share, bands = PLANTS[plant]
    rows = np.flatnonzero(arrays.kind == "real_positive")
    r = radius_grid(*arrays.image.shape[-2:])
    centre = arrays.image[rows][:, :, r < 2].mean(axis=-1)
    bump = np.exp(-0.5 * (r / sigma) ** 2).astype(np.float32)
    for b in bands:
        arrays.image[rows, b] += (share * centre[:, b, None, None] * bump).astype(np.float32)
    return arrays


def by_host_structure(p_inj, p_ctrl, structured, threshold: float) -> dict:
    """Test AUROC of injections ``p_inj`` against their paired controls ``p_ctrl`` and completeness
    at ``threshold`` (scores strictly above it), split by whether each injection's host carries the
    mock sky's offset clump (``structured``, bool per injection) or is point-symmetric."""
    structured = np.asarray(structured, bool)
    if not len(structured) == len(p_inj) == len(p_ctrl):
        raise ValueError(f"{len(p_inj)} injections, {len(p_ctrl)} controls and {len(structured)} host flags")
    return {
        kind: {
            "n": int(m.sum()),
            "auroc_injections_vs_controls": auroc_of(p_inj[m], p_ctrl[m]),
            "completeness": detected_fraction(p_inj[m], threshold, 4),
        }
        for kind, m in (("structured", structured), ("symmetric", ~structured))
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--member", default="{}", help="TrainConfig fields over the demo member (JSON)")
    ap.add_argument("--preprocess", default="{}", help="PreprocessSpec fields over the recorded spec (JSON)")
    ap.add_argument("--stream", default="{}", help="StreamSpec fields over the recorded stream (JSON)")
    ap.add_argument("--fixed-arcs", action="store_true")
    ap.add_argument(
        "--plant", choices=sorted(PLANTS), default=None, help="a tell-tale on every real positive (module doc)"
    )
    ap.add_argument("--catalog-only", action="store_true", help="train on the catalog rows alone, no injection")
    ap.add_argument(
        "--scores",
        default=None,
        help="write the test rows' scores, the injections' arc S/N and the threshold here (.npz)",
    )
    a, lake = parse_lake_args(ap)
    profile = training_profile("demo")
    arrays = load_training_set(lake.table(*T.TRAINING_SET.key).read())
    arrays = replace(arrays, stream=replace(arrays.stream, **json.loads(a.stream)))
    if a.plant:
        plant_shortcut(arrays, a.plant)
    tr, va = split_for_training(arrays, "cpu")
    if a.catalog_only:
        tr = replace(tr, stream=None)
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
        neg, real, inj, ctrl, snr = held_out_stamps(lake)
        p_neg, p_real, p_inj, p_ctrl = (score_stamps(model, ck, x)[0] for x in (neg, real, inj, ctrl))
    thr = threshold_at(p_neg)
    hosts = bank_table(lake, ("host_ra", "host_dec", "host_type"))
    structured = structured_host(
        *(hosts.column(c).to_numpy(zero_copy_only=False) for c in ("host_ra", "host_dec", "host_type"))
    )
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
                "plant": a.plant,
                "catalog_only": a.catalog_only,
                "val_auroc": round(res.best_val_auroc, 4),
                "best_epoch": res.best_epoch,
                "gates": gates,
                "test_auroc_injections_vs_controls": auroc_of(p_inj, p_ctrl),
                "test_auroc_real_vs_negatives": auroc_of(p_real, p_neg),
                "threshold_fpr_1e-2": float(thr),
                "recall_test_known_lenses": detected_fraction(p_real, thr, 4),
                "completeness_by_arc_snr": {
                    k: c for k, (c, _) in completeness_by_snr(p_inj, snr, thr, digits=4).items()
                },
                "by_host_structure": by_host_structure(p_inj, p_ctrl, structured, thr),
                "s_per_epoch": round(wall / max(res.epochs_run, 1), 1),
                "cpu_s": round(cpu),
                "load": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
