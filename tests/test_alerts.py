"""Alerts on failed asset checks and runs, end to end: real Dagster runs, a real HTTP receiver.

A tiny asset carries a planted contract violation (a blocking ERROR check that fails, which
fails the run) and a WARN check that fails. The alerts are delivered the way ``dhs materialize``
does it (``deliver_run_alerts``) and the way the daemon does it (``alert_sensor``), and each
failure must reach the webhook exactly once, whoever sees it first.
"""

from __future__ import annotations

import json
import logging

import dagster as dg
import pytest

from darkhaloscope.errors import InputError
from lake_platform.alert_log import JsonlAlertLog
from lake_platform.alerts import REDACTED, Alert, AlertSinks, deliver, redact
from lake_platform.lake import Lake
from lake_platform.webhook import WebhookSink
from lens_assets.ops import alert_sensor, collect_alerts, deliver_run_alerts
from resources.alert_sinks import AlertSinksResource
from tests.support.webhook_receiver import WebhookReceiver


@dg.asset(
    check_specs=[
        dg.AssetCheckSpec("contract", asset="planted", blocking=True),
        dg.AssetCheckSpec("coverage", asset="planted"),
    ]
)
def planted() -> dg.MaterializeResult:
    # The planted violation: three rows with dec outside [-90, 90].
    return dg.MaterializeResult(
        metadata={"rows": 10},
        check_results=[
            dg.AssetCheckResult(
                check_name="contract",
                passed=False,
                metadata={"bad_rows": 3, "column": "dec"},
                description="3 rows with dec outside [-90, 90]",
            ),
            dg.AssetCheckResult(
                check_name="coverage",
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"coverage": 0.41},
                description="footprint coverage 0.41 < 0.5",
            ),
        ],
    )


@dg.asset
def downstream(planted) -> None:  # must not run: the blocking check failed
    raise AssertionError("downstream ran after a failed blocking check")


@dg.asset(check_specs=[dg.AssetCheckSpec("freshness", asset="soft_only")])
def soft_only() -> dg.MaterializeResult:
    return dg.MaterializeResult(
        check_results=[
            dg.AssetCheckResult(
                check_name="freshness", passed=False, severity=dg.AssetCheckSeverity.WARN, description="stale"
            )
        ]
    )


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:  # sqlite storage in a temp dir, like a real DAGSTER_HOME
        yield inst


@pytest.fixture
def receiver():
    with WebhookReceiver(lifetime_s=60) as rx:
        yield rx


def _sinks(lake_root, url, **webhook):
    return AlertSinks(
        JsonlAlertLog(Lake(str(lake_root))), (WebhookSink(url, **{"deadline_s": 5, "backoff_s": 0.05, **webhook}),)
    )


def _key(body: dict) -> tuple:
    return body["kind"], body["asset"], body["check"], body["severity"]


