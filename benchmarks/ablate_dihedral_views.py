"""Ablation of scoring's view averaging on a demo lake: the published lens finder scored as the mean
logit over 1, 2, 4 and 8 of the stamp's flips and rotations (``preprocess.DIHEDRAL_SUBGROUPS``),
the same weights each time.

For each number of views prints one JSON line: validation AUROC, test AUROC of injections against
their paired controls and of test-split known lenses against held-out negatives, recall of
test-split known lenses and completeness by arc S/N at the 1e-2 FPR threshold of the held-out
negatives (the rows of ``ablate_lens_finder.py``), and the seconds scoring took (the cost is
~linear in the views; the search's throughput is measured by ``bench_search.py``).

    python benchmarks/ablate_dihedral_views.py --lake lakehouse [--views 1 2 4 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.ablate_lens_finder import _test_rows, parse_lake_args  # noqa: E402
from benchmarks.demo_headline import _by_snr, auroc_of  # noqa: E402
from darkhaloscope.evaluation.scoring import published_lens_finder  # noqa: E402
from darkhaloscope.evaluation.thresholds import order_statistic_threshold  # noqa: E402
from darkhaloscope.stats import roc_auc  # noqa: E402
from darkhaloscope.training.data import load_training_set  # noqa: E402
from darkhaloscope.training.inference import stamp_logits  # noqa: E402
from darkhaloscope.training.preprocess import DIHEDRAL_SUBGROUPS  # noqa: E402
from darkhaloscope.training.runs import split_for_training  # noqa: E402


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
    _, val = split_for_training(load_training_set(lake.dataset("training", "training_set").to_table()), "cpu")
    neg, real, inj, ctrl, snr = _test_rows(lake)
    with published_lens_finder(lake, "cpu") as (model, published):
        for views in sorted(set(a.views)):
            spec = replace(published, dihedral_views=views)
            t0 = time.perf_counter()
            z_val, ok, _ = stamp_logits(model, spec, val.image, device="cpu")
            z_neg, z_real, z_inj, z_ctrl = (
                stamp_logits(model, spec, x, device="cpu")[0] for x in (neg, real, inj, ctrl)
            )
            seconds = time.perf_counter() - t0
            # rankings, hence thresholds and completeness, do not depend on the temperature
            thr, _ = order_statistic_threshold(np.sort(z_neg)[::-1], 1e-2)
            print(
                json.dumps(
                    {
                        "views": views,
                        "published": views == published.dihedral_views,
                        "val_auroc": round(roc_auc(z_val[ok], val.label[ok]), 4),
                        "test_auroc_injections_vs_controls": auroc_of(z_inj, z_ctrl),
                        "test_auroc_real_vs_negatives": auroc_of(z_real, z_neg),
                        "recall_test_known_lenses": [int((z_real > thr).sum()), len(z_real)],
                        "completeness_by_arc_snr": _by_snr(z_inj, snr, thr),
                        "scoring_s": round(seconds, 1),
                        "rows": int(len(z_val) + len(z_neg) + len(z_real) + len(z_inj) + len(z_ctrl)),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
