"""Operational alerts: failed asset checks and failed runs, redacted, de-duplicated, delivered.

This module is plain Python (no Dagster): ``lens_assets/alerting.py`` turns Dagster events into
:class:`Alert` objects and calls :func:`deliver`, which sends them to the configured senders
(``lake_platform.webhook.WebhookSink``, the Slack sink of ``resources/alert_sinks.py``) and records
every outcome in the lake's alert log (``lake_platform.alert_log.JsonlAlertLog``).

De-duplication. Every alert has a ``dedup_key``: a stable hash of (kind, asset, check, partition,
run_id) -- never of a wall-clock time -- so the same failure seen twice (by the sensor under the
daemon and by ``dhs materialize`` after its run, or by the sensor after a restart) has the same
key, and :func:`deliver` skips alerts whose key the log already holds.

Delivery under faults. Each sender has an overall deadline per delivery round (connect, retries
and the whole response included), the senders run independently of each other and of the log, and
no lock is held while sending. An alert a sender did not take stays owed to it in the log and is
sent again by the next delivery (``dhs materialize`` or the sensor), up to a bounded backlog.
Delivery is at least once: an alert is never dropped silently, but two deliverers racing in the
same moment, or a log that could not be written, can make a sender see it twice.

Secrets. Anything that leaves the process (webhook bodies, log entries, the Parquet table) first
goes through :func:`redact`, which removes the values of the credential environment variables and
anything shaped like an AWS access key, an AWS secret after ``aws_secret_access_key`` or a Slack
token. Webhook URLs can themselves carry a secret (Slack incoming webhooks do), so only their
scheme and host are ever logged.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence
from urllib.parse import urlsplit

from darkhaloscope.errors import InputError
from darkhaloscope.seeding import stable_hash64

log = logging.getLogger(__name__)

ALERT_KINDS = ("check_failed", "run_failed")
SEVERITIES = ("ERROR", "WARN")
REDACTED = "***REDACTED***"

# The SDKs' environment variables whose *values* are secrets wherever they show up in text; the
# project's own credential settings (DHS_SLACK_TOKEN) come from the settings module, which
# registers them with add_secret_source.
SECRET_ENV_VARS = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "SLACK_BOT_TOKEN",
)
_SECRET_SOURCES: list[Callable[[], Iterable[str]]] = []
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


# --------------------------------------------------------------------------- redaction
def add_secret_source(source: Callable[[], Iterable[str]]) -> None:
    """Redact the values ``source()`` gives, as it gives them at each redaction, from now on (the
    settings module registers the values of the settings that hold credentials)."""
    if source not in _SECRET_SOURCES:
        _SECRET_SOURCES.append(source)


def _secret_values() -> list[str]:
    vals = {os.environ.get(name, "") for name in SECRET_ENV_VARS}
    vals.update(v for source in _SECRET_SOURCES for v in source())
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
    SLACK_BOT_TOKEN and the registered secrets (:func:`add_secret_source`: DHS_SLACK_TOKEN), AWS
    access key ids (AKIA/ASIA + 16), a 40-character secret after ``aws_secret_access_key``, Slack
    tokens, and the values of dict keys that name a secret (``secret``, ``password``,
    ``access_key``, ...). Keys are redacted as text too.
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


# --------------------------------------------------------------------------- sinks and delivery
class AlertDeliveryError(RuntimeError):
    """A sink did not accept an alert (refused, unreachable, or out of time)."""


class AlertSender(Protocol):
    """Something that sends one alert before a deadline (a ``time.monotonic()`` value), or raises.

    ``deadline_s`` is the most time one delivery round may spend on this sink, over all its alerts
    and attempts; ``send`` must give up (raise) by ``deadline``.
    """

    name: str
    deadline_s: float

    def send(self, alert: Alert, deadline: float) -> None: ...


#: Alerts still owed to a sink that the alert log keeps retrying; beyond it the oldest are given up.
DEFAULT_MAX_BACKLOG = 100
DEFAULT_REST_S = 60.0
#: Seconds a delivery round waits past a sink's deadline for its worker to report before moving on.
_GRACE_S = 1.0
LOG_SINK = "alert_log"
STATUS_DONE, STATUS_PENDING, STATUS_GIVEN_UP = "done", "pending", "given_up"


@dataclass(frozen=True)
class AlertSinks:
    """Where alerts go: ``log`` (an alert log with ``entries()``, ``record()`` and ``uri``; None = no
    de-duplication and no backlog) and ``senders`` (webhook, Slack, ...), each independent of the others."""

    log: Any = None
    senders: tuple = ()
    max_backlog: int = DEFAULT_MAX_BACKLOG
    #: Seconds a sender that failed is left alone: later rounds keep its alerts owed without trying,
    #: so a dead webhook costs one deadline per rest, not one per run of a long materialization.
    rest_after_failure_s: float = DEFAULT_REST_S
    resting_until: dict = field(default_factory=dict)  # sender name -> time.monotonic() it may be tried again

    def __post_init__(self) -> None:
        names = [s.name for s in self.senders]
        if len(set(names)) != len(names) or LOG_SINK in names:
            raise InputError(f"alert sinks must have distinct names other than {LOG_SINK!r}, got {names}")
        if self.max_backlog < 1 or self.rest_after_failure_s < 0:
            raise InputError(
                f"max_backlog must be >= 1 alert and rest_after_failure_s >= 0 s, got {self.max_backlog}, "
                f"{self.rest_after_failure_s}"
            )


@dataclass(frozen=True)
class DeliveryOutcome:
    """One alert in one delivery round: the sinks that took it now, each failing sink's error, its
    merged log entry (all rounds so far) and whether that entry reached the alert log."""

    alert: Alert
    delivered_to: tuple[str, ...]
    errors: Mapping[str, str]
    entry: Mapping[str, Any] = field(default_factory=dict)
    recorded: bool = True

    @property
    def ok(self) -> bool:
        return not self.errors


def owed_sinks(entry: Mapping[str, Any]) -> list[str]:
    """Sinks an entry's alert has not reached yet (they failed and have not succeeded since)."""
    delivered = set(entry.get("delivered_to") or ())
    return sorted(k for k in (entry.get("delivery_errors") or {}) if k not in delivered and k != LOG_SINK)


