"""A scriptable loopback imitation of the Legacy Surveys ``fits-cutout`` endpoint for tests.

``with CutoutServer(size=15) as srv:`` serves on 127.0.0.1 (or ``host``; a free port) from a
background thread. Each target (keyed by the ra/dec text of the request) answers with deterministic FITS
content, or follows a script of behaviours, one per request, the last one repeating:

- ``"ok"``: the FITS cube (+ INVVAR HDU) of :func:`expected_cube`.
- ``"no_invvar"``: the cube without the INVVAR HDU.
- an int (500, 503, 404, …): that HTTP status with a short text body.
- ``"truncate"``: a full Content-Length header, half the body, then the connection closes.
- ``"stall"``: sleeps ``stall_s`` (longer than the client's timeout) before answering.
- ``"trickle"``: the FITS body in 16 pieces ``trickle_s`` apart (each gap shorter than the client's
  read timeout, the whole longer than its total deadline).
- ``"html"``: status 200 with an HTML page.

The server counts requests per target and the largest number held at once (requests in their
``hold_s`` wait before answering, so overlap is observable), and shuts itself down after
``lifetime_s`` seconds even when a test forgets to.
"""

from __future__ import annotations

import io
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np
from astropy.io import fits

from darkhaloscope.seeding import rng_for

HTML_PAGE = b"<!DOCTYPE html>\n<html><head><title>Legacy Survey viewer</title></head><body>maintenance</body></html>\n"


def target_id(ra: float, dec: float) -> str:
    """The text the client puts in the URL for (ra, dec) degrees (7 decimals)."""
    return f"{float(ra):.7f},{float(dec):.7f}"


def expected_cube(ra: float, dec: float, size: int, bands: str = "grz") -> tuple[np.ndarray, np.ndarray]:
    """(image, invvar) float32 (n_bands, size, size) that the server sends for (ra, dec)."""
    rng = rng_for("cutout-server", target_id(ra, dec))
    image = rng.normal(0.0, 0.01, (len(bands), size, size)).astype(np.float32)
    image[:, size // 2, size // 2] += np.float32(1.0)
    invvar = np.full((len(bands), size, size), 1.0e4, dtype=np.float32)
    return image, invvar


def fits_bytes(image: np.ndarray, invvar: np.ndarray | None, bands: str) -> bytes:
    """A FITS file laid out like the viewer's write_cutout: primary cube + optional INVVAR HDU."""
    hdr = fits.Header()
    hdr["BANDS"] = bands
    for i, b in enumerate(bands):
        hdr[f"BAND{i}"] = b
    hdr["IMAGETYP"] = "IMAGE"
    hdus = [fits.PrimaryHDU(data=image, header=hdr)]
    if invvar is not None:
        ihdr = fits.Header()
        ihdr["IMAGETYP"] = "INVVAR"
        hdus.append(fits.ImageHDU(data=invvar, header=ihdr))
    buf = io.BytesIO()
    fits.HDUList(hdus).writeto(buf)
    return buf.getvalue()


class CutoutServer:
    """Context manager running the imitation service; see the module docstring."""

    def __init__(
        self,
        size: int = 15,
        bands: str = "grz",
        stall_s: float = 0.6,
        hold_s: float = 0.0,
        trickle_s: float = 0.05,
        lifetime_s: float = 30.0,
        host: str = "127.0.0.1",
    ):
        self.host = host
        self.size = size
        self.bands = bands
        self.stall_s = stall_s
        self.hold_s = hold_s
        self.trickle_s = trickle_s
        self.lifetime_s = lifetime_s
        self.scripts: dict[str, list] = {}
        self.requests: Counter = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None

    def script(self, ra: float, dec: float, behaviours: list) -> None:
        """Answer requests for (ra, dec) with ``behaviours`` in turn; the last one repeats."""
        self.scripts[target_id(ra, dec)] = list(behaviours)

    def count(self, ra: float, dec: float) -> int:
        """Requests received so far for (ra, dec)."""
        with self._lock:
            return self.requests[target_id(ra, dec)]

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def _next_behaviour(self, tid: str):
        with self._lock:
            n = self.requests[tid]
            self.requests[tid] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        script = self.scripts.get(tid, ["ok"])
        return script[min(n, len(script) - 1)]

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _make_handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def _send(
                self, status: int, body: bytes, ctype: str, send_bytes: int | None = None, pieces: int = 1
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                body = body if send_bytes is None else body[:send_bytes]
                step = -(-len(body) // pieces)
                for i in range(0, len(body), step):
                    if i:
                        time.sleep(server.trickle_s)
                    self.wfile.write(body[i : i + step])
                    self.wfile.flush()

            def do_GET(self):
                parts = urlsplit(self.path)
                if parts.path != "/fits-cutout":
                    self._send(404, b"no such endpoint", "text/plain")
                    return
                q = parse_qs(parts.query, keep_blank_values=True)
                try:
                    ra, dec = float(q["ra"][0]), float(q["dec"][0])
                    size = int(q["size"][0])
                except (KeyError, ValueError):
                    self._send(400, b"bad ra/dec/size", "text/plain")
                    return
                tid = target_id(ra, dec)
                what = server._next_behaviour(tid)
                try:
                    if server.hold_s:
                        time.sleep(server.hold_s)
                finally:
                    # Counted out before the first byte of the answer: once the client has the
                    # whole answer and starts its next request, this one is no longer counted.
                    server._done()
                try:
                    if what == "stall":
                        time.sleep(server.stall_s)
                        what = "ok"
                    if isinstance(what, int):
                        self._send(what, f"HTTP {what} for {tid}".encode(), "text/plain")
                    elif what == "html":
                        self._send(200, HTML_PAGE, "text/html")
                    elif what in ("ok", "no_invvar", "truncate", "trickle"):
                        bands = q.get("bands", [server.bands])[0]
                        image, invvar = expected_cube(ra, dec, size, bands)
                        body = fits_bytes(image, None if what == "no_invvar" else invvar, bands)
                        self._send(
                            200,
                            body,
                            "image/fits",
                            send_bytes=len(body) // 2 if what == "truncate" else None,
                            pieces=16 if what == "trickle" else 1,
                        )
                        if what == "truncate":
                            self.close_connection = True
                    else:
                        raise ValueError(f"unknown scripted behaviour {what!r}")
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up on a stalled answer, which is the behaviour under test.
                    pass

        return Handler

    def __enter__(self) -> "CutoutServer":
        self._httpd = ThreadingHTTPServer((self.host, 0), self._make_handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.lifetime_s, self._httpd.shutdown)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
