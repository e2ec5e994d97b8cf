"""A new job's first status write yields to the pod and Service creations of other jobs.

When hundreds of jobs arrive at once (a sweep, a queue admitting a backlog), the API server serves one create
per pod and Service, and one status write per job that says only ``Created``. No rank waits for that write,
but the API server serves it in the window in which pods are still waiting to be made: at 200 jobs it was
about one request in nine of that window (bench/real_controller.py, ``requests_until_exist``).
So a job's *first* report (its ``Created`` condition, the replica counts and the start time, nothing else:
``status.is_first_report``) waits while writes of this kind's reconciler are in flight, and goes out once they
have stopped for ``settle`` seconds, or after ``longest`` seconds whatever happens. A job whose pods all run by
then says ``Created`` and ``Running`` in one write. Any other change (Running, Restarting, Failed, Succeeded,
Suspended, a reason to wait) is written at once, as before.

**A burst** (:data:`BURST` or more jobs' first reports held at once) keeps each held after the creations stop
too, until its own pods run, so that it says ``Created`` and ``Running`` in one write, not two in the seconds
in which the kubelets report 8 pods per job and the scheduler binds them (issue 53); or until ``longest``, or
until fewer than :data:`BURST` are left held (then the rest go out). A job or two alone are held as before.

The reconcile asks :meth:`StatusYield.holds`; the writes are counted by :meth:`StatusYield.writing`; a held job
is woken through ``wake`` (the controller's work queue), so no job waits on a timer of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator

#: the longest a job's first status write waits for other jobs' creations (seconds)
LONGEST = 10.0
#: how long the writes must have stopped before the held first writes go out (seconds): the gaps between one
#: job's creations and the next job's in a burst are shorter
SETTLE = 0.1
#: how many jobs' first reports held at once keep each held until its own pods run (see the module docstring)
BURST = 8


class StatusYield:
    """First status writes held while this reconciler writes pods and Services (see the module docstring)."""

    def __init__(self, *, longest: float = LONGEST, settle: float = SETTLE, burst: int = BURST) -> None:
        self.longest = longest
        self.settle = settle
        self.burst = burst
        #: puts a job back in the work queue (``Controller.queue.add``); None: nothing is ever held
        self.wake: Callable[[str], None] | None = None
        self._writing = 0
        #: per held job: when its first write was first held (monotonic); kept until that write goes out
        self._held: dict[str, float] = {}
        self._due: asyncio.TimerHandle | None = None
        self._quiet: asyncio.TimerHandle | None = None

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Around one pod or Service write of a reconcile."""
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1
            if self._writing == 0 and self._held and self._quiet is None:
                self._quiet = asyncio.get_running_loop().call_later(self.settle, self._release_if_quiet)

    def holds(self, key: str) -> bool:
        """Whether job ``key``'s first report waits now. If it does, the job is woken when the writes stop (in a
        burst: when the burst is over), or when it has waited ``longest`` seconds; if it does not, the write goes
        out and the job is forgotten."""
        if self.wake is None:
            return False
        now = time.monotonic()
        first = self._held.setdefault(key, now)
        if not self._busy() or now - first >= self.longest:
            self._let_go(key)
            return False
        if self._due is None:
            self._due = asyncio.get_running_loop().call_later(first + self.longest - now, self._release_due)
        return True

    def forget(self, key: str) -> None:
        """Job ``key`` has nothing to hold any more (its status says more than Created, or it is gone)."""
        if key in self._held:
            self._let_go(key)

    def _busy(self) -> bool:
        """Creations in flight, or a burst of first reports waiting for their pods."""
        return self._writing > 0 or len(self._held) >= self.burst

    def _let_go(self, key: str) -> None:
        was_burst = len(self._held) >= self.burst
        del self._held[key]
        if was_burst and not self._busy():
            self._release(list(self._held))  # the burst is over: the few still held go out

    def _release_if_quiet(self) -> None:
        self._quiet = None
        if not self._busy():
            self._release(list(self._held))

    def _release_due(self) -> None:
        self._due = None
        now = time.monotonic()
        due = [key for key, first in self._held.items() if first + self.longest <= now]
        self._release(due)
        later = [first for key, first in self._held.items() if first + self.longest > now]
        if later:
            self._due = asyncio.get_running_loop().call_later(min(later) + self.longest - now, self._release_due)

    def _release(self, keys: list[str]) -> None:
        # Woken, not forgotten: a job keeps its first time until its write goes out (``holds``), so a job woken
        # as one burst ends and reconciled as the next begins still waits no longer than ``longest`` in all.
        if self.wake is not None:
            for key in keys:
                self.wake(key)
