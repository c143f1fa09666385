"""Alert delivery under faults, against real servers on loopback.

- a webhook that trickles its answer (one byte every 2 s) is abandoned at the sink's deadline;
- nothing locks the alert log while sending, and nothing locks it when there is nothing to send;
- a webhook that refuses connections and then comes back on the same port gets the alerts it
  missed on the next delivery, within a bounded backlog;
- the lake's alert log failing (a DHS_LAKE that is a file; an S3 lake behind a proxy that drops
  every connection to the moto server) does not stop the webhook or Slack, and the webhook failing
  does not stop Slack or the log;
- ``dhs materialize`` on a lake that is a file fails once (no retries), names the lake, and still
  alerts the webhook.
"""

from __future__ import annotations

import io
import threading
import time

import dagster as dg
import pytest

from lake_platform.alert_log import JsonlAlertLog
from lake_platform.alerts import Alert, AlertSinks, deliver
from lake_platform.lake import Lake
from lake_platform.webhook import WebhookSink
from lens_assets.ops import alert_sensor
from resources.alert_sinks import AlertSinksResource
from tests.support.fault_proxy import FaultProxy
from tests.support.s3_server import fresh_bucket
from tests.support.webhook_receiver import WebhookReceiver

DEADLINE_S = 1.5


def _alert(n: int = 0, **kw) -> Alert:
    return Alert(
        kind="check_failed",
        asset="sweeps",
        check="contract",
        partition=f"sweep-{n:03d}",
        severity="ERROR",
        description="3 rows with dec outside [-90, 90]",
        run_id=kw.pop("run_id", "run-1"),
        run_url="http://x/runs/run-1",
        created_at=f"2030-01-01T00:00:{n:02d}+00:00",
        **kw,
    )


def _webhook(url: str, **kw) -> WebhookSink:
    return WebhookSink(url, **{"deadline_s": DEADLINE_S, "connect_timeout_s": 0.5, "backoff_s": 0.05, **kw})


@pytest.mark.timeout(30)
def test_a_trickling_webhook_is_abandoned_at_its_deadline_and_the_alert_is_sent_later(tmp_path):
    log = JsonlAlertLog(Lake(str(tmp_path / "lake")))
    with WebhookReceiver(trickle_s=2.0) as rx:
        rx.script(["trickle"])
        t0 = time.monotonic()
        [outcome] = deliver([_alert()], AlertSinks(log, (_webhook(rx.url),)))
        elapsed = time.monotonic() - t0
        assert elapsed < DEADLINE_S + 1.0, f"delivery took {elapsed:.1f} s past a {DEADLINE_S} s deadline"
        assert "deadline" in outcome.errors["webhook"] and not outcome.delivered_to
        [entry] = log.entries()
        assert entry["status"] == "pending" and entry["delivery_errors"]["webhook"] == outcome.errors["webhook"]
        # The next delivery (no new alert) retries the owed one; the receiver now answers at once.
        [again] = deliver([], AlertSinks(log, (_webhook(rx.url),)))
        assert again.ok and again.delivered_to == ("webhook",)
        assert [r.status for r in rx.received] == [0, 200]
    [entry] = log.entries()
    assert entry["status"] == "done" and entry["attempts"] == 2 and entry["delivered_to"] == ["webhook"]
    assert deliver([_alert()], AlertSinks(log, (_webhook(rx.url),))) == []  # delivered once, never again


@pytest.mark.timeout(30)
def test_the_alert_log_is_not_locked_while_sending_nor_when_nothing_is_owed(tmp_path):
    log = JsonlAlertLog(Lake(str(tmp_path / "lake")))
    with WebhookReceiver(trickle_s=2.0) as rx:
        rx.script(["trickle"])
        sending = threading.Thread(
            target=deliver, args=([_alert()], AlertSinks(log, (_webhook(rx.url, deadline_s=3.0),)))
        )
        sending.start()
        while not rx.received:  # the POST is on the wire and trickling back
            time.sleep(0.05)
        t0 = time.monotonic()
        with log.locked():  # another run (dhs materialize, the sensor) takes the lock meanwhile
            waited = time.monotonic() - t0
        assert waited < 0.5 and sending.is_alive(), f"the lock was held while sending ({waited:.2f} s)"
        sending.join(10)
        deliver([], AlertSinks(log, (_webhook(rx.url),)))  # the owed alert goes out now
        assert log.entries()[0]["status"] == "done"

        # Nothing new and nothing owed: delivery only reads the log, even while another holds its lock.
        result: list = []
        with log.locked():
            idle = threading.Thread(
                target=lambda: result.append(deliver([_alert()], AlertSinks(log, (_webhook(rx.url),))))
            )
            idle.start()
            idle.join(2.0)
            assert not idle.is_alive(), "deliver() took the alert log's lock although it had nothing to send"
        assert result == [[]]


