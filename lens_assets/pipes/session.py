"""The Pipes session of a launched step, however it was launched: the one ``open_dagster_pipes``
of the trainer, the search worker and the negatives job. Imports only ``dagster_pipes`` (and
boto3 when the exchange is on S3), never dagster.

- Launched locally (``PipesSubprocessClient``, no ``DHS_LAUNCH_PREFIX``): the bootstrap is in
  environment variables, the context and messages in temporary files of this host — or, for the
  ``pipes-s3`` catalog launch, in the S3 bucket.
- Launched through ``DHS_LAUNCH_PREFIX`` (``ssh gpu01``, ``srun ... --``; the orchestrator's
  ``resources.launch.PipesLaunchClient``): the bootstrap is on the command line
  (``--dagster-pipes-context``, ``--dagster-pipes-messages``: ``PipesCliArgsParamsLoader``),
  the context and messages (with this process's stdout and stderr) in the bucket
  ``DHS_PIPES_BUCKET``; the S3 endpoint comes on the command line too (:data:`S3_ENDPOINT_ARG`),
  the credentials from this host's own AWS credentials chain (its environment, ``~/.aws``, an
  instance role).

Where the context and messages travel follows from the bootstrap parameters themselves: a
``bucket`` in them means S3.
"""

from __future__ import annotations

import argparse
import sys

#: The command-line flag that carries the S3 endpoint (``DHS_S3_ENDPOINT``) to a launched step.
S3_ENDPOINT_ARG = "--dhs-s3-endpoint"
#: Seconds between the uploads of message chunks to S3 (and the orchestrator's reads).
MESSAGE_INTERVAL_S = 1.0


def s3_client(endpoint: str | None = None):
    """A boto3 S3 client on ``endpoint`` (None: the AWS default) with bounded waits (5 s to connect,
    30 s to read, 3 attempts), credentials from the AWS SDK's default chain."""
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 3, "mode": "standard"})
    return boto3.session.Session().client("s3", endpoint_url=endpoint or None, config=config)


def _endpoint(argv: list[str]) -> str | None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(S3_ENDPOINT_ARG, dest="endpoint", default=None)
    return parser.parse_known_args(argv)[0].endpoint


def is_launched_step() -> bool:
    """True in a process launched through Dagster Pipes (either bootstrap)."""
    from dagster_pipes import PipesCliArgsParamsLoader, PipesEnvVarParamsLoader

    return PipesCliArgsParamsLoader().is_dagster_pipes_process() or PipesEnvVarParamsLoader().is_dagster_pipes_process()


def open_step_pipes():
    """``open_dagster_pipes`` with the params loader, context loader and message writer of the
    step's bootstrap (module doc)."""
    from dagster_pipes import (
        PipesCliArgsParamsLoader,
        PipesDefaultContextLoader,
        PipesDefaultMessageWriter,
        PipesEnvVarParamsLoader,
        PipesS3ContextLoader,
        PipesS3MessageWriter,
        open_dagster_pipes,
    )

    cli = PipesCliArgsParamsLoader()
    loader = cli if cli.is_dagster_pipes_process() else PipesEnvVarParamsLoader()
    on_s3 = "bucket" in loader.load_context_params(), "bucket" in loader.load_messages_params()
    client = s3_client(_endpoint(sys.argv[1:])) if any(on_s3) else None
    return open_dagster_pipes(
        params_loader=loader,
        context_loader=PipesS3ContextLoader(client) if on_s3[0] else PipesDefaultContextLoader(),
        message_writer=(
            PipesS3MessageWriter(client, interval=MESSAGE_INTERVAL_S) if on_s3[1] else PipesDefaultMessageWriter()
        ),
    )