def alert_from_entry(entry: Mapping[str, Any]) -> Alert:
    """The :class:`Alert` an alert-log entry was made from."""
    return Alert(
        **{
            k: entry.get(k)
            for k in (
                "kind",
                "asset",
                "severity",
                "description",
                "run_id",
                "run_url",
                "check",
                "partition",
                "created_at",
            )
        },
        metadata=entry.get("metadata") or {},
    )


def merged_entry(
    alert: Alert, previous: Mapping[str, Any] | None, delivered: Sequence[str], errors: Mapping[str, str]
) -> dict:
    """The log entry of ``alert`` after one more round: sinks reached so far, the latest error of each
    sink still owed, rounds tried and status (``done``, or ``pending`` while a sink is owed)."""
    previous = previous or {}
    reached = sorted(set(previous.get("delivered_to") or ()) | set(delivered))
    errs = {
        k: v
        for k, v in {**(previous.get("delivery_errors") or {}), **errors}.items()
        if k not in reached and k != LOG_SINK
    }
    entry = dict(
        alert.to_dict(),
        delivered_to=reached,
        delivery_errors=redact(errs),
        attempts=int(previous.get("attempts") or 0) + 1,
        last_attempt_at=iso_utc(time.time()),
    )
    entry["status"] = STATUS_PENDING if owed_sinks(entry) else STATUS_DONE
    return entry


def deliver(
    alerts: Iterable[Alert], sinks: AlertSinks, carried: Sequence[Mapping[str, Any]] = ()
) -> list[DeliveryOutcome]:
    """Send new alerts to every sender and retry the backlog; record the outcome in the alert log.

    New alerts are those whose ``dedup_key`` the log does not hold (repeats within ``alerts`` count
    once). The backlog is every log entry still owed to a configured sender, plus ``carried``
    entries that could not be written to the log before (the sensor keeps them in its cursor).
    Nothing is locked while sending: each sender works through its alerts within its own
    ``deadline_s`` and stops at its first failure (the rest stay owed); the log is then updated
    under its lock. A log that cannot be read or written (an unreachable S3 lake, a DHS_LAKE that
    is a file) does not stop the senders: its error is reported as the ``alert_log`` error of each
    outcome, and ``recorded`` is False. Returns one outcome per alert handled (empty when nothing
    was new or owed: then the log is only read, never locked).
    """
    batch: dict[str, Alert] = {}
    for a in alerts:
        if not isinstance(a, Alert):
            raise InputError(f"deliver() takes Alert objects, got {type(a).__name__}")
        batch.setdefault(a.dedup_key, a)
    logged, log_error = _read_log(sinks.log)
    work = _plan(batch, logged, carried, sinks)
    if not work:
        return []
    sent = _send_round([(a, owed) for a, _, owed in work], sinks)
    outcomes = []
    for alert, previous, owed in work:
        ok = tuple(n for n in owed if sent[n].get(alert.dedup_key) is None)
        errors = {n: sent[n][alert.dedup_key] for n in owed if sent[n].get(alert.dedup_key) is not None}
        outcomes.append(DeliveryOutcome(alert, ok, errors, merged_entry(alert, previous, ok, errors)))
    return _record(sinks, outcomes, log_error)


