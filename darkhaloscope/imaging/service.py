"""Client for the Legacy Surveys viewer's ``fits-cutout`` endpoint (legacysurvey.org/viewer).

One HTTP GET per target returns a FITS file whose primary HDU is a float32 cube
``(n_bands, size, size)`` in nanomaggies per pixel, with header ``BANDS='grz'``; with ``&invvar``
an extension with ``IMAGETYP='INVVAR'`` holds the inverse variance (1/nanomaggy²) of the same
shape. Stamps come back as ``[band, y, x]``, North up, East left, target at pixel
``(size // 2, size // 2)``.

Reliability rules: a target that cannot be fetched is reported as a failure and never replaced by
zeros; transient faults (5xx, 429, connection errors, timeouts, stalls, truncated bodies) are
retried with exponential back-off and full jitter; client errors (other 4xx) are not retried; a
body that is not FITS (an HTML page from a proxy or the wrong base URL) raises :class:`InputError` naming the URL, because it means the
service is misconfigured rather than that one target is unlucky.
"""

from __future__ import annotations

import io
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Sequence

import numpy as np
import requests
import urllib3
from astropy.io import fits

from ..constants import PIXEL_SCALE_ARCSEC, STAMP_SIZE
from ..errors import InputError
from ..retry import TRANSIENT_HTTP_STATUSES, RetriesExhausted, RetryPolicy, call_with_retries

#: FITS files are whole multiples of this many bytes; anything else was cut short in transit.
FITS_BLOCK = 2880
#: Bytes of a non-FITS body quoted in error messages.
BODY_EXCERPT = 160
_CHUNK = 64 * 1024


class TransientFetchError(RuntimeError):
    """A fault that a later attempt may not see (5xx, timeout, stall, truncated body)."""


class HTTPStatusError(RuntimeError):
    """The service refused the request with a client error (4xx); retrying cannot help."""

    def __init__(self, url: str, status: int, excerpt: bytes):
        super().__init__(f"{url} answered HTTP {status}: {excerpt!r}")
        self.status = status


@dataclass(frozen=True)
class CutoutResult:
    """One fetched cutout.

    image: float32 (n_bands, size, size), nanomaggies per pixel, ``[band, y, x]``.
    invvar: float32 of the same shape in 1/nanomaggy², or None when the service sent no
    INVVAR HDU (then ``'no_invvar'`` is in ``flags``).
    attempts: HTTP requests made for this target (1 = first try succeeded).
    """

    key: Hashable
    ra: float
    dec: float
    url: str
    image: np.ndarray
    invvar: np.ndarray | None
    bands: str
    attempts: int
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class CutoutFailure:
    """A target that could not be fetched; nothing (in particular no zero image) stands in for it.

    kind: ``'http_<status>'`` for a refused request, ``'retries_exhausted'`` after transient faults.
    """

    key: Hashable
    ra: float
    dec: float
    url: str
    attempts: int
    kind: str
    message: str


@dataclass
class FetchOutcome:
    """Result of :meth:`CutoutServiceClient.fetch_many`, each list in the order of the targets."""

    results: list[CutoutResult] = field(default_factory=list)
    failures: list[CutoutFailure] = field(default_factory=list)
    skipped: list[Hashable] = field(default_factory=list)

    def stacked_images(self) -> np.ndarray:
        """(N, n_bands, size, size) float32 nanomaggies of the successful results, in order."""
        if not self.results:
            raise InputError("no cutouts were fetched; nothing to stack")
        return np.stack([r.image for r in self.results])


def _fmt_deg(x: float) -> str:
    # 1e-7 deg = 0.36 mas: far below a pixel, and a fixed text form keeps URLs and seeds stable.
    return f"{float(x):.7f}"


