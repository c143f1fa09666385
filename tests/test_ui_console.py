"""A quiet console: the UI (``make ui``: ``dg dev -w workspace.yaml``) starts without a warning."""

import os

import pytest

from tests.support.dagster_ui import DagsterDev


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_ui_starts_without_a_warning(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env.update(DHS_LAKE=str(tmp_path / "lake"), DHS_MOCK_DIR=str(tmp_path / "mock"))
    with DagsterDev(tmp_path / "home", env, tmp_path / "dg-dev.log") as ui:
        log = ui.startup_log
    assert "warning" not in log.lower(), log[-3000:]
