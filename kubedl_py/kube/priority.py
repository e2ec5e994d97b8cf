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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

from kubedl_py.kube.metrics import Metrics

__all__ = ["WriteGate"]

#: set inside an urgent reconcile (and the tasks it starts) or an exempt block: its writes never wait
_PASS: ContextVar[bool] = ContextVar("kubedl_write_gate_pass", default=False)


class WriteGate:
    """Holds the writes of everything but urgent reconciles while one runs (see the module docstring).

    ``max_hold``: the longest a write waits, in seconds; 0 turns the gate off (nothing ever waits)."""

    def __init__(self, max_hold: float, *, metrics: Metrics | None = None) -> None:
        if max_hold < 0:
            raise ValueError(f"max_hold must be >= 0 seconds (0 turns the gate off), not {max_hold}")
        self.max_hold = max_hold
        self.metrics = metrics
        self._held = 0
        self._waiters: set[asyncio.Future[None]] = set()

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
