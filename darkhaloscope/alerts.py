"""Operational alerts: failed asset checks and failed runs, redacted, de-duplicated, delivered.

This module is plain Python (no Dagster): ``lens_assets/alerting.py`` turns Dagster events into
:class:`Alert` objects and calls :func:`deliver`; the sinks here post them to a webhook and record
them in the lake.

De-duplication. Every alert has a ``dedup_key``: a stable hash of (kind, asset, check, partition,
run_id) -- never of a wall-clock time -- so the same failure seen twice (by the sensor under the
daemon and by ``dhs materialize`` after its run, or by the sensor after a restart) has the same
key. :class:`JsonlAlertLog` keeps every delivered key in the lake
(``<lake>/ops/alert_log/alerts.jsonl`` and the queryable Parquet table ``ops/alerts``), and
:func:`deliver` skips alerts whose key is already there, so a restart never re-sends.

Secrets. Anything that leaves the process (webhook bodies, log entries, the Parquet table) first
goes through :func:`redact`, which removes the values of the credential environment variables and
anything shaped like an AWS access key, an AWS secret after ``aws_secret_access_key`` or a Slack
token. Webhook URLs can themselves carry a secret (Slack incoming webhooks do), so only their
scheme and host are ever logged.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence
from urllib.parse import urlsplit

import pyarrow as pa

from .errors import InputError
from .lake import Lake
from .seeding import stable_hash64

log = logging.getLogger(__name__)

ALERT_KINDS = ("check_failed", "run_failed")
SEVERITIES = ("ERROR", "WARN")
REDACTED = "***REDACTED***"

# Environment variables whose *values* are secrets wherever they show up in text.
SECRET_ENV_VARS = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "DHS_SLACK_TOKEN",
    "SLACK_BOT_TOKEN",
)
# Values shorter than this are not treated as secrets: redacting every "x" or "ab" in every
# message would destroy the text and such values are not real credentials anyway.
_MIN_SECRET_LEN = 6

_PATTERNS = (
    # AWS access key ids: long-term (AKIA) and temporary (ASIA).
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    # A 40-character secret following aws_secret_access_key (config files, env dumps, reprs).
    re.compile(r"(?i)(aws_secret_access_key[\"']?\s*[=:]\s*[\"']?)[A-Za-z0-9/+=]{40}"),
    # Slack tokens (bot, user, app, refresh, config).
    re.compile(r"\bxox[abeprs]-[A-Za-z0-9-]{10,}"),
)
# Dict keys whose values are secrets whatever they look like.
_SECRET_KEY_RE = re.compile(r"(?i)(secret|password|passwd|session_token|access_key|api_key|auth_token|slack_token)")

ALERTS_SCHEMA = pa.schema(
    [
        ("dedup_key", pa.string()),
        ("kind", pa.string()),
        ("asset", pa.string()),
        ("check", pa.string()),
        ("partition", pa.string()),
        ("severity", pa.string()),
        ("description", pa.string()),
        ("metadata_json", pa.string()),
        ("run_id", pa.string()),
        ("run_url", pa.string()),
        ("created_at", pa.string()),
        ("delivered_to", pa.list_(pa.string())),
        ("delivery_errors_json", pa.string()),
    ]
)


# --------------------------------------------------------------------------- redaction
def _secret_values() -> list[str]:
    vals = {os.environ.get(name, "") for name in SECRET_ENV_VARS}
    # Longest first so that a secret containing another secret is removed whole.
    return sorted((v for v in vals if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True)


def _redact_text(text: str, secrets_: Sequence[str]) -> str:
    for s in secrets_:
        if s in text:
            text = text.replace(s, REDACTED)
    text = _PATTERNS[0].sub(REDACTED, text)
    text = _PATTERNS[1].sub(lambda m: m.group(1) + REDACTED, text)
    text = _PATTERNS[2].sub(REDACTED, text)
    return text


def redact(obj: Any) -> Any:
    """Return a copy of ``obj`` (str, dict, list, tuple, scalars) with secrets replaced by ``***REDACTED***``.

    Removes the current values of AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_ACCESS_KEY_ID,
    DHS_SLACK_TOKEN and SLACK_BOT_TOKEN, AWS access key ids (AKIA/ASIA + 16), a 40-character
    secret after ``aws_secret_access_key``, Slack tokens, and the values of dict keys that name a
    secret (``secret``, ``password``, ``access_key``, ...). Keys are redacted as text too.
    """
    return _redact(obj, _secret_values())


def _redact(obj: Any, secrets_: Sequence[str]) -> Any:
    if isinstance(obj, str):
        return _redact_text(obj, secrets_)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            key = _redact_text(str(k), secrets_)
            if _SECRET_KEY_RE.search(str(k)) and v not in (None, ""):
                out[key] = REDACTED
            else:
                out[key] = _redact(v, secrets_)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_redact(v, secrets_) for v in obj)
    return obj


def _jsonable(value: Any, where: str) -> Any:
    """Check that ``value`` is JSON-serialisable (finite floats, str keys); InputError naming ``where``."""
    try:
        json.dumps(value, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where} is not JSON-serialisable: {exc}") from exc
    return value


def safe_url(url: str) -> str:
    """Scheme and host of a URL: what may be logged of a webhook URL whose path can hold a secret."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{':' + str(parts.port) if parts.port else ''}/…"


