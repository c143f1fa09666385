"""The catalog stage on Spark: the in-process Arrow functions applied per partition with mapInArrow.

Nothing here re-implements a cut, a match or a sampling rule: executors call
:func:`cuts.select_negatives`, :func:`crossmatch.match_candidates` and
:func:`sampling.sample_hash` on Arrow record batches, and the driver calls the same reductions
(:func:`crossmatch.reduce_matches`, :func:`sampling.stratum_quotas`, :func:`sampling.assemble_catalog`)
as the in-process path, so both paths give the same rows.

Spark DataFrames carry the Arrow schemas of the in-process path (same names and types; Spark
marks every column nullable). Writing Parquet is left to the caller.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from ..errors import InputError
from .crossmatch import (
    DEFAULT_MATCH_RADIUS_ARCSEC,
    POSITIVE_SCHEMA,
    crossmatch_summary,
    graded_galaxy_lenses,
    match_candidates,
    reduce_matches,
)
from .cuts import (
    CUT_INPUT_COLUMNS,
    NEGATIVE_SCHEMA,
    OBJECT_FIELDS,
    KnownLensIndex,
    NegativeSelectionConfig,
    funnel_from_table,
    funnel_table,
    negatives_from_selected,
    selected_rows,
)
from .sampling import (
    SAMPLING_SALT,
    assemble_catalog,
    eligible_positives,
    sample_hash,
    stratum_keys,
    stratum_quotas,
)

# Sweep columns the catalog functions read; the rest of a sweeps table (dchisq, ivars, ...) is
# not shipped to the Python workers.
INPUT_COLUMNS = tuple(
    dict.fromkeys(
        [
            "object_id", "release", "brickid", "objid", "brickname", "sweep_file", "row_index",
            "ra", "dec", "type", "maskbits", "fitbits", "healpix_128",
            *(f.name for f in OBJECT_FIELDS if f.name in {
                "flux_g", "flux_r", "flux_z", "flux_w1", "ebv", "shape_r", "shape_e1", "shape_e2", "sersic",
                "nobs_g", "nobs_r", "nobs_z"}),
            *(f"{k}_{b}" for k in ("psfsize", "psfdepth", "galdepth", "mw_transmission") for b in ("g", "r", "z")),
        ]
    )
)
_FUNNEL_COLS = ("_funnel_step_index", "_funnel_step", "_funnel_removed", "_funnel_remaining")


def spark_settings(master: str | None = None) -> dict[str, str]:
    """Spark configuration of the catalog stage, sized for a small machine; a cluster master just
    replaces ``spark.master``. ``master`` defaults to ``$DHS_SPARK_MASTER`` or ``local[*]``; driver
    memory comes from ``$DHS_SPARK_DRIVER_MEMORY`` (default 2g; applies when the JVM starts)."""
    master = master or os.environ.get("DHS_SPARK_MASTER", "local[*]")
    settings = {
        "spark.master": master,
        "spark.sql.shuffle.partitions": "8",
        "spark.default.parallelism": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Large Arrow batches amortise the per-batch Python overhead of the vectorised cuts.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "131072",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": os.environ.get("DHS_SPARK_DRIVER_MEMORY", "2g"),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
    }
    if master.startswith("local"):
        # Local Python workers must run this interpreter, the one with darkhaloscope installed.
        # PySpark takes the worker interpreter from $PYSPARK_PYTHON (default: whatever `python3` is
        # on PATH), not from spark.pyspark.python, so the environment is set as well. On a cluster
        # the executors' interpreter is the cluster's business (README, "Running the catalog stage").
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings["spark.pyspark.python"] = os.environ["PYSPARK_PYTHON"]
    return settings


def spark_session(master: str | None = None, app_name: str = "darkhaloscope-catalog", conf: dict | None = None):
    """A SparkSession with :func:`spark_settings` (``conf`` overrides entries)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for k, v in {**spark_settings(master), **(conf or {})}.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema([f.with_nullable(True) for f in schema]))


def read_sweeps(spark, sweeps):
    """DataFrame of the sweep columns the catalog needs, from Parquet path(s) or a DataFrame."""
    from pyspark.sql import DataFrame

    if isinstance(sweeps, DataFrame):
        df = sweeps
    else:
        paths = [sweeps] if isinstance(sweeps, (str, os.PathLike)) else list(sweeps)
        if not paths:
            raise InputError("no sweeps paths given")
        df = spark.read.parquet(*[str(p) for p in paths])
    for c in ("ra", "dec", "type", "sweep_file", "row_index"):
        if c not in df.columns:
            raise InputError(f"sweeps DataFrame has no column {c!r}")
    return df.select(*[c for c in INPUT_COLUMNS if c in df.columns])


