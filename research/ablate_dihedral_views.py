"""Ablation of scoring's view averaging on a demo lake: the published lens finder scored as the mean
logit over 1, 2, 4 and 8 of the stamp's flips and rotations (``preprocess.DIHEDRAL_SUBGROUPS``),
the same weights each time.

For each number of views prints one JSON line: validation AUROC, test AUROC of injections against
their paired controls and of test-split known lenses against held-out negatives, recall of
test-split known lenses and completeness by arc S/N at the 1e-2 FPR threshold of the held-out
negatives (the rows of ``research.ablate_lens_finder``), and the seconds scoring took (the cost
is ~linear in the views; the search's throughput is measured by ``benchmarks.bench_search``).

    python -m research.ablate_dihedral_views --lake lakehouse [--views 1 2 4 8]

Results: BENCHMARKS.md, *Scores averaged over the stamp and its 180° rotation*.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import table_registry as T
from darkhaloscope.evaluation.headline import auroc_of, completeness_by_snr
from darkhaloscope.evaluation.scoring import published_lens_finder
from darkhaloscope.stats import roc_auc
from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.inference import stamp_logits
from darkhaloscope.training.preprocess import DIHEDRAL_SUBGROUPS
from darkhaloscope.training.runs import split_for_training
from research.common import held_out_stamps, parse_lake_args, threshold_at


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--views",
        type=int,
        nargs="+",
        choices=sorted(DIHEDRAL_SUBGROUPS),
        default=sorted(DIHEDRAL_SUBGROUPS),
        help="the numbers of views to score (default: all)",
    )
    a, lake = parse_lake_args(ap)
    _, val = split_for_training(load_training_set(lake.table(*T.TRAINING_SET.key).read()), "cpu")
    neg, real, inj, ctrl, snr = held_out_stamps(lake)
    with published_lens_finder(lake.table(*T.LENS_FINDER.key), "cpu") as (model, published):
        for views in sorted(set(a.views)):
            spec = replace(published, dihedral_views=views)
            t0 = time.perf_counter()
            z_val, ok, _ = stamp_logits(model, spec, val.image, device="cpu")
            z_neg, z_real, z_inj, z_ctrl = (
                stamp_logits(model, spec, x, device="cpu")[0] for x in (neg, real, inj, ctrl)
            )
            seconds = time.perf_counter() - t0
            # rankings, hence thresholds and completeness, do not depend on the temperature
            thr = threshold_at(z_neg)
            print(
                json.dumps(
                    {
                        "views": views,
                        "published": views == published.dihedral_views,
                        "val_auroc": round(roc_auc(z_val[ok], val.label[ok]), 4),
                        "test_auroc_injections_vs_controls": auroc_of(z_inj, z_ctrl),
                        "test_auroc_real_vs_negatives": auroc_of(z_real, z_neg),
                        "recall_test_known_lenses": [int((z_real > thr).sum()), len(z_real)],
                        "completeness_by_arc_snr": completeness_by_snr(z_inj, snr, thr),
                        "scoring_s": round(seconds, 1),
                        "rows": int(len(z_val) + len(z_neg) + len(z_real) + len(z_inj) + len(z_ctrl)),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
