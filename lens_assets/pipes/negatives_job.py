"""The negatives' Spark job as a standalone process, launched through Dagster Pipes with its
context and messages exchanged through an S3 bucket (``CatalogLaunchResource(mode="pipes-s3")``).

It imports only ``dagster_pipes`` and the library, so it runs wherever the package is installed —
a Spark driver on EMR launched by ``dagster_aws.pipes.PipesEMRClient``, a container, or (here
and in the tests) a local subprocess. It commits each sweep file's negatives partition to the
run's staging area in the lake and reports the funnel back; the asset audits the staged partitions
and publishes them, exactly as on the local path.

    python -m lens_assets.pipes.negatives_job      (started by the Pipes client, never by hand)
"""

from __future__ import annotations


def main() -> None:
    import boto3
    from dagster_pipes import PipesS3ContextLoader, PipesS3MessageWriter, open_dagster_pipes

    from darkhaloscope.catalog.cuts import NegativeSelectionConfig
    from darkhaloscope.catalog.spark import negatives_on_spark
    from darkhaloscope.catalog.spark_conf import spark_session
    from darkhaloscope.catalog.spark_env import ensure_java, jvm_output_to, logging_conf
    from lakehouse.lake import Lake
    from table_registry.tables import KNOWN_LENSES, NEGATIVES, SWEEPS

    client = boto3.client("s3")  # endpoint and credentials from the environment (AWS_ENDPOINT_URL_S3, ...)
    with open_dagster_pipes(
        context_loader=PipesS3ContextLoader(client), message_writer=PipesS3MessageWriter(client, interval=1)
    ) as pipes:
        x = pipes.extras
        lake = Lake(x["lake_uri"], s3_endpoint=x.get("s3_endpoint"))
        ensure_java()
        with jvm_output_to(x["spark_log"]):
            spark = spark_session(x.get("spark_master"), conf=logging_conf(x["spark_log"]))
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
