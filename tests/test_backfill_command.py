"""``dhs backfill`` without a webserver to submit to: it fails at once naming the address, and
submits nothing (the daemon path itself is tests/test_daemon_automation.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.dagster_ui import free_port

REPO = Path(__file__).resolve().parents[1]


def test_backfill_without_a_webserver_names_it_and_fails(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = dict(os.environ, DAGSTER_HOME=str(tmp_path / "home"), DHS_LAKE=str(tmp_path / "lake"), DHS_DAGSTER_URL=url)
    done = subprocess.run(
        [sys.executable, "-m", "dhs.main", "backfill", "sweeps", "search_scores"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: Dagster webserver at {url}" in done.stderr
    assert "submitted" not in done.stdout