# --------------------------------------------------------------------------- the alert
@dataclass(frozen=True)
class Alert:
    """One failed asset check or failed run.

    ``created_at`` is the ISO-8601 UTC time of the Dagster event (not the time the alert was
    built) and is not part of ``dedup_key``. ``metadata`` must be JSON-serialisable and is
    redacted on construction, as is ``description``.
    """

    kind: str
    asset: str
    severity: str
    description: str
    run_id: str
    run_url: str
    check: str | None = None
    partition: str | None = None
    metadata: dict = field(default_factory=dict)
    created_at: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ALERT_KINDS:
            raise InputError(f"alert kind {self.kind!r} must be one of {ALERT_KINDS}")
        if self.severity not in SEVERITIES:
            raise InputError(f"alert severity {self.severity!r} must be one of {SEVERITIES}")
        if not self.asset or not isinstance(self.asset, str):
            raise InputError(f"alert asset {self.asset!r} must be a non-empty string")
        if not self.run_id or not isinstance(self.run_id, str):
            raise InputError(f"alert run_id {self.run_id!r} must be a non-empty string")
        if self.kind == "check_failed" and not self.check:
            raise InputError(f"a check_failed alert on asset {self.asset!r} must name its check")
        if not isinstance(self.metadata, Mapping):
            raise InputError(f"alert metadata must be a dict, got {type(self.metadata).__name__}")
        _jsonable(dict(self.metadata), f"metadata of the alert on {self.asset!r}")
        # Redact once at the boundary so no later copy (webhook, log, table) can carry a secret.
        object.__setattr__(self, "metadata", redact(dict(self.metadata)))
        object.__setattr__(self, "description", redact(self.description or ""))

    @property
    def dedup_key(self) -> str:
        """16 hex digits: stable hash of kind, asset, check, partition and run id (no clock)."""
        return f"{stable_hash64(self.kind, self.asset, self.check or '', self.partition or '', self.run_id):016x}"

    def to_dict(self) -> dict:
        """JSON-able dict of every field plus ``dedup_key``."""
        return {
            "dedup_key": self.dedup_key,
            "kind": self.kind,
            "asset": self.asset,
            "check": self.check,
            "partition": self.partition,
            "severity": self.severity,
            "description": self.description,
            "metadata": self.metadata,
            "run_id": self.run_id,
            "run_url": self.run_url,
            "created_at": self.created_at,
        }

    def summary(self) -> str:
        """One human line (used as the Slack/webhook ``text``)."""
        what = f"check {self.check!r} on {self.asset}" if self.kind == "check_failed" else f"run touching {self.asset}"
        part = f" [partition {self.partition}]" if self.partition else ""
        return f"[{self.severity}] {what}{part} failed: {self.description} ({self.run_url})"


def iso_utc(timestamp: float) -> str:
    """ISO-8601 UTC string of a POSIX timestamp (seconds)."""
    if not math.isfinite(timestamp):
        raise InputError(f"timestamp {timestamp!r} is not finite")
    return _dt.datetime.fromtimestamp(timestamp, tz=_dt.timezone.utc).isoformat()


# --------------------------------------------------------------------------- sinks
class AlertDeliveryError(RuntimeError):
    """A sink could not deliver an alert after its retries."""


class AlertSink(Protocol):
    """Something that sends one alert (raises AlertDeliveryError or another exception on failure)."""

    name: str

    def send(self, alert: Alert) -> None: ...


