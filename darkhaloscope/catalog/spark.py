"""The catalog stage on Spark: the in-process Arrow functions applied on the executors.

Nothing here re-implements a cut, a match or a sampling rule. The unit of work of the negatives
and the positives is one sweeps partition (one sweep file, the natural unit of a survey release):
Spark schedules one task per file, and each task streams its file's Parquet straight from the lake
with pyarrow and runs the library function on Arrow record batches
(:func:`sweep_tasks.build_negative_partition`, :func:`crossmatch.match_candidates`). Rows never
pass through Spark's row format, whose conversion to Arrow, not the cuts, is what made a
JVM-read-then-``mapInArrow`` design slower than the in-process path (BENCHMARKS.md, summary table,
row *negative-pool build*). The training catalog samples the negatives table as a
Spark DataFrame read the same way (:func:`negatives_dataframe`, :func:`training_catalog_on_spark`),
with the hashes computed by :func:`sampling.sample_hash` in ``mapInArrow``. The driver calls the same reductions
(:func:`crossmatch.reduce_matches`, :func:`sampling.stratum_quotas`, :func:`sampling.assemble_catalog`)
as the in-process path, so both paths give the same rows.

The session itself (its settings, a bounded start on a cluster) is :mod:`.spark_conf`'s. Executors
need the lake as the driver sees it: its tables (:class:`~darkhaloscope.storage.PartitionedTable`)
travel in the task closure with the lake's settings (endpoint, region, retries, timeouts);
credentials come from each executor host's own AWS chain (environment, profile, instance role).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..storage import PartitionedTable
from ..survey.sweeps import SWEEP_DIM
from .crossmatch import (
    DEFAULT_MATCH_RADIUS_ARCSEC,
    POSITIVE_SCHEMA,
    crossmatch_summary,
    graded_galaxy_lenses,
    match_candidates,
    reduce_matches,
)
from .cuts import (
    FUNNEL_SCHEMA,
    NEGATIVE_SCHEMA,
    KnownLensIndex,
    NegativeSelectionConfig,
    funnel_from_table,
    funnel_table,
)
from .sampling import (
    N1_FRACTION,
    NEGATIVES_PER_POSITIVE,
    SAMPLING_SALT,
    assemble_catalog,
    eligible_positives,
    sample_hash,
    stratum_keys,
    stratum_quotas,
)
from .spark_conf import counting_s3_retries
from .sweep_tasks import build_negative_partition, sweep_file_names, sweeps_partition_batches


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema([f.with_nullable(True) for f in schema]))


def _over_sweep_files(spark, names: list[str], task: Callable[[str], pa.Table], out_schema: pa.Schema):
    """Lazy DataFrame of ``out_schema``: one Spark task per sweep file, each yielding ``task(name)``."""
    files = spark.createDataFrame(
        spark.sparkContext.parallelize([(n,) for n in names], max(1, len(names))), "sweep_file string"
    )

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for name in batch.column(0).to_pylist():
                yield from task(name).cast(out_schema).to_batches()

    return files.mapInArrow(counting_s3_retries(spark, run), _spark_schema(out_schema))


def map_sweep_files(
    spark,
    sweeps: PartitionedTable,
    task: Callable[[str], pa.Table],
    out_schema: pa.Schema,
    names: list[str] | None = None,
) -> pa.Table:
    """Run ``task(sweep_file) -> Arrow table`` on the executors, one Spark task per partition of
    ``sweeps`` (or per sweep file in ``names``), and collect the (small) results on the driver as
    one table of ``out_schema``."""
    names = sweep_file_names(sweeps) if names is None else list(names)
    if not names:
        raise InputError(f"{sweeps.location()} has no sweeps partitions: materialize sweeps first")
    out = _over_sweep_files(spark, names, task, out_schema).toArrow()
    return out.cast(out_schema) if out.num_rows else out_schema.empty_table()


def negatives_dataframe(spark, negatives: PartitionedTable, names: list[str] | None = None):
    """The ``negatives`` table (or its partitions of sweep files ``names``) as a Spark DataFrame,
    each partition read by pyarrow on an executor (so an S3 lake needs no Hadoop S3 connector)."""
    names = sweep_file_names(negatives) if names is None else sorted(names)
    if not names:
        raise InputError(f"{negatives.location()} has no negatives partitions: materialize negatives first")
    return _over_sweep_files(spark, names, lambda n: negatives.read(partition={SWEEP_DIM: n}), NEGATIVE_SCHEMA)


def negatives_on_spark(
    spark,
    sweeps: PartitionedTable,
    known_lenses: pa.Table,
    negatives: PartitionedTable,
    config: NegativeSelectionConfig = NegativeSelectionConfig(),
    *,
    names: list[str] | None = None,
) -> dict[str, dict[str, int]]:
    """Build the ``negatives`` partition of every sweep file of ``sweeps`` (or of the files
    ``names``) on the executors (:func:`sweep_tasks.build_negative_partition`, one task per file),
    each committed to ``negatives`` (a run's staging area when it is audited before publication),
    and return the funnel of those files (see :func:`cuts.select_negatives`)."""
    index = spark.sparkContext.broadcast(KnownLensIndex.from_table(known_lenses))

    def task(name: str) -> pa.Table:
        return funnel_table(build_negative_partition(sweeps, name, index.value, negatives, config))

    return funnel_from_table(map_sweep_files(spark, sweeps, task, FUNNEL_SCHEMA, names=names))


def positives_on_spark(
    spark,
    sweeps: PartitionedTable,
    known_lenses: pa.Table,
    radius_arcsec: float = DEFAULT_MATCH_RADIUS_ARCSEC,
    config: NegativeSelectionConfig = NegativeSelectionConfig(),
) -> tuple[pa.Table, dict]:
    """Broadcast cross-match: each task pairs the rows of one sweep file with the (small) lens
    table, and the driver reduces the candidate pairs to the nearest source per lens. Returns the
    same (positives, summary) as :func:`crossmatch.crossmatch_positives` (positives are small)."""
    lenses, keep = graded_galaxy_lenses(known_lenses)
    bc = spark.sparkContext.broadcast(lenses)

    def task(name: str) -> pa.Table:
        parts = [match_candidates(b, bc.value, radius_arcsec, config) for b in sweeps_partition_batches(sweeps, name)]
        return pa.concat_tables(parts) if parts else POSITIVE_SCHEMA.empty_table()

    positives, dropped = reduce_matches(map_sweep_files(spark, sweeps, task, POSITIVE_SCHEMA))
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
    ratio: int = NEGATIVES_PER_POSITIVE,
    n1_fraction: float = N1_FRACTION,
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
    avail = {
        (r["_stratum"], r["pool"]): int(r["count"]) for r in negatives.groupBy("_stratum", "pool").count().collect()
    }
    quotas = stratum_quotas(dict(zip(keys, counts)), avail, ratio, n1_fraction)
    q = quotas.to_pydict()
    groups = {}
    for s, n1, n2 in zip(q["stratum"], q["n1_actual"], q["n2_actual"]):
        for p, k in (("N1", n1), ("N2", n2)):
            if k > 0:
                groups[(s, p)] = (k, _hash_threshold(k, avail.get((s, p), 0)))
    if not groups:
        return assemble_catalog(pos, NEGATIVE_SCHEMA.empty_table(), salt), quotas

    hashed_schema = pa.schema(
        [
            *(f.with_nullable(True) for f in NEGATIVE_SCHEMA),
            pa.field("_stratum", pa.string()),
            pa.field("_h", pa.float64()),
        ]
    )

    def add_hash(batches):
        for b in batches:
            yield pa.RecordBatch.from_arrays(
                [
                    *(b.column(f.name) for f in hashed_schema if f.name != "_h"),
                    pa.array(sample_hash(b.column("object_id").to_numpy(zero_copy_only=False), salt)),
                ],
                schema=hashed_schema,
            )

    hashed = negatives.mapInArrow(add_hash, _spark_schema(hashed_schema))
    w = Window.partitionBy("_stratum", "pool").orderBy("_h", "object_id")
    for _attempt in range(2):
        limits = spark.createDataFrame(
            [(s, p, int(k), float(t)) for (s, p), (k, t) in sorted(groups.items())],
            "_stratum string, pool string, _k long, _t double",
        )
        kept = hashed.join(F.broadcast(limits), ["_stratum", "pool"]).filter(F.col("_h") < F.col("_t"))
        ranked = kept.withColumn("_rank", F.row_number().over(w)).filter(F.col("_rank") <= F.col("_k"))
        selected = ranked.select(*[f.name for f in NEGATIVE_SCHEMA]).toArrow()
        got = {}
        sk = stratum_keys(selected).astype(str) if selected.num_rows else np.zeros(0, dtype=str)
        pl = (
            np.asarray(selected.column("pool").to_pylist(), dtype=object).astype(str)
            if selected.num_rows
            else np.zeros(0, dtype=str)
        )
        for s, p in groups:
            got[(s, p)] = int(((sk == s) & (pl == p)).sum())
        short = {g for g, (k, t) in groups.items() if got[g] < k and t < 1.0}
        if not short:
            break
        groups = {g: (k, 1.0 if g in short else t) for g, (k, t) in groups.items()}
    selected = selected.cast(NEGATIVE_SCHEMA) if selected.num_rows else NEGATIVE_SCHEMA.empty_table()
    return assemble_catalog(pos, selected, salt), quotas
