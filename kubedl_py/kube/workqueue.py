"""A work queue of object keys, with the semantics of client-go's rate-limited delaying queue.

Why these rules (they are what makes a level-based reconciler correct and cheap):

- **De-duplication.** A key waiting in the queue is there once, however many events arrive for it: the
  reconciler reads the current state anyway, so ten pod updates of one job cost one reconcile.
- **One worker per key.** A key handed out by :meth:`WorkQueue.get` is *processing* until :meth:`done`.
  Adding it meanwhile marks it *dirty* instead of queueing it, and :meth:`done` re-queues it. So two
  workers never reconcile the same job at once (they would race to create the same pods), yet a change
  that arrived during a reconcile is never lost.
- **Per-key exponential backoff.** :meth:`add_rate_limited` delays a failing key 5 ms, 10 ms, 20 ms, ...
  up to a cap, so one broken job cannot starve the others or hammer the API server; :meth:`forget`
  resets the count once it succeeds.
- **Delayed adds.** :meth:`add_after` wakes a key later (deadlines, TTL after finish, polling); when a
  key already waits, the earliest time wins, so a short requeue is never postponed by a long one.

The queue is single-loop asyncio: ``add*`` are plain functions (event handlers call them from the informer
without awaiting), and only :meth:`get` waits.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kubedl_py.kube.metrics import Metrics

__all__ = ["BackoffSettings", "ExponentialBackoff", "ShutDown", "WorkQueue"]

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down and has nothing left to hand out."""


@dataclass(frozen=True)
class BackoffSettings:
    """Per-key retry delays of a failing reconcile."""

    #: delay after the first failure, seconds; doubles with each further failure
    base_delay: float = 0.005
    #: the longest delay, seconds (client-go uses 1000 s; a training job's failure is worth a look sooner)
    max_delay: float = 300.0