class WebhookSink:
    """POSTs one JSON document per alert to ``url``.

    Retries connection errors, timeouts, HTTP 429 and 5xx with exponential back-off
    (``backoff_s * 2**attempt``) up to ``max_retries`` extra attempts; any other 4xx fails at once.
    The body is :meth:`Alert.to_dict` plus ``text`` (so Slack-style incoming webhooks show it).
    """

    def __init__(self, url: str, timeout_s: float = 5.0, max_retries: int = 3, backoff_s: float = 0.5, name: str = "webhook"):
        if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
            raise InputError(f"webhook URL (DHS_ALERT_WEBHOOK) must start with http:// or https://, got {safe_url(str(url))!r}")
        if not (timeout_s > 0) or max_retries < 0 or backoff_s < 0:
            raise InputError(f"webhook timeout_s={timeout_s} must be > 0, max_retries={max_retries} and backoff_s={backoff_s} >= 0")
        self.url = url
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.name = name

    def __repr__(self) -> str:  # the URL path may be a secret (Slack incoming webhooks)
        return f"WebhookSink({safe_url(self.url)!r}, timeout_s={self.timeout_s}, max_retries={self.max_retries})"

    def send(self, alert: Alert) -> None:
        import requests  # imported here: the library's science modules must not pay for it

        body = dict(alert.to_dict(), text=alert.summary())
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                resp = requests.post(self.url, json=body, timeout=self.timeout_s)
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = f"{type(exc).__name__}"
                log.warning("alert %s: webhook %s attempt %d failed: %s", alert.dedup_key, safe_url(self.url), attempt + 1, last)
                continue
            if resp.status_code < 300:
                return
            last = f"HTTP {resp.status_code}"
            if resp.status_code != 429 and resp.status_code < 500:
                break  # a client error will not go away by retrying
            log.warning("alert %s: webhook %s attempt %d failed: %s", alert.dedup_key, safe_url(self.url), attempt + 1, last)
        raise AlertDeliveryError(f"webhook {safe_url(self.url)} did not accept alert {alert.dedup_key}: {last} after {attempt + 1} attempt(s)")


_LOCAL_LOCKS: dict[str, threading.Lock] = {}
_LOCAL_LOCKS_GUARD = threading.Lock()


class JsonlAlertLog:
    """The de-duplication log and history of alerts, kept in the lake.

    ``<lake>/ops/alert_log/alerts.jsonl`` holds one JSON object per alert (its fields, the sinks
    it reached and each sink's error). The Parquet table ``ops/alerts`` is rebuilt from that file
    on every append, so it is always a complete, queryable copy (``dhs query "select * from
    alerts"``). Both are committed atomically through :class:`Lake` (read-modify-write).

    Concurrency: within one process a lock serialises appends; for a local lake an ``flock`` on
    ``<lake>/ops/alert_log/.lock`` serialises processes too (the daemon and ``dhs materialize``).
    On S3 two processes appending in the same instant can lose one append (S3 through pyarrow has
    no compare-and-swap); the JSONL file is the source of truth and the next append repairs the table.
    """

    GROUP, LOG_ASSET, FILE, TABLE = "ops", "alert_log", "alerts.jsonl", "alerts"
    name = "alert_log"

    def __init__(self, lake: Lake):
        self.lake = lake

    def __repr__(self) -> str:
        return f"JsonlAlertLog({self.lake.describe()})"

    def entries(self) -> list[dict]:
        """Every recorded entry, oldest first (empty when the log does not exist yet)."""
        if not self._exists():
            return []
        raw = self.lake.read_bytes(self.GROUP, self.LOG_ASSET, self.FILE)
        out = []
        for n, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(f"line {n} of {self.uri} is not JSON: {exc}") from exc
        return out

    @property
    def uri(self) -> str:
        return self.lake.full_uri(f"{self.lake.partition_path(self.GROUP, self.LOG_ASSET)}/{self.FILE}")

    def seen_keys(self) -> set[str]:
        """Dedup keys already recorded."""
        return {e["dedup_key"] for e in self.entries()}

    def _exists(self) -> bool:
        import pyarrow.fs as pafs

        path = f"{self.lake.partition_path(self.GROUP, self.LOG_ASSET)}/{self.FILE}"
        return self.lake.fs.get_file_info(path).type == pafs.FileType.File

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the log's lock (thread lock, plus a file lock for a local lake)."""
        with _LOCAL_LOCKS_GUARD:
            lock = _LOCAL_LOCKS.setdefault(self.lake.uri, threading.Lock())
        with lock:
            if self.lake.is_s3:
                yield
                return
            import fcntl

            folder = self.lake.partition_path(self.GROUP, self.LOG_ASSET)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, ".lock"), "a+") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)

    def record(self, outcomes: Sequence["DeliveryOutcome"]) -> int:
        """Append outcomes whose key is not yet recorded; rewrite the table. Returns how many were added.

        Call under :meth:`locked` when the check for new keys and the append must be one step.
        """
        existing = self.entries()
        seen = {e["dedup_key"] for e in existing}
        new = []
        for o in outcomes:
            if o.alert.dedup_key in seen:
                continue
            seen.add(o.alert.dedup_key)
            new.append(dict(o.alert.to_dict(), delivered_to=list(o.delivered_to), delivery_errors=redact(dict(o.errors))))
        if not new:
            return 0
        entries = existing + new
        payload = "".join(json.dumps(e, sort_keys=True, allow_nan=False) + "\n" for e in entries).encode("utf-8")
        self.lake.write_bytes(self.GROUP, self.LOG_ASSET, self.FILE, payload)
        self.lake.write_table(self.GROUP, self.TABLE, _entries_table(entries), schema=ALERTS_SCHEMA)
        return len(new)

    def send(self, alert: Alert) -> None:
        """Record one alert with no other sink (so JsonlAlertLog also satisfies AlertSink)."""
        with self.locked():
            self.record([DeliveryOutcome(alert, (), {})])


