"""An HTTP/1.1 proxy (on loopback unless told otherwise) that forwards to an upstream server and
injects scripted faults.

Put it between an S3 client (pyarrow's AWS SDK, boto3) and the moto server to see how the lake
behaves when S3 misbehaves. It parses each request (Content-Length or chunked bodies, keep-alive
connections, ``Expect: 100-continue``) and asks the *rule* what to do with it:

- ``"pass"``: forward unchanged on a fresh upstream connection and relay the response.
- ``"error500"``: answer ``500 InternalError`` (S3 XML) without forwarding.
- ``"drop"``: close the client connection without any answer (request not forwarded).
- ``"drop_mid_response"``: forward, then send the status line, headers and half of the body, and
  close: the server did the work but the client never saw the whole reply.
- ``"stall"``: hold the connection silent for ``stall_s`` seconds (longer than the client's
  timeout), then close.
- ``"forbidden"``: answer ``403 InvalidAccessKeyId`` (S3 XML), as S3 does for an unknown key.
- ``"slowdown"``: answer ``503 SlowDown`` (S3 XML), as S3 does when throttling a prefix.
- ``"hold"``: keep the request unanswered until :meth:`FaultProxy.release` (or the proxy stops),
  then forward it: a task caught mid-request, for as long as a test needs (``holding`` is set
  once one is held, ``held_from`` lists the clients' addresses).

A rule is ``rule(method, path, headers, index) -> action`` (``index`` counts requests from 0);
:meth:`FaultProxy.fail` builds the common one (fail the next N matching requests). Counters:
``requests`` (every request seen), ``actions`` (Counter of actions taken) and ``log`` (method,
path, action). Threads are daemons with socket timeouts; the proxy stops after ``lifetime_s``
even if a test forgets to stop it.
"""

from __future__ import annotations

import re
import socket
import threading
from collections import Counter
from typing import Callable

ACTIONS = ("pass", "error500", "drop", "drop_mid_response", "stall", "forbidden", "slowdown", "hold")
Rule = Callable[[str, str, dict, int], str]

_S3_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{msg}</Message>'
    "<RequestId>FAULTPROXY</RequestId></Error>"
)


class _Reader:
    """Buffered reads from a socket that keep the raw bytes (needed to relay them unchanged)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buf += data
        return True

    def readline(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError("peer closed the connection mid-line")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line + b"\r\n"

    def read(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise ConnectionError("peer closed the connection mid-body")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_to_close(self) -> bytes:
        while self._fill():
            pass
        out, self.buf = self.buf, b""
        return out

    def at_eof(self) -> bool:
        return not self.buf and not self._fill()


def _read_head(r: _Reader) -> tuple[bytes, list[bytes], dict[str, str]]:
    first = r.readline()
    lines = []
    headers: dict[str, str] = {}
    while True:
        line = r.readline()
        if line == b"\r\n":
            break
        lines.append(line)
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return first, lines, headers


def _read_body(r: _Reader, headers: dict[str, str], allow_to_close: bool) -> bytes:
    """Raw body bytes (chunked framing kept) following ``headers``."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raw = b""
        while True:
            size_line = r.readline()
            raw += size_line
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers up to the empty line
                    t = r.readline()
                    raw += t
                    if t == b"\r\n":
                        return raw
            raw += r.read(size + 2)
    if "content-length" in headers:
        return r.read(int(headers["content-length"]))
    return r.read_to_close() if allow_to_close else b""


