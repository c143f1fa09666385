"""The negatives' Spark job as a standalone process, launched through Dagster Pipes with its
context and messages exchanged through an S3 bucket (``CatalogLaunchResource(mode="pipes-s3")``).

It imports only ``dagster_pipes``, the library, and the settings and the lake factory
(``resources.settings``, ``resources.storage``: no Dagster), so it runs wherever the package is
installed — a Spark driver on EMR launched by ``dagster_aws.pipes.PipesEMRClient``, another host through
``DHS_LAUNCH_PREFIX`` (``lens_assets.pipes.session``), a container, or (here and in the tests) a
local subprocess. It commits each sweep file's negatives partition to the run's staging area in
the lake and reports the funnel back; the asset audits the staged partitions and publishes them,
exactly as on the local path. Spark's logs go to the file ``spark_log`` of the extras, or, launched
on another host (no such file there), to ``dhs-spark.log`` in that host's temporary folder.

    python -m lens_assets.pipes.negatives_job      (started by the Pipes client, never by hand)
"""

from __future__ import annotations


def main() -> None:
    import os
    import tempfile

    from darkhaloscope.catalog.cuts import NegativeSelectionConfig
    from darkhaloscope.catalog.spark import negatives_on_spark
    from darkhaloscope.catalog.spark_conf import spark_session
    from darkhaloscope.catalog.spark_env import ensure_java, jvm_output_to, logging_conf
    from resources.settings import spark_env
    from resources.storage import open_lake
    from table_registry import KNOWN_LENSES, NEGATIVES, SWEEPS

    from .session import open_step_pipes

    with open_step_pipes() as pipes:
        x = pipes.extras
        lake = open_lake(x["lake_uri"], x.get("s3_endpoint"))
        ensure_java()
        log = x.get("spark_log") or os.path.join(tempfile.gettempdir(), "dhs-spark.log")
        with jvm_output_to(log):
            spark = spark_session(x.get("spark_master"), conf=logging_conf(log), env=spark_env())
        pipes.log.info(f"negatives of {len(x['names'])} sweep file(s) on {spark.sparkContext.master}")
        funnel = negatives_on_spark(
            spark,
            lake.table(*SWEEPS.key),
            lake.read_table(*KNOWN_LENSES.key),
            lake.subtree(x["staging"]).table(*NEGATIVES.key),
            NegativeSelectionConfig.from_dict(x["selection"]),
            names=x["names"],
        )
        pipes.report_custom_message({"funnel": funnel})


if __name__ == "__main__":
    main()
