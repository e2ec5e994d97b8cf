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
- **Fair between tenants.** With a ``tenant`` function (the controllers': a key's namespace), ordinary keys wait
  in one line per tenant, served in turn: one tenant's burst of 300 new jobs no longer puts another
  tenant's single job behind all of them, it waits for at most one key of each other tenant (issue 47).
  Within a tenant, first come first served.
- **Urgent keys.** ``add(key, urgent=True)`` (a job that lost a running pod) lines the key up ahead of
  ordinary keys, first come first served among urgent ones. Going first is not enough when every worker is
  busy with new work: a worker frees up only when its reconcile ends. So a controller may keep a few workers
  that take urgent keys only (``get(urgent_only=True)``); they idle until a failover needs them.

The queue is single-loop asyncio: ``add*`` are plain functions (event handlers call them from the informer
without awaiting), and only :meth:`get` waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kubedl_py.kube.metrics import Metrics

__all__ = ["BackoffSettings", "ExponentialBackoff", "ShutDown", "WorkQueue", "namespace_of"]

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


def namespace_of(key: str) -> str:
    """The tenant of a ``namespace/name`` key: its namespace (a cluster-scoped key is its own)."""
    return key.partition("/")[0] if "/" in key else ""


class _FairLine(Generic[K]):
    """The ordinary keys ready to be handed out: one first-come-first-served line per tenant, served in turn."""

    def __init__(self, tenant: Callable[[K], Hashable] | None) -> None:
        self._tenant = tenant or (lambda key: None)
        self._lines: dict[Hashable, deque[K]] = {}
        #: tenants with a key waiting, in the order they are served
        self._turns: deque[Hashable] = deque()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def append(self, key: K) -> None:
        tenant = self._tenant(key)
        line = self._lines.get(tenant)
        if line is None:
            line = self._lines[tenant] = deque()
            self._turns.append(tenant)
        line.append(key)
        self._size += 1

    def remove(self, key: K) -> None:
        tenant = self._tenant(key)
        line = self._lines[tenant]
        line.remove(key)
        self._size -= 1
        if not line:
            del self._lines[tenant]
            self._turns.remove(tenant)

    def popleft(self) -> K:
        tenant = self._turns.popleft()
        line = self._lines[tenant]
        key = line.popleft()
        self._size -= 1
        if line:
            self._turns.append(tenant)  # its next key after one of every other tenant's
        else:
            del self._lines[tenant]
        return key

    def clear(self) -> None:
        self._lines.clear()
        self._turns.clear()
        self._size = 0


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
        tenant: Callable[[K], Hashable] | None = None,
    ) -> None:
        self.name = name
        self.backoff: ExponentialBackoff[K] = backoff or ExponentialBackoff()
        self._metrics = metrics
        #: ordinary keys ready to be handed out: in order per tenant (``tenant``: none, one line), tenants in turn
        self._queue: _FairLine[K] = _FairLine(tenant)
        #: urgent keys ready to be handed out, in order; handed out before any of ``_queue``
        self._front: deque[K] = deque()
        #: when each key of ``_front`` and ``_queue`` was lined up (monotonic): its wait, kept only with metrics
        self._ready_at: dict[K, float] = {}
        #: keys that need processing: waiting in _front or _queue, or to be re-queued when their processing ends
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        #: keys being processed that were added again as urgent: done() re-queues them at the front
        self._urgent: set[K] = set()
        #: delayed keys: when each is due (loop time) and the timer that will add it
        self._waiting: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._getters: deque[asyncio.Future[None]] = deque()
        #: workers waiting for an urgent key only
        self._urgent_getters: deque[asyncio.Future[None]] = deque()
        self._shutting_down = False
        self._idle = asyncio.Event()
        self._idle.set()

    # ----------------------------------------------------------------------------------------- adding

    def add(self, key: K, *, urgent: bool = False) -> None:
        """Ask for ``key`` to be processed (once, however often this is called before a worker takes it).

        ``urgent`` lines it up ahead of every ordinary key (and moves it there if it already waits): a job that
        lost a running pod must not wait behind hundreds of jobs being created, its peers are stalled meanwhile.
        """
        if self._shutting_down:
            return
        if key in self._dirty:
            if urgent and key in self._processing:
                self._urgent.add(key)
            elif urgent and key not in self._front:  # it waits among the ordinary keys: move it up
                self._queue.remove(key)
                self._line_up(key, urgent=True)
            return
        self._dirty.add(key)
        if self._metrics is not None:
            self._metrics.queue_adds.labels(self.name).inc()
        if key in self._processing:
            if urgent:
                self._urgent.add(key)
            return  # done() re-queues it: one worker per key
        self._line_up(key, urgent=urgent)

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

    def add_soon(self, key: K, delay: float) -> None:
        """Add ``key`` within ``delay`` seconds, so that whatever else comes for it meanwhile is one processing:
        nothing when it already waits to be handed out (or to be re-queued when its processing ends), since it
        will be processed after this call anyway; otherwise :meth:`add_after`."""
        if key in self._dirty:
            return
        self.add_after(key, delay)

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

    async def get(self, *, urgent_only: bool = False) -> K:
        """The next key to process (urgent ones first); it is yours until :meth:`done`. ``urgent_only``: wait
        for an urgent key, leave ordinary ones to other workers. Raises :class:`ShutDown` at the end."""
        key, _urgent = await self.take(urgent_only=urgent_only)
        return key

    async def take(self, *, urgent_only: bool = False) -> tuple[K, bool]:
        """:meth:`get`, and whether the key came from the urgent lane."""
        getters = self._urgent_getters if urgent_only else self._getters
        while not (self._front or (self._queue and not urgent_only)):
            if self._shutting_down:
                raise ShutDown(self.name)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # A key may have been meant for us; pass the wake-up on so it is not stranded.
                if waiter.done() and not waiter.cancelled():
                    self._wake_one(urgent=urgent_only or bool(self._front))
                raise
            finally:
                if waiter in getters:
                    getters.remove(waiter)
        lane = "urgent" if self._front else "ordinary"
        key = self._front.popleft() if self._front else self._queue.popleft()
        ready_at = self._ready_at.pop(key, None)
        if self._metrics is not None and ready_at is not None:
            self._metrics.queue_wait.labels(self.name, lane).observe(time.monotonic() - ready_at)
        self._dirty.discard(key)
        self._processing.add(key)
        self._idle.clear()
        self._changed()
        return key, lane == "urgent"

    def done(self, key: K) -> None:
        """Processing of ``key`` ended; if it was added meanwhile, it goes back in the queue now."""
        self._processing.discard(key)
        urgent = key in self._urgent
        self._urgent.discard(key)
        if key in self._dirty:
            self._line_up(key, urgent=urgent)
        if not self._processing:
            self._idle.set()

    # ------------------------------------------------------------------------------------------- state

    def __len__(self) -> int:
        """Keys ready to be handed out (not the delayed ones, not those being processed)."""
        return len(self._front) + len(self._queue)

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
            self._front.clear()
            self._ready_at.clear()
            self._dirty.clear()
        self._changed()
        for getters in (self._getters, self._urgent_getters):
            while getters:
                waiter = getters.popleft()
                if not waiter.done():
                    waiter.set_result(None)

    async def wait_idle(self) -> None:
        """Wait until no key is being processed (after shutdown: until workers let go of their keys)."""
        await self._idle.wait()

    # -------------------------------------------------------------------------------------------- inner

    def _line_up(self, key: K, *, urgent: bool) -> None:
        (self._front if urgent else self._queue).append(key)
        if self._metrics is not None:  # moved up from the ordinary line: waiting since it was first lined up
            self._ready_at.setdefault(key, time.monotonic())
        self._changed()
        self._wake_one(urgent=urgent)

    def _wake_one(self, *, urgent: bool = False) -> None:
        """Wake a worker for a key just lined up: any worker; for an urgent key, one that takes urgent keys
        only when no other worker waits."""
        for getters in (self._getters, self._urgent_getters) if urgent else (self._getters,):
            while getters:
                waiter = getters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return

    def _changed(self) -> None:
        if self._metrics is not None:
            self._metrics.queue_depth.labels(self.name).set(len(self))
