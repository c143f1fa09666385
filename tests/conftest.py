"""Shared fixtures: real-data location, the loopback S3 server, lakes on local disk and on S3."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.s3_server import fresh_bucket, s3_server  # noqa: F401  (fixture re-export)

REPO = Path(__file__).resolve().parent.parent


def real_data_dir() -> Path:
    """Folder of the real survey files (DHS_REAL_DATA or ../shared/data/real beside the repo)."""
    return Path(os.environ.get("DHS_REAL_DATA", REPO.parent / "shared" / "data" / "real"))


@pytest.fixture
def real_data() -> Path:
    d = real_data_dir()
    if not d.is_dir():
        pytest.skip(f"real survey files not found at {d} (set DHS_REAL_DATA to the shared/data/real folder)")
    return d


@pytest.fixture(params=["local", "s3"])
def lake(request, tmp_path):
    """The same tests on a local lake and on an S3 lake served by moto on 127.0.0.1."""
    from darkhaloscope.lake import Lake

    if request.param == "local":
        return Lake(str(tmp_path / "lake"))
    server = request.getfixturevalue("s3_server")
    return Lake(f"s3://{fresh_bucket(server)}/lake", s3_endpoint=server.endpoint_url)


def pytest_sessionfinish(session, exitstatus):
    """Finalise pyarrow's S3 subsystem before interpreter exit (apache/arrow#35876)."""
    import pyarrow.fs

    try:
        pyarrow.fs.finalize_s3()
    except Exception as exc:  # finalising twice or without S3 use raises; report, never hide
        print(f"pyarrow finalize_s3: {exc}")
