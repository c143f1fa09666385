"""The one retry helper: attempts, deadline, jitter and what is never retried."""

import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.retry import RetriesExhausted, RetryPolicy, call_with_retries


class Flaky:
    """Raises ``fault`` the first ``failures`` calls, then returns 'ok'."""

    def __init__(self, failures: int, fault: BaseException = ConnectionError("reset")):
        self.failures, self.fault, self.calls = failures, fault, 0

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.fault
        return "ok"


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionError)


def test_transient_faults_are_retried_with_seeded_full_jitter():
    waits: list[float] = []
    policy = RetryPolicy(max_attempts=4, backoff_base_s=1.0, backoff_max_s=3.0)
    assert call_with_retries(Flaky(3), _transient, policy, ("target", 7), sleep=waits.append) == ("ok", 4)
    assert waits == [policy.backoff_s(i, ("target", 7)) for i in range(3)]
    assert all(0 <= w <= c for w, c in zip(waits, [1.0, 2.0, 3.0]))  # cap doubles, then stops at backoff_max_s
    assert policy.backoff_s(0, ("target", 8)) != waits[0]  # another key spreads differently


def test_exhausted_attempts_raise_naming_the_last_fault():
    with pytest.raises(RetriesExhausted, match="reset") as err:
        call_with_retries(Flaky(10), _transient, RetryPolicy(max_attempts=3, backoff_base_s=0.0), sleep=lambda s: None)
    assert err.value.attempts == 3 and isinstance(err.value.last, ConnectionError)


def test_permanent_errors_propagate_after_one_attempt():
    flaky = Flaky(10, InputError("bad file"))
    with pytest.raises(InputError, match="bad file"):
        call_with_retries(flaky, _transient, RetryPolicy(max_attempts=5), sleep=lambda s: None)
    assert flaky.calls == 1


def test_no_wait_is_begun_that_would_end_past_the_deadline():
    waits: list[float] = []
    policy = RetryPolicy(max_attempts=50, backoff_base_s=10.0, backoff_max_s=10.0, deadline_s=0.5)
    flaky = Flaky(10)
    with pytest.raises(RetriesExhausted):
        call_with_retries(flaky, _transient, policy, ("k",), sleep=waits.append)
    assert all(w < 0.5 for w in waits) and flaky.calls == len(waits) + 1


def test_invalid_policies_are_refused():
    with pytest.raises(InputError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(InputError, match="deadline"):
        RetryPolicy(deadline_s=0)


def test_a_policy_bounded_by_a_deadline_keeps_its_attempts_and_backoffs():
    import time as _time

    base = RetryPolicy(max_attempts=3, backoff_base_s=0.5, backoff_max_s=4.0)
    bounded = base.until(_time.monotonic() + 2.0)
    assert (bounded.max_attempts, bounded.backoff_base_s, bounded.backoff_max_s) == (3, 0.5, 4.0)
    assert 1.9 < bounded.deadline_s <= 2.0
    # a deadline already past still allows the one attempt (no deadline_s <= 0)
    assert base.until(_time.monotonic() - 5.0).deadline_s == pytest.approx(1e-3)
