"""Operations: alerts on failed checks and failed runs, the ``alerts`` table, and runs whose
process was killed.

Alerts (Dagster OSS has no built-in check alerting). Two delivery paths share one de-duplication
log in the lake (``ops/alert_log``):

* ``alert_sensor`` runs under the daemon every 30 s. Its cursor is the event-log storage id of
  the last terminal run-status event it processed; each tick it reads the runs that finished
  since (success, failure or cancellation), turns their failed check evaluations (ERROR and WARN)
  and their run failure into :class:`~lake_platform.alerts.Alert` objects and delivers them.
* ``dhs materialize`` runs without the daemon and calls :func:`deliver_run_alerts` after each run.

Because an alert's dedup key depends only on (kind, asset, check, partition, run id) and both
paths consult the same log, neither sends what the other already sent; both also retry the
alerts a sink has not taken yet (the backlog, see ``lake_platform.alerts``).

``ops/alerts`` is written by alert delivery, not by a run, so it is an external asset (an
``AssetSpec``) whose materializations are reported as runless events each time delivery adds rows
(:func:`report_alerts_table`); its contract is checked by a standalone asset check that reads the
published table.

Killed runs. A run killed with SIGKILL (or whose machine lost power) never reports its end, so
Dagster keeps it STARTED and its concurrency slots (pools ``gpu`` and ``spark``) claimed; the
open-source run launcher has no health check for it. Every run records the process ids that
execute it (the run worker's "Started process for run (pid)" and the executor's "Executing steps
in process (pid)" engine events); :func:`reap_dead_runs` marks a STARTING/STARTED/CANCELING run of
this host failed when none of those processes is alive, and frees its slots. Its staging area then
belongs to a dead run and is swept by the next run (``LakeResource.stage``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import dagster as dg
from dagster import DagsterEventType

from darkhaloscope.errors import InputError
from io_managers.parquet import column_schema
from lake_platform import audits as au
from lake_platform.alerts import Alert, AlertSinks, DeliveryOutcome, deliver, iso_utc, redact
from lake_platform.lake import host_tag
from lake_platform.staging import process_alive
from resources import LakeResource
from resources.alert_sinks import AlertSinksResource
from table_registry import ALERTS

from .shared.publish import OWNERS

DEFAULT_WEBSERVER_URL = "http://127.0.0.1:3000"
_TERMINAL = (DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED)
_RUN_EVENTS = {
    DagsterEventType.ASSET_CHECK_EVALUATION,
    DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
    DagsterEventType.STEP_FAILURE,
    DagsterEventType.RUN_FAILURE,
}
_MAX_TEXT = 2000  # characters of an error message kept in an alert (stack traces are in the UI)


def run_url(run_id: str) -> str:
    """Link to a run in the Dagster UI: ``{DAGSTER_WEBSERVER_URL or http://127.0.0.1:3000}/runs/<run_id>``."""
    base = os.environ.get("DAGSTER_WEBSERVER_URL") or DEFAULT_WEBSERVER_URL
    return f"{base.rstrip('/')}/runs/{run_id}"


def _metadata_to_json(metadata: Any) -> dict:
    """Dagster MetadataValues -> plain JSON values (redacted by Alert)."""
    out = {}
    for k, v in (metadata or {}).items():
        raw = getattr(v, "value", v)
        try:
            json.dumps(raw, allow_nan=False)
        except (TypeError, ValueError):
            raw = str(raw)  # tables, schemas, NaN floats: keep a readable form rather than drop them
        out[str(k)] = raw
    return out


def _error_text(err: Any) -> str:
    """The error's message followed by its causes' (Dagster wraps user errors: the cause says what broke)."""
    parts = []
    while err is not None and len(parts) < 5:
        parts.append(err.message.strip())
        err = err.cause or err.context
    return " <- caused by: ".join(parts)


def _alerts_for_run(instance: dg.DagsterInstance, run_id: str) -> list[Alert]:
    run = instance.get_run_by_id(run_id)
    if run is None:
        raise InputError(f"run {run_id!r} is not in the Dagster instance")
    url = run_url(run_id)
    run_partition = run.tags.get("dagster/partition")
    alerts: list[Alert] = []
    step_assets: dict[str, set[str]] = {}
    step_errors: dict[str, str] = {}
    step_classes: dict[str, str | None] = {}
    failure_entry = None
    for entry in instance.all_logs(run_id, of_type=_RUN_EVENTS):
        ev = entry.dagster_event
        if ev is None:
            continue
        etype = ev.event_type
        if etype == DagsterEventType.ASSET_MATERIALIZATION_PLANNED:
            if ev.step_key:
                step_assets.setdefault(ev.step_key, set()).add(ev.event_specific_data.asset_key.to_user_string())
        elif etype == DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluation = ev.event_specific_data
            if evaluation.passed:
                continue
            alerts.append(
                Alert(
                    kind="check_failed",
                    asset=evaluation.asset_key.to_user_string(),
                    check=evaluation.check_name,
                    partition=evaluation.partition or run_partition,
                    severity=evaluation.severity.value,
                    description=(evaluation.description or f"asset check {evaluation.check_name!r} did not pass")[
                        :_MAX_TEXT
                    ],
                    metadata=dict(_metadata_to_json(evaluation.metadata), blocking=bool(evaluation.blocking)),
                    run_id=run_id,
                    run_url=url,
                    created_at=iso_utc(entry.timestamp),
                )
            )
        elif etype == DagsterEventType.STEP_FAILURE:
            err = getattr(ev.event_specific_data, "error", None)
            step_errors[ev.step_key or "?"] = (_error_text(err) if err else entry.user_message or "")[:_MAX_TEXT]
            step_classes[ev.step_key or "?"] = getattr(err, "cls_name", None) if err else None
        elif etype == DagsterEventType.RUN_FAILURE:
            failure_entry = entry
    # A run that failed only because blocking checks failed is one incident: the check alerts say it.
    # (BlockingAuditFailed: a blocking audit failed on staged data; see lens_assets.shared.publish)
    only_blocking_checks = bool(step_classes) and all(
        c in ("DagsterAssetCheckFailedError", "BlockingAuditFailed") for c in step_classes.values()
    )
    if failure_entry is not None and not (
        only_blocking_checks and any(a.kind == "check_failed" and a.severity == "ERROR" for a in alerts)
    ):
        failed_assets = sorted({a for s in step_errors for a in step_assets.get(s, {s})})
        err = getattr(failure_entry.dagster_event.event_specific_data, "error", None)
        detail = "; ".join(f"{s}: {m}" for s, m in sorted(step_errors.items())) or (err.message.strip() if err else "")
        alerts.append(
            Alert(
                kind="run_failed",
                asset=",".join(failed_assets) or run.job_name,
                check=None,
                partition=run_partition,
                severity="ERROR",
                description=f"{failure_entry.user_message or 'run failed'} {detail}".strip()[:_MAX_TEXT],
                metadata={
                    "job_name": run.job_name,
                    "failed_steps": sorted(step_errors),
                    "failure_reason": run.tags.get("dagster/failure_reason"),
                },
                run_id=run_id,
                run_url=url,
                created_at=iso_utc(failure_entry.timestamp),
            )
        )
    return alerts


def _parse_cursor(cursor: str | None) -> tuple[int, list[dict]]:
    """(after_storage_id, alert-log entries not yet recorded) of a sensor cursor."""
    if not cursor:
        return 0, []
    try:
        doc = json.loads(cursor)
        value, unrecorded = doc["after_storage_id"], doc.get("unrecorded", [])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f'alert sensor cursor {cursor!r} is not of the form {{"after_storage_id": N}}') from exc
    if not isinstance(value, int) or value < 0:
        raise InputError(f"alert sensor cursor {cursor!r}: after_storage_id must be a non-negative integer")
    if not isinstance(unrecorded, list) or not all(isinstance(e, dict) and "dedup_key" in e for e in unrecorded):
        raise InputError(f"alert sensor cursor {cursor!r}: unrecorded must be a list of alert-log entries")
    return value, unrecorded


