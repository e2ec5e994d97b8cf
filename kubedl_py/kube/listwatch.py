"""List, then watch from the list's resourceVersion, for ever: the one loop behind the informers and the SDK.

Why one place: keeping a view of the API server's objects current is subtle (a watch may end, break, expire
or fail at once), and every consumer must get the same answers. The controller's :class:`~.informer.Informer`
caches what this loop delivers; the SDK's ``wait``, ``delete(wait=True)`` and log following react to it.
They differ only in what they give up on, which is a setting here, not a second loop.

The branches of :meth:`ListWatch.events`:

1. **List** when there is no resourceVersion to resume from (the start, or after a 410): one
   :class:`Listed` carries every object and the list's resourceVersion.
2. **Watch from the last resourceVersion**, asking for bookmarks. A bookmark only moves that resourceVersion
   forward (it is not passed on), so a resumed watch starts from a recent point even when the watched
   objects are quiet. Every other event is passed on as a :class:`~.client.WatchEvent`.
3. The watch ends (the server's ``timeoutSeconds``), or breaks after delivering events or after lasting
   ``min_watch_duration`` -> resume at once from the last resourceVersion seen, without listing.
4. **410 Gone** (as HTTP status or as an ERROR event): the resourceVersion fell out of the server's history
   -> list again at once. When the resourceVersion of a list that was just made expires before the watch
   delivered anything, that counts as a failure (5), so a server in that state is not hammered.
5. A **failure** -- the list or a watch failing at once, or a watch that ends at once without a single
   event (a failing server or proxy, not a timeout: reopening it at once would spin) -- is retried after
   the backoff of :func:`~.retry.backoff_delay` when the ``retry`` predicate accepts it: for ever (the
   informers), or until ``attempts`` failures in a row or ``deadline`` seconds of failing (the SDK), when
   :class:`WatchError` is raised. A failure the predicate refuses is raised at once (a list's as is, a
   watch's as :class:`WatchError`), so a caller can tell "the list was refused" from "the watch was".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from kubedl_py.kube.client import KubeClient, WatchEvent
from kubedl_py.kube.errors import Gone, TransportError
from kubedl_py.kube.resources import Resource
from kubedl_py.kube.retry import RetrySettings, backoff_delay

__all__ = ["ListWatch", "ListWatchSettings", "Listed", "WatchError", "retry_everything"]

logger = logging.getLogger(__name__)


def retry_everything(exc: BaseException) -> bool:
    """The informers' predicate: every failure is worth another try (cancellation is not an Exception)."""
    return isinstance(exc, Exception)


@dataclass(frozen=True)
class ListWatchSettings:
    """Timing and patience of one list/watch loop."""

    #: server-side ``timeoutSeconds`` of each watch (None: the client's setting); the watch is then resumed
    watch_timeout_seconds: int | None = None
    #: a watch silent for this long is presumed dead and resumed (None: the client's setting)
    read_timeout: float | None = None
    #: a watch that ends sooner than this without any event is a failure (backoff), not a normal end
    min_watch_duration: float = 1.0
    #: backoff between failures; with ``give_up`` also the ``attempts``/``deadline`` after which to stop
    backoff: RetrySettings = field(default_factory=RetrySettings)
    #: stop after ``backoff.attempts`` failures in a row or ``backoff.deadline`` seconds of failing
    give_up: bool = False
    #: retry a failed list like a failed watch (else the list's error is raised as is)
    retry_list: bool = True


@dataclass(frozen=True)
class Listed:
    """Every object of a (re-)list, and the resourceVersion the following watch starts from."""

    items: list[dict[str, Any]]
    resource_version: str


class WatchError(Exception):
    """The loop stopped on a watch failure: ``cause`` is the failure, ``failures`` how many came in a row
    (0 when the ``retry`` predicate refused it outright)."""

    def __init__(self, cause: BaseException, failures: int) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.failures = failures


#: ``on_backoff(failure, delay, failures_in_a_row)``: called before each backoff sleep
BackoffHook = Callable[[BaseException, float, int], None]


