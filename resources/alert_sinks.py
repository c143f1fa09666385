"""Where alerts go: the lake's alert log, a webhook (DHS_ALERT_WEBHOOK) and, optionally, Slack.

The Slack token is never part of the resource's config (config is shown in the UI and stored in
run records); it is read from the environment variable named by ``slack_token_env`` when the
sinks are built, and only the Slack client ever holds it.
"""


import os

import dagster as dg
from dagster_slack import SlackResource
from pydantic import Field

from darkhaloscope.alerts import Alert, AlertDeliveryError, JsonlAlertLog, WebhookSink
from darkhaloscope.errors import InputError
from darkhaloscope.lake import Lake


class SlackSink:
    """Posts an alert's summary to a Slack channel through dagster_slack's client (slack_sdk WebClient)."""

    name = "slack"

    def __init__(self, client, channel: str):
        if not channel:
            raise InputError("slack_channel is empty: name the channel (e.g. '#lens-alerts') that receives alerts")
        self._client = client
        self.channel = channel

    def __repr__(self) -> str:  # the client holds the token: never show it
        return f"SlackSink(channel={self.channel!r})"

    def send(self, alert: Alert) -> None:
        resp = self._client.chat_postMessage(channel=self.channel, text=alert.summary())
        if not resp.get("ok", False):
            raise AlertDeliveryError(f"Slack refused alert {alert.dedup_key} for channel {self.channel!r}: {resp.get('error')}")


class AlertSinksResource(dg.ConfigurableResource):
    """Builds the alert sinks: always the lake's alert log; a webhook and Slack when configured.

    Unset fields fall back to the environment when :meth:`build_sinks` runs (so a deployment
    needs no config): ``webhook_url`` to DHS_ALERT_WEBHOOK, ``lake_uri`` to DHS_LAKE
    (./lakehouse), ``s3_endpoint`` to DHS_S3_ENDPOINT, ``slack_channel`` to DHS_SLACK_CHANNEL; the Slack token comes from the
    environment variable ``slack_token_env`` (DHS_SLACK_TOKEN, else SLACK_BOT_TOKEN).
    """

    webhook_url: str | None = Field(default=None, description="URL receiving one JSON POST per alert; default env DHS_ALERT_WEBHOOK")
    webhook_timeout_s: float = Field(default=5.0, description="seconds per webhook attempt")
    webhook_max_retries: int = Field(default=3, description="extra attempts on 5xx/429/connection errors")
    webhook_backoff_s: float = Field(default=0.5, description="first back-off in seconds (doubles each retry)")
    slack_channel: str | None = Field(default=None, description="Slack channel for alerts (default env DHS_SLACK_CHANNEL); Slack is used only with a channel and a token")
    slack_token_env: str = Field(default="DHS_SLACK_TOKEN", description="name of the env var holding the Slack bot token")
    slack_api_url: str | None = Field(default=None, description="Slack API base URL override (tests, proxies)")
    lake_uri: str | None = Field(default=None, description="lake root holding ops/alert_log and ops/alerts; default env DHS_LAKE")
    s3_endpoint: str | None = Field(default=None, description="S3 endpoint override; default env DHS_S3_ENDPOINT")

    def _slack_token(self) -> str | None:
        return os.environ.get(self.slack_token_env) or os.environ.get("SLACK_BOT_TOKEN") or None

    def lake(self) -> Lake:
        """The lake holding the alert log."""
        uri = self.lake_uri or os.environ.get("DHS_LAKE", "./lakehouse")
        return Lake(uri, s3_endpoint=self.s3_endpoint or os.environ.get("DHS_S3_ENDPOINT") or None)

    def build_sinks(self) -> list:
        """[JsonlAlertLog, WebhookSink?, SlackSink?] for :func:`darkhaloscope.alerts.deliver`."""
        sinks: list = [JsonlAlertLog(self.lake())]
        url = self.webhook_url or os.environ.get("DHS_ALERT_WEBHOOK") or None
        if url:
            sinks.append(WebhookSink(url, timeout_s=self.webhook_timeout_s, max_retries=self.webhook_max_retries, backoff_s=self.webhook_backoff_s))
        token = self._slack_token()
        channel = self.slack_channel or os.environ.get("DHS_SLACK_CHANNEL") or None
        if channel and token:
            client = SlackResource(token=token).get_client()
            if self.slack_api_url:
                client.base_url = self.slack_api_url.rstrip("/") + "/"
            sinks.append(SlackSink(client, channel))
        elif channel or token:
            # Said once per build, without any secret: only one of channel and token is configured.
            missing = f"env {self.slack_token_env} is empty" if channel else "no channel (slack_channel or DHS_SLACK_CHANNEL)"
            dg.get_dagster_logger().warning(f"Slack alerts are off: {missing}")
        return sinks
