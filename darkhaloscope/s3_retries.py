"""How often the AWS SDK inside pyarrow retried this process's S3 requests.

The lake's S3 requests are retried by one layer, the AWS SDK's standard retry strategy inside
pyarrow (:mod:`darkhaloscope.retry`), and pyarrow reports nothing about it: its retry strategies
expose only ``max_attempts``. The SDK's client-side monitoring does report it: when
``AWS_CSM_ENABLED`` is set as the SDK initialises, every API call sends one UDP datagram (JSON) to
``AWS_CSM_HOST:AWS_CSM_PORT`` whose ``AttemptCount`` says how many attempts it took (the SDK's
``DefaultMonitoring``; the same fields as botocore's CSM).

:func:`start` listens on a loopback port and initialises pyarrow's S3 support with monitoring on;
the variables are set only while it does, so child processes and boto3 clients made later are not
monitored. :func:`retries` is the number of retries of this process's S3 calls so far. S3 support
is initialised once per process: where something initialised it before :func:`start` ran,
nothing is reported and :func:`monitored` stays False. The lake calls :func:`start` before it
creates an S3 file system, in the driver and in every Spark task that unpickles a lake.
"""

from __future__ import annotations

import json
import os
import select
import socket
import threading

#: Only the C++ SDK (pyarrow) is counted; a stray boto3 client that inherited the variables is not.
_SDK_AGENT = "aws-sdk-cpp"
_ENV = ("AWS_CSM_ENABLED", "AWS_CSM_HOST", "AWS_CSM_PORT", "AWS_CSM_CLIENT_ID")


class _Monitor:
    """The loopback socket the SDK reports to and the counts read from it."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.calls = self.retries = 0
        threading.Thread(target=self._listen, name="dhs-s3-retry-monitor", daemon=True).start()

    def _listen(self) -> None:
        while True:
            select.select([self.sock], [], [])
            self.drain()

    def drain(self) -> None:
        """Count every datagram waiting on the socket (the SDK sends each before its call returns)."""
        with self.lock:
            while True:
                try:
                    data = self.sock.recv(65536)
                except BlockingIOError:
                    return
                event = json.loads(data)
                if event.get("Type") == "ApiCall" and str(event.get("UserAgent", "")).startswith(_SDK_AGENT):
                    self.calls += 1
                    self.retries += max(0, int(event.get("AttemptCount", 1)) - 1)


_monitor: _Monitor | None = None
_start_lock = threading.Lock()


def start() -> None:
    """Initialise pyarrow's S3 support with the SDK's monitoring reporting to this process (once)."""
    global _monitor
    with _start_lock:
        if _monitor is not None:
            return
        import pyarrow.fs as pafs

        monitor = _Monitor()
        saved = {k: os.environ.get(k) for k in _ENV}
        os.environ.update(
            AWS_CSM_ENABLED="true", AWS_CSM_HOST="127.0.0.1", AWS_CSM_PORT=str(monitor.port), AWS_CSM_CLIENT_ID="dhs"
        )
        try:
            pafs.ensure_s3_initialized()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        _monitor = monitor


def monitored() -> bool:
    """True once the SDK has reported a call to this process (its S3 support was initialised by
    :func:`start`, and it has made a call)."""
    if _monitor is None:
        return False
    _monitor.drain()
    return _monitor.calls > 0


def retries() -> int:
    """Retries of this process's S3 calls so far (0 when unmonitored)."""
    if _monitor is None:
        return 0
    _monitor.drain()
    return _monitor.retries
