"""On the embedded mock survey, the Spark path and the in-process path select the same rows."""

import dagster as dg
import pyarrow as pa
import pytest

import lens_assets.catalog as catalog
from darkhaloscope.catalog.crossmatch import crossmatch_positives
from darkhaloscope.catalog.cuts import NEGATIVE_SCHEMA, KnownLensIndex, recorded_selection, select_negatives
from darkhaloscope.catalog.spark import negatives_on_spark, positives_on_spark
from darkhaloscope.survey.known_lenses import load_known_lenses
from darkhaloscope.survey.sweeps import read_sweep
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lake_platform.staging import rejected
from lens_assets.ops import deliver_run_alerts
from mock_survey.survey import MockSurveyConfig, generate_mock_survey
from resources import ComputeResource, LakeResource
from resources.alert_sinks import AlertSinksResource
from resources.compute import QuietPySparkResource
from resources.config import spark_config
from table_registry import NEGATIVES, POSITIVES, SELECTION_FUNNEL, TRAINING_CATALOG, TRAINING_STRATA
from tests.support.wap import events, published_files, run_assets

pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def mock_lake(tmp_path_factory):
    """The demo mock survey ingested into a lake (sweeps partitions as the sweeps asset writes them)."""
    root = tmp_path_factory.mktemp("mock")
    manifest = generate_mock_survey(
        root / "survey", MockSurveyConfig(profile="demo", n_rows_per_file=4000, n_hidden_lenses=4)
    )
    lake = Lake(str(root / "lake"))
    for f in manifest.sweep_files:
        lake.write_table("survey", "sweeps", read_sweep(str(f)), partition={"sweep_file": f.name})
    table = pa.concat_tables([read_sweep(str(f)) for f in manifest.sweep_files])
    return lake, table, load_known_lenses()


def test_negatives_and_positives_agree_on_the_mock_survey(spark, mock_lake):
    lake, table, lenses = mock_lake
    local, funnel = select_negatives(table, KnownLensIndex.from_table(lenses))
    spark_funnel = negatives_on_spark(spark, lake.table("survey", "sweeps"), lenses, lake.table("catalog", "negatives"))
    remote = lake.read_table("catalog", "negatives").cast(NEGATIVE_SCHEMA)
    assert local.num_rows > 100
    assert remote.sort_by("object_id").equals(local.cast(NEGATIVE_SCHEMA).sort_by("object_id"))
    assert spark_funnel == funnel
    pos_local, _ = crossmatch_positives(table, lenses)
    pos_spark, _ = positives_on_spark(spark, lake.table("survey", "sweeps"), lenses)
    assert pos_local.num_rows > 50
    assert pos_spark.sort_by("object_id").equals(pos_local.sort_by("object_id"))


