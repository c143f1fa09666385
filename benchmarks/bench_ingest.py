"""Benchmark: sweep FITS -> committed lake partition with darkhaloscope.survey.ingest_sweep (exactly
what the ``sweeps`` asset runs) vs astropy + pyarrow at their best.

Baselines, each writing the same rows to zstd Parquet:
- ``arrow``, the peer at its best: ``astropy.io.fits`` opened with memory mapping, each column
  handed to pyarrow (byte-swapped to native order, vector columns as fixed-size lists, strings
  trimmed by pyarrow) and written with ``pyarrow.parquet.write_table`` in one go, dictionary
  encoding on the string columns only (as ingest_sweep);
- ``pandas``, the common recipe: ``astropy.table.Table.read`` -> vector columns split into scalar
  columns (pandas cannot hold them) -> ``Table.to_pandas`` -> ``DataFrame.to_parquet``.
All run on the same ~3-million-row mock DR10 sweep (the ``full`` mock survey profile, cached under
benchmarks/out/), each in its own subprocess so that peak RSS is measured per method
(``resource.getrusage(RUSAGE_SELF).ru_maxrss`` inside the child); wall and CPU seconds are
both reported because the host may be shared. ingest_sweep also validates the data model and
derives object ids, which the baselines do not. Prints one JSON line. One core:

    taskset -c 0 python -m benchmarks.bench_ingest [--rows N] [--out benchmarks/out]
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

    from darkhaloscope.survey.sweeps import ingest_sweep
    from lake_platform.lake import Lake

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru0.ru_utime + ru0.ru_stime
    t0 = time.perf_counter()
    if method == "dhs":
        # the table by its key, not through table_registry, whose import (torch, for the gates)
        # would count in this child's peak memory
        info = ingest_sweep(src, Lake(dest).table("survey", "sweeps"))
        rows, size = info["rows"], info["bytes"]
    elif method == "arrow":
        rows, size = _arrow_baseline(src, dest)
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
    print(
        json.dumps(
            {
                "rows": rows,
                "seconds": seconds,
                "cpu_seconds": cpu,
                "peak_rss_mb": ru.ru_maxrss / 1024.0,
                "parquet_mb": size / 1e6,
            }
        )
    )


def _arrow_baseline(src: str, dest: str) -> tuple[int, int]:
    """FITS table -> pyarrow Table (column by column from the memory map) -> zstd Parquet, with
    dictionary encoding on the string columns only (on numeric columns it costs time for nothing)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from astropy.io import fits

    with fits.open(src, memmap=True) as hdul:
        data = hdul[1].data
        cols = {}
        for name in data.columns.names:
            arr = np.asarray(data[name])
            arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)
            if arr.ndim > 1:
                cols[name.lower()] = pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), arr.shape[1])
            elif arr.dtype.kind == "S":
                cols[name.lower()] = pc.utf8_rtrim_whitespace(pa.array(arr).cast(pa.string()))
            else:
                cols[name.lower()] = pa.array(arr)
        table = pa.table(cols)
    strings = [f.name for f in table.schema if pa.types.is_string(f.type)]
    pq.write_table(table, dest, compression="zstd", use_dictionary=strings)
    return table.num_rows, os.path.getsize(dest)


def _run(method: str, src: Path, dest: Path) -> dict:
    if dest.is_dir():
        shutil.rmtree(dest)
    elif dest.exists():
        dest.unlink()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", method, "--src", str(src), "--dest", str(dest)],
        capture_output=True,
        text=True,
        check=False,
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

    from mock_survey.survey import MockSurveyConfig, generate_mock_survey

    out = Path(args.out)
    t0 = time.perf_counter()
    manifest = generate_mock_survey(out / "mock_full", MockSurveyConfig(profile="full", n_rows_per_file=args.rows))
    gen_seconds = time.perf_counter() - t0
    src = manifest.sweep_files[0]
    size_mb = src.stat().st_size / 1e6
    res = {}
    for method in ("dhs", "arrow", "pandas"):
        r = _run(method, src, out / ("ingest_dhs_lake" if method == "dhs" else f"ingest_{method}.parquet"))
        r["rows_per_s"] = r["rows"] / r["seconds"]
        r["mb_per_s"] = size_mb / r["seconds"]
        r["rows_per_cpu_s"] = r["rows"] / r["cpu_seconds"]
        res[method] = r
    dhs = res["dhs"]
    summary = {
        "benchmark": "ingest",
        "fits_file": src.name,
        "fits_mb": round(size_mb, 1),
        "rows": dhs["rows"],
        "mock_generate_seconds": round(gen_seconds, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
    }
    for method, r in res.items():
        summary[method] = {k: round(v, 2) for k, v in r.items()}
    for base in ("arrow", "pandas"):
        b = res[base]
        summary[f"vs_{base}"] = {
            "throughput_ratio": round(dhs["rows_per_s"] / b["rows_per_s"], 2),
            # the host is shared: CPU-time throughput is the load-independent comparison
            "cpu_throughput_ratio": round(dhs["rows_per_cpu_s"] / b["rows_per_cpu_s"], 2),
            "peak_rss_ratio_dhs_over_baseline": round(dhs["peak_rss_mb"] / b["peak_rss_mb"], 3),
        }
    summary["dhs_peak_rss_over_file_size"] = round(dhs["peak_rss_mb"] / size_mb, 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
