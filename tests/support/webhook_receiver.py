"""A loopback HTTP server that records every POST (path, headers, body), for alert tests.

``with WebhookReceiver() as rx:`` listens on 127.0.0.1 (a free port) in a background thread;
``rx.url`` is the address to give a WebhookSink (``rx.url + "/api/"`` works as a Slack API base,
since every answer is ``{"ok": true}`` JSON). ``rx.script([500, 500])`` makes the next two POSTs
fail with those statuses before answering 200 again. The server stops after ``lifetime_s``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict
    body: bytes
    status: int  # what the receiver answered

    def json(self):
        return json.loads(self.body)


class WebhookReceiver:
    def __init__(self, lifetime_s: float = 60.0):
        self.received: list[Received] = []
        self._script: list[int] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server naming)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer._lock:
                    status = outer._script.pop(0) if outer._script else 200
                    outer.received.append(Received(self.path, dict(self.headers.items()), body, status))
                payload = json.dumps({"ok": status < 300}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):  # keep test output clean
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._timer = threading.Timer(lifetime_s, self._server.shutdown)
        self._timer.daemon = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, statuses: list[int]) -> None:
        """Answer the next POSTs with these statuses (then 200 again)."""
        with self._lock:
            self._script = list(statuses)

    def accepted(self) -> list[Received]:
        """POSTs answered with a 2xx status."""
        with self._lock:
            return [r for r in self.received if r.status < 300]

    def __enter__(self) -> "WebhookReceiver":
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
