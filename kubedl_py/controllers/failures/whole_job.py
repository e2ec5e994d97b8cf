"""The whole job restarted in place (``restartScope: Job``, ``restartMode`` Auto or InPlace): the actions.

The rules are ``whole_in_place.py``'s, the pods' side ``kubedl_py.agent``'s; :class:`WholeJobInPlace` acts on
one reconcile's observation for ``handling.FailureHandling`` (``recover``), with its records, budgets and
whole-job recreate passed in, so a failure here is recorded and charged as every other one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from kubedl_py import agent
from kubedl_py.api.plain import parse_time
from kubedl_py.controllers import status as st
from kubedl_py.controllers.failures import whole_in_place
from kubedl_py.controllers.failures.classes import Failure, whole_restart_failure
from kubedl_py.controllers.failures.ledger import Ledger
from kubedl_py.controllers.failures.policies import restart_mode
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.writes import Writes
from kubedl_py.kube.events import EventRecorder

logger = logging.getLogger(__name__)

#: annotation changes remembered until the cache shows them (:attr:`WholeJobInPlace.told`)
MAX_TOLD = 100_000


class Reports(Protocol):
    """What this needs of the reporter (``reporting.Reporter``)."""

    def restarting(
        self, seen: Observation, message: str, *, specific: str | None = None, counted_if_changed: bool = False
    ) -> None: ...

    async def persist(self, seen: Observation) -> None: ...


class WholeJobInPlace:
    def __init__(
        self,
        *,
        recorder: EventRecorder,
        reporter: Reports,
        writes: Writes,
        ledger: Ledger,
        restart_job: Callable[[Observation, str], Awaitable[None]],
    ) -> None:
        self.recorder = recorder
        #: the staged conditions, and the status write that comes before pods are told
        self.reporter = reporter
        self.writes = writes
        #: where failures are recorded and charged
        self.ledger = ledger
        self.restart_job = restart_job
        #: the in-place attempt annotations patched on pods whose change the cache does not show yet
        self.told: dict[tuple[str, str], str] = {}

    async def step(self, seen: Observation) -> None:
        """``restartScope: Job`` in place (``whole_in_place.py``, ``kubedl_py.agent``): a pod restarted whole by
        its kubelet is a failure, charged once; every pod is told the job's next attempt and restarts whole; the
        attempt is released once every pod has reached it. Fallbacks (recreating as before) say why."""
        job = seen.job
        if not whole_in_place.wanted(job):
            return
        state = whole_in_place.state_of(seen.status)
        if restart_mode(job) == "Auto" and await self._unschedulable(seen, state):
            return
        if state.unavailable:
            return
        if not state.restarting:
            failed = whole_in_place.failed_pods(seen, state)
            if failed:
                await self._begin(seen, state, failed)
            else:
                await self._tell(seen, agent.ANNOTATION_RELEASED, state.released)
            return
        await self._tell(seen, agent.ANNOTATION_ATTEMPT, state.attempt)
        late = whole_in_place.behind(seen, state)
        if not late:
            since = parse_time(state.since)
            whole_in_place.release_attempt(seen, state)
            whole_in_place.store(seen.status, state)
            await self.reporter.persist(seen)
            await self._tell(seen, agent.ANNOTATION_RELEASED, state.released)
            took = f" in {(seen.now - since).total_seconds():.1f}s" if since is not None else ""
            message = (
                f"every rank restarted in its own pod{took}: attempt {state.attempt} released (same pods, nodes and "
                "ports)."
            )
            logger.info("%s: %s", seen.key, message)
            await self.recorder.normal(seen.raw, "RestartedInPlace", message)
            return
        left = whole_in_place.time_left(state, seen.now)
        if left > 0:
            seen.want_requeue(left + 0.5)
            return
        names = ", ".join(f"{r.replica_type} {r.index}" for r in late[:5]) + (" ..." if len(late) > 5 else "")
        what = (
            f"{names} did not restart in place within {int(whole_in_place.RESTART_TIMEOUT_SECONDS)}s (attempt "
            f"{state.attempt})"
        )
        await self.recorder.warning(seen.raw, "InPlaceRestartTimedOut", f"{what}; recreating every pod of the job.")
        await self.restart_job(seen, what)

    async def _begin(self, seen: Observation, state: whole_in_place.State, failed: list[Replica]) -> None:
        charged: tuple[Replica, Failure] | None = None
        for replica in failed:
            assert replica.pod is not None
            failure = whole_restart_failure(replica.pod, self.ledger.main_container(replica.pod))
            self.ledger.record(seen, replica, replica.pod, failure)
            charged = charged or (replica, failure)
        assert charged is not None
        replica, failure = charged
        self.ledger.check_budget(seen, replica, failure)  # JobFailure when this restart would reach a limit
        self.ledger.count_restart(seen, replica, failure)
        who = f"{replica.replica_type} {replica.index} {failure.description}"
        why_not = whole_in_place.cannot_restart(seen)
        if why_not is not None:
            message = f"{who}; {why_not}, so the job cannot restart in place: recreating every pod instead."
            await self.recorder.warning(seen.raw, "InPlaceRestartUnavailable", message)
            await self.restart_job(seen, who)
            return
        state.attempt = max(
            state.released + 1, *(whole_in_place.attempt_of(r.pod, state) for r in failed if r.pod is not None)
        )
        state.since = st.timestamp(seen.now)
        whole_in_place.store(seen.status, state)
        message = (
            f"{who}; restarting every rank in its own pod (attempt {state.attempt}; failurePolicy.restartScope: Job, "
            "in place)."
        )
        self.reporter.restarting(seen, message)
        await self.recorder.normal(seen.raw, "RestartingInPlace", message)
        logger.info("%s: %s", seen.key, message)
        await self.reporter.persist(seen)  # the charge and the attempt before any pod is told
        await self._tell(seen, agent.ANNOTATION_ATTEMPT, state.attempt)
        seen.want_requeue(whole_in_place.RESTART_TIMEOUT_SECONDS + 0.5)

    async def _tell(self, seen: Observation, key: str, value: int) -> None:
        """Set the job's attempt annotation ``key`` on its pods that do not show ``value`` yet (once each)."""
        if len(self.told) > MAX_TOLD:
            self.told.clear()  # pods gone before the cache showed their change: told again if still there
        stale = whole_in_place.stale(seen, key, value, self.told)
        for pod in await self.writes.annotate_pods(stale, {key: str(value)}):
            self.told.pop((str((pod.get("metadata") or {}).get("uid")), key), None)  # told again next time

    async def _unschedulable(self, seen: Observation, state: whole_in_place.State) -> bool:
        """``restartMode: Auto`` where the scheduler places no pod with the agent (no node declares
        RestartAllContainersOnContainerExits): the job's pods are made without it from now on (the pods not
        placed are made again at once), and an event says so. True when that happened now."""
        refused = [
            (replica, why)
            for replica in seen.replicas.values()
            if replica.pod is not None
            and not replica.terminating
            and (why := whole_in_place.undeclared(replica.pod)) is not None
        ]
        if not refused:
            return False
        if not state.unavailable:  # said once; pods refused later (made before it was said) go the same way
            replica, why = refused[0]
            state.unavailable = (
                f"{replica.replica_type} {replica.index} could not be scheduled with the in-place agent: {why} "
                f"({whole_in_place.NODE_FEATURE}); the job is recreated on a failure (restartMode Auto)"
            )
            whole_in_place.store(seen.status, state)
            await self.recorder.warning(seen.raw, "InPlaceRestartUnavailable", state.unavailable + ".")
            await self.reporter.persist(seen)
        await self.writes.delete_pods(r.pod for r, _ in refused if r.pod is not None)
        for r, _ in refused:
            r.pod, r.terminating = None, True
        return True
