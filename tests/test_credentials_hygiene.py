"""Storage credentials never reach logs, metadata or alerts.

Materializations write through a Lake on the loopback S3 server with a recognisable random
access key and secret in the environment (moto accepts any key). Everything an operator or a
webhook could see is gathered -- every event of every run serialised whole, the materialization
metadata, the process's stdout/stderr at the file-descriptor level (C++ SDK output included), the
alert webhook bodies and the alert log -- and neither the secret nor the key id may appear.
"""

import secrets
import string

import dagster as dg
import pyarrow as pa
import pytest
from dagster._serdes import serialize_value

from lake_platform.alert_log import JsonlAlertLog
from lake_platform.alerts import AlertSinks
from lake_platform.lake import Lake
from lake_platform.webhook import WebhookSink
from lens_assets.ops import deliver_run_alerts
from tests.support.s3_server import fresh_bucket
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.s3


class LakeConfig(dg.Config):
    uri: str
    endpoint: str


def _lake(config: LakeConfig) -> Lake:
    return Lake(config.uri, s3_endpoint=config.endpoint, s3_max_attempts=2, s3_request_timeout_s=5)


@dg.asset(check_specs=[dg.AssetCheckSpec("row_contract", asset="hygiene_table", blocking=True)])
def hygiene_table(context: dg.AssetExecutionContext, config: LakeConfig) -> dg.MaterializeResult:
    lake = _lake(config)
    info = lake.write_table("test", "hygiene", pa.table({"x": pa.array(range(100), pa.int64())}))
    context.log.info(f"wrote {info.rows} rows to {info.uri} via {lake.describe()}")
    print(f"stdout: committed {info.uri}")
    rows = lake.count_rows("test", "hygiene")
    return dg.MaterializeResult(
        metadata={"uri": info.uri, "rows": rows, "lake": lake.describe()},
        # A failing check so that alerts (with the lake's description in their metadata) are produced.
        check_results=[
            dg.AssetCheckResult(
                check_name="row_contract", passed=rows == 101, metadata={"rows": rows, "lake": lake.describe()}
            )
        ],
    )


@dg.asset
def missing_bucket_table(config: LakeConfig) -> None:
    # Fails with the lake's InputError: its message and stack trace land in the event log and the alert.
    _lake(config).write_table("test", "hygiene", pa.table({"x": pa.array([1], pa.int64())}))


def _random(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


@pytest.mark.timeout(60)
def test_credentials_never_appear_in_logs_metadata_or_alerts(s3_server, monkeypatch, capfd, tmp_path):
    key_id = "AKIA" + _random(string.ascii_uppercase + string.digits, 16)
    secret = _random(string.ascii_letters + string.digits + "/+", 40)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    bucket = fresh_bucket(s3_server, prefix="hygiene")

    good = {"ops": {"hygiene_table": {"config": {"uri": f"s3://{bucket}/lake", "endpoint": s3_server.endpoint_url}}}}
    bad = {
        "ops": {
            "missing_bucket_table": {
                "config": {"uri": "s3://no-such-bucket-hygiene/lake", "endpoint": s3_server.endpoint_url}
            }
        }
    }
    with dg.instance_for_test() as instance, WebhookReceiver() as rx:
        r1 = dg.materialize([hygiene_table], instance=instance, run_config=good, raise_on_error=False)
        r2 = dg.materialize([missing_bucket_table], instance=instance, run_config=bad, raise_on_error=False)
        assert not r1.success and not r2.success  # the blocking check and the missing bucket fail them

        sinks = AlertSinks(
            JsonlAlertLog(Lake(str(tmp_path / "alerts"))), (WebhookSink(rx.url, deadline_s=5, max_attempts=2),)
        )
        outcomes = deliver_run_alerts(instance, r1.run_id, sinks) + deliver_run_alerts(instance, r2.run_id, sinks)

        events = [serialize_value(e) for rid in (r1.run_id, r2.run_id) for e in instance.all_logs(rid)]
        mats = [serialize_value(m) for m in r1.asset_materializations_for_node("hygiene_table")]
        webhook_bodies = [r.body.decode() for r in rx.received]
    captured = capfd.readouterr()
    alert_log = (tmp_path / "alerts" / "ops" / "alerts.files" / "alerts.jsonl").read_text()

    # Positive controls: each source really holds the run's output (so an absence means something).
    assert any(f"s3://{bucket}/lake/test/hygiene/part-0.parquet" in e for e in events)
    assert any("no-such-bucket-hygiene" in e for e in events)
    assert mats and "part-0.parquet" in mats[0]
    assert f"stdout: committed s3://{bucket}" in captured.out
    # the blocking check failure (its run failure is the same incident) + the missing-bucket run failure
    assert len(outcomes) == 2 and len(webhook_bodies) == 2
    assert "no-such-bucket-hygiene" in alert_log

    sources = {
        "event log": "\n".join(events),
        "materialization metadata": "\n".join(mats),
        "stdout": captured.out,
        "stderr": captured.err,
        "webhook bodies": "\n".join(webhook_bodies),
        "alert log": alert_log,
    }
    for name, text in sources.items():
        assert secret not in text, f"the AWS secret leaked into the {name}"
        assert key_id not in text, f"the AWS access key id leaked into the {name}"