def _selection_partition(batches: Iterable[pa.RecordBatch], index: KnownLensIndex, config, out_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Stage 1: keys (sweep_file, row_index) of the rows passing every cut, plus funnel rows."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        table = pa.Table.from_batches([batch])
        rows, funnel = selected_rows(table, index, config)
        keys = table.select(["sweep_file", "row_index"]).take(pa.array(rows, pa.int64()))
        n = keys.num_rows
        yield pa.RecordBatch.from_arrays(
            [keys.column("sweep_file").combine_chunks(), keys.column("row_index").combine_chunks(),
             *(pa.nulls(n, out_schema.field(c).type) for c in _FUNNEL_COLS)],
            schema=out_schema,
        )
        ft = funnel_table(funnel)
        m = ft.num_rows
        yield pa.RecordBatch.from_arrays(
            [ft.column("sweep_file").combine_chunks(), pa.nulls(m, pa.int64()),
             *(ft.column(c).combine_chunks() for c in ("step_index", "step", "n_removed", "n_remaining"))],
            schema=out_schema,
        )


def negatives_on_spark(spark, sweeps, known_lenses: pa.Table, config: NegativeSelectionConfig = NegativeSelectionConfig()):
    """Apply the negative selection of :mod:`cuts` to every partition of the sweeps, in two stages.

    Stage 1 ships only the columns the cuts read (``CUT_INPUT_COLUMNS``) to the Python workers and
    returns the surviving keys (sweep_file, row_index) and the funnel; stage 2 joins those keys
    back to the full rows in the JVM and describes only the survivors
    (:func:`cuts.negatives_from_selected`). Moving 10 instead of ~40 columns of every row through
    Arrow is what keeps Spark near the in-process speed.

    ``sweeps``: Parquet path(s) of the sweeps table, or a DataFrame with its columns.
    Returns ``(negatives DataFrame with NEGATIVE_SCHEMA, funnel dict)``. The keys are persisted so
    collecting the funnel does not recompute the cuts; the caller writes the negatives and then
    releases the cache (``spark.catalog.clearCache()``).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    df = read_sweeps(spark, sweeps)
    index = spark.sparkContext.broadcast(KnownLensIndex.from_table(known_lenses))
    key_schema = pa.schema(
        [pa.field("sweep_file", pa.string()), pa.field("row_index", pa.int64()),
         pa.field("_funnel_step_index", pa.int32()), pa.field("_funnel_step", pa.string()),
         pa.field("_funnel_removed", pa.int64()), pa.field("_funnel_remaining", pa.int64())]
    )

    def select(batches):
        return _selection_partition(batches, index.value, config, key_schema)

    cut_input = df.select(*[c for c in CUT_INPUT_COLUMNS if c in df.columns])
    both = cut_input.mapInArrow(select, _spark_schema(key_schema)).persist(StorageLevel.MEMORY_AND_DISK)
    frows = both.filter(F.col("_funnel_step").isNotNull()).select(
        "sweep_file",
        F.col("_funnel_step_index").alias("step_index"),
        F.col("_funnel_step").alias("step"),
        F.col("_funnel_removed").alias("n_removed"),
        F.col("_funnel_remaining").alias("n_remaining"),
    )
    funnel = funnel_from_table(frows.toArrow())
    keys = both.filter(F.col("_funnel_step").isNull()).select("sweep_file", "row_index")
    survivors = df.join(keys, ["sweep_file", "row_index"], "left_semi")

    def describe(batches):
        for batch in batches:
            if batch.num_rows:
                for b in negatives_from_selected(pa.Table.from_batches([batch]), config).to_batches():
                    yield b

    out_schema = pa.schema([f.with_nullable(True) for f in NEGATIVE_SCHEMA])
    negatives = survivors.mapInArrow(describe, _spark_schema(out_schema))
    return negatives, funnel


def positives_on_spark(
    spark,
    sweeps,
    known_lenses: pa.Table,
    radius_arcsec: float = DEFAULT_MATCH_RADIUS_ARCSEC,
    config: NegativeSelectionConfig = NegativeSelectionConfig(),
) -> tuple[pa.Table, dict]:
    """Broadcast cross-match: every partition pairs its rows with the (small) lens table, and the
    driver reduces the candidate pairs to the nearest source per lens. Returns the same
    (positives, summary) as :func:`crossmatch.crossmatch_positives` (positives are small)."""
    df = read_sweeps(spark, sweeps)
    lenses, keep = graded_galaxy_lenses(known_lenses)
    bc = spark.sparkContext.broadcast(lenses)

    def fn(batches):
        for batch in batches:
            for b in match_candidates(batch, bc.value, radius_arcsec, config).to_batches():
                yield b

    cands = df.mapInArrow(fn, _spark_schema(POSITIVE_SCHEMA)).toArrow()
    cands = cands.cast(POSITIVE_SCHEMA) if cands.num_rows else POSITIVE_SCHEMA.empty_table()
    positives, dropped = reduce_matches(cands)
    return positives, crossmatch_summary(positives, known_lenses, int(keep.sum()), dropped)


def _hash_threshold(k: int, n: int) -> float:
    """Hash cut that keeps about k of n uniformly hashed rows plus a 6-sigma margin."""
    if k <= 0 or n <= 0:
        return 0.0
    return min(1.0, (k + 6.0 * math.sqrt(k) + 20.0) / n)


def training_catalog_on_spark(
    spark,
    negatives,
    positives: pa.Table,
    ratio: int = 100,
    n1_fraction: float = 0.85,
    salt: str = SAMPLING_SALT,
) -> tuple[pa.Table, pa.Table]:
    """:func:`sampling.build_training_catalog` with the negatives pool as a Spark DataFrame.

    No global sort: availability is a groupBy count; each row gets its sampling hash in
    mapInArrow; a per-(stratum, pool) hash threshold keeps slightly more than the quota (retried
    with no threshold for any group that came up short); a window partitioned by (stratum, pool)
    ranks that small remainder. The selected rows (ratio × positives, small) are collected and
    assembled on the driver. Returns (catalog, strata) exactly as the in-process function does.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pos = eligible_positives(positives.cast(POSITIVE_SCHEMA) if positives.num_rows else POSITIVE_SCHEMA.empty_table())
    keys, counts = np.unique(stratum_keys(pos).astype(str), return_counts=True)
    negatives = negatives.withColumn("_stratum", F.concat_ws("|", "nobs_z_bin", "type_bin"))
    avail = {(r["_stratum"], r["pool"]): int(r["count"]) for r in negatives.groupBy("_stratum", "pool").count().collect()}
    quotas = stratum_quotas(dict(zip(keys, counts)), avail, ratio, n1_fraction)
    q = quotas.to_pydict()
    groups = {}
    for s, n1, n2 in zip(q["stratum"], q["n1_actual"], q["n2_actual"]):
        for p, k in (("N1", n1), ("N2", n2)):
            if k > 0:
                groups[(s, p)] = (k, _hash_threshold(k, avail.get((s, p), 0)))
    if not groups:
        return assemble_catalog(pos, NEGATIVE_SCHEMA.empty_table(), salt), quotas

    hashed_schema = pa.schema([*(f.with_nullable(True) for f in NEGATIVE_SCHEMA), pa.field("_stratum", pa.string()), pa.field("_h", pa.float64())])

    def add_hash(batches):
        for b in batches:
            yield pa.RecordBatch.from_arrays(
                [*(b.column(f.name) for f in hashed_schema if f.name != "_h"), pa.array(sample_hash(b.column("object_id").to_numpy(zero_copy_only=False), salt))],
                schema=hashed_schema,
            )

    hashed = negatives.mapInArrow(add_hash, _spark_schema(hashed_schema))
    w = Window.partitionBy("_stratum", "pool").orderBy("_h", "object_id")
    for _attempt in range(2):
        limits = spark.createDataFrame([(s, p, int(k), float(t)) for (s, p), (k, t) in sorted(groups.items())], "_stratum string, pool string, _k long, _t double")
        kept = hashed.join(F.broadcast(limits), ["_stratum", "pool"]).filter(F.col("_h") < F.col("_t"))
        ranked = kept.withColumn("_rank", F.row_number().over(w)).filter(F.col("_rank") <= F.col("_k"))
        selected = ranked.select(*[f.name for f in NEGATIVE_SCHEMA]).toArrow()
        got = {}
        sk = stratum_keys(selected).astype(str) if selected.num_rows else np.zeros(0, dtype=str)
        pl = np.asarray(selected.column("pool").to_pylist(), dtype=object).astype(str) if selected.num_rows else np.zeros(0, dtype=str)
        for (s, p) in groups:
            got[(s, p)] = int(((sk == s) & (pl == p)).sum())
        short = {g for g, (k, t) in groups.items() if got[g] < k and t < 1.0}
        if not short:
            break
        groups = {g: (k, 1.0 if g in short else t) for g, (k, t) in groups.items()}
    selected = selected.cast(NEGATIVE_SCHEMA) if selected.num_rows else NEGATIVE_SCHEMA.empty_table()
    return assemble_catalog(pos, selected, salt), quotas
