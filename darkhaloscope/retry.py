"""The one retry helper of the library: transient faults of an HTTP peer, retried with back-off.

Every failure kind is retried by exactly one layer (``docs/reference/operations.md``):

- an S3 request of the lake or of the survey mirror: the AWS SDK's standard retry strategy inside
  pyarrow (``Lake(s3_max_attempts=...)``), nothing above it;
- an HTTP request to the cutout service or to an alert sink: :func:`call_with_retries` here,
  inside the client, nothing above it;
- a run whose process died (killed, out of memory): Dagster's run retries (``dagster.yaml``), which
  skip runs that failed in a step;
- permanent errors (bad input, refused credentials, a lake that is not a writable folder, a 4xx
  answer): no layer.

Built on tenacity; the back-off is "full jitter" (a uniform wait in [0, cap], the cap doubling per
attempt up to ``backoff_max_s``) drawn from a generator seeded by the caller's key, so two runs of
the same work wait the same way while different targets still spread their retries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Hashable, TypeVar

import tenacity

from .errors import InputError
from .seeding import rng_for

T = TypeVar("T")

#: HTTP statuses worth another attempt: request timeout, too early, throttling, server-side faults.
TRANSIENT_HTTP_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class RetriesExhausted(RuntimeError):
    """Every allowed attempt met a transient fault; ``attempts`` were made, ``last`` is the final fault."""

    def __init__(self, attempts: int, last: BaseException):
        super().__init__(f"{type(last).__name__}: {last} (after {attempts} attempt(s))")
        self.attempts = attempts
        self.last = last


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry one call.

    ``max_attempts`` counts the first try; waits are ``U(0, min(backoff_max_s, backoff_base_s *
    2**n))`` seconds before retry n+1; with ``deadline_s`` no attempt starts (and no wait is begun)
    that would end later than ``deadline_s`` seconds after the first one started.
    """

    max_attempts: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise InputError(
                f"retry policy needs max_attempts >= 1 and back-offs >= 0, got max_attempts={self.max_attempts}, "
                f"backoff_base_s={self.backoff_base_s}, backoff_max_s={self.backoff_max_s}"
            )
        if self.deadline_s is not None and not self.deadline_s > 0:
            raise InputError(f"retry deadline_s must be > 0 seconds, got {self.deadline_s}")

    def until(self, deadline: float) -> "RetryPolicy":
        """This policy bounded by ``deadline`` (a ``time.monotonic()`` instant): attempts and waits
        end by then (at least 1 ms is left, so a deadline already past still allows one try)."""
        return replace(self, deadline_s=max(1e-3, seconds_left(deadline)))

    def backoff_s(self, retry_index: int, jitter_key: tuple[Hashable, ...] = ()) -> float:
        """Seconds to wait before retry ``retry_index + 1`` (full jitter, seeded by ``jitter_key``)."""
        cap = min(self.backoff_max_s, self.backoff_base_s * 2.0**retry_index)
        return float(rng_for("retry-backoff", *map(str, jitter_key), retry_index).uniform(0.0, cap))


def call_with_retries(
    fn: Callable[[], T],
    transient: Callable[[BaseException], bool],
    policy: RetryPolicy,
    jitter_key: tuple[Hashable, ...] = (),
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, int]:
    """``(fn(), attempts)``, calling ``fn`` again after each exception for which ``transient`` is true.

    An exception that is not transient propagates at once, unchanged. When the attempts or the
    deadline run out, :class:`RetriesExhausted` is raised from the last transient fault.
    """
    stop = tenacity.stop_after_attempt(policy.max_attempts)
    if policy.deadline_s is not None:
        stop = stop | tenacity.stop_before_delay(policy.deadline_s)
    retrying = tenacity.Retrying(
        stop=stop,
        wait=lambda state: policy.backoff_s(state.attempt_number - 1, jitter_key),
        retry=tenacity.retry_if_exception(transient),
        sleep=sleep,
    )
    try:
        for attempt in retrying:
            with attempt:
                value = fn()
            if not attempt.retry_state.outcome.failed:
                return value, attempt.retry_state.attempt_number
    except tenacity.RetryError as exc:
        last = exc.last_attempt
        raise RetriesExhausted(last.attempt_number, last.exception()) from last.exception()
    raise AssertionError("tenacity ended without an outcome")  # unreachable: every path above returns or raises


def seconds_left(deadline: float) -> float:
    """Seconds from now until ``deadline`` (a ``time.monotonic()`` value); never negative."""
    return max(0.0, deadline - time.monotonic())
