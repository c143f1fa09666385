"""The Pipes session of a launched step, however it was launched: the one ``open_dagster_pipes``
of the trainer, the search worker and the negatives job. Imports only ``dagster_pipes``, what it
shares with its launcher (``resources.pipes_transport``) and boto3 when the exchange is on S3,
never dagster.

- Launched locally (``PipesSubprocessClient``, no ``DHS_LAUNCH_PREFIX``): the bootstrap is in
  environment variables, the context and messages in temporary files of this host — or, for the
  ``pipes-s3`` catalog launch, in the S3 bucket.
- Launched through ``DHS_LAUNCH_PREFIX`` (``ssh gpu01``, ``srun ... --``; the orchestrator's
  ``resources.launch.PipesLaunchClient``): the bootstrap is on the command line
  (``--dagster-pipes-context``, ``--dagster-pipes-messages``: ``PipesCliArgsParamsLoader``),
  the context and messages (with this process's stdout and stderr) in the bucket
  ``DHS_PIPES_BUCKET``; the S3 endpoint comes on the command line too
  (:data:`~resources.pipes_transport.S3_ENDPOINT_ARG`),
  the credentials from this host's own AWS credentials chain (its environment, ``~/.aws``, an
  instance role).

Where the context and messages travel follows from the bootstrap parameters themselves: a
``bucket`` in them means S3.
"""

from __future__ import annotations

import argparse
import sys

from resources.pipes_transport import MESSAGE_INTERVAL_S, S3_ENDPOINT_ARG, s3_client


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
