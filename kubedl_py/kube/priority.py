"""Recovery before new work, inside kube-apiserver too: while a reconcile of an urgent key runs, the process's
other writes wait.

Why: the work queue hands a job that lost a pod to a worker at once (urgent keys, and workers kept for them),
but that reconcile's writes then share a CPU-bound kube-apiserver with the process's own burst of creates for
new jobs, and under load most of a failover's time went there (bench/real_failover.py while 200 jobs are
created). A new job whose pods are created a few hundred milliseconds later loses nothing anyone notices; a
distributed job waiting for its replacement pod idles every one of its accelerators.

How: :class:`~kubedl_py.kube.manager.Controller` workers run the reconcile of a key taken from the urgent lane
inside :meth:`WriteGate.urgent`; :class:`~kubedl_py.kube.client.KubeClient` awaits
:meth:`WriteGate.before_write` before sending any request but a GET. Writes made from inside an urgent
reconcile (its task and every task it starts: the mark is a context variable) and from inside
:meth:`WriteGate.exempt` (leader election: a lease must be renewed on time) go at once. Every other write
waits until no urgent reconcile runs, but never longer than ``max_hold`` seconds: a slow or stuck repair delays
new work by at most that, it never stops it. Reads (gets, lists, watches) never wait.

The repair window. Holding writes during the urgent reconcile is not enough under a burst: before the
controller even sees that a pod is gone, the old pod's deletion waits in the same CPU-bound kube-apiserver,
kept busy by the burst's creates and by what follows each created pod (bindings, kubelet status writes). Only
creating new pods more slowly shortens that, so the process does it while it is repairing: an urgent reconcile
that finds a running job losing a pod (one seen terminating, or its replacement being made) calls
:meth:`WriteGate.repaired`, and for ``repair_window`` seconds after the last such call each controller's
workers take keys through ``repair_workers`` slots (:class:`OrdinaryLimit`) instead of all at once; the
workers kept for urgent keys are never limited. Failovers come in groups (a node lost, a preemption), so
the first one of a group is not helped; the ones after it are, and new jobs are created more slowly
meanwhile. A burst with no failover is not slowed at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubedl_py.kube.metrics import Metrics

__all__ = ["OrdinaryLimit", "WriteGate"]

#: set inside an urgent reconcile (and the tasks it starts) or an exempt block: its writes never wait
_PASS: ContextVar[bool] = ContextVar("kubedl_write_gate_pass", default=False)


class WriteGate:
    """Holds the writes of everything but urgent reconciles while one runs (see the module docstring).

    ``max_hold``: the longest a write waits, in seconds; 0 turns the gate off (nothing ever waits).
    ``repair_window``: seconds after the last :meth:`repaired` during which :meth:`repair_left` is positive
    (0: never)."""

    def __init__(self, max_hold: float, *, repair_window: float = 0.0, metrics: Metrics | None = None) -> None:
        if not max_hold >= 0:  # also refuses nan
            raise ValueError(f"max_hold must be >= 0 seconds (0 turns the gate off), not {max_hold}")
        if not repair_window >= 0:
            raise ValueError(f"repair_window must be >= 0 seconds (0 turns it off), not {repair_window}")
        self.max_hold = max_hold
        self.repair_window = repair_window
        self.metrics = metrics
        self._held = 0
        self._waiters: set[asyncio.Future[None]] = set()
        self._repair_until = 0.0
        #: how many times :meth:`repaired` was called
        self.repairs = 0

    def repaired(self) -> None:
        """A running job is being repaired (it lost a pod, or the pod's replacement is made): open the repair
        window, or push its end ``repair_window`` seconds from now."""
        self.repairs += 1
        if self.metrics is not None:
            self.metrics.repairs.inc()
        if self.repair_window:
            self._repair_until = max(self._repair_until, time.monotonic() + self.repair_window)

    def repair_left(self) -> float:
        """Seconds until the repair window closes; 0 when it is closed."""
        return max(0.0, self._repair_until - time.monotonic())

    @property
    def held(self) -> int:
        """Urgent reconciles running now."""
        return self._held

    @property
    def waiting(self) -> int:
        """Writes waiting for them now."""
        return len(self._waiters)

    @contextlib.contextmanager
    def urgent(self) -> Iterator[None]:
        """Run an urgent reconcile: its own writes pass, everyone else's wait until every such block ends."""
        token = _PASS.set(True)
        self._held += 1
        try:
            yield
        finally:
            _PASS.reset(token)
            self._held -= 1
            if not self._held:
                for waiter in self._waiters:
                    if not waiter.done():
                        waiter.set_result(None)
                self._waiters.clear()

    @staticmethod
    @contextlib.contextmanager
    def exempt() -> Iterator[None]:
        """Writes from inside this block (and the tasks started in it) never wait; nothing else is held."""
        token = _PASS.set(True)
        try:
            yield
        finally:
            _PASS.reset(token)

    @staticmethod
    def passing() -> bool:
        """True inside an urgent reconcile (or a task it started) or an exempt block: writes from here never
        wait. A caller that bounds its writes with a shared semaphore must give these slots of their own: the
        shared ones may all be held by writes waiting at this gate (a priority inversion, up to ``max_hold``)."""
        return _PASS.get()

    async def before_write(self) -> None:
        """Return when this write may be sent: at once unless an urgent reconcile runs and this is not one."""
        if not self._held or not self.max_hold or _PASS.get():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        started = time.monotonic()
        try:
            # a write is never lost here: it is sent after max_hold whatever the urgent reconciles do
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.max_hold):
                    await waiter
        finally:
            self._waiters.discard(waiter)
            if self.metrics is not None:
                self.metrics.write_gate_wait.observe(time.monotonic() - started)


class OrdinaryLimit:
    """How many of one controller's ordinary workers (not those kept for urgent keys) take a key and reconcile it
    at once: ``normal`` (all of them, so no limit at all) while the gate's repair window is closed,
    ``repairing`` while it is open (see the module docstring). An ending turn wakes the longest waiter; a window
    that closes lets them all through."""

    def __init__(
        self, gate: WriteGate, *, normal: int, repairing: int, name: str = "", metrics: Metrics | None = None
    ) -> None:
        if repairing < 1:
            raise ValueError(f"repairing must be at least 1 reconcile, not {repairing}")
        self.gate = gate
        self.normal = normal
        self.repairing = repairing
        self.name = name
        self.metrics = metrics
        self._running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def running(self) -> int:
        """Workers in a turn now (taking a key, or reconciling it)."""
        return self._running

    def limit(self) -> int:
        """How many may run now."""
        return min(self.normal, self.repairing) if self.gate.repair_left() > 0 else self.normal

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One worker's turn (take a key, reconcile it) inside this block; wait first while the limit is reached.
        A worker waits here *before* taking a key: one that held a key while waiting would keep that job from
        the urgent workers if it then lost a pod (the key being "processing")."""
        started: float | None = None
        # No queue-jumping rule for newcomers: with one, a worker ending its reconcile would queue behind the
        # waiters even under the limit, and the workers would convoy one at a time after a window closes.
        while self._running >= self.limit():
            if started is None:
                started = time.monotonic()
            left = self.gate.repair_left()
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                # woken by a reconcile that ends, or by the window closing (then the limit is ``normal``)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left if left > 0 else None):
                        await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
        if started is not None and self.metrics is not None:
            self.metrics.repair_wait.labels(self.name).observe(time.monotonic() - started)
        self._running += 1
        try:
            yield
        finally:
            self._running -= 1
            self._wake()

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
                return