@pytest.mark.timeout(30)
def test_a_refusing_webhook_gets_its_alerts_when_it_recovers_within_a_bounded_backlog(tmp_path, caplog):
    log = JsonlAlertLog(Lake(str(tmp_path / "lake")))
    with WebhookReceiver() as first:
        port = first.port
    # The port now refuses connections: three rounds, three alerts owed to the webhook; backlog of 2.
    for n in range(3):
        outcomes = deliver([_alert(n)], AlertSinks(log, (_webhook(f"http://127.0.0.1:{port}"),), max_backlog=2))
        assert all(
            "ConnectionRefusedError" in o.errors["webhook"] or "not sent" in o.errors["webhook"] for o in outcomes
        )
    status = {e["partition"]: e["status"] for e in log.entries()}
    assert status == {"sweep-000": "given_up", "sweep-001": "pending", "sweep-002": "pending"}
    assert any("given up" in r.getMessage() for r in caplog.records)

    with WebhookReceiver(port=port) as back:  # the same URL answers again
        outcomes = deliver([_alert(3)], AlertSinks(log, (_webhook(back.url),), max_backlog=2))
        assert sorted(o.alert.partition for o in outcomes) == ["sweep-001", "sweep-002", "sweep-003"]
        assert all(o.ok for o in outcomes)
        assert sorted(r.json()["partition"] for r in back.accepted()) == ["sweep-001", "sweep-002", "sweep-003"]
    assert {e["partition"]: e["status"] for e in log.entries()} == {
        "sweep-000": "given_up",
        "sweep-001": "done",
        "sweep-002": "done",
        "sweep-003": "done",
    }
    assert len(log.lake.read_table("ops", "alerts")) == 4


@pytest.mark.timeout(30)
def test_a_failed_sink_rests_so_a_long_materialization_pays_its_deadline_once_per_rest(tmp_path):
    log = JsonlAlertLog(Lake(str(tmp_path / "lake")))
    with WebhookReceiver(trickle_s=2.0) as rx:
        sinks = AlertSinks(
            log, (_webhook(rx.url, deadline_s=0.5),), rest_after_failure_s=1.0
        )  # one deliverer, many runs
        rx.script(["trickle"])
        deliver([_alert(0)], sinks)  # pays the 0.5 s deadline
        t0 = time.monotonic()
        [new, owed] = deliver([_alert(1)], sinks)  # the next run, at once: the webhook is resting
        assert time.monotonic() - t0 < 0.4 and len(rx.received) == 1
        assert "failed recently" in new.errors["webhook"] and "failed recently" in owed.errors["webhook"]
        time.sleep(1.1)
        outcomes = deliver([], sinks)  # rested: both owed alerts go out
        assert sorted(o.alert.partition for o in outcomes if o.ok) == ["sweep-000", "sweep-001"]
    assert {e["status"] for e in log.entries()} == {"done"}


@pytest.mark.timeout(30)
def test_a_lake_that_is_a_file_does_not_silence_the_webhook_or_slack(tmp_path):
    lake_file = tmp_path / "lakehouse"
    lake_file.write_text("not a folder")
    with WebhookReceiver() as rx, WebhookReceiver() as slack_api:
        with WebhookReceiver() as gone:
            dead = gone.url
        res = AlertSinksResource(
            webhook_url=dead,
            webhook_deadline_s=1.0,
            webhook_connect_timeout_s=0.5,
            webhook_backoff_s=0.05,
            lake_uri=str(lake_file),
        )
        sinks = res.build_sinks()
        slack = _slack_sink(slack_api.url)
        sinks = AlertSinks(sinks.log, (_webhook(rx.url), _webhook(dead, name="dead"), slack))
        [outcome] = deliver([_alert()], sinks)
        assert outcome.delivered_to == ("webhook", "slack") and not outcome.recorded
        assert "ConnectionRefusedError" in outcome.errors["dead"]
        assert "StorageError" in outcome.errors["alert_log"] and str(lake_file) in outcome.errors["alert_log"]
        assert "a file stands where the lake needs a folder" in outcome.errors["alert_log"]
        assert len(rx.accepted()) == 1 and slack_api.accepted()[0].json()["channel"] == "#lens-alerts"


def _slack_sink(api_url: str):
    from dagster_slack import SlackResource

    from resources.alert_sinks import SlackSink

    client = SlackResource(token="xoxb-test-0000000000").get_client()
    client.base_url = api_url + "/api/"
    return SlackSink(client, "#lens-alerts", deadline_s=DEADLINE_S)


