"""What a reconciler keeps about each job between reconciles, in one place, forgotten with the job in one step.

Everything here is an optimisation or a memo, never the truth: a controller restart forgets it all and the
next reconcile decides from the cluster alone (the tests restart controllers to keep it so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubedl_py.api.plain import Object
from kubedl_py.controllers.ownership import Conflict

if TYPE_CHECKING:
    from kubedl_py.api import TrainingJob


@dataclass
class Block:
    """The names that block one incarnation (uid) of a job, and when to look at them again."""

    uid: str
    conflicts: list[Conflict]
    #: looks that found them still taken
    checks: int
    #: when (monotonic) the next look is due
    next_check: float


@dataclass
class JobMemory:
    #: resourceVersion of the job after our last status write (read-your-writes on a lagging cache)
    written: str | None = None
    #: when the job's status was last written (monotonic), for reporting.STATUS_BATCH_PERIOD
    status_written_at: float | None = None
    #: the last reason to wait told in an event (``Reporter.report_waiting``), so a resync tells nothing new
    waiting_said: str | None = None
    #: the resourceVersion of each of its Services when last found as the job wants it
    services_checked: dict[str, str] = field(default_factory=dict)
    #: its uid and the (plural, name) of its extra objects found to be its own (``Writes.take_over``)
    owned: tuple[str, set[tuple[str, str]]] | None = None
    #: its document as last parsed (status and volatile metadata left out) and what the parse gave
    parsed: tuple[Object, TrainingJob | None, list[str]] | None = None
    #: the names that blocked it, found taken, and when to look at them again (``Creation.still_blocked``)
    block: Block | None = None


class Memories:
    """Per job key, its :class:`JobMemory`."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobMemory] = {}

    def of(self, key: str) -> JobMemory:
        memory = self._jobs.get(key)
        if memory is None:
            memory = self._jobs[key] = JobMemory()
        return memory

    def peek(self, key: str) -> JobMemory | None:
        return self._jobs.get(key)

    def forget(self, key: str) -> None:
        self._jobs.pop(key, None)

    def __len__(self) -> int:
        return len(self._jobs)
