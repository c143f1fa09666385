"""`dagster dev` (webserver + daemon) in a subprocess, and runs launched through its GraphQL API the
way the UI launches them (used by the daemon tests and benchmarks/bench_ui_launch.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
LOCATION = "dark_halo_scope"

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message stack }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
  }
}"""
RUN_STATUS = "query Status($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DagsterDev:
    """``with DagsterDev(home, env) as ui:`` runs ``dg dev -w workspace.yaml`` (as ``make ui`` does) on
    a free loopback port with DAGSTER_HOME=``home`` (its settings written from the repository's
    dhs/dagster.yaml and ``env``, as ``make ui`` does) until the block ends; ``ui.launch(...)``
    starts a run like the UI's "Materialize" button; ``ui.startup_log`` is what it printed until the
    code location loaded."""

    def __init__(self, home: Path, env: dict, log: Path, timeout_s: float = 180.0):
        self.home, self.log_path, self.timeout_s = Path(home), Path(log), timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/graphql"
        self.env = {**env, "DAGSTER_HOME": str(self.home)}

    def __enter__(self) -> "DagsterDev":
        import dagster as dg

        from dhs.instance import apply_pool_limits, start_run_retry_cursors, write_instance_settings

        write_instance_settings(self.home, self.env)  # as `make ui` (`dhs instance`) does
        with dg.DagsterInstance.from_config(str(self.home)) as instance:
            apply_pool_limits(instance, self.env)
            start_run_retry_cursors(instance)
        dg_cli = Path(sys.executable).with_name("dg")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(dg_cli), "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(self.port)],
            cwd=REPO,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dg dev exited: {self.log_path.read_text()[-3000:]}")
            try:
                if self._loaded():
                    self.log.flush()
                    self.startup_log = self.log_path.read_text()
                    return self
            except requests.RequestException:
                pass
            time.sleep(1.0)
        raise TimeoutError(
            f"dg dev did not load the code location in {self.timeout_s}s: {self.log_path.read_text()[-3000:]}"
        )

    def __exit__(self, *exc) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.log.close()

    def query(self, text: str, variables: dict | None = None) -> dict:
        r = requests.post(self.url, json={"query": text, "variables": variables or {}}, timeout=60)
        r.raise_for_status()
        body = r.json()
        if body.get("errors"):
            raise RuntimeError(body["errors"])
        return body["data"]

    def _loaded(self) -> bool:
        data = self.query("{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }")
        entries = data["workspaceOrError"]["locationEntries"]
        return any(e["name"] == LOCATION and e["loadStatus"] == "LOADED" for e in entries)

    def launch(self, asset_paths: list[list[str]], partition: str | None = None) -> str:
        """Launch the implicit asset job for ``asset_paths`` (and their checks); returns the run id."""
        params = {
            "selector": {
                "repositoryLocationName": LOCATION,
                "repositoryName": "__repository__",
                "jobName": "__ASSET_JOB",
                "assetSelection": [{"path": p} for p in asset_paths],
            },
            "mode": "default",
            "runConfigData": {},
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}] if partition else []},
        }
        out = self.query(LAUNCH, {"params": params})["launchRun"]
        if out["__typename"] != "LaunchRunSuccess":
            raise RuntimeError(f"launch failed: {out}")
        return out["run"]["runId"]

    def wait(self, run_id: str, timeout_s: float = 180.0) -> str:
        """Block until the run ends; returns its status (SUCCESS, FAILURE, CANCELED)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.query(RUN_STATUS, {"id": run_id})["runOrError"]["status"]
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                return status
            time.sleep(0.5)
        raise TimeoutError(f"run {run_id} did not finish in {timeout_s}s")
