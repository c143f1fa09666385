"""Shared fixtures: real-data location, the loopback S3 server, lakes on local disk and on S3.

Tests that need something outside the repository (the real survey files, Chromium) skip on a
user's machine with the reason, and fail in CI (``CI`` set to a true value, as CI services do):
a suite that skipped them there would pass without having checked anything. Every other skip is
a failure in CI too (``pytest_runtest_makereport`` below).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.spark_fixtures import spark  # noqa: F401  (fixture, for every test module)
from tests.support.chromium import CHROMIUM
from tests.support.netns import netns_host  # noqa: F401  (fixture: one other host for the session)
from tests.support.s3_server import fresh_bucket, s3_server  # noqa: F401  (fixture, for every test module)
from tests.support.spark_cluster import spark_cluster  # noqa: F401  (fixture, on the session's other host)

REPO = Path(__file__).resolve().parent.parent


#: Values of the CI variable that mean "running in CI" (GitHub Actions, GitLab and most services set CI=true).
CI_TRUE = ("1", "true", "yes", "on")


def in_ci() -> bool:
    """True when the CI environment variable is set to a true value."""
    return os.environ.get("CI", "").strip().lower() in CI_TRUE


def skip_or_fail(reason: str):
    """Skip with ``reason`` on a user's machine; fail in CI, where a skip would pass unseen."""
    if in_ci():
        pytest.fail(f"{reason} (CI={os.environ.get('CI')!r}: CI must run this test, not skip it)", pytrace=False)
    pytest.skip(reason)


def real_data_dir() -> Path:
    """Folder of the real survey files (DHS_REAL_DATA or ../shared/data/real beside the repo)."""
    return Path(os.environ.get("DHS_REAL_DATA", REPO.parent / "shared" / "data" / "real"))


def require_real_file(name: str) -> Path:
    """Path of the real survey file ``name``; skips (fails in CI) when it is absent."""
    path = real_data_dir() / name
    if not path.is_file():
        skip_or_fail(f"real survey file {path} not found (set DHS_REAL_DATA to the shared/data/real folder)")
    return path


def require_chromium() -> Path:
    """Path of headless Chromium; skips (fails in CI) when it is absent."""
    if not CHROMIUM.exists():
        skip_or_fail(f"{CHROMIUM} is absent, so the browser check did not run (install it: make chromium, as root)")
    return CHROMIUM


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI, a test that skipped for any reason (importorskip, skipif) is reported as failed."""
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (CI={os.environ.get('CI')!r}), which must run every test: {reason}"


@pytest.fixture(params=["local", "s3"])
def lake(request, tmp_path):
    """The same tests on a local lake and on an S3 lake served by moto on 127.0.0.1."""
    from lake_platform.lake import Lake

    if request.param == "local":
        return Lake(str(tmp_path / "lake"))
    server = request.getfixturevalue("s3_server")
    return Lake(f"s3://{fresh_bucket(server)}/lake", s3_endpoint=server.endpoint_url)


@pytest.fixture(scope="session", autouse=True)
def _stop_spark_at_end():
    """Stop whatever SparkContext the tests left running (one per process) when the session ends."""
    yield
    import sys

    if "pyspark" in sys.modules:
        from pyspark import SparkContext

        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()


def pytest_sessionfinish(session, exitstatus):
    """Finalise pyarrow's S3 subsystem before interpreter exit (apache/arrow#35876)."""
    import pyarrow.fs

    try:
        pyarrow.fs.finalize_s3()
    except Exception as exc:  # finalising twice or without S3 use raises; report, never hide
        print(f"pyarrow finalize_s3: {exc}")