class FaultProxy:
    """Loopback proxy to ``upstream`` (host, port) with scripted faults; use as a context manager."""

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        stall_s: float = 3.0,
        lifetime_s: float = 120.0,
        listen_host: str = "127.0.0.1",
    ):
        self.upstream = (upstream_host, upstream_port)
        self.listen_host = listen_host
        self.holding = threading.Event()
        self.held_from: list[tuple[str, int]] = []  # client (address, port) of each held request
        self._released = threading.Event()
        self.stall_s = stall_s
        self.rule: Rule = lambda method, path, headers, index: "pass"
        self.requests = 0
        self.actions: Counter = Counter()
        self.log: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((listen_host, 0))
        self._listener.listen(64)
        self._listener.settimeout(0.2)  # so the accept loop notices stop() promptly
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="fault-proxy", daemon=True)
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.listen_host}:{self.port}"

    # ------------------------------------------------------------------ scripting
    def set_rule(self, rule: Rule) -> None:
        """Replace the rule deciding each request's fate."""
        with self._lock:
            self.rule = rule

    def fail(
        self,
        action: str,
        times: int | None = None,
        method: str | None = None,
        path_re: str | None = None,
        header: str | None = None,
    ) -> None:
        """Apply ``action`` to the next ``times`` requests (all when None) matching method/path/header name."""
        if action not in ACTIONS:
            raise ValueError(f"unknown fault action {action!r}; one of {ACTIONS}")
        remaining = [times]
        pattern = re.compile(path_re) if path_re else None

        def rule(m: str, p: str, h: dict, i: int) -> str:
            if method and m != method:
                return "pass"
            if pattern and not pattern.search(p):
                return "pass"
            if header and header.lower() not in h:
                return "pass"
            if remaining[0] is None:
                return action
            if remaining[0] > 0:
                remaining[0] -= 1
                return action
            return "pass"

        self.set_rule(rule)

    def clear(self) -> None:
        """Forward everything from now on."""
        self.set_rule(lambda method, path, headers, index: "pass")

    def release(self) -> None:
        """Forward the held requests (and any later one a rule holds) and clear the rule."""
        self.clear()
        self._released.set()

    def reset_counters(self) -> None:
        """Zero the counters and forget held requests (``holding`` cleared, the next hold holds)."""
        with self._lock:
            self.requests = 0
            self.actions.clear()
            self.log.clear()
            self.held_from.clear()
            self.holding.clear()
            self._released.clear()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "FaultProxy":
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._released.set()
        self._timer.cancel()
        try:
            self._listener.close()
        except OSError:
            pass  # already closed by an earlier stop(): nothing left to release

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------ serving
    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return  # listener closed by stop()
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _decide(self, method: str, path: str, headers: dict) -> str:
        with self._lock:
            index = self.requests
            self.requests += 1
            action = self.rule(method, path, headers, index)
            if action not in ACTIONS:
                raise ValueError(f"fault rule returned unknown action {action!r}")
            self.actions[action] += 1
            self.log.append((method, path, action))
        return action

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        r = _Reader(conn)
        try:
            while not self._stop.is_set():
                try:
                    if r.at_eof():
                        return
                    first, lines, headers = _read_head(r)
                except (ConnectionError, socket.timeout, OSError):
                    return  # client went away between requests: normal end of a keep-alive connection
                method, path = first.decode("latin-1").split(" ")[:2]
                if headers.get("expect", "").lower() == "100-continue":
                    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    lines = [ln for ln in lines if not ln.lower().startswith(b"expect:")]
                body = _read_body(r, headers, allow_to_close=False)
                action = self._decide(method, path, headers)
                if action == "error500":
                    self._reply_error(conn, method, 500, "Internal Server Error", "InternalError", "injected fault")
                elif action == "forbidden":
                    self._reply_error(
                        conn,
                        method,
                        403,
                        "Forbidden",
                        "InvalidAccessKeyId",
                        "The AWS Access Key Id you provided does not exist in our records.",
                    )
                elif action == "slowdown":
                    self._reply_error(conn, method, 503, "Slow Down", "SlowDown", "Please reduce your request rate.")
                elif action == "drop":
                    return
                elif action == "stall":
                    self._stop.wait(self.stall_s)
                    return
                else:
                    if action == "hold":
                        with self._lock:
                            self.held_from.append(conn.getpeername()[:2])
                        self.holding.set()
                        self._released.wait()
                        if self._stop.is_set():
                            return
                    status, resp = self._forward(first + b"".join(lines) + b"\r\n" + body, method)
                    if action == "drop_mid_response":
                        head_end = resp.index(b"\r\n\r\n") + 4
                        cut = head_end + max(1, (len(resp) - head_end) // 2) if len(resp) > head_end else head_end - 10
                        conn.sendall(resp[:cut])
                        return
                    conn.sendall(resp)
                if headers.get("connection", "").lower() == "close":
                    return
        finally:
            conn.close()

    def _reply_error(self, conn: socket.socket, method: str, code: int, reason: str, s3_code: str, msg: str) -> None:
        body = _S3_ERROR.format(code=s3_code, msg=msg).encode()
        head = (
            f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            f"x-amz-request-id: FAULTPROXY\r\n\r\n"
        ).encode()
        # A reply to HEAD carries no body, or the bytes would be read as the next response.
        conn.sendall(head if method == "HEAD" else head + body)

    def _forward(self, request: bytes, method: str) -> tuple[int, bytes]:
        """Send one raw request upstream on a fresh connection; return (status, raw response)."""
        with socket.create_connection(self.upstream, timeout=30) as up:
            up.sendall(request)
            r = _Reader(up)
            while True:
                first, lines, headers = _read_head(r)
                status = int(first.split(b" ")[1])
                if status != 100:
                    break  # skip interim 100 Continue replies
            no_body = method == "HEAD" or status in (204, 304)
            body = b"" if no_body else _read_body(r, headers, allow_to_close=True)
            if "content-length" not in headers and "transfer-encoding" not in headers and not no_body:
                # Body delimited by the upstream closing: give the client a length instead.
                lines.append(f"Content-Length: {len(body)}\r\n".encode())
            return status, first + b"".join(lines) + b"\r\n" + body
