"""On the embedded mock survey, the Spark path and the in-process path select the same rows."""

import pyarrow as pa
import pytest

from darkhaloscope.catalog.crossmatch import crossmatch_positives
from darkhaloscope.catalog.cuts import NEGATIVE_SCHEMA, KnownLensIndex, select_negatives
from darkhaloscope.catalog.spark import negatives_on_spark, positives_on_spark
from darkhaloscope.survey.known_lenses import load_known_lenses
from darkhaloscope.survey.mock_survey import MockSurveyConfig, generate_mock_survey
from darkhaloscope.survey.sweeps import sweep_to_parquet, read_sweep
from tests.spark_fixtures import spark  # noqa: F401  (fixture)

pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def mock_sweeps(tmp_path_factory):
    root = tmp_path_factory.mktemp("mock")
    manifest = generate_mock_survey(root / "survey", MockSurveyConfig(profile="demo", n_rows_per_file=4000))
    paths = []
    for f in manifest.sweep_files:
        dest = root / "parquet" / (f.name.replace(".fits", ".parquet"))
        dest.parent.mkdir(exist_ok=True)
        sweep_to_parquet(str(f), str(dest))
        paths.append(str(dest))
    table = pa.concat_tables([read_sweep(str(f)) for f in manifest.sweep_files])
    return paths, table, load_known_lenses()


def test_negatives_and_positives_agree_on_the_mock_survey(spark, mock_sweeps):  # noqa: F811
    paths, table, lenses = mock_sweeps
    local, funnel = select_negatives(table, KnownLensIndex.from_table(lenses))
    df, spark_funnel = negatives_on_spark(spark, paths, lenses)
    remote = df.toArrow().cast(NEGATIVE_SCHEMA)
    spark.catalog.clearCache()
    assert local.num_rows > 100
    assert remote.sort_by("object_id").equals(local.cast(NEGATIVE_SCHEMA).sort_by("object_id"))
    assert spark_funnel == funnel
    pos_local, _ = crossmatch_positives(table, lenses)
    pos_spark, _ = positives_on_spark(spark, paths, lenses)
    assert pos_local.num_rows > 50
    assert pos_spark.sort_by("object_id").equals(pos_local.sort_by("object_id"))