def collect_alerts(
    instance: dg.DagsterInstance, run_id: str | None = None, since_cursor: str | None = None, limit: int = 200
) -> tuple[list[Alert], str | None]:
    """Alerts for failed checks (ERROR and WARN) and failed runs, and the cursor to pass next time.

    With ``run_id``: the alerts of that run only; the cursor is returned unchanged. Otherwise:
    every run that reached a terminal state (success, failure, cancellation) after
    ``since_cursor`` (``None`` = the whole history), at most ``limit`` status events per kind per
    call; the returned cursor (``{"after_storage_id": N}``) never skips an unprocessed event.
    Metadata and descriptions are redacted.
    """
    if run_id is not None:
        return _alerts_for_run(instance, run_id), since_cursor
    after, _ = _parse_cursor(since_cursor)
    found: list[tuple[int, str]] = []
    horizon: int | None = None  # with a truncated page, events past its end wait for the next call
    for etype in _TERMINAL:
        res = instance.fetch_run_status_changes(
            dg.RunStatusChangeRecordsFilter(event_type=etype, after_storage_id=after), limit=limit, ascending=True
        )
        found += [(r.storage_id, r.run_id) for r in res.records]
        if res.has_more and res.records:
            last = res.records[-1].storage_id
            horizon = last if horizon is None else min(horizon, last)
    if horizon is not None:
        found = [f for f in found if f[0] <= horizon]
    alerts: list[Alert] = []
    seen_runs: set[str] = set()
    for _, rid in sorted(found):
        if rid not in seen_runs:
            seen_runs.add(rid)
            alerts += _alerts_for_run(instance, rid)
    new_after = max([after] + [sid for sid, _ in found])
    return alerts, json.dumps({"after_storage_id": new_after})


