"""The Spark path gives the same rows, funnel, positives and training catalog as the in-process path."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from darkhaloscope.catalog.crossmatch import POSITIVE_SCHEMA, crossmatch_positives
from darkhaloscope.catalog.cuts import NEGATIVE_SCHEMA, merge_funnels, select_negatives
from darkhaloscope.catalog.sampling import build_training_catalog
from tests.spark_fixtures import known_lenses_table, spark, synthetic_sweeps  # noqa: F401  (fixture)

pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def sweep_files(tmp_path_factory):
    """Two small synthetic sweep Parquet files and known lenses on some of their sources."""
    d = tmp_path_factory.mktemp("sweeps")
    a = synthetic_sweeps(2500, key="spark-a", ra0=150.0, dec0=0.0, size_deg=0.5)
    b = synthetic_sweeps(2000, key="spark-b", ra0=155.0, dec0=-20.0, size_deg=5.0)
    pq.write_table(a, d / "a.parquet", row_group_size=700)
    pq.write_table(b, d / "b.parquet")
    both = pa.concat_tables([a, b])
    # Lenses 0.2" from every 40th source (galaxy-scale, graded) plus a group lens (never a positive).
    ra, dec = both.column("ra").to_numpy(), both.column("dec").to_numpy()
    rows = [{"name": f"L{i}", "ra": ra[i], "dec": dec[i] + 0.2 / 3600, "grade": "confident" if i % 80 else "probable"} for i in range(0, both.num_rows, 40)]
    rows.append({"name": "grp", "ra": ra[7], "dec": dec[7], "kind": "group"})
    return [str(d / "a.parquet"), str(d / "b.parquet")], both, known_lenses_table(rows)


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by([("object_id", "ascending")])


def test_negatives_spark_equals_in_process(spark, sweep_files):  # noqa: F811
    from darkhaloscope.catalog.spark import negatives_on_spark

    paths, both, lenses = sweep_files
    local, funnel_local = select_negatives(both, lenses)
    df, funnel_spark = negatives_on_spark(spark, paths, lenses)
    assert [f.name for f in df.schema.fields] == NEGATIVE_SCHEMA.names
    got = df.toArrow().cast(NEGATIVE_SCHEMA)
    spark.catalog.clearCache()
    assert local.num_rows > 50
    assert _sorted(got).equals(_sorted(local))
    assert funnel_spark == merge_funnels(funnel_local)
    assert funnel_spark[both.column("sweep_file")[0].as_py()]["known_lens"] > 0


def test_positives_spark_equals_in_process(spark, sweep_files):  # noqa: F811
    from darkhaloscope.catalog.spark import positives_on_spark

    paths, both, lenses = sweep_files
    local, summary_local = crossmatch_positives(both, lenses)
    got, summary_spark = positives_on_spark(spark, paths, lenses)
    assert got.schema == POSITIVE_SCHEMA
    assert got.equals(local)
    assert summary_spark == summary_local
    assert local.num_rows == lenses.num_rows - 1  # every galaxy-scale lens matched, the group lens not
    # Positives south of -18 deg are kept and flagged.
    assert not all(local.column("in_negative_footprint").to_pylist())


def test_training_catalog_spark_equals_in_process(spark, sweep_files):  # noqa: F811
    from darkhaloscope.catalog.spark import training_catalog_on_spark

    paths, both, lenses = sweep_files
    negs, _ = select_negatives(both, known_lenses_table([]))
    pos, _ = crossmatch_positives(both, lenses)
    # Pretend every positive is eligible so several strata have quotas.
    pos = pos.set_column(pos.schema.get_field_index("passes_negative_cuts"), "passes_negative_cuts", pa.array([True] * pos.num_rows))
    pos = pos.set_column(pos.schema.get_field_index("in_negative_footprint"), "in_negative_footprint", pa.array([True] * pos.num_rows))
    local_cat, local_strata = build_training_catalog(negs, pos, ratio=3, n1_fraction=0.8)
    df = spark.createDataFrame(negs).repartition(2)
    cat, strata = training_catalog_on_spark(spark, df, pos, ratio=3, n1_fraction=0.8)
    assert strata.equals(local_strata)
    assert cat.equals(local_cat)
    n_neg = int(pc.sum(pc.equal(cat.column("label"), 0)).as_py())
    assert 0 < n_neg <= 3 * pos.num_rows
    assert np.all(np.array(local_strata.column("backfilled").to_pylist()) >= 0)