def _catalog_lake(source: Lake, lenses: pa.Table, root) -> tuple[Lake, dict, dg.DagsterInstance]:
    """A lake with the mock survey's sweeps and the known lenses published, and an instance with
    their partitions registered."""
    lake = Lake(str(root / "lake"))
    for part in source.partitions("survey", "sweeps"):
        lake.write_table("survey", "sweeps", source.read_table("survey", "sweeps", partition=part), partition=part)
    lake.write_table("survey", "known_lenses", lenses)
    resource = LakeResource(uri=lake.uri)
    resources = {
        "lake": resource,
        "io_manager": LakeIOManager(uri=resource.uri),
        "compute": ComputeResource(profile="demo"),
        "pyspark": QuietPySparkResource(spark_config=spark_config("local[2]")),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sweep_file", sorted(p["sweep_file"] for p in lake.partitions("survey", "sweeps")))
    return lake, resources, instance


def _all_sweeps(instance) -> tuple[str, str]:
    names = instance.get_dynamic_partitions("sweep_file")
    return names[0], names[-1]


def test_catalog_assets_materialize_with_their_checks(spark, mock_lake, tmp_path):
    """negatives (every partition in one run), positives and training_catalog on the mock survey,
    with a non-default selection: every audit passes in the asset's own step."""
    source, _, lenses = mock_lake
    lake, resources, instance = _catalog_lake(source, lenses, tmp_path)
    # a non-default selection: the checks must re-verify the selection that was run, not the defaults
    run_config = {"ops": {"negatives": {"config": {"exclusion_radius_arcsec": 5.0, "zmag_max": 19.5}}}}
    neg = run_assets(
        [NEGATIVES.key, SELECTION_FUNNEL.key],
        resources,
        instance,
        run_config=run_config,
        partition_range=_all_sweeps(instance),
    )
    rest = run_assets([POSITIVES.key, TRAINING_CATALOG.key, TRAINING_STRATA.key], resources, instance)
    assert recorded_selection(lake.read_table("catalog", "selection_funnel")).exclusion_radius_arcsec == 5.0
    assert max(lake.read_table("catalog", "negatives").column("mag_z").to_pylist()) < 19.5
    evaluations = neg.get_asset_check_evaluations() + rest.get_asset_check_evaluations()
    assert {e.check_name for e in evaluations} == {
        "negatives_contract",
        "negatives_exclusion",
        "negatives_pass_cuts",
        "selection_funnel_contract",
        "positives_contract",
        "training_catalog_contract",
        "splits_disjoint",
        "split_fractions",
        "strata_have_negatives",
        "training_strata_contract",
    }
    failed = {e.check_name: e.metadata for e in evaluations if not e.passed}
    assert not failed
    names = sorted(p["sweep_file"] for p in lake.partitions("survey", "sweeps"))
    assert sorted(p["sweep_file"] for p in lake.partitions("catalog", "negatives")) == names
    assert sorted(p["sweep_file"] for p in lake.partitions("catalog", "selection_funnel")) == names
    assert len(neg.get_asset_materialization_events()) == 2 * len(names)  # each table, each partition
    labels = lake.read_table("catalog", "training_catalog", columns=["label"]).column("label").to_pylist()
    assert labels.count(1) > 10 and labels.count(0) > 10


def test_a_negative_failing_a_cut_rejects_every_partition_of_the_run(spark, mock_lake, tmp_path, monkeypatch):
    """A bug that lets a negative with nobs_z = 1 through: negatives_pass_cuts fails on the staged
    partition; none of the run's partitions is published (the old ones stay byte for byte), the
    run fails once without retry and says where the rejected data is."""
    source, _, lenses = mock_lake
    lake, resources, instance = _catalog_lake(source, lenses, tmp_path)
    run_assets([NEGATIVES.key, SELECTION_FUNNEL.key], resources, instance, partition_range=_all_sweeps(instance))
    before = published_files(lake)
    real = catalog.negatives_on_spark

    def leaky(spark, sweeps, known, out, selection, *, names):
        funnel = real(spark, sweeps, known, out, selection, names=names)
        part = {"sweep_file": names[0]}
        staged = out.read(part)
        bad = staged.slice(0, 1)
        bad = bad.set_column(
            bad.schema.get_field_index("nobs_z"), "nobs_z", pa.array([1], bad.schema.field("nobs_z").type)
        )
        bad = bad.set_column(bad.schema.get_field_index("object_id"), "object_id", pa.array([-1], pa.int64()))
        out.write(pa.concat_tables([staged, bad.cast(staged.schema)]), partition=part)
        return funnel

    monkeypatch.setattr(catalog, "negatives_on_spark", leaky)
    result = run_assets(
        [NEGATIVES.key, SELECTION_FUNNEL.key],
        resources,
        instance,
        partition_range=_all_sweeps(instance),
        raise_on_error=False,
    )
    assert not result.success
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert not checks["negatives_pass_cuts"].passed and checks["negatives_contract"].passed
    assert "nobs" in str(checks["negatives_pass_cuts"].metadata["by_partition"].value)
    assert not events(result, "ASSET_MATERIALIZATION") and not events(result, "STEP_UP_FOR_RETRY")
    assert published_files(lake) == before
    failure = events(result, "STEP_FAILURE")[0].event_specific_data.error
    assert "negatives_pass_cuts" in failure.message and "_rejected" in failure.message
    kept = rejected(lake)
    assert sorted(k["table"] for k in kept) == ["catalog/negatives"] * 2 + ["catalog/selection_funnel"] * 2
    sinks = AlertSinksResource(lake_uri=lake.uri).build_sinks()
    sent = deliver_run_alerts(instance, result.run_id, sinks)
    assert [(o.alert.kind, o.alert.check) for o in sent] == [
        ("check_failed", "negatives_pass_cuts")
    ]  # one incident, one alert
    assert deliver_run_alerts(instance, result.run_id, sinks) == []