class CutoutServiceClient:
    """Thread-safe client of ``{base_url}/fits-cutout``.

    Parameters: ``size`` in pixels (square stamp), ``pixscale`` in arcsec/pixel, ``bands`` the
    band letters in channel order, ``max_concurrency`` the most requests in flight at once (over
    every thread using this client), ``timeout_s`` the connect timeout, the longest silence while
    reading and the longest total time for one response body (seconds), ``max_retries`` retries
    after the first attempt, back-off ``min(backoff_max_s, backoff_base_s * 2**attempt)`` seconds
    with full jitter. ``sleep`` is called for back-off waits (inject a recorder in tests).
    """

    def __init__(
        self,
        base_url: str,
        layer: str = "ls-dr10",
        size: int = STAMP_SIZE,
        pixscale: float = PIXEL_SCALE_ARCSEC,
        bands: str = "grz",
        max_concurrency: int = 8,
        timeout_s: float = 30.0,
        max_retries: int = 4,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InputError(f"cutout service base URL must start with http:// or https://, got {base_url!r}")
        if int(size) < 1 or int(size) != size:
            raise InputError(f"cutout size must be a positive integer number of pixels, got {size!r}")
        if not bands or len(set(bands)) != len(bands):
            raise InputError(f"bands must be distinct band letters, got {bands!r}")
        if max_concurrency < 1 or max_retries < 0 or timeout_s <= 0 or backoff_base_s < 0 or backoff_max_s < 0:
            raise InputError(
                f"invalid client limits: max_concurrency={max_concurrency}, max_retries={max_retries}, "
                f"timeout_s={timeout_s}, backoff_base_s={backoff_base_s}, backoff_max_s={backoff_max_s}"
            )
        self.base_url = base_url.rstrip("/")
        self.layer = layer
        self.size = int(size)
        self.pixscale = float(pixscale)
        self.bands = bands
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.retry = RetryPolicy(
            max_attempts=self.max_retries + 1, backoff_base_s=float(backoff_base_s), backoff_max_s=float(backoff_max_s)
        )
        self._sleep = sleep
        # Bounds requests in flight across all threads and fetch_many calls sharing this client;
        # it is not held during back-off, so a sleeping retry does not block a free slot.
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._sessions_lock = threading.Lock()
        # One long-lived pool, so worker threads and their sessions (keep-alive connections) are
        # reused by every fetch_many call instead of piling up.
        self._pool: ThreadPoolExecutor | None = None

    # -- plumbing -----------------------------------------------------------------------------

    def url_for(self, ra: float, dec: float) -> str:
        """The fits-cutout URL for (ra, dec) in degrees."""
        return (
            f"{self.base_url}/fits-cutout?ra={_fmt_deg(ra)}&dec={_fmt_deg(dec)}&layer={self.layer}"
            f"&pixscale={self.pixscale:g}&bands={self.bands}&size={self.size}&invvar"
        )

    def backoff_s(self, ra: float, dec: float, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt + 1``: full jitter, U(0, cap), seeded by (ra, dec, attempt)."""
        return self.retry.backoff_s(attempt, (_fmt_deg(ra), _fmt_deg(dec)))

    def _session(self) -> requests.Session:
        # requests.Session is not documented as thread-safe, so each worker thread gets its own.
        sess = getattr(self._local, "session", None)
        if sess is None:
            sess = requests.Session()
            adapter = requests.adapters.HTTPAdapter(pool_maxsize=self.max_concurrency, max_retries=0)
            sess.mount("http://", adapter)
            sess.mount("https://", adapter)
            self._local.session = sess
            with self._sessions_lock:
                self._sessions.append(sess)
        return sess

    def _executor(self) -> ThreadPoolExecutor:
        with self._sessions_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix="cutout")
            return self._pool

    def close(self) -> None:
        """Stop the worker threads and close every HTTP session this client opened."""
        with self._sessions_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        with self._sessions_lock:
            for sess in self._sessions:
                sess.close()
            self._sessions.clear()

    def __enter__(self) -> "CutoutServiceClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _get(self, url: str) -> bytes:
        """One GET; returns the complete body or raises TransientFetchError / HTTPStatusError / InputError."""
        with self._slots:
            t0 = time.monotonic()
            try:
                resp = self._session().get(url, timeout=(self.timeout_s, self.timeout_s), stream=True)
            except (
                requests.exceptions.MissingSchema,
                requests.exceptions.InvalidSchema,
                requests.exceptions.InvalidURL,
            ) as e:
                raise InputError(f"invalid cutout URL {url}: {e}") from e
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as e:
                raise TransientFetchError(f"{url}: {type(e).__name__}: {e}") from e
            try:
                if resp.status_code in TRANSIENT_HTTP_STATUSES:
                    raise TransientFetchError(f"{url} answered HTTP {resp.status_code}")
                raw = resp.raw
                chunks = []
                try:
                    if resp.status_code >= 400:
                        raise HTTPStatusError(url, resp.status_code, raw.read1(BODY_EXCERPT, decode_content=True))
                    # read1 returns whatever has arrived, so the total deadline below is checked
                    # even while a server trickles bytes slower than the read timeout.
                    while chunk := raw.read1(_CHUNK, decode_content=True):
                        chunks.append(chunk)
                        if time.monotonic() - t0 > self.timeout_s:
                            raise TransientFetchError(f"{url}: body still arriving after {self.timeout_s} s (stalled)")
                except (urllib3.exceptions.HTTPError, OSError) as e:
                    raise TransientFetchError(f"{url}: body cut short: {type(e).__name__}: {e}") from e
                return b"".join(chunks)
            finally:
                resp.close()

    # -- parsing ------------------------------------------------------------------------------

    def parse_fits(self, body: bytes, url: str) -> tuple[np.ndarray, np.ndarray | None, tuple[str, ...]]:
        """FITS bytes -> (image, invvar or None, flags); float32 native-endian (n_bands, size, size).

        Raises InputError (naming ``url``) for HTML or other non-FITS bodies and wrong shapes or
        bands; TransientFetchError for a body that is not a whole number of FITS blocks.
        """
        head = body[:BODY_EXCERPT]
        if not body.startswith(b"SIMPLE  ="):
            stripped = head.lstrip().lower()
            what = "HTML" if stripped.startswith((b"<!doctype html", b"<html", b"<")) else "data that is not FITS"
            if not body:
                raise TransientFetchError(f"{url}: empty body")
            raise InputError(f"{url} returned {what} instead of a FITS cutout; body starts {head!r}")
        if len(body) % FITS_BLOCK:
            raise TransientFetchError(
                f"{url}: FITS body of {len(body)} bytes is not a multiple of {FITS_BLOCK} (truncated)"
            )
        try:
            with fits.open(io.BytesIO(body), memmap=False, lazy_load_hdus=False) as hdul:
                # astropy only warns about short data (and warning filters are process-wide, not
                # to be changed from the fetching threads): a short file must be an error here
                ends = [hdul.fileinfo(i)["datLoc"] + hdul.fileinfo(i)["datSpan"] for i in range(len(hdul))]
                if max(ends) > len(body):
                    raise TransientFetchError(
                        f"{url}: FITS body of {len(body)} bytes is shorter than its headers say ({max(ends)} bytes; truncated)"
                    )
                hdus = [(h.header.copy(), None if h.data is None else np.array(h.data)) for h in hdul]
        except (OSError, ValueError) as e:
            raise TransientFetchError(f"{url}: unreadable FITS ({type(e).__name__}: {e})") from e
        header, image = hdus[0]
        expected = (len(self.bands), self.size, self.size)
        if image is None or image.shape != expected:
            raise InputError(
                f"{url}: primary HDU has shape {None if image is None else image.shape}, expected {expected}"
            )
        flags: list[str] = []
        got_bands = header.get("BANDS")
        if got_bands is None:
            flags.append("no_bands_header")
        elif str(got_bands).strip() != self.bands:
            raise InputError(f"{url}: header BANDS={got_bands!r}, requested {self.bands!r}")
        invvar = None
        for hdr, data in hdus[1:]:
            if str(hdr.get("IMAGETYP", "")).strip().upper() == "INVVAR":
                if data is None or data.shape != expected:
                    raise InputError(
                        f"{url}: INVVAR HDU has shape {None if data is None else data.shape}, expected {expected}"
                    )
                invvar = data.astype(np.float32, copy=False)
                break
        if invvar is None:
            flags.append("no_invvar")
        return image.astype(np.float32, copy=False), invvar, tuple(flags)

    # -- public -------------------------------------------------------------------------------

    def _fetch_one(self, key: Hashable, ra: float, dec: float) -> CutoutResult | CutoutFailure:
        url = self.url_for(ra, dec)
        tries = 0

        def attempt() -> tuple[np.ndarray, np.ndarray | None, tuple[str, ...]]:
            nonlocal tries
            tries += 1
            return self.parse_fits(self._get(url), url)

        try:
            (image, invvar, flags), _ = call_with_retries(
                attempt,
                lambda e: isinstance(e, TransientFetchError),
                self.retry,
                (_fmt_deg(ra), _fmt_deg(dec)),
                self._sleep,
            )
        except HTTPStatusError as e:
            return CutoutFailure(key, float(ra), float(dec), url, tries, f"http_{e.status}", str(e))
        except RetriesExhausted as e:
            return CutoutFailure(key, float(ra), float(dec), url, e.attempts, "retries_exhausted", str(e.last))
        return CutoutResult(key, float(ra), float(dec), url, image, invvar, self.bands, tries, flags)

    def fetch(self, ra: float, dec: float, key: Hashable = None) -> CutoutResult:
        """Fetch one cutout at (ra, dec) degrees, retrying transient faults; raise InputError when it fails."""
        out = self._fetch_one(key, ra, dec)
        if isinstance(out, CutoutFailure):
            raise InputError(
                f"cutout at ra={ra}, dec={dec} not obtained after {out.attempts} attempts ({out.kind}): {out.message}"
            )
        return out

    def fetch_many(
        self,
        targets: Iterable[tuple[Hashable, float, float]],
        already_done: Iterable[Hashable] = (),
        on_result: Callable[[CutoutResult], None] | None = None,
    ) -> FetchOutcome:
        """Fetch ``(key, ra_deg, dec_deg)`` targets concurrently, skipping keys in ``already_done``.

        ``on_result`` is called (from the calling thread, in completion order) as each cutout
        arrives, so a caller can commit it at once and a later run can resume. Per-target
        failures are collected, never replaced by zeros. An InputError (non-FITS body, wrong
        shape or bands: a misconfigured service) cancels the remaining work and propagates.
        Results, failures and skipped keys come back in the order of ``targets``.
        """
        done = set(already_done)
        todo: list[tuple[int, Hashable, float, float]] = []
        outcome = FetchOutcome()
        seen: set = set()
        for i, (key, ra, dec) in enumerate(targets):
            if key in seen:
                raise InputError(f"target key {key!r} appears more than once")
            seen.add(key)
            if not (np.isfinite(ra) and np.isfinite(dec) and 0.0 <= ra < 360.0 and abs(dec) <= 90.0):
                raise InputError(f"target {key!r} has invalid coordinates ra={ra}, dec={dec} (degrees)")
            if key in done:
                outcome.skipped.append(key)
            else:
                todo.append((i, key, float(ra), float(dec)))
        by_index: dict[int, CutoutResult | CutoutFailure] = {}
        window = 2 * self.max_concurrency  # keeps memory flat for millions of targets
        pool = self._executor()
        pending: dict[Future, int] = {}
        it = iter(todo)
        try:
            while True:
                while len(pending) < window:
                    nxt = next(it, None)
                    if nxt is None:
                        break
                    pending[pool.submit(self._fetch_one, nxt[1], nxt[2], nxt[3])] = nxt[0]
                if not pending:
                    break
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    idx = pending.pop(fut)
                    res = fut.result()  # re-raises InputError from a worker
                    by_index[idx] = res
                    if on_result is not None and isinstance(res, CutoutResult):
                        on_result(res)
        finally:
            # On an error, drop queued work and let requests already running finish, so no thread
            # outlives this call still writing into a result nobody reads.
            for fut in pending:
                fut.cancel()
            wait(pending)
        for idx in sorted(by_index):
            res = by_index[idx]
            (outcome.results if isinstance(res, CutoutResult) else outcome.failures).append(res)
        return outcome


def targets_from_columns(
    keys: Sequence[Hashable], ra: Sequence[float], dec: Sequence[float]
) -> list[tuple[Hashable, float, float]]:
    """Zip key, ra and dec columns (degrees) into targets, checking lengths and coordinate ranges."""
    ra_a = np.asarray(ra, dtype=np.float64)
    dec_a = np.asarray(dec, dtype=np.float64)
    if not (len(keys) == ra_a.size == dec_a.size):
        raise InputError(f"keys ({len(keys)}), ra ({ra_a.size}) and dec ({dec_a.size}) differ in length")
    bad = ~(np.isfinite(ra_a) & np.isfinite(dec_a) & (ra_a >= 0) & (ra_a < 360) & (np.abs(dec_a) <= 90))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"target {keys[i]!r} has invalid coordinates ra={ra_a[i]}, dec={dec_a[i]} (degrees)")
    return list(zip(keys, ra_a.tolist(), dec_a.tolist()))
