"""A real S3 protocol server on loopback for tests: moto's ThreadedMotoServer.

``mock_aws`` cannot be used: pyarrow's C++ AWS SDK talks HTTP directly and bypasses botocore,
so the tests run moto as a server on 127.0.0.1 (a free port) for the whole session.

Use it from a test module with ``from tests.support.s3_server import s3_server, fresh_bucket``
(pytest finds the fixture through the import), then ``bucket = fresh_bucket(s3_server)`` for a
bucket of the test's own (buckets are never shared between tests, so nothing leaks across them).
"""

from __future__ import annotations

import itertools
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import pytest

# The environment the server and every client in the session use. AWS_EC2_METADATA_DISABLED
# stops the SDK probing instance metadata (multi-second hangs); us-east-1 avoids moto's
# location-constraint errors on CreateBucket.
TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
_counter = itertools.count()


@dataclass(frozen=True)
class S3Server:
    """Where the loopback S3 server listens."""

    host: str
    port: int
    bucket: str  # a bucket created at start (tests that need isolation use fresh_bucket)

    @property
    def endpoint_url(self) -> str:
        """``http://HOST:PORT`` (for boto3 and for ``Lake(..., s3_endpoint=...)``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def endpoint_override(self) -> str:
        """``HOST:PORT`` (for ``pyarrow.fs.S3FileSystem(endpoint_override=..., scheme='http')``)."""
        return f"{self.host}:{self.port}"

    def client(self, **kwargs):
        """A boto3 S3 client on this server (keys from the environment *now*, unless given)."""
        import boto3

        # A new Session each time: boto3's default session caches the first credentials it found,
        # which would hide a test's change of AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
        return boto3.session.Session().client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1", **kwargs)


@contextmanager
def running_s3_server(host: str = "127.0.0.1", bucket: str = "dhs-test") -> Iterator[S3Server]:
    """moto's S3 server on ``host``:<free port> with ``bucket`` created, for as long as the block
    runs; the environment holds :data:`TEST_ENV` meanwhile."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is needed for the loopback S3 server")
    mp = pytest.MonkeyPatch()
    for k, v in TEST_ENV.items():
        mp.setenv(k, v)
    # werkzeug logs every request at INFO even with verbose=False.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address=host, port=0, verbose=False)
    server.start()
    try:
        bound_host, port = server.get_host_and_port()
        info = S3Server(host=bound_host, port=port, bucket=bucket)
        info.client().create_bucket(Bucket=info.bucket)
        yield info
    finally:
        server.stop()
        mp.undo()


@pytest.fixture(scope="session")
def s3_server():
    """Start moto's S3 server on 127.0.0.1:<free port> for the session; yields an :class:`S3Server`."""
    with running_s3_server() as server:
        yield server


def fresh_bucket(server: S3Server, prefix: str = "dhs") -> str:
    """Create and return a new, empty bucket on ``server`` (unique within the session)."""
    name = f"{prefix}-{next(_counter):04d}"  # the server lives for one session: a counter is unique
    server.client().create_bucket(Bucket=name)
    return name


def list_keys(server: S3Server, bucket: str, **client_kwargs) -> dict[str, int]:
    """Every object of ``bucket`` as {key: size}, listed with boto3 straight from the server."""
    out: dict[str, int] = {}
    for page in server.client(**client_kwargs).get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = obj["Size"]
    return out