@pytest.mark.timeout(60)
def test_each_failure_alerts_once_across_cli_sensor_and_restart(instance, receiver, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_WEBSERVER_URL", "http://dagster.example:3000/")
    lake_root = tmp_path / "lake"
    result = dg.materialize([planted, downstream], instance=instance, raise_on_error=False)
    assert not result.success  # the blocking ERROR check failed the run

    outcomes = deliver_run_alerts(instance, result.run_id, _sinks(lake_root, receiver.url))
    bodies = [r.json() for r in receiver.accepted()]
    # the run failed only because of the blocking check: one incident, told by the check's alert
    assert sorted(_key(b) for b in bodies) == [
        ("check_failed", "planted", "contract", "ERROR"),
        ("check_failed", "planted", "coverage", "WARN"),
    ]
    assert len(outcomes) == 2 and all(o.ok for o in outcomes)
    contract = next(b for b in bodies if b["check"] == "contract")
    assert contract["metadata"]["bad_rows"] == 3 and contract["metadata"]["blocking"] is True
    assert contract["description"] == "3 rows with dec outside [-90, 90]"
    assert contract["run_url"] == f"http://dagster.example:3000/runs/{result.run_id}"
    assert contract["run_id"] == result.run_id and contract["partition"] is None

    # The CLI path again, and a "restarted" process (new log object on the same lake): nothing new.
    assert deliver_run_alerts(instance, result.run_id, _sinks(lake_root, receiver.url)) == []
    assert len(receiver.received) == 2

    # The daemon's sensor over the whole history: the same alerts are already in the log.
    sinks_resource = AlertSinksResource(webhook_url=receiver.url, lake_uri=str(lake_root), webhook_backoff_s=0.05)
    ctx = dg.build_sensor_context(instance=instance, resources={"alert_sinks": sinks_resource})
    tick = alert_sensor(ctx)
    assert isinstance(tick, dg.SkipReason) and "0 handled" in tick.skip_message
    assert len(receiver.received) == 2
    cursor = ctx.cursor
    assert json.loads(cursor)["after_storage_id"] > 0

    # A later successful run whose WARN check fails: the sensor sends just that, once.
    ok = dg.materialize([soft_only], instance=instance)
    assert ok.success  # a WARN failure does not fail the run
    ctx2 = dg.build_sensor_context(instance=instance, resources={"alert_sinks": sinks_resource}, cursor=cursor)
    alert_sensor(ctx2)
    assert [_key(r.json()) for r in receiver.received[2:]] == [("check_failed", "soft_only", "freshness", "WARN")]
    ctx3 = dg.build_sensor_context(instance=instance, resources={"alert_sinks": sinks_resource}, cursor=ctx2.cursor)
    alert_sensor(ctx3)
    assert len(receiver.received) == 3
    # ... and the CLI path for that run now finds it already sent.
    assert deliver_run_alerts(instance, ok.run_id, _sinks(lake_root, receiver.url)) == []

    # The log: JSONL and the queryable Parquet table hold the same four alerts, one row each.
    log = JsonlAlertLog(Lake(str(lake_root)))
    entries = log.entries()
    assert len(entries) == 3 and len({e["dedup_key"] for e in entries}) == 3
    assert all(e["delivered_to"] == ["webhook"] for e in entries)
    table = Lake(str(lake_root)).read_table("ops", "alerts")
    assert sorted(table.column("dedup_key").to_pylist()) == sorted(e["dedup_key"] for e in entries)
    assert sorted(table.column("check").to_pylist(), key=str) == sorted(["contract", "coverage", "freshness"], key=str)
    assert (lake_root / "ops" / "alerts.files" / "alerts.jsonl").is_file()


@dg.asset(check_specs=[dg.AssetCheckSpec("contract", asset="violating", blocking=True)])
def violating() -> dg.MaterializeResult:
    return dg.MaterializeResult(
        check_results=[
            dg.AssetCheckResult(
                check_name="contract", passed=False, metadata={"bad_rows": 1}, description="1 duplicate object id"
            )
        ]
    )


@pytest.mark.timeout(60)
def test_planted_contract_violation_makes_exactly_one_webhook_call(instance, receiver, tmp_path):
    result = dg.materialize([violating], instance=instance, raise_on_error=False)
    assert not result.success
    deliver_run_alerts(instance, result.run_id, _sinks(tmp_path / "lake", receiver.url))
    assert [_key(r.json()) for r in receiver.received] == [("check_failed", "violating", "contract", "ERROR")]


@pytest.mark.timeout(30)
def test_run_failure_that_is_not_a_check_alerts_as_run_failed():
    @dg.asset
    def broken():
        raise RuntimeError("the sweep file vanished")

    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([broken], instance=instance, raise_on_error=False)
    alerts, _ = collect_alerts(instance, run_id=result.run_id)
    assert [(a.kind, a.asset) for a in alerts] == [("run_failed", "broken")]
    assert "the sweep file vanished" in alerts[0].description


@pytest.mark.timeout(30)
def test_collect_alerts_cursor_only_moves_forward():
    instance = dg.DagsterInstance.ephemeral()  # in-memory: this test needs an empty history, fast
    first = dg.materialize([soft_only], instance=instance)
    alerts, cursor = collect_alerts(instance)
    assert [(a.asset, a.check, a.run_id) for a in alerts] == [("soft_only", "freshness", first.run_id)]
    assert collect_alerts(instance, since_cursor=cursor) == ([], cursor)
    with pytest.raises(InputError, match="cursor"):
        collect_alerts(instance, since_cursor="not json")
    with pytest.raises(InputError, match="no-such-run"):
        collect_alerts(instance, run_id="no-such-run")


def _alert(check="contract", run_id="run-1", **kw) -> Alert:
    return Alert(
        kind="check_failed",
        asset="sweeps",
        check=check,
        partition="sweep-000m005",
        severity="ERROR",
        description="bad",
        metadata=kw.pop("metadata", {}),
        run_id=run_id,
        run_url=f"http://x/runs/{run_id}",
        **kw,
    )


@pytest.mark.timeout(30)
def test_webhook_retries_server_errors_and_records_failures(receiver, tmp_path, caplog):
    lake = tmp_path / "lake"
    receiver.script([500, 503])
    [outcome] = deliver([_alert()], _sinks(lake, receiver.url, max_attempts=4, backoff_s=0.01))
    assert outcome.ok and [r.status for r in receiver.received] == [500, 503, 200]

    receiver.script([404])  # a client error is final: no retry
    [outcome] = deliver([_alert(check="other")], _sinks(lake, receiver.url, max_attempts=4, backoff_s=0.01))
    assert not outcome.ok and "HTTP 404" in outcome.errors["webhook"] and len(receiver.received) == 4

    # A receiver that is down: the failure is logged and recorded as owed, not dropped.
    with WebhookReceiver() as gone:
        dead_url = gone.url
    with caplog.at_level(logging.ERROR, logger="lake_platform.alerts"):
        outcomes = deliver(
            [_alert(run_id="run-2")], _sinks(lake, dead_url, deadline_s=2, max_attempts=2, backoff_s=0.01)
        )
    # the new alert, and the one the 404 left owed (the round stops at the first failure)
    assert [o.alert.check for o in outcomes] == ["contract", "other"]
    outcome = outcomes[0]
    assert outcome.errors["webhook"].startswith("AlertDeliveryError")
    assert "not sent in this round" in outcomes[1].errors["webhook"]
    assert any("not delivered to webhook" in r.getMessage() for r in caplog.records)
    entry = next(e for e in JsonlAlertLog(Lake(str(lake))).entries() if e["run_id"] == "run-2")
    assert entry["delivered_to"] == [] and "ConnectionError" in entry["delivery_errors"]["webhook"]
    assert entry["status"] == "pending"


@pytest.mark.timeout(30)
def test_slack_through_the_resource_keeps_the_token_out_of_logs(receiver, tmp_path, monkeypatch, caplog):
    token = "xoxb-1234567890-abcdefghijklmnop"
    monkeypatch.setenv("DHS_SLACK_TOKEN", token)
    monkeypatch.delenv("DHS_ALERT_WEBHOOK", raising=False)
    res = AlertSinksResource(
        slack_channel="#lens-alerts", slack_api_url=receiver.url + "/api/", lake_uri=str(tmp_path / "lake")
    )
    with caplog.at_level(logging.DEBUG):
        sinks = res.build_sinks()
        [outcome] = deliver([_alert(metadata={"note": f"token is {token}"})], sinks)
    assert outcome.delivered_to == ("slack",)
    [post] = receiver.received
    assert post.path == "/api/chat.postMessage" and post.json()["channel"] == "#lens-alerts"
    assert post.headers.get("Authorization") == f"Bearer {token}"  # the token goes only to Slack
    assert token not in post.body.decode()
    assert token not in repr(sinks) and token not in repr(res) and token not in caplog.text
    assert token not in (tmp_path / "lake" / "ops" / "alerts.files" / "alerts.jsonl").read_text()


def test_redact_removes_env_secrets_and_key_shapes(monkeypatch):
    secret = "Zq8vP2mK7xR4tW9yB3nC6dF1gH5jL0sA2eU4iO7p"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEJr//sessiontoken")
    out = redact(
        {
            "msg": f"failed with {secret} and AKIAIOSFODNN7EXAMPLE",
            "nested": [{"cfg": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}],
            "password": "hunter22",
            "token": "FwoGZXIvYXdzEJr//sessiontoken",
            "rows": 3,
        }
    )
    text = json.dumps(out)
    for leaked in (
        secret,
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "hunter22",
        "sessiontoken",
    ):
        assert leaked not in text
    assert out["rows"] == 3 and out["password"] == REDACTED and "aws_secret_access_key = " in out["nested"][0]["cfg"]
    assert redact("nothing secret here") == "nothing secret here"


def test_alert_validation_and_stable_dedup_key():
    a = _alert()
    # Everything but kind/asset/check/partition/run_id is outside the key (no clock in it).
    assert a.dedup_key == _alert(created_at="2030-01-01T00:00:00+00:00", metadata={"x": 1}).dedup_key
    assert a.dedup_key != _alert(run_id="run-2").dedup_key
    assert a.dedup_key == "%016x" % __import__("darkhaloscope.seeding", fromlist=["x"]).stable_hash64(
        "check_failed", "sweeps", "contract", "sweep-000m005", "run-1"
    )
    with pytest.raises(InputError, match="kind"):
        Alert(kind="oops", asset="a", severity="ERROR", description="", run_id="r", run_url="u")
    with pytest.raises(InputError, match="severity"):
        Alert(kind="run_failed", asset="a", severity="FATAL", description="", run_id="r", run_url="u")
    with pytest.raises(InputError, match="JSON"):
        _alert(metadata={"bad": object()})
    with pytest.raises(InputError, match="DHS_ALERT_WEBHOOK"):
        WebhookSink("ftp://example.org/hook")
    with pytest.raises(InputError, match="distinct names"):
        AlertSinks(None, (WebhookSink("http://a.example/x"), WebhookSink("http://b.example/y")))
