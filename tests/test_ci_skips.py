"""With CI set, a skipped test fails the run; on a user's machine it skips and says why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SKIPPING_TESTS = """
import pytest

def test_skips():
    pytest.skip("no widget here")

@pytest.mark.skipif(True, reason="marked off")
def test_marked():
    pass

def test_real_file():
    from tests.conftest import require_real_file
    require_real_file("no-such-file.fits")

def test_browser():
    from tests.conftest import require_chromium, CHROMIUM
    import tests.conftest as c
    c.CHROMIUM = CHROMIUM.with_name("no-such-browser")
    require_chromium()

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False
"""


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_skipping.py").write_text(SKIPPING_TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "DHS_REAL_DATA")}
    env.update(PYTHONPATH=str(REPO), DHS_REAL_DATA=str(tmp_path / "no-real-data"))
    if ci is not None:
        env["CI"] = ci
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rA",
        "-p",
        "tests.conftest",
        "-p",
        "no:cacheprovider",
        str(tmp_path / "test_skipping.py"),
    ]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_skips_fail_in_ci(tmp_path):
    for ci in ("true", "1", "TRUE"):
        out = _run(tmp_path, ci)
        assert out.returncode == 1, out.stdout
        assert "3 failed, 1 xfailed, 1 error" in out.stdout, out.stdout
        assert "skipped in CI" in out.stdout and "no-such-file.fits not found" in out.stdout
        assert "the browser check did not run" in out.stdout


def test_skips_say_why_on_a_users_machine(tmp_path):
    for ci in (None, "false", ""):
        out = _run(tmp_path, ci)
        assert out.returncode == 0, out.stdout
        assert "4 skipped, 1 xfailed" in out.stdout, out.stdout
        for reason in (
            "no widget here",
            "marked off",
            "no-such-file.fits not found (set DHS_REAL_DATA",
            "no-such-browser is absent, so the browser check did not run",
        ):
            assert reason in out.stdout