class ExponentialBackoff(Generic[K]):
    """Per-key failure counts and the delay each implies: ``base * 2**failures``, capped."""

    def __init__(self, settings: BackoffSettings | None = None) -> None:
        self.settings = settings or BackoffSettings()
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        """Count one more failure of ``key`` and return how long to wait before retrying it."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        # Cap the exponent too: 2**1100 overflows a float long before anyone waits that long.
        delay = self.settings.base_delay * (2 ** min(failures, 64))
        return float(min(delay, self.settings.max_delay))

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts from the base delay again."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        """How many failures of ``key`` have been counted since it was last forgotten."""
        return self._failures.get(key, 0)


class WorkQueue(Generic[K]):
    """De-duplicating, rate-limited, delaying queue of keys for N concurrent workers.

    Worker loop::

        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            try:
                ...  # reconcile key
            finally:
                queue.done(key)
    """

    def __init__(
        self,
        *,
        name: str = "",
        backoff: ExponentialBackoff[K] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.name = name
        self.backoff: ExponentialBackoff[K] = backoff or ExponentialBackoff()
        self._metrics = metrics
        self._queue: deque[K] = deque()
        #: keys that need processing: waiting in _queue, or to be re-queued when their processing ends
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        #: keys being processed that were added again as urgent: done() re-queues them at the front
        self._urgent: set[K] = set()
        #: delayed keys: when each is due (loop time) and the timer that will add it
        self._waiting: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._getters: deque[asyncio.Future[None]] = deque()
        self._shutting_down = False
        self._idle = asyncio.Event()
        self._idle.set()

    # ----------------------------------------------------------------------------------------- adding

    def add(self, key: K, *, urgent: bool = False) -> None:
        """Ask for ``key`` to be processed (once, however often this is called before a worker takes it).

        ``urgent`` puts it at the front of the line (and moves it there if it already waits): a job that lost
        a running pod must not wait behind hundreds of jobs being created, its peers are stalled meanwhile.
        """
        if self._shutting_down:
            return
        if key in self._dirty:
            if urgent and key in self._processing:
                self._urgent.add(key)
            elif urgent:  # dirty and not processing: it waits in the queue; move it to the front
                self._queue.remove(key)
                self._queue.appendleft(key)
            return
        self._dirty.add(key)
        if self._metrics is not None:
            self._metrics.queue_adds.labels(self.name).inc()
        if key in self._processing:
            if urgent:
                self._urgent.add(key)
            return  # done() re-queues it: one worker per key
        if urgent:
            self._queue.appendleft(key)
        else:
            self._queue.append(key)
        self._changed()
        self._wake_one()

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` after ``delay`` seconds; if it already waits for an earlier time, keep that one."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        current = self._waiting.get(key)
        if current is not None:
            if current[0] <= due:
                return
            current[1].cancel()
        handle = loop.call_at(due, self._fire, key)
        self._waiting[key] = (due, handle)

    def add_rate_limited(self, key: K) -> None:
        """Add ``key`` after its per-key backoff delay (call after a failed reconcile)."""
        if self._metrics is not None:
            self._metrics.queue_retries.labels(self.name).inc()
        self.add_after(key, self.backoff.when(key))

    def forget(self, key: K) -> None:
        """Reset the backoff of ``key`` (call after a successful reconcile)."""
        self.backoff.forget(key)

    def num_requeues(self, key: K) -> int:
        """Failures counted for ``key`` since it was last forgotten."""
        return self.backoff.failures(key)

    def _fire(self, key: K) -> None:
        self._waiting.pop(key, None)
        self.add(key)

    # --------------------------------------------------------------------------------------- handing out

    async def get(self) -> K:
        """The next key to process; it is yours until :meth:`done`. Raises :class:`ShutDown` at the end."""
        while not self._queue:
            if self._shutting_down:
                raise ShutDown(self.name)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # A key may have been meant for us; pass the wake-up on so it is not stranded.
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()
                raise
            finally:
                if waiter in self._getters:
                    self._getters.remove(waiter)
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        self._idle.clear()
        self._changed()
        return key

    def done(self, key: K) -> None:
        """Processing of ``key`` ended; if it was added meanwhile, it goes back in the queue now."""
        self._processing.discard(key)
        urgent = key in self._urgent
        self._urgent.discard(key)
        if key in self._dirty:
            if urgent:
                self._queue.appendleft(key)
            else:
                self._queue.append(key)
            self._changed()
            self._wake_one()
        if not self._processing:
            self._idle.set()

    # ------------------------------------------------------------------------------------------- state

    def __len__(self) -> int:
        """Keys ready to be handed out (not the delayed ones, not those being processed)."""
        return len(self._queue)

    @property
    def processing(self) -> frozenset[K]:
        """Keys handed out and not yet done."""
        return frozenset(self._processing)

    @property
    def delayed(self) -> frozenset[K]:
        """Keys waiting for an ``add_after`` / ``add_rate_limited`` delay."""
        return frozenset(self._waiting)

    def due(self, key: K) -> float | None:
        """The loop time at which a delayed ``key`` will be added, or None when it is not delayed."""
        entry = self._waiting.get(key)
        return None if entry is None else entry[0]

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    # ---------------------------------------------------------------------------------------- shutdown

    def shutdown(self, *, drain: bool = False) -> None:
        """Stop accepting keys and wake every waiting worker.

        With ``drain=False`` the keys still waiting are dropped: workers finish what they hold and then
        get :class:`ShutDown`. With ``drain=True`` workers first get everything already queued (delayed
        keys are dropped either way: their time has not come).
        """
        self._shutting_down = True
        for _, handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()
        if not drain:
            self._queue.clear()
            self._dirty.clear()
        self._changed()
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def wait_idle(self) -> None:
        """Wait until no key is being processed (after shutdown: until workers let go of their keys)."""
        await self._idle.wait()

    # -------------------------------------------------------------------------------------------- inner

    def _wake_one(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _changed(self) -> None:
        if self._metrics is not None:
            self._metrics.queue_depth.labels(self.name).set(len(self._queue))
