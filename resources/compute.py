"""Compute: the device for simulation, training and scoring (DHS_DEVICE: auto | cpu | cuda) and
the catalog stage's Spark session."""


import dagster as dg
from dagster_pyspark.resources import LazyPySparkResource, spark_session_from_config


class ComputeResource(dg.ConfigurableResource):
    """``device`` is auto (CUDA when present), cpu or cuda; ``profile`` is demo or full."""

    device: str = "auto"
    profile: str = "demo"

    def torch_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"DHS_DEVICE={self.device!r}: expected auto, cpu or cuda")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("DHS_DEVICE=cuda but torch sees no CUDA device")
        return self.device


def spark_log_file() -> str:
    """Where the catalog stage's Spark logs go: $DHS_SPARK_LOG, else <DAGSTER_HOME>/logs/spark.log
    (DAGSTER_HOME defaults to ./.dagster_home)."""
    import os

    home = os.environ.get("DAGSTER_HOME") or os.path.abspath(".dagster_home")
    return os.environ.get("DHS_SPARK_LOG") or os.path.join(home, "logs", "spark.log")


class QuietPySparkResource(LazyPySparkResource):
    """The lazily started Spark session of the catalog stage, on a Java it finds (a system JDK
    17+, else the packaged one), logging at WARN to :func:`spark_log_file` instead of the terminal."""

    def _init_session(self) -> None:
        if self._spark_session is not None:
            return
        from darkhaloscope.catalog.spark_env import ensure_java, jvm_output_to, logging_conf

        ensure_java()
        log = spark_log_file()
        conf = {**self.spark_config, **logging_conf(log)}
        with jvm_output_to(log):
            self._spark_session = spark_session_from_config(conf)
