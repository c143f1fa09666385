"""Where alerts go: the lake's alert log, a webhook (DHS_ALERT_WEBHOOK) and, optionally, Slack.

The Slack token is never part of the resource's config (config is shown in the UI and stored in
run records); it is read from the environment variable named by ``slack_token_env`` when the
sinks are built, and only the Slack client ever holds it.
"""

import math
import urllib.error

import dagster as dg
from dagster_slack import SlackResource
from pydantic import Field

from darkhaloscope.errors import InputError
from darkhaloscope.retry import TRANSIENT_HTTP_STATUSES, RetriesExhausted, RetryPolicy, call_with_retries, seconds_left
from lake_platform.alert_log import JsonlAlertLog
from lake_platform.alerts import DEFAULT_MAX_BACKLOG, DEFAULT_REST_S, Alert, AlertDeliveryError, AlertSinks
from lake_platform.lake import Lake
from lake_platform.webhook import WebhookSink

from .settings import setting, variable
from .storage import open_lake


def _slack_transient(exc: BaseException) -> bool:
    """Unreachable Slack, a timeout, throttling (429) and Slack-side faults (5xx) are worth another attempt."""
    from slack_sdk.errors import SlackApiError

    if isinstance(exc, SlackApiError):
        return getattr(exc.response, "status_code", None) in TRANSIENT_HTTP_STATUSES
    return isinstance(exc, (urllib.error.URLError, ConnectionError, TimeoutError))


class SlackSink:
    """Posts an alert's summary to a Slack channel through dagster_slack's client (slack_sdk WebClient).

    ``deadline_s`` bounds one delivery round; within it transient faults are retried (the
    client's own retry handlers are switched off, so this is the only retry layer), and each
    request's socket timeout is the time left.
    """

    name = "slack"

    def __init__(self, client, channel: str, deadline_s: float = 10.0, max_attempts: int = 3, backoff_s: float = 0.5):
        if not channel:
            raise InputError("slack_channel is empty: name the channel (e.g. '#lens-alerts') that receives alerts")
        self._client = client
        self._client.retry_handlers = []
        self.channel = channel
        self.deadline_s = float(deadline_s)
        self.policy = RetryPolicy(max_attempts=max_attempts, backoff_base_s=backoff_s, backoff_max_s=8 * backoff_s)

    def __repr__(self) -> str:  # the client holds the token: never show it
        return f"SlackSink(channel={self.channel!r}, deadline_s={self.deadline_s})"

    def send(self, alert: Alert, deadline: float) -> None:
        def attempt() -> None:
            self._client.timeout = max(1, math.ceil(seconds_left(deadline)))
            resp = self._client.chat_postMessage(channel=self.channel, text=alert.summary())
            if not resp.get("ok", False):
                raise AlertDeliveryError(
                    f"Slack refused alert {alert.dedup_key} for channel {self.channel!r}: {resp.get('error')}"
                )

        try:
            call_with_retries(attempt, _slack_transient, self.policy.until(deadline), (alert.dedup_key,))
        except RetriesExhausted as exc:
            raise AlertDeliveryError(
                f"Slack did not accept alert {alert.dedup_key} for channel {self.channel!r}: {exc}"
            ) from exc


