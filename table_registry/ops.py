"""The ops stage's tables (``lens_assets/ops.py``): each with its contract and audits."""

from __future__ import annotations

from lake_platform.alert_log import ALERTS_SCHEMA
from lake_platform.audits import Audit
from lake_platform.contracts import Contract

from .columns import from_schema, optional
from .table import Table

ALERTS_CONTRACT = Audit("alerts_contract", "one row per delivered alert with kind, asset and severity")

ALERTS = Table(
    "ops",
    "alerts",
    "every delivered alert (failed checks and failed runs) with the sinks it reached",
    Contract(
        table="alerts",
        columns=optional(
            from_schema(
                ALERTS_SCHEMA,
                {
                    "dedup_key": ("", "the alert's identity: one alert per failed check or run"),
                    "kind": ("", "check_failed or run_failed"),
                    "asset": ("", "asset key of the failed check or run"),
                    "check": ("", "name of the failed check (empty for a run)"),
                    "partition": ("", "partition key, empty for an unpartitioned asset"),
                    "severity": ("", "ERROR (a blocking check, a failed run) or WARN"),
                    "description": ("", "what failed, in one line (secrets redacted)"),
                    "metadata_json": ("", "the check's metadata (JSON, secrets redacted)"),
                    "run_id": ("", "Dagster run id"),
                    "run_url": ("", "link to the run in the Dagster UI"),
                    "created_at": ("", "when the alert was raised (ISO 8601, UTC)"),
                    "delivered_to": ("", "sinks that took the alert (log, webhook, slack)"),
                    "delivery_errors_json": ("", "each owed sink's last delivery error (JSON)"),
                    "status": ("", "done, pending (a sink still owes it) or given_up"),
                    "attempts": ("", "delivery rounds tried"),
                    "last_attempt_at": ("", "when delivery was last tried (ISO 8601, UTC)"),
                },
            ),
            "dedup_key",
            "kind",
            "asset",
            "severity",
            "run_id",
        ),
        key=("dedup_key",),
        allowed_values={"severity": ("ERROR", "WARN")},
    ),
    None,
    (ALERTS_CONTRACT,),
)

#: The ops stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (ALERTS,)
