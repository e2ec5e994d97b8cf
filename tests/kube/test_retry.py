"""The retry policy: what it retries, how long it waits, when it gives up, and that it counts."""

from __future__ import annotations

import time

import pytest

from kubedl_py.kube import errors
from kubedl_py.kube.retry import RetryPolicy, RetrySettings, backoff_delay

FAST = RetrySettings(attempts=4, initial_delay=0.001, max_delay=0.01, jitter=0.001, deadline=5.0)


class Flaky:
    """Fails with the given errors in turn, then returns "ok"."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


async def test_retries_server_errors_and_transport_errors_then_succeeds() -> None:
    counted: list[tuple[str, str]] = []
    policy = RetryPolicy(FAST, on_retry=lambda verb, res: counted.append((verb, res)))
    flaky = Flaky(errors.ServerError("x", status=503), errors.TransportError("reset"))
    assert await policy.call(flaky, verb="get", resource="pods") == "ok"
    assert flaky.calls == 3
    assert policy.retries == 2
    assert counted == [("get", "pods"), ("get", "pods")]


async def test_never_retries_client_errors() -> None:
    policy = RetryPolicy(FAST)
    flaky = Flaky(errors.NotFound('pods "x" not found', status=404))
    with pytest.raises(errors.NotFound):
        await policy.call(flaky)
    assert flaky.calls == 1
    assert policy.retries == 0


async def test_gives_up_after_attempts_with_the_last_error() -> None:
    policy = RetryPolicy(FAST)
    flaky = Flaky(*(errors.ServerError(f"fail {i}", status=500) for i in range(10)))
    with pytest.raises(errors.ServerError, match="fail 3"):
        await policy.call(flaky)
    assert flaky.calls == FAST.attempts


async def test_honours_retry_after() -> None:
    settings = RetrySettings(attempts=2, initial_delay=0.001, max_delay=1.0, jitter=0.0)
    policy = RetryPolicy(settings)
    flaky = Flaky(errors.TooManyRequests("slow down", status=429, retry_after=0.2))
    started = time.monotonic()
    assert await policy.call(flaky) == "ok"
    assert time.monotonic() - started >= 0.2


async def test_retry_after_is_capped() -> None:
    settings = RetrySettings(attempts=2, initial_delay=0.001, max_delay=0.05, jitter=0.0)
    policy = RetryPolicy(settings)
    flaky = Flaky(errors.TooManyRequests("slow down", status=429, retry_after=3600))
    started = time.monotonic()
    assert await policy.call(flaky) == "ok"
    assert time.monotonic() - started < 1.0


def test_backoff_delay_doubles_is_capped_and_honours_retry_after() -> None:
    settings = RetrySettings(initial_delay=0.1, max_delay=1.0, jitter=0.0)
    assert [backoff_delay(settings, n) for n in (1, 2, 3, 4, 5)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    assert backoff_delay(settings, 10_000) == 1.0  # no overflow however long it has been failing
    slow_down = errors.TooManyRequests("slow down", status=429, retry_after=0.7)
    assert backoff_delay(settings, 1, slow_down) == pytest.approx(0.7)
    jittery = RetrySettings(initial_delay=0.1, max_delay=1.0, jitter=0.05)
    assert all(0.1 <= backoff_delay(jittery, 1) <= 0.15 for _ in range(20))
