"""The negatives' Spark job launched through Dagster Pipes with its context and messages on S3
(dagster-aws' PipesS3ContextInjector / PipesS3MessageReader, the loopback S3 server): the job
stages the partitions, the asset audits and publishes them — the same bytes as the local path."""

from __future__ import annotations

import dagster as dg
import pytest

from io_managers import LakeIOManager
from lake_platform.lake import PART_FILE, Lake
from resources import ComputeResource, LakeResource
from resources.compute import CatalogLaunchResource, QuietPySparkResource
from resources.config import spark_config
from table_registry import NEGATIVES, SELECTION_FUNNEL
from tests.spark_fixtures import known_lenses_table, synthetic_sweeps
from tests.support.s3_server import fresh_bucket
from tests.support.wap import run_assets

pytestmark = [pytest.mark.s3, pytest.mark.spark]
NAMES = ["sweep-150p000-155p005.fits", "sweep-155p000-160p005.fits"]


def _lake(root) -> Lake:
    lake = Lake(str(root))
    for i, name in enumerate(NAMES):
        table = synthetic_sweeps(2000, key=name, ra0=150.0 + 5 * i, sweep_file=name)
        lake.write_table("survey", "sweeps", table, partition={"sweep_file": name})
    lake.write_table("survey", "known_lenses", known_lenses_table([{"ra": 150.5, "dec": 0.5}]))
    return lake


def _negatives(lake: Lake, launch: CatalogLaunchResource):
    resource = LakeResource(uri=lake.uri)
    resources = {
        "lake": resource,
        "io_manager": LakeIOManager(uri=resource.uri),
        "compute": ComputeResource(profile="demo"),
        "pyspark": QuietPySparkResource(spark_config=spark_config("local[2]")),
        "catalog_launch": launch,
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sweep_file", NAMES)
    return run_assets([NEGATIVES.key, SELECTION_FUNNEL.key], resources, instance, partition_range=(NAMES[0], NAMES[-1]))


@pytest.mark.timeout(600)
def test_negatives_job_launched_through_pipes_on_s3_publishes_what_the_local_path_publishes(
    tmp_path, s3_server, spark, monkeypatch
):
    bucket = fresh_bucket(s3_server)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)  # the job's boto3 client finds the server here
    local, remote = _lake(tmp_path / "local"), _lake(tmp_path / "remote")
    _negatives(local, CatalogLaunchResource(mode="local"))
    result = _negatives(
        remote, CatalogLaunchResource(mode="pipes-s3", bucket=bucket, s3_endpoint=s3_server.endpoint_url)
    )

    assert {e.check_name: e.passed for e in result.get_asset_check_evaluations()} == {
        "negatives_contract": True,
        "negatives_exclusion": True,
        "negatives_pass_cuts": True,
        "selection_funnel_contract": True,
    }
    for name in NAMES:
        part = f"catalog/negatives/sweep_file={name}/{PART_FILE}"
        assert (tmp_path / "remote" / part).read_bytes() == (tmp_path / "local" / part).read_bytes()
    funnel = remote.read_table("catalog", "selection_funnel")
    assert funnel.drop_columns(["selection"]).equals(
        local.read_table("catalog", "selection_funnel").drop_columns(["selection"])
    )
    assert remote.read_table("catalog", "negatives").num_rows > 0
    # the messages travelled through the bucket (the context object is removed after the run)
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert any(k.endswith(".json") for k in keys), keys
