"""What a step launched through Dagster Pipes and its launcher (``resources/launch.py``) share: the
command-line flag carrying the S3 endpoint, the interval of the message chunks and the S3 client
both sides build. It imports no Dagster, so the launched step (``lens_assets.pipes.session``) uses
it too."""

from __future__ import annotations

from .settings import setting

#: The command-line flag that carries the S3 endpoint (``DHS_S3_ENDPOINT``) to a launched step.
S3_ENDPOINT_ARG = "--dhs-s3-endpoint"
#: Seconds between the uploads of message chunks to S3 (and the orchestrator's reads).
MESSAGE_INTERVAL_S = 1.0


def s3_client(endpoint: str | None = None):
    """A boto3 S3 client on ``endpoint`` (None: the AWS default) with the lake's bounded waits
    (seconds to connect: ``DHS_S3_CONNECT_TIMEOUT_S``; seconds to wait for an answer:
    ``DHS_S3_REQUEST_TIMEOUT_S``; 3 attempts), credentials from the AWS SDK's default chain."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=float(setting("DHS_S3_CONNECT_TIMEOUT_S")),
        read_timeout=float(setting("DHS_S3_REQUEST_TIMEOUT_S")),
        retries={"max_attempts": 3, "mode": "standard"},
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint or None, config=config)
