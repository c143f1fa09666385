"""Benchmark: the AUC bootstrap (200 resamples) with scikit-learn per resample vs
``stats.auc_bootstrap_interval`` (every resample's counts scored at once by
``stats.weighted_auc_rows``), resampling rows, and resampling clusters of 9 rows as the injection
bank's hosts (scikit-learn then with the counts as ``sample_weight``).

Each pair resamples identically (``stats.bootstrap_interval`` on the same rng), so the intervals
are equal (checked); the difference is scikit-learn's per-call input validation. The shortcut scan
runs ~27 such bootstraps per cutout validation, training runs one per epoch and the evaluation
report two cluster bootstraps of 1,000 resamples. Prints one JSON line.

    python -m benchmarks.bench_stats [--n 300 3000 30000]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from sklearn.metrics import roc_auc_score

from darkhaloscope.stats import auc_bootstrap_interval, bootstrap_interval


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[300, 3000, 30000])
    ap.add_argument("--n-boot", type=int, default=200)
    args = ap.parse_args()
    rows = []
    for n in args.n:
        rng = np.random.default_rng(n)
        y = (rng.random(n) < 0.2).astype(np.int8)
        s = np.round(rng.normal(size=n) + y, 2)
        t0 = time.perf_counter()
        ours = auc_bootstrap_interval(s, y, np.random.default_rng(1), args.n_boot)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = bootstrap_interval(lambda i: roc_auc_score(y[i], s[i]), n, np.random.default_rng(1), args.n_boot)
        t_ref = time.perf_counter() - t0
        row = {
            "n": n,
            "rows_s": round(t_ours, 4),
            "sklearn_per_resample_s": round(t_ref, 4),
            "speedup": round(t_ref / t_ours, 1),
            "same_interval": bool(np.allclose(ours, ref, atol=1e-12)),
        }
        cluster = np.arange(n) // 9
        k = int(cluster[-1]) + 1
        t0 = time.perf_counter()
        ours = auc_bootstrap_interval(s, y, np.random.default_rng(2), args.n_boot, clusters=cluster)
        t_ours = time.perf_counter() - t0

        def by_cluster(idx):
            counts = np.bincount(idx, minlength=k)[cluster]
            return roc_auc_score(y, s, sample_weight=counts) if 0 < (counts * y).sum() < counts.sum() else np.nan

        t0 = time.perf_counter()
        ref = bootstrap_interval(by_cluster, k, np.random.default_rng(2), args.n_boot)
        t_ref = time.perf_counter() - t0
        row.update(
            clusters_s=round(t_ours, 4),
            sklearn_weighted_per_resample_s=round(t_ref, 4),
            cluster_speedup=round(t_ref / t_ours, 1),
            same_cluster_interval=bool(np.allclose(ours, ref, atol=1e-12)),
        )
        rows.append(row)
    print(
        json.dumps(
            {
                "benchmark": "auc_bootstrap",
                "n_boot": args.n_boot,
                "rows": rows,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
