"""The Spark path gives the same rows, funnel, positives and training catalog as the in-process path."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from darkhaloscope.catalog.crossmatch import POSITIVE_SCHEMA, crossmatch_positives
from darkhaloscope.catalog.cuts import CUT_STEPS, NEGATIVE_SCHEMA, merge_funnels, select_negatives
from darkhaloscope.catalog.sampling import build_training_catalog
from lake_platform.lake import Lake
from tests.conftest import require_real_file
from tests.spark_fixtures import known_lenses_table, synthetic_sweeps

pytest.importorskip("pyspark")


def _synthetic_survey() -> tuple[list[pa.Table], pa.Table]:
    """Two small synthetic sweep files and known lenses on some of their sources."""
    a = synthetic_sweeps(2500, key="spark-a", ra0=150.0, dec0=0.0, size_deg=0.5)
    b = synthetic_sweeps(2000, key="spark-b", ra0=155.0, dec0=-20.0, size_deg=5.0)
    both = pa.concat_tables([a, b])
    # Lenses 0.2" from every 40th source (galaxy-scale, graded) plus a group lens (never a positive).
    ra, dec = both.column("ra").to_numpy(), both.column("dec").to_numpy()
    rows = [
        {"name": f"L{i}", "ra": ra[i], "dec": dec[i] + 0.2 / 3600, "grade": "confident" if i % 80 else "probable"}
        for i in range(0, both.num_rows, 40)
    ]
    rows.append({"name": "grp", "ra": ra[7], "dec": dec[7], "kind": "group"})
    return [a, b], known_lenses_table(rows)


def _lake_with_sweeps(lake: Lake, files: list[pa.Table]) -> Lake:
    for t in files:
        lake.write_table(
            "survey", "sweeps", t, partition={"sweep_file": t.column("sweep_file")[0].as_py()}, row_group_size=700
        )
    return lake


@pytest.fixture(scope="module")
def survey():
    """(sweep tables, all rows, known lenses)."""
    files, lenses = _synthetic_survey()
    return files, pa.concat_tables(files), lenses


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by([("object_id", "ascending")])


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def test_negatives_spark_equals_in_process(spark, survey, lake):
    """Spark tasks read each sweeps partition from the lake (a folder, or S3 on loopback) and commit
    its negatives partition: the rows, the per-partition layout and the funnel are the in-process ones."""
    from darkhaloscope.catalog.spark import negatives_dataframe, negatives_on_spark

    files, both, lenses = survey
    _lake_with_sweeps(lake, files)
    local, funnel_local = select_negatives(both, lenses)
    funnel_spark = negatives_on_spark(spark, lake.table("survey", "sweeps"), lenses, lake.table("catalog", "negatives"))
    got = lake.read_table("catalog", "negatives")
    assert got.schema.names == NEGATIVE_SCHEMA.names
    assert local.num_rows > 50
    assert _sorted(got.cast(NEGATIVE_SCHEMA)).equals(_sorted(local))
    assert funnel_spark == merge_funnels(funnel_local)
    assert funnel_spark[files[0].column("sweep_file")[0].as_py()]["known_lens"] > 0
    assert _sorted(
        negatives_dataframe(spark, lake.table("catalog", "negatives")).toArrow().cast(NEGATIVE_SCHEMA)
    ).equals(_sorted(local))
    for t in files:
        name = t.column("sweep_file")[0].as_py()
        part = lake.read_table("catalog", "negatives", partition={"sweep_file": name})
        assert part.column("object_id").to_pylist() == sorted(part.column("object_id").to_pylist())
        assert set(part.column("sweep_file").to_pylist()) <= {name}


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_positives_spark_equals_in_process(spark, survey, lake):
    from darkhaloscope.catalog.spark import positives_on_spark

    files, both, lenses = survey
    _lake_with_sweeps(lake, files)
    local, summary_local = crossmatch_positives(both, lenses)
    got, summary_spark = positives_on_spark(spark, lake.table("survey", "sweeps"), lenses)
    assert got.schema == POSITIVE_SCHEMA
    assert got.equals(local)
    assert summary_spark == summary_local
    assert local.num_rows == lenses.num_rows - 1  # every galaxy-scale lens matched, the group lens not
    # Positives south of -18 deg are kept and flagged.
    assert not all(local.column("in_negative_footprint").to_pylist())


def test_training_catalog_spark_equals_in_process(spark, survey):
    from darkhaloscope.catalog.spark import training_catalog_on_spark

    _, both, lenses = survey
    negs, _ = select_negatives(both, known_lenses_table([]))
    pos, _ = crossmatch_positives(both, lenses)
    # Pretend every positive is eligible so several strata have quotas.
    pos = pos.set_column(
        pos.schema.get_field_index("passes_negative_cuts"), "passes_negative_cuts", pa.array([True] * pos.num_rows)
    )
    pos = pos.set_column(
        pos.schema.get_field_index("in_negative_footprint"), "in_negative_footprint", pa.array([True] * pos.num_rows)
    )
    local_cat, local_strata = build_training_catalog(negs, pos, ratio=3, n1_fraction=0.8)
    df = spark.createDataFrame(negs).repartition(2)
    cat, strata = training_catalog_on_spark(spark, df, pos, ratio=3, n1_fraction=0.8)
    assert strata.equals(local_strata)
    assert cat.equals(local_cat)
    n_neg = int(pc.sum(pc.equal(cat.column("label"), 0)).as_py())
    assert 0 < n_neg <= 3 * pos.num_rows
    assert np.all(np.array(local_strata.column("backfilled").to_pylist()) >= 0)


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_real_dr8_sweep_runs_through_the_spark_stage(spark, lake):
    """The real DR8 sweep, ingested by the sweep reader (padded TYPE, int16 MASKBITS, no SERSIC),
    through negatives_on_spark and positives_on_spark; a lens is planted 0.3" from a real galaxy."""
    from darkhaloscope.catalog.spark import negatives_on_spark, positives_on_spark
    from darkhaloscope.survey.sweeps import read_sweep

    path = require_real_file("sweep-320m005-330p000.fits")
    t = read_sweep(path)
    lake.write_table("survey", "sweeps", t, partition={"sweep_file": path.name})
    galaxy = next(i for i, s in enumerate(t.column("type").to_pylist()) if s.strip() in {"SER", "DEV", "REX", "EXP"})
    lenses = known_lenses_table(
        [{"name": "planted", "ra": t.column("ra")[galaxy].as_py(), "dec": t.column("dec")[galaxy].as_py() + 0.3 / 3600}]
    )
    local, funnel_local = select_negatives(t, lenses)
    funnel = negatives_on_spark(spark, lake.table("survey", "sweeps"), lenses, lake.table("catalog", "negatives"))
    assert funnel == funnel_local
    f = funnel[path.name]
    assert f["input"] == t.num_rows > 0
    assert sum(f[s] for s in CUT_STEPS) + f["selected"] == t.num_rows
    got = lake.read_table("catalog", "negatives").cast(NEGATIVE_SCHEMA)
    assert got.num_rows > 0 and _sorted(got).equals(_sorted(local))
    assert got.column("sersic").null_count == got.num_rows  # DR8 has no SERSIC: null, never invented
    positives, summary = positives_on_spark(spark, lake.table("survey", "sweeps"), lenses)
    assert positives.column("name").to_pylist() == ["planted"]
    assert positives.column("row_index").to_pylist() == [t.column("row_index")[galaxy].as_py()]
    assert abs(positives.column("separation_arcsec")[0].as_py() - 0.3) < 0.01
