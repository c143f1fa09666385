"""Benchmark: sweep FITS -> committed lake partition with darkhaloscope.survey.ingest_sweep (exactly
what the ``sweeps`` asset runs) vs the obvious baseline.

Baseline: ``astropy.table.Table.read`` -> vector columns split into scalar columns (pandas cannot
hold them) -> ``Table.to_pandas`` -> ``DataFrame.to_parquet`` (pyarrow, zstd). Both run on the
same ~3-million-row mock DR10 sweep (the ``full`` mock survey profile, cached under
benchmarks/out/), each in its own subprocess so that peak RSS is measured per method
(``resource.getrusage(RUSAGE_SELF).ru_maxrss`` inside the child); wall and CPU seconds are
both reported because the host may be shared. Prints one JSON line.

    python benchmarks/bench_ingest.py [--rows N] [--out benchmarks/out]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path


def _child(method: str, src: str, dest: str) -> None:
    # Imports are done before timing starts so both methods are timed on the work alone.
    import pandas  # noqa: F401
    from astropy.table import Table  # noqa: F401

    import darkhaloscope.survey.sweeps  # noqa: F401

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru0.ru_utime + ru0.ru_stime
    t0 = time.perf_counter()
    if method == "dhs":
        from darkhaloscope.lake import Lake
        from darkhaloscope.survey.sweeps import ingest_sweep

        info = ingest_sweep(src, Lake(dest))
        rows, size = info["rows"], info["bytes"]
    else:
        from astropy.table import Table

        t = Table.read(src, hdu=1)
        for name in list(t.colnames):
            if t[name].ndim > 1:
                col = t[name]
                for k in range(col.shape[1]):
                    t[f"{name}_{k}"] = col[:, k]
                t.remove_column(name)
        df = t.to_pandas()
        df.to_parquet(dest, compression="zstd")
        rows, size = len(df), os.path.getsize(dest)
    seconds = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime + ru.ru_stime - cpu0
    print(json.dumps({
        "rows": rows, "seconds": seconds, "cpu_seconds": cpu,
        "peak_rss_mb": ru.ru_maxrss / 1024.0, "parquet_mb": size / 1e6,
    }))


def _run(method: str, src: Path, dest: Path) -> dict:
    if dest.is_dir():
        shutil.rmtree(dest)
    elif dest.exists():
        dest.unlink()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", method, "--src", str(src), "--dest", str(dest)],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{method} run failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--src")
    ap.add_argument("--dest")
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.src, args.dest)
        return

    from darkhaloscope.survey.mock_survey import MockSurveyConfig, generate_mock_survey

    out = Path(args.out)
    t0 = time.perf_counter()
    manifest = generate_mock_survey(out / "mock_full", MockSurveyConfig(profile="full", n_rows_per_file=args.rows))
    gen_seconds = time.perf_counter() - t0
    src = manifest.sweep_files[0]
    size_mb = src.stat().st_size / 1e6
    res = {}
    for method in ("dhs", "baseline"):
        r = _run(method, src, out / ("ingest_dhs_lake" if method == "dhs" else "ingest_baseline.parquet"))
        r["rows_per_s"] = r["rows"] / r["seconds"]
        r["mb_per_s"] = size_mb / r["seconds"]
        r["rows_per_cpu_s"] = r["rows"] / r["cpu_seconds"]
        res[method] = r
    print(json.dumps({
        "benchmark": "ingest",
        "fits_file": src.name,
        "fits_mb": round(size_mb, 1),
        "rows": res["dhs"]["rows"],
        "mock_generate_seconds": round(gen_seconds, 1),
        "dhs": {k: round(v, 2) for k, v in res["dhs"].items()},
        "baseline": {k: round(v, 2) for k, v in res["baseline"].items()},
        "throughput_ratio": round(res["dhs"]["rows_per_s"] / res["baseline"]["rows_per_s"], 2),
        # The benchmark host is shared: CPU-time throughput is the load-independent comparison.
        "cpu_throughput_ratio": round(res["dhs"]["rows_per_cpu_s"] / res["baseline"]["rows_per_cpu_s"], 2),
        "peak_rss_ratio_dhs_over_baseline": round(res["dhs"]["peak_rss_mb"] / res["baseline"]["peak_rss_mb"], 3),
        "dhs_peak_rss_over_file_size": round(res["dhs"]["peak_rss_mb"] / size_mb, 3),
    }))


if __name__ == "__main__":
    main()