def _entries_table(entries: Sequence[dict]) -> pa.Table:
    cols: dict[str, list] = {f.name: [] for f in ALERTS_SCHEMA}
    for e in entries:
        for k in ("dedup_key", "kind", "asset", "check", "partition", "severity", "description", "run_id", "run_url", "created_at"):
            cols[k].append(e.get(k))
        cols["metadata_json"].append(json.dumps(e.get("metadata") or {}, sort_keys=True))
        cols["delivered_to"].append(list(e.get("delivered_to") or []))
        cols["delivery_errors_json"].append(json.dumps(e.get("delivery_errors") or {}, sort_keys=True))
    return pa.table(cols, schema=ALERTS_SCHEMA)


@dataclass(frozen=True)
class DeliveryOutcome:
    """What happened to one new alert: the sinks that took it and each failing sink's error text."""

    alert: Alert
    delivered_to: tuple[str, ...]
    errors: Mapping[str, str]

    @property
    def ok(self) -> bool:
        return not self.errors


def deliver(alerts: Iterable[Alert], sinks: Sequence[Any]) -> list[DeliveryOutcome]:
    """Send each alert not already in a :class:`JsonlAlertLog` among ``sinks`` to every other sink.

    Alerts repeated within ``alerts`` are sent once. A sink that fails is logged (ERROR) and its
    error is recorded in the log entry; the other sinks still get the alert. The log is written
    after sending (at-least-once: a crash between the two can repeat an alert, never lose one),
    under the log's lock so that the daemon and the CLI do not both send the same alert.
    Returns one outcome per newly handled alert (empty when everything was already delivered).
    Without a JsonlAlertLog nothing is de-duplicated across calls.
    """
    logs = [s for s in sinks if isinstance(s, JsonlAlertLog)]
    others = [s for s in sinks if not isinstance(s, JsonlAlertLog)]
    names = [getattr(s, "name", type(s).__name__) for s in others]
    if len(set(names)) != len(names):
        raise InputError(f"alert sinks must have distinct names, got {names}")
    batch: dict[str, Alert] = {}
    for a in alerts:
        if not isinstance(a, Alert):
            raise InputError(f"deliver() takes Alert objects, got {type(a).__name__}")
        batch.setdefault(a.dedup_key, a)
    with contextlib.ExitStack() as stack:
        for lg in logs:
            stack.enter_context(lg.locked())
        seen: set[str] = set()
        for lg in logs:
            seen |= lg.seen_keys()
        outcomes = []
        for key, alert in batch.items():
            if key in seen:
                continue
            ok, errors = [], {}
            for sink, name in zip(others, names):
                try:
                    sink.send(alert)
                    ok.append(name)
                except Exception as exc:  # recorded and logged below, never dropped
                    errors[name] = redact(f"{type(exc).__name__}: {exc}")
                    log.error("alert %s (%s) was not delivered to %s: %s", key, alert.summary(), name, errors[name])
            outcomes.append(DeliveryOutcome(alert, tuple(ok), errors))
        for lg in logs:
            lg.record(outcomes)
    return outcomes
