"""``dhs backfill``: a survey-wide backfill submitted to a running Dagster webserver, run by its daemon.

The command only submits (GraphQL ``launchPartitionBackfill``, what the UI's "Materialize all
partitions" sends) and, with ``--wait``, follows the backfill until it ends; the daemon plans the
runs — each asset's partitions in runs as its backfill policy says, upstream partitions before
downstream ones — launches them through the run queue (``DHS_MAX_CONCURRENT_RUNS``, the pools'
limits) and retries dead runs, so closing the terminal stops nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import requests

from darkhaloscope.errors import InputError

LAUNCH = """
mutation Backfill($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on PartitionSetNotFoundError { message }
    ... on InvalidStepError { invalidStepKey }
    ... on InvalidOutputError { invalidOutputName }
    ... on UnauthorizedError { message }
  }
}"""
STATUS = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status numPartitions }
    ... on PythonError { message }
    ... on BackfillNotFoundError { message }
  }
}"""
#: Backfill statuses after which nothing more runs.
DONE = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}
SUCCEEDED = {"COMPLETED", "COMPLETED_SUCCESS"}


@dataclass
class DagsterWebserver:
    """The GraphQL endpoint of a running ``dagster dev`` / ``dagster-webserver`` (``url``: its base
    URL, e.g. http://127.0.0.1:3000); requests time out after ``timeout_s``."""

    url: str
    timeout_s: float = 60.0

    def query(self, text: str, variables: dict) -> dict:
        endpoint = self.url.rstrip("/") + "/graphql"
        try:
            r = requests.post(endpoint, json={"query": text, "variables": variables}, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise InputError(
                f"Dagster webserver at {self.url}: {exc} (is `make ui` or the webserver running?)"
            ) from exc
        try:
            body = r.json()
        except ValueError:
            body = {}
        if body.get("errors"):  # GraphQL's own errors (answered with HTTP 200 or 500)
            raise InputError(f"Dagster webserver at {self.url} refused the request: {body['errors']}")
        if body.get("data") is None:
            raise InputError(f"Dagster webserver at {self.url}: HTTP {r.status_code} {r.text[:500]}")
        return body["data"]  # a PythonError in it (answered with HTTP 500) is the caller's to report

    def launch_backfill(self, asset_paths: list[list[str]], title: str) -> str:
        """Submit a backfill of every partition of the assets ``asset_paths``; returns its id."""
        params = {"assetSelection": [{"path": p} for p in asset_paths], "allPartitions": True, "title": title}
        out = self.query(LAUNCH, {"params": params})["launchPartitionBackfill"]
        if out["__typename"] != "LaunchBackfillSuccess":
            raise InputError(f"the backfill was refused: {out}")
        return out["backfillId"]

    def backfill_status(self, backfill_id: str) -> str:
        out = self.query(STATUS, {"id": backfill_id})["partitionBackfillOrError"]
        if out["__typename"] != "PartitionBackfill":
            raise InputError(f"backfill {backfill_id}: {out}")
        return out["status"]

    def wait(self, backfill_id: str, timeout_s: float, poll_s: float = 5.0, say=None) -> str:
        """Block until the backfill ends (or ``timeout_s`` passes: TimeoutError); its last status."""
        deadline, last = time.monotonic() + timeout_s, None
        while True:
            status = self.backfill_status(backfill_id)
            if status != last and say is not None:
                say(f"backfill {backfill_id}: {status}")
            last = status
            if status in DONE:
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"backfill {backfill_id} still {status} after {timeout_s:.0f}s (it goes on)")
            time.sleep(poll_s)