def deliver_run_alerts(instance: dg.DagsterInstance, run_id: str, sinks: AlertSinks) -> list[DeliveryOutcome]:
    """Deliver the alerts of one finished run, and retry the backlog (used by ``dhs materialize``,
    which has no daemon). ``sinks`` is ``AlertSinksResource(...).build_sinks()``. Returns the
    outcomes of the alerts handled (empty when everything was already delivered)."""
    alerts, _ = collect_alerts(instance, run_id=run_id)
    return deliver(alerts, sinks)


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Sends failed asset checks (ERROR and WARN) and failed runs to the alert sinks, and retries "
    "undelivered ones.",
)
def alert_sensor(context: dg.SensorEvaluationContext, alert_sinks: AlertSinksResource) -> dg.SkipReason:
    """Each tick: the alerts of runs finished since the cursor, plus the backlog, delivered once each.

    The cursor always moves past the runs it read. Entries the alert log could not take (an
    unreachable lake) travel in the cursor, at most ``max_backlog`` of them, and are written to
    the log (and sent to the sinks they still owe) on a later tick, so the webhook and Slack are
    not sent the same alert again while the lake is down.
    """
    _, carried = _parse_cursor(context.cursor)
    alerts, cursor = collect_alerts(context.instance, since_cursor=context.cursor)
    sinks = alert_sinks.build_sinks()
    outcomes = deliver(alerts, sinks, carried=carried)
    # every carried entry is either in the log already or among the outcomes
    unrecorded = [dict(o.entry) for o in outcomes if not o.recorded and sinks.log is not None][-sinks.max_backlog :]
    context.update_cursor(json.dumps(dict(json.loads(cursor), unrecorded=unrecorded)))
    report_alerts_table(context.instance, alert_sinks.lake(), sum(1 for o in outcomes if o.recorded))
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        context.log.error(redact(f"alert {o.alert.dedup_key} not delivered to {sorted(o.errors)}"))
    return dg.SkipReason(
        f"{len(alerts)} alert(s) seen, {len(outcomes)} handled, {len(failed)} with a delivery failure, "
        f"{len(unrecorded)} waiting for the alert log (see ops/alerts)"
    )


#: Run tag naming the host whose process executes the run (set by ``dhs``; runs launched by the
#: local run launcher without it run on this host).
HOST_TAG = "dhs/host"
_ACTIVE = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def run_pids(instance: dg.DagsterInstance, run_id: str) -> list[int]:
    """Process ids recorded in a run's engine events."""
    pids = []
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        data = entry.dagster_event.event_specific_data if entry.dagster_event else None
        pid = (getattr(data, "metadata", None) or {}).get("pid")
        if pid is not None:
            pids.append(int(getattr(pid, "value", pid)))
    return sorted(set(pids))


def reap_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark this host's active runs failed when every process that executed them is gone; returns
    their run ids. Runs with no recorded process yet are left to Dagster's start timeout."""
    here = host_tag()
    reaped = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=_ACTIVE)):
        if run.tags.get(HOST_TAG, here) != here:
            continue
        pids = run_pids(instance, run.run_id)
        if not pids or any(process_alive(p) for p in pids):
            continue
        instance.report_run_failed(
            run, message=f"Marked failed: the process(es) {pids} that executed this run on {here} are gone (killed)"
        )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        reaped.append(run.run_id)
    return reaped


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Marks runs whose processes were killed as failed and frees their concurrency slots.",
)
def dead_run_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    reaped = reap_dead_runs(context.instance)
    for run_id in reaped:
        context.log.warning(f"run {run_id} marked failed: its processes are gone")
    return dg.SkipReason(f"{len(reaped)} dead run(s) marked failed")


ALERTS_KEY = dg.AssetKey(list(ALERTS.key))

alerts = dg.AssetSpec(
    ALERTS_KEY,
    group_name=ALERTS.group,
    kinds={"parquet"},
    owners=OWNERS,
    description=f"{ALERTS.description}; written by alert delivery (alert_sensor, dhs), rebuilt from "
    "ops/alerts.files/alerts.jsonl.",
    metadata={"dagster/column_schema": column_schema(ALERTS.contract)},
)


@dg.asset_check(asset=ALERTS_KEY, name=ALERTS.contract_audit.name, description=ALERTS.contract_audit.description)
def alerts_contract(lake: LakeResource) -> dg.AssetCheckResult:
    outcome = au.contract_audit(ALERTS.contract_audit, lake.lake().dataset(*ALERTS.key), ALERTS.contract)
    return dg.AssetCheckResult(
        passed=outcome.passed,
        metadata={"problems": dg.MetadataValue.json(outcome.metadata["problems"])},
        description=outcome.description,
    )


def report_alerts_table(instance: dg.DagsterInstance, lake, n_new: int) -> None:
    """Record a runless materialization of ``ops/alerts`` after delivery added ``n_new`` rows."""
    if n_new <= 0:
        return
    uri = lake.table(*ALERTS_KEY.path).location()
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key=ALERTS_KEY,
            metadata={
                "dagster/uri": dg.MetadataValue.path(uri),
                "new_alerts": n_new,
                "dagster/row_count": dg.MetadataValue.int(lake.count_rows(*ALERTS_KEY.path)),
            },
        )
    )


ops_defs = dg.Definitions(assets=[alerts], asset_checks=[alerts_contract], sensors=[alert_sensor, dead_run_sensor])
