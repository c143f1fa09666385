"""Compute: the device for simulation, training and scoring (DHS_DEVICE: auto | cpu | cuda), where
the search scores (DHS_SEARCH_LAUNCH: local | spark | pipes) and the Spark session of the catalog
stage and of the search's Spark launch."""

import dagster as dg
from dagster_aws.s3 import S3Resource
from dagster_pyspark.resources import LazyPySparkResource

from darkhaloscope.errors import InputError

from .settings import SEARCH_LAUNCHES, default, setting, spark_env


class ComputeResource(dg.ConfigurableResource):
    """``device`` is auto (CUDA when present), cpu or cuda; ``profile`` is demo or full;
    ``search_launch`` is the default launch of ``search_scores`` (one of ``SEARCH_LAUNCHES``);
    ``selection_proposal`` names the injections' proposal (``lensing.priors.PROPOSALS``) and
    ``selection_population`` is a user population's Parquet file ("" for none); ``lens_model`` is
    the injections' lens, profile names joined by + (``lensing.profiles``); ``source_model`` and
    ``nuisance`` the injections' source light and imaging nuisance (``lensing.source_models``,
    ``lensing.nuisance``), in the selection bank and the training stream alike."""

    device: str = default("DHS_DEVICE")
    profile: str = default("DHS_PROFILE")
    search_launch: str = default("DHS_SEARCH_LAUNCH")
    selection_proposal: str = default("DHS_SELECTION_PROPOSAL")
    selection_population: str = default("DHS_SELECTION_POPULATION")
    lens_model: str = default("DHS_LENS_MODEL")
    source_model: str = default("DHS_SOURCE_MODEL")
    nuisance: str = default("DHS_NUISANCE")

    def lens_profiles(self) -> tuple[str, ...]:
        """``lens_model`` as a tuple of profile names."""
        return tuple(self.lens_model.split("+"))

    def torch_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"DHS_DEVICE={self.device!r}: expected auto, cpu or cuda")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("DHS_DEVICE=cuda but torch sees no CUDA device")
        return self.device

    def launch_of_search(self, requested: str = "") -> str:
        """The launch of a search run: ``requested`` (the run's config) or else ``search_launch``."""
        launch = requested or self.search_launch
        if launch not in SEARCH_LAUNCHES:
            raise InputError(
                f"search launch {launch!r} (search_scores config 'launch' or DHS_SEARCH_LAUNCH): "
                f"expected one of {', '.join(SEARCH_LAUNCHES)}"
            )
        return launch


def spark_log_file() -> str:
    """Where the catalog stage's Spark logs go: $DHS_SPARK_LOG, else <DAGSTER_HOME>/logs/spark.log
    (DAGSTER_HOME defaults to ./.dagster_home)."""
    import os

    home = os.environ.get("DAGSTER_HOME") or os.path.abspath(".dagster_home")
    return setting("DHS_SPARK_LOG") or os.path.join(home, "logs", "spark.log")


class QuietPySparkResource(LazyPySparkResource):
    """The lazily started Spark session of the catalog stage, on a Java it finds (a system JDK
    17+, else the packaged one), logging at WARN to :func:`spark_log_file` instead of the terminal.
    ``spark_config`` holds the settings that override everything else; the rest (the master, the
    driver's address, the operator's files, a bounded start on a cluster) is the library's
    ``spark_conf.spark_session``."""

    def _init_session(self) -> None:
        if self._spark_session is not None:
            return
        from darkhaloscope.catalog.spark_conf import spark_session
        from darkhaloscope.catalog.spark_env import ensure_java, jvm_output_to, logging_conf

        ensure_java()
        log = spark_log_file()
        conf = {**self.spark_config, **logging_conf(log)}
        with jvm_output_to(log):
            self._spark_session = spark_session(conf=conf, env=spark_env())


class CatalogLaunchResource(dg.ConfigurableResource):
    """Where the negatives' Spark job runs: ``local`` (in the asset's process, on the ``pyspark``
    session; the default) or ``pipes-s3``: a separate process launched through Dagster Pipes
    whose context and messages travel through the S3 bucket ``bucket`` (dagster-aws'
    ``PipesS3ContextInjector`` / ``PipesS3MessageReader``) — the exchange a remote launcher such as
    ``PipesEMRClient`` uses; here the process is started by ``resources.launch.PipesLaunchClient``,
    locally or, with ``launch_prefix`` (``DHS_LAUNCH_PREFIX``), on another host (``timeout_s``,
    ``python``: ``DHS_LAUNCH_TIMEOUT_S``, ``DHS_LAUNCH_PYTHON``)."""

    mode: str = default("DHS_CATALOG_LAUNCH")
    bucket: str = ""
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    launch_prefix: str = ""
    timeout_s: float = float(default("DHS_LAUNCH_TIMEOUT_S"))
    python: str = ""

    def s3_client(self):
        """boto3 S3 client from dagster-aws' S3Resource (credentials from the AWS SDK's default
        chain: environment, profile, instance role)."""
        return S3Resource(endpoint_url=self.s3_endpoint, region_name=self.s3_region).get_client()

    def run_negatives(
        self, context, lake_uri: str, s3_endpoint: str | None, staging: str, names: list[str], selection: dict
    ) -> dict:
        """Launch :mod:`lens_assets.pipes.negatives_job`; returns the funnel it reported."""
        import sys

        from dagster_aws.pipes import PipesS3ContextInjector, PipesS3MessageReader

        from darkhaloscope.catalog.spark_conf import spark_master

        from .launch import PipesLaunchClient

        if self.mode != "pipes-s3" or not self.bucket:
            raise ValueError(
                f"catalog launch mode {self.mode!r} with bucket {self.bucket!r}: expected 'pipes-s3' and a bucket"
            )
        client = self.s3_client()
        pipes = PipesLaunchClient(
            launch_prefix=self.launch_prefix,
            bucket=self.bucket,
            s3_endpoint=self.s3_endpoint,
            timeout_s=self.timeout_s,
            python=self.python,
            context_injector=PipesS3ContextInjector(bucket=self.bucket, client=client, key_prefix="pipes/"),
            message_reader=PipesS3MessageReader(bucket=self.bucket, client=client, interval=1),
        )
        extras = {
            "lake_uri": lake_uri,
            "s3_endpoint": s3_endpoint,
            "staging": staging,
            "names": names,
            "selection": selection,
            "spark_master": spark_master(spark_env()),
            "spark_log": None if pipes.remote else spark_log_file(),  # another host logs to its own folder
        }
        done = pipes.run(
            context=context, command=[sys.executable, "-m", "lens_assets.pipes.negatives_job"], extras=extras
        )
        return reported(done, "funnel", "the negatives job")


def reported(done: dg.PipesClientCompletedInvocation, key: str, who: str):
    """The value of the one custom Pipes message ``{key: value}`` that a launched process reported."""
    values = [m[key] for m in done.get_custom_messages() if isinstance(m, dict) and key in m]
    if len(values) != 1:
        raise RuntimeError(f"{who} reported {len(values)} {key!r} messages (expected one)")
    return values[0]
