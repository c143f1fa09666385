"""Resources built from the environment (all optional; the defaults give the embedded demo)."""

import os

from darkhaloscope.errors import InputError
from mock_survey.paths import DEFAULT_MOCK_DIR

from .compute import ComputeResource
from .imaging import ImagingResource
from .lake import LakeResource
from .survey import SurveyResource


def build_resources() -> dict:
    """Resource instances from DHS_* environment variables."""
    import dagster as dg

    from .compute import CatalogLaunchResource, QuietPySparkResource

    s3_endpoint = os.environ.get("DHS_S3_ENDPOINT") or None
    profile = os.environ.get("DHS_PROFILE", "demo")
    resources = {
        "lake": LakeResource(uri=os.environ.get("DHS_LAKE", "./lakehouse"), s3_endpoint=s3_endpoint),
        "survey": SurveyResource(
            survey=os.environ.get("DHS_SURVEY", "mock"),
            profile=profile,
            mock_dir=os.environ.get("DHS_MOCK_DIR", DEFAULT_MOCK_DIR),
            mock_seed=mock_seed_from_env(),
            s3_endpoint=s3_endpoint,
        ),
        "imaging": ImagingResource(cutout_source=os.environ.get("DHS_CUTOUT_SOURCE", "auto")),
        "compute": ComputeResource(
            device=os.environ.get("DHS_DEVICE", "auto"),
            profile=profile,
            search_launch=os.environ.get("DHS_SEARCH_LAUNCH", "local"),
        ),
        "pyspark": QuietPySparkResource(spark_config=spark_config(os.environ.get("DHS_SPARK_MASTER", "local[*]"))),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    }
    resources["catalog_launch"] = CatalogLaunchResource(
        mode=os.environ.get("DHS_CATALOG_LAUNCH", "local"),
        bucket=os.environ.get("DHS_PIPES_BUCKET", ""),
        s3_endpoint=s3_endpoint,
    )
    from io_managers import LakeIOManager

    from .alert_sinks import AlertSinksResource

    resources["alert_sinks"] = AlertSinksResource()

    resources["io_manager"] = LakeIOManager(**resources["lake"].model_dump())
    return resources


def mock_seed_from_env() -> int:
    """DHS_MOCK_SEED (default 0): the mock survey's seed, an integer >= 0."""
    raw = os.environ.get("DHS_MOCK_SEED", "0").strip() or "0"
    if not raw.isdigit():
        raise InputError(f"DHS_MOCK_SEED must be an integer >= 0, got {raw!r}")
    return int(raw)


def spark_config(master: str) -> dict:
    """The catalog stage's Spark settings (one definition, in the library) plus the app name."""
    from darkhaloscope.catalog.spark import spark_settings

    return {**spark_settings(master), "spark.app.name": "darkhaloscope"}
