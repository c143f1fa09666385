"""One asset through the UI path against the CLI, on an existing lake and Dagster instance.

UI path: `dagster dev` (webserver + daemon) is started first (not timed); the run is launched over
GraphQL exactly as the UI's "Materialize" button does (queued run coordinator, the default run
launcher's run worker process, which executes the asset's step and its checks), timed from the
launch request until the run reports SUCCESS. CLI path: the wall time of
`dhs materialize ASSET` (a fresh process: imports, planning, the in-process run). Both materialize
the same asset on the same lake and instance, alternately, ``--repeat`` times each.

    python -m benchmarks.bench_ui_launch --lake /path/lakehouse --home /path/dagster_home --asset cutout_validation
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.dagster_ui import DagsterDev

REPO = Path(__file__).resolve().parent.parent


def cli_seconds(asset: str, env: dict) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "dhs.main", "materialize", asset], cwd=REPO, env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return time.perf_counter() - t0


def ui_seconds(ui: DagsterDev, key: list[str]) -> float:
    t0 = time.perf_counter()
    status = ui.wait(ui.launch([key]), timeout_s=900)
    if status != "SUCCESS":
        raise RuntimeError(f"UI run ended {status}")
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lake", required=True)
    p.add_argument("--home", required=True, help="DAGSTER_HOME where the asset's upstream is recorded")
    p.add_argument("--asset", default="cutout_validation")
    p.add_argument("--key", default="imaging/cutout_validation")
    p.add_argument("--mock-dir", default=".dhs_mock")
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    env = dict(os.environ, DHS_LAKE=a.lake, DAGSTER_HOME=a.home, DHS_MOCK_DIR=a.mock_dir, PYTHONWARNINGS="ignore")
    cli, ui_times = [], []
    with DagsterDev(Path(a.home), env, Path(a.home) / "bench-dagster-dev.log") as ui:
        for _ in range(a.repeat):
            cli.append(cli_seconds(a.asset, env))
            ui_times.append(ui_seconds(ui, a.key.split("/")))
    print(
        json.dumps(
            {
                "bench": "ui_launch",
                "asset": a.key,
                "cli_s": [round(x, 1) for x in cli],
                "ui_s": [round(x, 1) for x in ui_times],
                "ui_over_cli": round(min(ui_times) / min(cli), 2),
                "load_avg": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