class AlertSinksResource(dg.ConfigurableResource):
    """Builds the alert sinks: always the lake's alert log; a webhook and Slack when configured.

    Unset fields fall back to the environment when :meth:`build_sinks` runs (so a deployment
    needs no config): ``webhook_url`` to DHS_ALERT_WEBHOOK, ``lake_uri`` to DHS_LAKE
    (./lakehouse), ``s3_endpoint`` to DHS_S3_ENDPOINT, ``slack_channel`` to DHS_SLACK_CHANNEL; the Slack token comes
    from the
    environment variable ``slack_token_env`` (DHS_SLACK_TOKEN, else SLACK_BOT_TOKEN).
    """

    webhook_url: str | None = Field(
        default=None, description="URL receiving one JSON POST per alert; default env DHS_ALERT_WEBHOOK"
    )
    webhook_deadline_s: float = Field(
        default=10.0,
        description="seconds one delivery round may spend on the webhook (connect, retries and whole answers)",
    )
    webhook_connect_timeout_s: float = Field(default=3.0, description="seconds to open a connection to the webhook")
    webhook_max_attempts: int = Field(
        default=3,
        description="attempts per alert on connection errors and 408/425/429/5xx answers, within the deadline",
    )
    webhook_backoff_s: float = Field(
        default=0.5, description="first back-off cap in seconds (doubles each retry, full jitter)"
    )
    slack_channel: str | None = Field(
        default=None,
        description="Slack channel for alerts (default env DHS_SLACK_CHANNEL); Slack is used only with a channel and "
        "a token",
    )
    slack_token_env: str = Field(
        default="DHS_SLACK_TOKEN", description="name of the env var holding the Slack bot token"
    )
    slack_api_url: str | None = Field(default=None, description="Slack API base URL override (tests, proxies)")
    slack_deadline_s: float = Field(default=10.0, description="seconds one delivery round may spend on Slack")
    max_backlog: int = Field(
        default=DEFAULT_MAX_BACKLOG,
        description="undelivered alerts kept and retried; beyond it the oldest are given up",
    )
    rest_after_failure_s: float = Field(
        default=DEFAULT_REST_S,
        description="seconds a sink that failed is not tried again by the same deliverer (its alerts stay owed)",
    )
    lake_uri: str | None = Field(
        default=None, description="lake root holding ops/alert_log and ops/alerts; default env DHS_LAKE"
    )
    s3_endpoint: str | None = Field(default=None, description="S3 endpoint override; default env DHS_S3_ENDPOINT")

    def _slack_token(self) -> str | None:
        return variable(self.slack_token_env) or variable("SLACK_BOT_TOKEN")

    def lake(self) -> Lake:
        """The lake holding the alert log (:func:`resources.storage.open_lake`)."""
        return open_lake(self.lake_uri or None, self.s3_endpoint or setting("DHS_S3_ENDPOINT"))

    def build_sinks(self) -> AlertSinks:
        """The alert log and the configured senders, for :func:`lake_platform.alerts.deliver`."""
        senders: list = []
        url = self.webhook_url or setting("DHS_ALERT_WEBHOOK")
        if url:
            senders.append(
                WebhookSink(
                    url,
                    deadline_s=self.webhook_deadline_s,
                    connect_timeout_s=self.webhook_connect_timeout_s,
                    max_attempts=self.webhook_max_attempts,
                    backoff_s=self.webhook_backoff_s,
                )
            )
        token = self._slack_token()
        channel = self.slack_channel or setting("DHS_SLACK_CHANNEL")
        if channel and token:
            client = SlackResource(token=token).get_client()
            if self.slack_api_url:
                client.base_url = self.slack_api_url.rstrip("/") + "/"
            senders.append(SlackSink(client, channel, deadline_s=self.slack_deadline_s))
        elif channel or token:
            # Said once per build, without any secret: only one of channel and token is configured.
            missing = (
                f"env {self.slack_token_env} is empty" if channel else "no channel (slack_channel or DHS_SLACK_CHANNEL)"
            )
            dg.get_dagster_logger().warning(f"Slack alerts are off: {missing}")
        try:
            alert_log = JsonlAlertLog(self.lake())
        except InputError as exc:  # a malformed DHS_LAKE must not silence the webhook and Slack
            dg.get_dagster_logger().error(f"the alert log is off: {exc}")
            alert_log = None
        return AlertSinks(
            log=alert_log,
            senders=tuple(senders),
            max_backlog=self.max_backlog,
            rest_after_failure_s=self.rest_after_failure_s,
        )
