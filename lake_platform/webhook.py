"""The alert webhook: one JSON POST per alert, finished or abandoned by an overall deadline.

``requests``' ``timeout`` bounds each socket read, not the request: a server that answers one byte
every few seconds keeps such a client waiting forever. :func:`post_json` therefore opens the
connection itself (``http.client``) and arms a timer that shuts the socket down at the deadline,
so connecting, sending, the status line, the headers and the body all end by then. The POST goes
straight to the URL's host (no HTTP proxy).
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from darkhaloscope.errors import InputError
from darkhaloscope.retry import TRANSIENT_HTTP_STATUSES, RetriesExhausted, RetryPolicy, call_with_retries, seconds_left

from .alerts import Alert, AlertDeliveryError, safe_url

#: Bytes of a webhook's answer that are read (the status decides; the body is only quoted in errors).
_MAX_ANSWER = 4096


class DeadlineExceeded(AlertDeliveryError):
    """The request had not finished when its deadline came."""


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes


class HttpStatusError(AlertDeliveryError):
    """The server answered with a status outside 2xx."""

    def __init__(self, url: str, answer: HttpAnswer):
        super().__init__(f"{safe_url(url)} answered HTTP {answer.status}: {answer.body[:160]!r}")
        self.status = answer.status


def post_json(
    url: str, document: dict, deadline: float, connect_timeout_s: float, headers: dict | None = None
) -> HttpAnswer:
    """POST ``document`` as JSON to ``url``; everything ends by ``deadline`` (a ``time.monotonic()`` value).

    Raises :class:`DeadlineExceeded` when time runs out (however slowly the server answers),
    ``ConnectionError`` / ``OSError`` when the server is unreachable.
    """
    parts = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    left = seconds_left(deadline)
    if left <= 0:
        raise DeadlineExceeded(f"{safe_url(url)}: no time left before the deadline")
    conn = conn_cls(parts.hostname, parts.port, timeout=min(connect_timeout_s, left))
    aborted = threading.Event()
    try:
        conn.connect()
        sock = conn.sock
        sock.settimeout(max(0.001, seconds_left(deadline)))

        def abort() -> None:
            aborted.set()
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked read at once
            except OSError:
                pass  # already closed: the request ended by itself

        timer = threading.Timer(seconds_left(deadline), abort)
        timer.daemon = True
        timer.start()
        try:
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            body = json.dumps(document, sort_keys=True, allow_nan=False).encode("utf-8")
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            return HttpAnswer(resp.status, resp.read(_MAX_ANSWER))
        finally:
            timer.cancel()
    except (OSError, http.client.HTTPException) as exc:
        if aborted.is_set() or isinstance(exc, TimeoutError):
            raise DeadlineExceeded(
                f"{safe_url(url)}: no complete answer before the deadline ({type(exc).__name__})"
            ) from exc
        raise ConnectionError(f"{safe_url(url)}: {type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()


def _transient(exc: BaseException) -> bool:
    """Connection failures and 408/425/429/5xx answers are worth another attempt; the rest are not."""
    if isinstance(exc, HttpStatusError):
        return exc.status in TRANSIENT_HTTP_STATUSES
    return isinstance(exc, ConnectionError) and not isinstance(exc, DeadlineExceeded)


class WebhookSink:
    """POSTs one JSON document per alert (:meth:`Alert.to_dict` plus a one-line ``text``, so
    Slack-style incoming webhooks show it) to ``url``.

    ``deadline_s``: the most time one delivery round spends on this webhook, all alerts, attempts
    and back-off waits included. Within it, connection failures and 408/425/429/5xx answers are
    retried up to ``max_attempts`` in all with back-off from ``backoff_s`` (doubling, full jitter);
    other 4xx answers fail at once. ``connect_timeout_s`` bounds opening a connection.
    """

    def __init__(
        self,
        url: str,
        deadline_s: float = 10.0,
        connect_timeout_s: float = 3.0,
        max_attempts: int = 3,
        backoff_s: float = 0.5,
        name: str = "webhook",
    ):
        if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
            raise InputError(
                f"webhook URL (DHS_ALERT_WEBHOOK) must start with http:// or https://, got {safe_url(str(url))!r}"
            )
        if not (deadline_s > 0 and connect_timeout_s > 0):
            raise InputError(
                f"webhook deadline_s={deadline_s} and connect_timeout_s={connect_timeout_s} must be > 0 seconds"
            )
        self.url = url
        self.deadline_s = float(deadline_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.policy = RetryPolicy(max_attempts=max_attempts, backoff_base_s=backoff_s, backoff_max_s=8 * backoff_s)
        self.name = name

    def __repr__(self) -> str:  # the URL path may be a secret (Slack incoming webhooks)
        url = safe_url(self.url)
        return f"WebhookSink({url!r}, deadline_s={self.deadline_s}, max_attempts={self.policy.max_attempts})"

    def send(self, alert: Alert, deadline: float) -> None:
        """POST ``alert``; raise AlertDeliveryError (naming the last fault) unless it was accepted by ``deadline``."""
        document = dict(alert.to_dict(), text=alert.summary())

        def attempt() -> None:
            answer = post_json(self.url, document, deadline, self.connect_timeout_s)
            if not 200 <= answer.status < 300:
                raise HttpStatusError(self.url, answer)

        try:
            call_with_retries(attempt, _transient, self.policy.until(deadline), (alert.dedup_key,))
        except RetriesExhausted as exc:
            raise AlertDeliveryError(
                f"webhook {safe_url(self.url)} did not accept alert {alert.dedup_key}: {exc}"
            ) from exc