def _read_log(alert_log: Any) -> tuple[dict[str, dict], str | None]:
    """({dedup_key: entry}, None), or ({}, the error) when the log cannot be read."""
    if alert_log is None:
        return {}, None
    try:
        return {e["dedup_key"]: e for e in alert_log.entries()}, None
    except Exception as exc:  # the senders still run without de-duplication
        text = redact(f"{type(exc).__name__}: {exc}")
        log.error(
            "alert log %s could not be read (%s); alerts go to the other sinks without de-duplication", alert_log, text
        )
        return {}, text


def _plan(
    batch: Mapping[str, Alert], logged: Mapping[str, dict], carried: Sequence[Mapping[str, Any]], sinks: AlertSinks
) -> list[tuple[Alert, Mapping[str, Any] | None, list[str]]]:
    """(alert, previous entry, senders owed) for this round: new alerts first, then the backlog."""
    names = [s.name for s in sinks.senders]
    work = [(a, None, list(names)) for k, a in batch.items() if k not in logged]
    handled = set(batch) | set(logged)
    for entry in carried[-sinks.max_backlog :]:
        if entry["dedup_key"] not in handled:
            handled.add(entry["dedup_key"])
            work.append((alert_from_entry(entry), entry, [n for n in owed_sinks(entry) if n in names]))
    for entry in logged.values():
        owed = [n for n in owed_sinks(entry) if n in names]
        if entry.get("status") == STATUS_PENDING and owed:
            work.append((alert_from_entry(entry), entry, owed))
    return work


def _send_round(work: Sequence[tuple[Alert, Sequence[str]]], sinks: AlertSinks) -> dict[str, dict[str, str | None]]:
    """{sender: {dedup_key: None if accepted, else the error}} after one round, every sender in its
    own thread within its own deadline; alerts a sender did not get to (it failed earlier in the
    round, its deadline passed, or it is resting after a failure) carry an error too."""
    results: dict[str, dict[str, str | None]] = {s.name: {} for s in sinks.senders}
    workers = []
    for sender in sinks.senders:
        todo = [a for a, owed in work if sender.name in owed]
        rest = sinks.resting_until.get(sender.name, 0.0) - time.monotonic()
        if todo and rest > 0:
            results[sender.name] = {
                a.dedup_key: f"AlertDeliveryError: not tried: {sender.name} failed recently; "
                f"tried again in {rest:.0f} s"
                for a in todo
            }
        elif todo:
            deadline = time.monotonic() + float(sender.deadline_s)
            t = threading.Thread(
                target=_send_each,
                args=(sender, todo, deadline, results[sender.name]),
                name=f"alert-{sender.name}",
                daemon=True,
            )
            t.start()
            workers.append((sender, todo, deadline, t))
    for sender, todo, deadline, t in workers:
        t.join(max(0.0, deadline - time.monotonic()) + _GRACE_S)
        done = dict(results[sender.name])  # a snapshot: a late worker cannot change this round's outcome
        for a in todo:
            if a.dedup_key not in done:
                done[a.dedup_key] = (
                    f"AlertDeliveryError: not sent in this round: {sender.name} failed on an earlier alert "
                    f"or its {sender.deadline_s:g} s deadline passed"
                )
        results[sender.name] = done
        if any(v is not None for v in done.values()):
            sinks.resting_until[sender.name] = time.monotonic() + sinks.rest_after_failure_s
    return results


def _send_each(sender: AlertSender, alerts: Sequence[Alert], deadline: float, out: dict[str, str | None]) -> None:
    """Send alerts in order until the first failure or the deadline (the rest stay owed)."""
    for alert in alerts:
        if time.monotonic() >= deadline:
            return
        try:
            sender.send(alert, deadline)
        except Exception as exc:  # recorded against the alert and logged, never dropped
            out[alert.dedup_key] = redact(f"{type(exc).__name__}: {exc}")
            log.error(
                "alert %s (%s) was not delivered to %s: %s",
                alert.dedup_key,
                alert.summary(),
                sender.name,
                out[alert.dedup_key],
            )
            return
        out[alert.dedup_key] = None


def _record(sinks: AlertSinks, outcomes: list[DeliveryOutcome], read_error: str | None) -> list[DeliveryOutcome]:
    """Write the round's entries to the alert log; when it cannot be written (or could not even be
    read this round: a second wait on an unreachable lake would only delay the caller) mark the
    outcomes unrecorded with the log's error."""
    if sinks.log is None:
        return [replace(o, recorded=False) for o in outcomes]
    error = read_error
    if error is None:
        try:
            sinks.log.record([o.entry for o in outcomes], sinks.max_backlog)
            return outcomes
        except Exception as exc:  # the other sinks already have the alerts; the caller keeps the entries
            error = redact(f"{type(exc).__name__}: {exc}")
    log.error("alert log %s not written (%s); %d alert(s) not recorded", sinks.log, error, len(outcomes))
    return [replace(o, errors={**o.errors, LOG_SINK: error}, recorded=False) for o in outcomes]