@dg.asset(check_specs=[dg.AssetCheckSpec("contract", asset="violating", blocking=True)])
def violating() -> dg.MaterializeResult:
    return dg.MaterializeResult(
        check_results=[dg.AssetCheckResult(check_name="contract", passed=False, description="1 duplicate object id")]
    )


class _FastFailingS3Sinks(AlertSinksResource):
    """The resource with an S3 client that gives up after 2 attempts (5 take ~11 s per request)."""

    def lake(self) -> Lake:
        return Lake(
            self.lake_uri,
            s3_endpoint=self.s3_endpoint,
            s3_max_attempts=2,
            s3_connect_timeout_s=1.0,
            s3_request_timeout_s=2.0,
        )


@pytest.mark.s3
@pytest.mark.timeout(60)
def test_the_sensor_alerts_while_the_s3_lake_is_unreachable_and_records_once_it_is_back(s3_server, tmp_path):
    bucket = fresh_bucket(s3_server)
    with FaultProxy(s3_server.host, s3_server.port, lifetime_s=50.0) as proxy, WebhookReceiver() as rx:
        res = _FastFailingS3Sinks(webhook_url=rx.url, lake_uri=f"s3://{bucket}/lake", s3_endpoint=proxy.endpoint_url)
        with dg.instance_for_test() as instance:
            assert not dg.materialize([violating], instance=instance, raise_on_error=False).success
            proxy.fail("drop", times=10**6)  # every S3 request: connection closed without an answer
            ctx = dg.build_sensor_context(instance=instance, resources={"alert_sinks": res})
            tick = alert_sensor(ctx)
            assert "1 waiting for the alert log" in tick.skip_message
            assert [r.json()["check"] for r in rx.accepted()] == ["contract"]  # the webhook still heard it
            assert proxy.actions["drop"] >= 1

            proxy.clear()  # S3 is back: the next tick writes the carried entry, sends nothing twice
            ctx2 = dg.build_sensor_context(instance=instance, resources={"alert_sinks": res}, cursor=ctx.cursor)
            assert "0 waiting for the alert log" in alert_sensor(ctx2).skip_message
            assert len(rx.received) == 1
    [entry] = JsonlAlertLog(Lake(f"s3://{bucket}/lake", s3_endpoint=s3_server.endpoint_url)).entries()
    assert entry["check"] == "contract" and entry["delivered_to"] == ["webhook"] and entry["status"] == "done"


@pytest.mark.timeout(60)
def test_materialize_on_a_lake_that_is_a_file_fails_once_naming_it_and_still_alerts(tmp_path):
    """The step fails without retries (the lake's path is a file: a permanent error), `dhs
    materialize` ends with its FAILED: summary rather than a traceback, and the webhook hears it."""
    from dhs.materialize import MaterializeError, Materializer
    from io_managers import LakeIOManager
    from lens_assets.survey import sweep_files
    from resources import LakeResource, SurveyResource
    from resources.survey import SWEEP_DIR

    mirror = tmp_path / "mirror" / SWEEP_DIR
    mirror.mkdir(parents=True)
    (mirror / "sweep-030m005-035p000.fits").write_bytes(b"\0" * 2880)
    lake_file = tmp_path / "lakehouse"
    lake_file.write_text("not a folder")
    lake_res = LakeResource(uri=str(lake_file))
    with WebhookReceiver() as rx, dg.instance_for_test() as instance:
        defs = dg.Definitions(
            assets=[sweep_files],
            resources={
                "survey": SurveyResource(survey=str(tmp_path / "mirror")),
                "lake": lake_res,
                "io_manager": LakeIOManager(uri=str(lake_file)),
                "alert_sinks": AlertSinksResource(
                    webhook_url=rx.url, lake_uri=str(lake_file), webhook_deadline_s=DEADLINE_S
                ),
            },
        )
        out = io.StringIO()
        with pytest.raises(MaterializeError, match="StorageError") as err:
            Materializer(defs, instance, out=out).run(["sweep_files"])
        assert str(lake_file) in str(err.value) and "a file stands where the lake needs a folder" in str(err.value)
        [run] = instance.get_runs()
        events = {e.dagster_event.event_type_value for e in instance.all_logs(run.run_id) if e.dagster_event}
        assert "STEP_UP_FOR_RETRY" not in events and "STEP_FAILURE" in events
        assert [r.json()["kind"] for r in rx.accepted()] == ["run_failed"]
        assert (
            "ALERT [ERROR] run touching survey/sweep_files" in out.getvalue()
            and "alert_log: StorageError" in out.getvalue()
        )
