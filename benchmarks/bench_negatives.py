"""Benchmark of the negative-pool build: the in-process path vs Spark local[2] (one JSON line).

Generates a ~3-million-row synthetic sweep-like table (tests/spark_fixtures.synthetic_sweeps,
DR10-like distributions) once, stores it as 4 sweeps partitions (4 sweep files) of a lake under
benchmarks/out/, and measures:

- the cuts alone (cuts.cut_masks) and select_negatives on the table in memory, with Arrow and
  numpy held to one thread, in rows per second per core; against them the peer at its best for
  columnar predicates, DuckDB (one thread) computing the same five pass masks in SQL from the same
  in-memory Arrow table and returning them as Arrow columns (the same output as cut_masks);
- the obvious baseline: one sweep file built in-process by the stage's unit of work
  (sweep_tasks.build_negative_partition: Parquet read, cuts, description, sort, commit);
- the same through Spark local[2] (negatives_on_spark: one task per sweep file on the executors)
  for lakes holding 1, 2 and 4 of the files, against the in-process loop over the same files.

Run: ``python -m benchmarks.bench_negatives [--rows 3000000]`` (the single-core figures hold Arrow,
numpy and DuckDB to one thread; Spark local[2] gets the machine's two cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import table_registry as T
from darkhaloscope.catalog.cuts import KnownLensIndex, NegativeSelectionConfig, cut_masks, select_negatives
from darkhaloscope.catalog.sweep_tasks import build_negative_partition, sweep_file_names
from lake_platform.lake import PART_FILE, Lake
from tests.spark_fixtures import known_lenses_table, synthetic_sweeps

OUT = Path(__file__).resolve().parent / "out"


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
        t = synthetic_sweeps(
            n, key=f"bench-{i}", ra0=150.0 + 5.0 * i, dec0=0.0, size_deg=5.0, sweep_file="sweep-150p000-165p005.fits"
        )
        t = t.set_column(
            t.schema.get_field_index("row_index"), "row_index", pa.array(range(start, start + n), pa.int64())
        )
        writer = writer or pq.ParquetWriter(tmp, t.schema, compression="zstd")
        writer.write_table(t, row_group_size=131072)
    writer.close()
    tmp.rename(path)
    return path


def lake_with_files(rows: int, k: int) -> Lake:
    """A lake whose sweeps table holds the first ``k`` of 4 copies of the synthetic file, each its
    own sweep file (partition files are hard links into one store)."""
    store = Lake(str(OUT / "lake_store"))
    names = [f"sweep-{150 + 5 * i:03d}p000-{155 + 5 * i:03d}p005.fits" for i in range(4)]
    if sweep_file_names(store.table(*T.SWEEPS.key)) != names:
        base = pq.read_table(make_input(rows))
        for name in names:
            col = pa.array([name] * base.num_rows, pa.string())
            named = base.set_column(base.schema.get_field_index("sweep_file"), "sweep_file", col)
            store.table(*T.SWEEPS.key).write(named, partition={"sweep_file": name}, row_group_size=131072)
    root = OUT / f"lake_{k}"
    shutil.rmtree(root, ignore_errors=True)
    lake = Lake(str(root))
    for name in names[:k]:
        src = f"{store.partition_path(*T.SWEEPS.key, {'sweep_file': name})}/{PART_FILE}"
        dest = Path(lake.partition_path(*T.SWEEPS.key, {"sweep_file": name}))
        dest.mkdir(parents=True)
        os.link(src, dest / PART_FILE)
    return lake


def lenses_for(table: pa.Table, n: int = 5000) -> pa.Table:
    """A known-lens catalogue the size of the real one (~5k), on sources of the table."""
    step = max(1, table.num_rows // n)
    ra = table.column("ra").to_numpy()[::step][:n]
    dec = table.column("dec").to_numpy()[::step][:n]
    return known_lenses_table([{"ra": r, "dec": d + 2.0 / 3600} for r, d in zip(ra, dec)])


def duckdb_cut_masks(table: pa.Table, config: NegativeSelectionConfig) -> pa.Table:
    """The five pass masks of cuts.cut_masks, computed by DuckDB on one thread (nulls fail a cut)."""
    import duckdb

    types = ", ".join("'" + t.replace("'", "''") + "'" for t in sorted(config.types))
    nobs = " AND ".join(f"coalesce(nobs_{b} >= {int(config.min_nobs)}, false)" for b in config.nobs_bands)
    sql = (
        f"SELECT coalesce(dec > {config.dec_min!r} AND dec < {config.dec_max!r}, false) AS dec_footprint, "
        f"coalesce(trim(type) IN ({types}), false) AS type, "
        f"coalesce((maskbits & {int(config.maskbit_mask)}) = 0, false) AS maskbits, {nobs} AS nobs, "
        f"coalesce(flux_z > {config.zflux_min!r}, false) AS zmag FROM sweeps"
    )
    con = duckdb.connect(config={"threads": 1})
    try:
        con.register("sweeps", table)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure_in_memory(path: Path, config: NegativeSelectionConfig):
    """(rows, known lenses, negatives, cuts time, select_negatives time, DuckDB cuts time) on the
    table in memory."""
    table = pq.read_table(path)
    lenses = lenses_for(table)
    index = KnownLensIndex.from_table(lenses)
    t_cuts = best_of(lambda: cut_masks(table, config))
    t_select = best_of(lambda: select_negatives(table, index, config))
    ours = cut_masks(table, config)
    theirs = duckdb_cut_masks(table, config)
    for name, mask in ours.items():  # same answer before comparing speed
        if not (theirs.column(name).to_numpy(zero_copy_only=False) == mask).all():
            raise AssertionError(f"DuckDB and cut_masks disagree on cut {name!r}")
    t_duckdb = best_of(lambda: duckdb_cut_masks(table, config))
    return table.num_rows, lenses, select_negatives(table, index, config)[0], t_cuts, t_select, t_duckdb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    # one thread for numpy's and OpenMP's pools in the Spark workers this process starts (they
    # inherit its environment), as Arrow's below, so that both paths are timed per core
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    config = NegativeSelectionConfig()
    lakes = {k: lake_with_files(args.rows, k) for k in (1, 2, 4)}

    n, lenses, neg, t_cuts, t_select, t_duckdb = measure_in_memory(make_input(args.rows), config)
    index = KnownLensIndex.from_table(lenses)

    def inproc_run(k: int) -> float:
        t0 = time.perf_counter()
        sweeps, negatives = lakes[k].table(*T.SWEEPS.key), lakes[k].table(*T.NEGATIVES.key)
        for name in sweep_file_names(sweeps):
            build_negative_partition(sweeps, name, index, negatives, config)
        return time.perf_counter() - t0

    inproc_times = {k: best_of(lambda: inproc_run(k), repeats=2) for k in (1, 2, 4)}

    from darkhaloscope.catalog.spark import negatives_on_spark
    from darkhaloscope.catalog.spark_conf import spark_session
    from resources.settings import spark_env

    spark = spark_session(args.master, app_name="bench-negatives", env=spark_env())

    def spark_run(k: int) -> float:
        t0 = time.perf_counter()
        sweeps, negatives = lakes[k].table(*T.SWEEPS.key), lakes[k].table(*T.NEGATIVES.key)
        funnel = negatives_on_spark(spark, sweeps, lenses, negatives, config)
        dt = time.perf_counter() - t0
        sel = sum(v["selected"] for v in funnel.values())
        if sel != k * neg.num_rows:
            raise AssertionError(f"Spark selected {sel} rows for {k} files, in-process {neg.num_rows} per file")
        return dt

    spark_run(1)  # warm-up: JVM code paths and the Python worker daemon
    spark_times = {k: best_of(lambda: spark_run(k), repeats=2) for k in (1, 2, 4)}
    spark.stop()

    result = {
        "bench": "negatives",
        "rows_per_file": n,
        "selected_per_file": neg.num_rows,
        "n2_fraction": round(float((neg.column("pool").to_numpy(zero_copy_only=False) == "N2").mean()), 4),
        "known_lenses": lenses.num_rows,
        "inproc_cuts_s": round(t_cuts, 4),
        "inproc_cuts_rows_per_s_per_core": round(n / t_cuts),
        "duckdb_cuts_s": round(t_duckdb, 4),
        "duckdb_cuts_rows_per_s": round(n / t_duckdb),
        "inproc_cuts_over_duckdb_speed": round(t_duckdb / t_cuts, 2),
        "inproc_select_s": round(t_select, 4),
        "inproc_select_rows_per_s_per_core": round(n / t_select),
        "inproc_s_by_files": {str(k): round(v, 3) for k, v in inproc_times.items()},
        "spark_master": args.master,
        "spark_s_by_files": {str(k): round(v, 3) for k, v in spark_times.items()},
        "spark_rows_per_s_by_files": {str(k): round(k * n / v) for k, v in spark_times.items()},
        "spark_over_inproc_by_files": {str(k): round(spark_times[k] / inproc_times[k], 3) for k in (1, 2, 4)},
        "targets": {"cuts_rows_per_s_per_core": 5_000_000, "spark_over_inproc_max_at_1_file": 2.0},
        "cpu_count": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
