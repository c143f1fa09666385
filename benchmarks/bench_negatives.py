"""Benchmark of the negative-pool build: in-process Arrow path vs Spark local[2] (one JSON line).

Generates a ~3-million-row synthetic sweep-like table (tests/spark_fixtures.synthetic_sweeps,
DR10-like distributions) into benchmarks/out/ as Parquet once, then measures:

- the cuts alone (cuts.cut_masks) and the whole in-process build (cuts.select_negatives) with
  Arrow and numpy held to one thread, in rows per second per core;
- the same build on Spark local[2] (cuts applied per partition by mapInArrow, output consumed by
  a no-op write), for 1, 2 and 4 copies of the file; the 1-copy time is compared with the
  in-process build including the Parquet read (the obvious baseline).

Run: ``python benchmarks/bench_negatives.py [--rows 3000000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from darkhaloscope.catalog.cuts import NegativeSelectionConfig, cut_masks, select_negatives  # noqa: E402
from tests.spark_fixtures import known_lenses_table, synthetic_sweeps  # noqa: E402

OUT = ROOT / "benchmarks" / "out"


def make_input(rows: int) -> Path:
    path = OUT / f"synthetic_sweeps_{rows}.parquet"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    chunk = 1_000_000
    writer = None
    tmp = path.with_suffix(".tmp")
    for i, start in enumerate(range(0, rows, chunk)):
        n = min(chunk, rows - start)
        # Different sky patches per chunk keep object ids unique; one sweep file name for all.
        t = synthetic_sweeps(n, key=f"bench-{i}", ra0=150.0 + 5.0 * i, dec0=0.0, size_deg=5.0, sweep_file="sweep-150p000-165p005.fits")
        t = t.set_column(t.schema.get_field_index("row_index"), "row_index", pa.array(range(start, start + n), pa.int64()))
        writer = writer or pq.ParquetWriter(tmp, t.schema, compression="zstd")
        writer.write_table(t, row_group_size=131072)
    writer.close()
    tmp.rename(path)
    return path


def lenses_for(table: pa.Table, n: int = 5000) -> pa.Table:
    """A known-lens catalogue the size of the real one (~5k), on sources of the table."""
    step = max(1, table.num_rows // n)
    ra = table.column("ra").to_numpy()[::step][:n]
    dec = table.column("dec").to_numpy()[::step][:n]
    return known_lenses_table([{"ra": r, "dec": d + 2.0 / 3600} for r, d in zip(ra, dec)])


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    path = make_input(args.rows)
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    config = NegativeSelectionConfig()

    table = pq.read_table(path)
    lenses = lenses_for(table)
    n = table.num_rows
    t_cuts = best_of(lambda: cut_masks(table, config))
    t_build = best_of(lambda: select_negatives(table, lenses, config))
    t_read_build = best_of(lambda: select_negatives(pq.read_table(path), lenses, config), repeats=2)
    neg, funnel = select_negatives(table, lenses, config)
    del table

    from darkhaloscope.catalog.spark import negatives_on_spark, spark_session

    spark = spark_session(args.master, app_name="bench-negatives", conf={"spark.sql.shuffle.partitions": "2"})
    copies_dir = OUT / "copies"
    shutil.rmtree(copies_dir, ignore_errors=True)
    copies_dir.mkdir()
    for i in range(4):
        os.link(path, copies_dir / f"copy{i}.parquet")

    def spark_run(k: int) -> tuple[float, int]:
        paths = [str(copies_dir / f"copy{i}.parquet") for i in range(k)]
        t0 = time.perf_counter()
        df, fun = negatives_on_spark(spark, paths, lenses, config)
        df.write.format("noop").mode("overwrite").save()
        dt = time.perf_counter() - t0
        spark.catalog.clearCache()
        return dt, sum(v["selected"] for v in fun.values())

    spark_run(1)  # warm-up: JVM code paths and Python workers
    spark_times = {}
    for k in (1, 2, 4):
        dt, sel = spark_run(k)
        if sel != k * neg.num_rows:
            raise AssertionError(f"Spark selected {sel} rows for {k} copies, in-process {neg.num_rows} per copy")
        spark_times[k] = dt
    spark.stop()
    shutil.rmtree(copies_dir, ignore_errors=True)

    result = {
        "bench": "negatives",
        "rows": n,
        "selected": neg.num_rows,
        "n2_fraction": round(float((neg.column("pool").to_numpy(zero_copy_only=False) == "N2").mean()), 4),
        "known_lenses": lenses.num_rows,
        "inproc_cuts_s": round(t_cuts, 4),
        "inproc_cuts_rows_per_s_per_core": round(n / t_cuts),
        "inproc_build_s": round(t_build, 4),
        "inproc_build_rows_per_s_per_core": round(n / t_build),
        "inproc_read_and_build_s": round(t_read_build, 4),
        "spark_master": args.master,
        "spark_s_by_copies": {str(k): round(v, 3) for k, v in spark_times.items()},
        "spark_rows_per_s_by_copies": {str(k): round(k * n / v) for k, v in spark_times.items()},
        "spark_over_inproc_read_and_build": round(spark_times[1] / t_read_build, 3),
        "targets": {"cuts_rows_per_s_per_core": 5_000_000, "spark_over_inproc_max": 2.0},
        "cpu_count": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
