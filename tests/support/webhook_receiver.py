"""A loopback HTTP server that records every POST (path, headers, body), for alert tests.

``with WebhookReceiver() as rx:`` listens on 127.0.0.1 (a free port) in a background thread;
``rx.url`` is the address to give a WebhookSink (``rx.url + "/api/"`` works as a Slack API base,
since every answer is ``{"ok": true}`` JSON). ``rx.script([500, 500])`` makes the next two POSTs
fail with those statuses before answering 200 again; ``"trickle"`` in a script answers that POST
one byte every ``trickle_s`` seconds (status line, headers and body), as a stuck proxy does.
``WebhookReceiver(port=p)`` listens on a given port: stop one receiver and its port refuses
connections; start another on the same port and the webhook "recovers". The server stops after
``lifetime_s``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict
    body: bytes
    status: int  # what the receiver answered (0: an answer trickled out byte by byte)

    def json(self):
        return json.loads(self.body)


class WebhookReceiver:
    def __init__(self, lifetime_s: float = 60.0, port: int = 0, trickle_s: float = 3.0):
        self.received: list[Received] = []
        self._script: list = []
        self.trickle_s = trickle_s
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server naming)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer._lock:
                    action = outer._script.pop(0) if outer._script else 200
                    status = 200 if action == "trickle" else action
                    # a trickled answer never completes: recorded with status 0, never as accepted
                    outer.received.append(
                        Received(self.path, dict(self.headers.items()), body, 0 if action == "trickle" else status)
                    )
                payload = json.dumps({"ok": status < 300}).encode()
                answer = (
                    f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
                ).encode() + payload
                if action != "trickle":
                    self.wfile.write(answer)
                    return
                for i in range(len(answer)):  # one byte at a time: every read succeeds, the answer never ends
                    try:
                        self.wfile.write(answer[i : i + 1])
                        self.wfile.flush()
                    except OSError:
                        return  # the client gave up
                    time.sleep(outer.trickle_s)

            def log_message(self, *args):  # keep test output clean
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._timer = threading.Timer(lifetime_s, self._server.shutdown)
        self._timer.daemon = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, statuses: list) -> None:
        """Answer the next POSTs with these statuses or ``"trickle"`` (then 200 again)."""
        with self._lock:
            self._script = list(statuses)

    def accepted(self) -> list[Received]:
        """POSTs answered with a 2xx status."""
        with self._lock:
            return [r for r in self.received if 200 <= r.status < 300]

    def __enter__(self) -> "WebhookReceiver":
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
