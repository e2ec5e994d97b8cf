"""The one retry policy for API requests, built on tenacity.

What is retried, and why:

- :class:`~kubedl_py.kube.errors.ServerError` (5xx): the server or something in front of it failed; the
  same request may succeed in a moment (an apiserver restarting, etcd leader election).
- :class:`~kubedl_py.kube.errors.TooManyRequests` (429): the server asks us to slow down; we wait at least
  the ``Retry-After`` it names.
- :class:`~kubedl_py.kube.errors.TransportError`: no answer at all (connection refused/reset, timeout).

Never any other 4xx: the request is wrong, and sending it again only adds load. A create that timed out
may have happened; its retry then fails with AlreadyExists, which reconcilers treat as success because
their names are deterministic.

Delays grow exponentially with random jitter (so that many workers failing together do not retry in
lock-step) and are capped. The same waiting rule, with no attempt limit, drives the informers' reconnect
loops (:func:`forever`), so there is exactly one notion of "backing off" in the machinery.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kubedl_py.kube.errors import ConnectionRefused, ServerError, TooManyRequests, TransportError

if TYPE_CHECKING:  # tenacity is imported at the first retry: a command whose requests succeed never loads it
    from tenacity import AsyncRetrying, RetryCallState

__all__ = ["RetryPolicy", "RetrySettings", "backoff_delay", "forever", "is_retryable"]

logger = logging.getLogger(__name__)
#: our own generator: background threads must not move the global one (tests seed it; hypothesis checks it)
_RNG = random.Random()

T = TypeVar("T")


@dataclass(frozen=True)
class RetrySettings:
    """How hard to try one API request before giving up."""

    #: total tries of one request, the first included; 1 disables retrying
    attempts: int = 6
    #: first backoff delay, seconds; each retry doubles it (plus jitter) up to ``max_delay``
    initial_delay: float = 0.2
    #: cap of one backoff delay, seconds (also caps a server's Retry-After, so a bogus header cannot stall us)
    max_delay: float = 10.0
    #: random extra delay added to each backoff, up to this many seconds
    jitter: float = 0.2
    #: give up once this many seconds have passed since the first try, whatever ``attempts`` says
    deadline: float = 60.0
    #: retry a refused connection (nothing listens at the server's address). A controller waits for its API
    #: server to come back; a command line answers at once that no cluster is running there.
    retry_refused: bool = True


def is_retryable(exc: BaseException, settings: RetrySettings | None = None) -> bool:
    """True for the failures that the same request may survive: 5xx, 429 and no-answer (a refused
    connection only when ``settings`` allow it)."""
    if isinstance(exc, ConnectionRefused) and settings is not None and not settings.retry_refused:
        return False
    return isinstance(exc, ServerError | TooManyRequests | TransportError)


def backoff_delay(settings: RetrySettings, attempt: int, exc: BaseException | None = None) -> float:
    """How long to wait after failure number ``attempt`` (1 for the first): ``initial_delay * 2**(attempt-1)``
    capped at ``max_delay``, plus up to ``jitter`` at random, and never shorter than a 429's Retry-After
    (itself capped at ``max_delay``). For loops that cannot use :class:`RetryPolicy` or :func:`forever`,
    such as one that yields watch events between failures."""
    exponent = min(max(attempt - 1, 0), 64)  # 2**1100 overflows a float long before anyone waits that long
    delay = float(min(settings.initial_delay * 2**exponent, settings.max_delay))
    if settings.jitter > 0:
        delay += _RNG.uniform(0.0, settings.jitter)
    if isinstance(exc, TooManyRequests) and exc.retry_after is not None:
        delay = max(delay, min(exc.retry_after, settings.max_delay))
    return delay


class _WaitHonouringRetryAfter:
    """Exponential backoff with jitter, but never shorter than a 429's Retry-After (see :func:`backoff_delay`)."""

    def __init__(self, settings: RetrySettings) -> None:
        self._settings = settings

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        return backoff_delay(self._settings, state.attempt_number, exc)


class RetryPolicy:
    """Runs an API call under the retry rules above; counts the retries it made.

    ``on_retry(verb, resource)`` is called before each retry (the client increments a Prometheus counter
    there); ``retries`` is the plain total, for tests and logs.
    """

    def __init__(
        self,
        settings: RetrySettings | None = None,
        *,
        on_retry: Callable[[str, str], None] | None = None,
    ) -> None:
        self.settings = settings or RetrySettings()
        self.retries = 0
        self._on_retry = on_retry

    async def call(self, fn: Callable[[], Awaitable[T]], *, verb: str = "", resource: str = "") -> T:
        """Await ``fn()``; on a retryable failure wait and call it again, up to the settings' limits."""
        settings = self.settings
        # The first attempt runs without tenacity: building its loop for every request cost about 7% of the
        # controller's CPU while creating pods, and nearly every request succeeds the first time. A retryable
        # failure enters the loop below, which replays it as its first attempt (same count, backoff and log).
        try:
            return await fn()
        except Exception as exc:
            if not is_retryable(exc, settings) or settings.attempts <= 1:
                raise
            first_failure: Exception | None = exc

        async def attempt() -> T:
            nonlocal first_failure
            if first_failure is not None:
                failure, first_failure = first_failure, None
                raise failure
            return await fn()

        def before_sleep(state: RetryCallState) -> None:
            self.retries += 1
            if self._on_retry is not None:
                self._on_retry(verb, resource)
            exc = state.outcome.exception() if state.outcome is not None else None
            delay = state.next_action.sleep if state.next_action is not None else 0.0
            logger.info(
                "retrying %s %s in %.2fs (attempt %d failed: %s)",
                verb,
                resource,
                delay,
                state.attempt_number,
                exc,
            )

        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, stop_after_delay, stop_any

        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda exc: is_retryable(exc, settings)),
            wait=_WaitHonouringRetryAfter(settings),
            stop=stop_any(stop_after_attempt(max(settings.attempts, 1)), stop_after_delay(settings.deadline)),
            before_sleep=before_sleep,
            reraise=True,
        )
        async for trial in retrying:
            with trial:
                return await attempt()
        raise AssertionError("unreachable: tenacity either returns or re-raises")  # pragma: no cover


def forever(
    settings: RetrySettings | None = None,
    *,
    retry: Callable[[BaseException], bool] = lambda exc: isinstance(exc, Exception),
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> AsyncRetrying:
    """A tenacity loop that never gives up (for informers and leader election), same backoff as above.

    Cancellation is a BaseException, not an Exception, so it is never retried and stops the loop.
    """
    settings = settings or RetrySettings()
    from tenacity import AsyncRetrying, retry_if_exception, stop_never

    return AsyncRetrying(
        retry=retry_if_exception(retry),
        wait=_WaitHonouringRetryAfter(settings),
        stop=stop_never,
        before_sleep=before_sleep,
        reraise=True,
    )
