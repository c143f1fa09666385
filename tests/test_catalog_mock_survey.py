"""On the embedded mock survey, the Spark path and the in-process path select the same rows."""

import dagster as dg
import pyarrow as pa
import pytest
from dagster_pyspark import LazyPySparkResource

import lens_assets.catalog as catalog

from darkhaloscope.catalog.crossmatch import crossmatch_positives
from darkhaloscope.catalog.cuts import NEGATIVE_SCHEMA, KnownLensIndex, select_negatives
from darkhaloscope.catalog.spark import negatives_on_spark, positives_on_spark
from darkhaloscope.lake import Lake
from darkhaloscope.survey.known_lenses import load_known_lenses
from darkhaloscope.survey.mock_survey import MockSurveyConfig, generate_mock_survey
from darkhaloscope.survey.sweeps import read_sweep
from resources import ComputeResource, LakeResource
from resources.config import spark_config
from tests.spark_fixtures import spark  # noqa: F401  (fixture)

pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def mock_lake(tmp_path_factory):
    """The demo mock survey ingested into a lake (sweeps partitions as the sweeps asset writes them)."""
    root = tmp_path_factory.mktemp("mock")
    manifest = generate_mock_survey(root / "survey", MockSurveyConfig(profile="demo", n_rows_per_file=4000))
    lake = Lake(str(root / "lake"))
    for f in manifest.sweep_files:
        lake.write_table("survey", "sweeps", read_sweep(str(f)), partition={"sweep_file": f.name})
    table = pa.concat_tables([read_sweep(str(f)) for f in manifest.sweep_files])
    return lake, table, load_known_lenses()


def test_negatives_and_positives_agree_on_the_mock_survey(spark, mock_lake):  # noqa: F811
    lake, table, lenses = mock_lake
    local, funnel = select_negatives(table, KnownLensIndex.from_table(lenses))
    spark_funnel = negatives_on_spark(spark, lake, lenses)
    remote = lake.read_table("catalog", "negatives").cast(NEGATIVE_SCHEMA)
    assert local.num_rows > 100
    assert remote.sort_by("object_id").equals(local.cast(NEGATIVE_SCHEMA).sort_by("object_id"))
    assert spark_funnel == funnel
    pos_local, _ = crossmatch_positives(table, lenses)
    pos_spark, _ = positives_on_spark(spark, lake, lenses)
    assert pos_local.num_rows > 50
    assert pos_spark.sort_by("object_id").equals(pos_local.sort_by("object_id"))


def test_catalog_assets_materialize_with_their_checks(spark, mock_lake, tmp_path):  # noqa: F811
    """negatives, positives and training_catalog through dg.materialize on the mock survey, with a
    non-default selection: every check passes, and a negatives partition of a sweep file no longer
    in sweeps is removed."""
    source, _, lenses = mock_lake
    lake = Lake(str(tmp_path / "lake"))
    for part in source.partitions("survey", "sweeps"):
        lake.write_table("survey", "sweeps", source.read_table("survey", "sweeps", partition=part), partition=part)
    lake.write_table("survey", "known_lenses", lenses)
    stale = {"sweep_file": "sweep-000p000-005p005.fits"}
    lake.write_table("catalog", "negatives", NEGATIVE_SCHEMA.empty_table(), partition=stale)
    resources = {
        "lake": LakeResource(uri=lake.uri),
        "pyspark": LazyPySparkResource(spark_config=spark_config("local[2]")),
        "compute": ComputeResource(profile="demo"),
    }
    # a non-default selection: the checks must re-verify the selection that was run, not the defaults
    run_config = {"ops": {"catalog__negatives": {"config": {"exclusion_radius_arcsec": 5.0, "zmag_max": 19.5}}}}
    result = dg.materialize([*catalog.catalog_defs.assets, *catalog.catalog_defs.asset_checks], resources=resources, run_config=run_config)
    assert result.success
    assert catalog.selection_as_run(lake).exclusion_radius_arcsec == 5.0
    assert max(lake.read_table("catalog", "negatives").column("mag_z").to_pylist()) < 19.5
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == len(catalog.catalog_defs.asset_checks)
    failed = {e.check_name: e.metadata for e in evaluations if not e.passed and e.check_name != "split_fractions"}
    assert not failed
    names = sorted(p["sweep_file"] for p in lake.partitions("survey", "sweeps"))
    assert sorted(p["sweep_file"] for p in lake.partitions("catalog", "negatives")) == names
    assert sorted(set(lake.read_table("catalog", "selection_funnel").column("sweep_file").to_pylist())) == names
    labels = lake.read_table("catalog", "training_catalog", columns=["label"]).column("label").to_pylist()
    assert labels.count(1) > 10 and labels.count(0) > 10