class ListWatch:
    """One list/watch loop over ``resource`` (one namespace or all, optional selectors).

    ``resource_version``, ``lists`` and ``watches`` are there for callers and tests to see where it is.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        settings: ListWatchSettings | None = None,
        retry: Callable[[BaseException], bool] = retry_everything,
        on_backoff: BackoffHook | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.settings = settings or ListWatchSettings()
        self._retry = retry
        self._on_backoff = on_backoff
        #: the last resourceVersion seen (list, event or bookmark): where a resumed watch starts
        self.resource_version: str | None = None
        #: successful lists so far (1 after the first; +1 per 410)
        self.lists = 0
        #: watch requests opened so far
        self.watches = 0

    @property
    def name(self) -> str:
        where = self.namespace or "*"
        selectors = ", ".join(s for s in (self.label_selector, self.field_selector) if s)
        return f"{self.resource}[{where}{', ' + selectors if selectors else ''}]"

    async def events(self) -> AsyncGenerator[Listed | WatchEvent, None]:
        """:class:`Listed`, then the watch's events, for ever (see the module docstring for every branch)."""
        settings = self.settings
        failures = 0
        failing_since = 0.0
        while True:
            failure: BaseException
            fresh_list = self.resource_version is None
            if fresh_list:
                try:
                    listed = await self.client.list(
                        self.resource,
                        namespace=self.namespace,
                        label_selector=self.label_selector,
                        field_selector=self.field_selector,
                    )
                except Exception as exc:
                    if not settings.retry_list or not self._retry(exc):
                        raise
                    failure = exc
                else:
                    self.lists += 1
                    self.resource_version = listed.resource_version
                    yield Listed(listed.items, listed.resource_version)
            if self.resource_version is not None:
                started = time.monotonic()
                progressed = False
                self.watches += 1
                try:
                    async with contextlib.aclosing(
                        self.client.watch(
                            self.resource,
                            namespace=self.namespace,
                            label_selector=self.label_selector,
                            field_selector=self.field_selector,
                            resource_version=self.resource_version,
                            timeout_seconds=settings.watch_timeout_seconds,
                            read_timeout=settings.read_timeout,
                            allow_bookmarks=True,
                        )
                    ) as stream:
                        async for event in stream:
                            progressed = True
                            version = (event.object.get("metadata") or {}).get("resourceVersion")
                            if version:
                                self.resource_version = str(version)
                            if event.type != "BOOKMARK":
                                yield event
                except Gone as exc:
                    logger.info(
                        "list/watch %s: resourceVersion %s expired; listing again", self.name, self.resource_version
                    )
                    self.resource_version = None
                    if progressed or not fresh_list:
                        failures = 0
                        continue
                    failure = exc  # the list's own resourceVersion expired at once: back off before listing again
                except Exception as exc:
                    if not self._retry(exc):
                        raise WatchError(exc, 0) from exc
                    lasted = time.monotonic() - started
                    if progressed or lasted >= settings.min_watch_duration:
                        # It worked for a while (a quiet watch delivers nothing, and that is fine), then broke:
                        # a dropped connection, not a failing server. Resume at once from where it got to.
                        logger.info("list/watch %s: watch broke after %.1fs (%s); resuming", self.name, lasted, exc)
                        failures = 0
                        continue
                    failure = exc
                else:
                    if progressed or time.monotonic() - started >= settings.min_watch_duration:
                        logger.debug("list/watch %s: watch ended; resuming from %s", self.name, self.resource_version)
                        failures = 0
                        continue
                    failure = TransportError(f"watch of {self.name} ended at once without events")
            if failures == 0:
                failing_since = time.monotonic()
            failures += 1
            if settings.give_up and (
                failures >= settings.backoff.attempts or time.monotonic() - failing_since >= settings.backoff.deadline
            ):
                raise WatchError(failure, failures) from failure
            delay = backoff_delay(settings.backoff, failures, failure)
            if self._on_backoff is not None:
                self._on_backoff(failure, delay, failures)
            else:
                logger.info("list/watch %s: %s; retrying in %.2fs (failure %d)", self.name, failure, delay, failures)
            await asyncio.sleep(delay)
