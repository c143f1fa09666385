"""Resources built from the environment (all optional; the defaults give the embedded demo)."""

from .compute import ComputeResource
from .imaging import ImagingResource
from .lake import LakeResource
from .settings import setting, validate
from .survey import SurveyResource


def build_resources() -> dict:
    """Resource instances from the DHS_* environment variables (``resources/settings.py``), each
    validated first: a bad value raises InputError naming the variable."""
    from .alert_sinks import AlertSinksResource
    from .compute import CatalogLaunchResource, QuietPySparkResource
    from .launch import PipesLaunchClient

    validate()
    s3_endpoint = setting("DHS_S3_ENDPOINT")
    profile = setting("DHS_PROFILE")
    lake = LakeResource(
        uri=setting("DHS_LAKE"),
        s3_endpoint=s3_endpoint,
        rejected_keep_days=float(setting("DHS_REJECTED_KEEP_DAYS")),
    )
    launch = {
        "launch_prefix": setting("DHS_LAUNCH_PREFIX") or "",
        "bucket": setting("DHS_PIPES_BUCKET") or "",
        "s3_endpoint": s3_endpoint,
        "timeout_s": float(setting("DHS_LAUNCH_TIMEOUT_S")),
        "python": setting("DHS_LAUNCH_PYTHON") or "",
    }
    return {
        "lake": lake,
        "survey": SurveyResource(
            survey=setting("DHS_SURVEY"),
            profile=profile,
            mock_dir=setting("DHS_MOCK_DIR"),
            mock_seed=int(setting("DHS_MOCK_SEED")),
            mock_sweep_files=_optional_int("DHS_MOCK_SWEEP_FILES"),
            mock_rows_per_file=_optional_int("DHS_MOCK_ROWS_PER_FILE"),
            mock_hidden_lenses=_optional_int("DHS_MOCK_HIDDEN_LENSES"),
            s3_endpoint=s3_endpoint,
            s3_anonymous=setting("DHS_SURVEY_S3_ANONYMOUS") == "true",
            known_lens_theta_e=setting("DHS_KNOWN_LENS_THETA_E"),
        ),
        "imaging": ImagingResource(cutout_source=setting("DHS_CUTOUT_SOURCE")),
        "compute": ComputeResource(
            device=setting("DHS_DEVICE"),
            profile=profile,
            search_launch=setting("DHS_SEARCH_LAUNCH"),
            selection_proposal=setting("DHS_SELECTION_PROPOSAL"),
            selection_population=setting("DHS_SELECTION_POPULATION") or "",
            lens_model=setting("DHS_LENS_MODEL"),
            source_model=setting("DHS_SOURCE_MODEL"),
            nuisance=setting("DHS_NUISANCE"),
        ),
        "pyspark": QuietPySparkResource(spark_config=spark_config()),
        "pipes_subprocess_client": PipesLaunchClient(**launch),
        "catalog_launch": CatalogLaunchResource(mode=setting("DHS_CATALOG_LAUNCH"), **launch),
        "alert_sinks": AlertSinksResource(),
    }


def _optional_int(name: str) -> int | None:
    value = setting(name)
    return None if value is None else int(value)


def spark_config(master: str | None = None) -> dict:
    """The settings the Spark session must have whatever the environment says: the app name and,
    when given, the master. Everything else (``DHS_SPARK_*``, the operator's properties files, our
    defaults) is resolved by the library when the session starts (``darkhaloscope.catalog.spark_conf``),
    so a bad setting fails the step that needs Spark, not the loading of the definitions."""
    return {"spark.app.name": "darkhaloscope", **({"spark.master": master} if master else {})}
