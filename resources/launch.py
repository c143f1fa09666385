"""How steps launched through Dagster Pipes start: the trainer (``lens_finder``), the search worker
(``search_scores`` with ``launch: pipes``) and the negatives job (``DHS_CATALOG_LAUNCH=pipes-s3``).

Without ``DHS_LAUNCH_PREFIX`` a step is a local subprocess (``PipesSubprocessClient``: bootstrap in
environment variables, context and messages in temporary files of this host, or in the bucket for
the ``pipes-s3`` catalog launch). With a prefix (``ssh gpu01``, ``srun --gres=gpu:1 --``) the
step runs wherever the prefix puts it and shares nothing with this host but the lake and the
bucket ``DHS_PIPES_BUCKET``: the bootstrap goes on the command line (ssh forwards no environment),
the context and the messages (the step's logs, stdout and stderr, results) through the bucket
(dagster-aws' ``PipesS3ContextInjector`` and ``PipesS3MessageReader``), the S3 endpoint on the
command line too (``lens_assets.pipes.session``); credentials are the far host's own.

A prefixed launch fails within bounded time, naming what failed and publishing nothing: at once
when the launch exits non-zero (the prefix's own error, an unreachable host, the step's exception),
and after ``DHS_LAUNCH_TIMEOUT_S`` when the step has not opened its Pipes session by then (a step
that never starts, or cannot write its messages to the bucket): its processes are then stopped.
These failures are not retried by the asset's retry policy; the next run starts afresh.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence

import dagster as dg
from dagster_aws.pipes import PipesS3ContextInjector, PipesS3MessageReader

from darkhaloscope.errors import InputError

from .pipes_transport import MESSAGE_INTERVAL_S, S3_ENDPOINT_ARG, s3_client
from .settings import default

#: Key prefix of the context objects in the bucket (removed after each run).
CONTEXT_PREFIX = "pipes/"
#: Lines of a launch's own output kept for its failure message.
TAIL_LINES = 40
#: ``NAME=value`` words of a prefix whose value a message never shows (credentials given inline).
_SECRET_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(SECRET|TOKEN|PASSWORD|KEY)[A-Za-z0-9_]*)=.+$", re.IGNORECASE)


def shown(prefix: Sequence[str]) -> str:
    """The prefix as a message shows it: the values of credentials given inline (``env
    AWS_SECRET_ACCESS_KEY=…``) redacted."""
    return shlex.join(_SECRET_NAME.sub(r"\1=REDACTED", word) for word in prefix)


class PipesLaunchClient(dg.PipesSubprocessClient):
    """``PipesSubprocessClient`` that launches through ``launch_prefix`` when one is set (module
    doc). ``bucket``: the bucket of the context and messages; ``s3_endpoint``: this host's S3
    endpoint (``DHS_S3_ENDPOINT``), passed to the step too; ``timeout_s``: seconds the step may
    take to open its Pipes session; ``python``: the interpreter on the far side of the prefix
    (default: the command's own, this interpreter's path). Other arguments are
    ``PipesSubprocessClient``'s, used as they are without a prefix."""

    def __init__(
        self,
        launch_prefix: str = "",
        bucket: str = "",
        s3_endpoint: str | None = None,
        timeout_s: float = float(default("DHS_LAUNCH_TIMEOUT_S")),
        python: str = "",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.prefix = shlex.split(launch_prefix)
        self.bucket, self.s3_endpoint, self.timeout_s, self.python = bucket, s3_endpoint, float(timeout_s), python
        if self.prefix and not bucket:
            raise InputError(
                f"DHS_LAUNCH_PREFIX={launch_prefix!r} needs DHS_PIPES_BUCKET (the bucket of the Pipes context and "
                "messages of a step on another host)"
            )

    @property
    def remote(self) -> bool:
        """True when steps launch through a prefix (they share only the lake and the bucket)."""
        return bool(self.prefix)

    def run(  # ty: ignore[invalid-method-override]
        self,
        *,
        context: dg.OpExecutionContext | dg.AssetExecutionContext,
        extras: Mapping | None = None,
        command: str | Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> dg.PipesClientCompletedInvocation:
        """Run ``command`` (a list of words) in a Pipes session: as ``PipesSubprocessClient`` does
        without a prefix, else through the prefix (module doc)."""
        if not self.prefix:
            return super().run(context=context, extras=extras, command=command, env=env, cwd=cwd)
        client = s3_client(self.s3_endpoint)
        injector = PipesS3ContextInjector(bucket=self.bucket, client=client, key_prefix=CONTEXT_PREFIX)
        reader = PipesS3MessageReader(
            bucket=self.bucket, client=client, interval=MESSAGE_INTERVAL_S, include_stdio_in_messages=True
        )
        try:
            client.head_bucket(Bucket=self.bucket)
        except Exception as exc:  # botocore's ClientError or a connection error: either names the cause
            raise self._failure(
                f"cannot reach the bucket DHS_PIPES_BUCKET={self.bucket!r} of the steps launched through "
                f"DHS_LAUNCH_PREFIX={shown(self.prefix)!r}: {exc}"
            ) from exc
        with dg.open_pipes_session(
            context=context, context_injector=injector, message_reader=reader, extras=extras
        ) as s:
            argv = self._argv(command, s.get_bootstrap_cli_arguments())
            where = f"s3://{self.bucket}/{s.message_reader_params['key_prefix']}/"
            launch = _Launch(argv, cwd or self.cwd, {**os.environ, **self.env, **(env or {})}, self.prefix)
            try:
                problem = launch.wait(lambda: s.message_handler.received_opened_message, self.timeout_s)
            except dg.DagsterExecutionInterruptedError:
                context.log.info("[pipes] execution interrupted, stopping the launched step")
                launch.stop(self.termination_timeout_seconds)
                raise
            if problem is not None:
                raise self._failure(f"{launch.describe()} {problem} (its Pipes messages go to {where}){launch.tail()}")
        if not s.message_handler.received_closed_message:
            state = "did not close" if s.message_handler.received_opened_message else "never opened"
            raise self._failure(
                f"{launch.describe()} exited with status 0 but its Pipes session {state}: its messages never "
                f"reached {where}{launch.tail()}"
            )
        return dg.PipesClientCompletedInvocation(s)

    def _argv(self, command: str | Sequence[str], bootstrap: Mapping[str, str]) -> list[str]:
        words = shlex.split(command) if isinstance(command, str) else list(command)
        if self.python:
            words[0] = self.python
        words += [w for pair in bootstrap.items() for w in pair]
        if self.s3_endpoint:
            words += [S3_ENDPOINT_ARG, self.s3_endpoint]
        # ssh joins its arguments into one line for the far shell: every word must pass it unchanged
        unsafe = [w for w in words if shlex.quote(w) != w]
        if unsafe:
            raise InputError(
                f"the command of a step launched through DHS_LAUNCH_PREFIX holds words a remote shell would change: "
                f"{unsafe[:3]} (set DHS_LAUNCH_PYTHON to a path without spaces or shell characters)"
            )
        return [*self.prefix, *words]

    @staticmethod
    def _failure(message: str) -> dg.Failure:
        """A failure the asset's retry policy leaves to the next run (a retry seconds later meets the
        same host, prefix and bucket)."""
        return dg.Failure(description=message, allow_retries=False)


class _Launch:
    """The process of a prefixed launch, in a session of its own (so that stopping it stops the
    prefix's processes too: ssh, srun, a shell), its output kept as a tail for a failure message
    and shown until the step opens its session (later output arrives through the Pipes messages)."""

    def __init__(self, argv: list[str], cwd: str | None, env: dict, prefix: list[str]):
        self.argv, self.prefix = argv, prefix
        self.lines: deque[str] = deque(maxlen=TAIL_LINES)
        self.opened = False
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.reader = threading.Thread(target=self._read, name="launch-output", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace")
            self.lines.append(line.rstrip("\n"))
            if not self.opened:
                sys.stderr.write(line)
        self.proc.stdout.close()

    def describe(self) -> str:
        words = self.argv[len(self.prefix) :]
        module = next((w for w, prev in zip(words[1:], words) if prev == "-m"), words[0])
        return f"the step {module} launched through DHS_LAUNCH_PREFIX={shown(self.prefix)!r}"

    def tail(self) -> str:
        self.reader.join(timeout=5)
        return "; its last output:\n" + "\n".join(self.lines) if self.lines else "; it wrote no output"

    def wait(self, opened, timeout_s: float) -> str | None:
        """Wait for the process to end; None when it exited 0, else what went wrong. ``opened()`` says
        whether the step has opened its session; the process is stopped when it has not after
        ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            self.opened = self.opened or opened()
            if not self.opened and time.monotonic() > deadline:
                self.stop()
                return (
                    f"did not open its Pipes session within {timeout_s:g} s (DHS_LAUNCH_TIMEOUT_S): it never started "
                    "or cannot write to the bucket; it was stopped"
                )
            time.sleep(0.2)
        status = self.proc.returncode
        if status != 0:
            if opened():
                return f"exited with status {status} after opening its Pipes session (its error is in the run's events)"
            return f"exited with status {status} before it opened its Pipes session"
        return None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the launch's process group, then SIGKILL whatever of it is left after the launch
        ended or ``grace_s`` passed."""
        _signal_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass  # killed below
        _signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the group has ended: what we wanted
