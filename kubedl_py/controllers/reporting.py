"""What a reconcile reports: the job's conditions and replica counts, why it waits, and the one status write.

The status is staged in the observation (``seen.status``) by every part of the reconcile and written here, once
per reconcile when it changed, only over the version it was computed from (``write``), or earlier when an act
destroys the evidence of a decision (``persist``: a failed pod's deletion).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from kubedl_py.api import Framework, TrainingJob
from kubedl_py.api.groups import KUBEDL, condition_reason, group_of
from kubedl_py.api.plain import Object
from kubedl_py.controllers import status as st
from kubedl_py.controllers.addressing import replica_name
from kubedl_py.controllers.failures.policies import (
    completion_of,
    count_phase,
    unschedulable_message,
    unseen_by_scheduler,
)
from kubedl_py.controllers.kinds.base import Kind
from kubedl_py.controllers.memory import Memories
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.outcomes import StaleDecision
from kubedl_py.controllers.ownership import NAME_IN_USE, PREVIOUS_JOB_TERMINATING
from kubedl_py.controllers.pods import type_selector
from kubedl_py.controllers.podstate import is_crashing, slot_of
from kubedl_py.controllers.status_pacing import StatusYield
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.resources import Resource

logger = logging.getLogger(__name__)


#: ``Running`` False reasons of a job whose pods wait for a scheduler or for a name (cleared when that ends)
UNSCHEDULABLE = "Unschedulable"
#: no scheduler has looked at a pod for a while (its schedulerName names no running scheduler)
NOT_SCHEDULED = "NotScheduled"
#: the reasons of a create the API server refused for now (refusals.py, Outcome.RETRY)
RETRYING_REASONS = frozenset({"FailedCreate", "QuotaExceeded"})
#: a gang larger than the job (kubeflow.org), a PodGroup that does not go (``gang.py``)
GANG_REASONS = frozenset({"GangIncomplete", "PodGroupTerminating"})
WAITING_REASONS = frozenset(
    {UNSCHEDULABLE, NOT_SCHEDULED, NAME_IN_USE, PREVIOUS_JOB_TERMINATING, *GANG_REASONS, *RETRYING_REASONS}
)

#: seconds a change of replica counts alone waits after the job's last status write, to go out with the next
#: change: a job's pods start and end within moments of each other, one write per pod would be wasted (the
#: Kubernetes Job controller batches its pods' updates the same way, once a second)
STATUS_BATCH_PERIOD = 1.0


def reason_of(job: TrainingJob, word: str, specific: str | None = None) -> str:
    """A condition reason in the job's API group's words (``groups.condition_reason``)."""
    return condition_reason(job.api_group, job.kind, word, specific)


class Reporter:
    def __init__(
        self,
        *,
        client: KubeClient,
        resource: Resource,
        framework: Framework,
        kind: Kind[Any],
        recorder: EventRecorder,
        memories: Memories,
        status_yield: StatusYield,
        on_transition: Callable[[str, str, str], None],
    ) -> None:
        self.client = client
        self.resource = resource
        self.framework = framework
        self.kind = kind
        self.recorder = recorder
        self.memories = memories
        self.status_yield = status_yield
        self.on_transition = on_transition

    # --------------------------------------------------------------------------------- conditions, said once

    def restarting(
        self, seen: Observation, message: str, *, specific: str | None = None, counted_if_changed: bool = False
    ) -> None:
        """The job says it is restarting (``Restarting`` True with ``message``), counted as a transition (with
        ``counted_if_changed``: only when the condition changed)."""
        job = seen.job
        reason = reason_of(job, "Restarting", specific)
        changed = st.set_condition(seen.status, st.RESTARTING, reason=reason, message=message)
        if changed or not counted_if_changed:
            self.on_transition(job.kind, st.RESTARTING, job.namespace)

    async def restarting_event(self, seen: Observation, message: str) -> None:
        """``restarting`` and its ``JobRestarting`` event."""
        self.restarting(seen, message)
        await self.recorder.normal(seen.raw, "JobRestarting", message)

    def set_failed(self, seen: Observation, reason: str, message: str) -> None:
        if st.set_condition(seen.status, st.FAILED, reason=reason_of(seen.job, "Failed", reason), message=message):
            seen.status["completionTime"] = st.timestamp(seen.now)
            self.on_transition(seen.job.kind, st.FAILED, seen.job.namespace)
            logger.info("%s: failed (%s): %s", seen.key, reason, message)

    # ------------------------------------------------------------------------------------------- report

    async def report(self, seen: Observation) -> None:
        status = seen.status
        finished_before = st.is_finished(status)
        if not finished_before:
            self._update_conditions(seen)
        # Counted after the conditions, so the reconcile that ends a job reports the pods' final phases, and
        # counted on after the end: pods keep finishing (a TF worker after worker 0) and cleanup removes them.
        self.update_replica_statuses(seen, finished=st.is_finished(status))
        if not st.is_finished(status):
            await self._report_waiting(seen)
        elif status.get("avoidedNodes"):
            # failurePolicy.avoidNodeAfterFailures: for the job's life only (null: a merge patch removes it)
            status["avoidedNodes"] = None
        # A job that just finished is woken by the watch event of this write; the reconciler then times the TTL.
        await self.write(seen)

    async def _report_waiting(self, seen: Observation) -> None:
        """Why a job that is not running waits, on the job itself (``Running`` False with a reason, and a Warning
        event when that changes): a name taken by an object not the job's (``ownership.py``), or pods the
        scheduler cannot place (its message: no node with the resources, the host port, ...). Cleared when it no
        longer applies. A job whose pods all run says nothing here: the event-free path of a healthy job."""
        status = seen.status
        reason, message = None, None
        if seen.conflicts:
            first = seen.conflicts[0]
            reason = first.reason
            message = "; ".join(dict.fromkeys(conflict.message for conflict in seen.conflicts))
        elif seen.retrying is not None:
            reason, message = seen.retrying
        else:
            waiting = [
                (r, text)
                for r in seen.replicas.values()
                if r.pod is not None and not r.terminating
                for text in [unschedulable_message(r.pod)]
                if text is not None
            ]
            unseen: list[tuple[Replica, str]] = []
            for replica in seen.replicas.values():
                if replica.pod is None or replica.terminating:
                    continue
                said, again = unseen_by_scheduler(replica.pod, seen.now)
                if said is not None:
                    unseen.append((replica, said))
                elif again is not None:
                    seen.want_requeue(again)  # nothing announces that no scheduler came: look then
            if waiting:
                reason, message = UNSCHEDULABLE, _pods_waiting(seen, waiting, "cannot be scheduled")
            elif unseen:
                reason, message = NOT_SCHEDULED, _pods_waiting(seen, unseen, "is not scheduled")
        if reason is None or message is None:
            st.clear_condition(status, st.RUNNING, reasons=WAITING_REASONS)
            return
        memory = self.memories.of(seen.key)
        if st.is_true(status, st.RUNNING) or st.is_true(status, st.RESTARTING):
            # A running job with one pod waiting (a replacement): Running/Restarting stay; the event says why.
            changed = memory.waiting_said != message
        else:
            changed = st.set_condition(status, st.RUNNING, true=False, reason=reason, message=message)
        if changed:
            memory.waiting_said = message
            await self.recorder.warning(seen.raw, reason, message)

    def update_replica_statuses(self, seen: Observation, *, finished: bool) -> None:
        """Per replica type, the pods a user sees in ``kubectl get pods``: ``active`` running, ``succeeded``,
        ``failed`` (a Pending pod is none of them yet). Once the job has finished, cleanup deletes pods: a
        pod that ended is still counted as it ended, so finished counts never go down then."""
        statuses = seen.status.setdefault("replicaStatuses", {})
        for replica_type in seen.job.replica_specs:
            counts = {"active": 0, "succeeded": 0, "failed": 0}
            for replica in seen.replicas.values():
                if replica.replica_type != replica_type or replica.pod is None:
                    continue
                phase = replica.phase
                if phase == "Succeeded":
                    counts["succeeded"] += 1
                elif phase == "Failed":
                    counts["failed"] += 1
                elif phase == "Running" and not replica.terminating:
                    counts["active"] += 1
            entry = statuses.setdefault(replica_type, {})
            if finished:
                for key in ("succeeded", "failed"):
                    counts[key] = max(counts[key], int(entry.get(key) or 0))
            entry.update(counts)
            selector = type_selector(seen.job, replica_type)
            if selector:
                # What the Training Operator reports (an HPA or a dashboard finds the pods of a type by it).
                entry["labelSelector"] = {"matchLabels": selector}
                entry["selector"] = ",".join(f"{key}={value}" for key, value in sorted(selector.items()))

    def _succeeded(self, seen: Observation) -> bool:
        """The kind's success rule; with a ``completionPolicy``, its rule instead: ``minSucceeded`` replicas of
        its type succeeded, or (``maxFailed`` alone) every one of them ended and no more than that failed."""
        job = seen.job
        completion = completion_of(job)
        pods = seen.pods_by_type()
        if completion is None:
            return self.kind.succeeded(job, pods)
        counted = pods.get(completion.replica_type, [])
        succeeded = count_phase(counted, "Succeeded")
        if completion.min_succeeded is not None:
            return succeeded >= completion.min_succeeded
        failed = count_phase(counted, "Failed")
        return succeeded > 0 and succeeded + failed == completion.total and completion.tolerates(failed)

    def _update_conditions(self, seen: Observation) -> None:
        job, status = seen.job, seen.status
        if self._succeeded(seen):
            st.set_condition(
                status,
                st.SUCCEEDED,
                reason=reason_of(job, "Succeeded"),
                message=f"{job.kind} {seen.key} successfully completed.",
            )
            status["completionTime"] = st.timestamp(seen.now)
            self.on_transition(job.kind, st.SUCCEEDED, job.namespace)
            return
        slots = list(seen.replicas.values())
        completion = completion_of(job)
        tolerated = completion.replica_type if completion is not None and completion.tolerates(0) else None
        up = ("Running", "Succeeded")
        all_up = bool(slots) and all(
            r.pod is not None and (r.phase in up or (r.phase == "Failed" and r.replica_type == tolerated))
            for r in slots
        )
        missing = [r for r in slots if r.terminating or slot_of(r) in seen.unavailable]
        if missing and st.is_true(status, st.RUNNING):
            # Replaced without a failure we saw (a pod deleted by hand): still, the job does not say Running.
            who = "; ".join(
                seen.unavailable.get(slot_of(r))
                or f"{r.replica_type} {r.index}: pod {replica_name(job.name, *slot_of(r))} is being deleted"
                for r in missing
            )
            self.restarting(seen, f"{who}; replacing it.")
        restarting = missing or any(r.pod is not None and is_crashing(r.pod) for r in slots)
        if restarting:
            return  # Restarting was set when the replacement started; stays until all are up again
        if all_up and not st.is_true(status, st.RUNNING):
            message = f"{job.kind} {seen.key} is running."
            st.set_condition(status, st.RUNNING, reason=reason_of(job, "Running"), message=message)
            self.on_transition(job.kind, st.RUNNING, job.namespace)

    # -------------------------------------------------------------------------------------- the status write

    def cache_behind(self, key: str, raw: Object) -> bool:
        """Whether the cached job predates our last status write of it."""
        memory = self.memories.peek(key)
        written = memory.written if memory is not None else None
        cached = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        if memory is None or written is None or not (written.isdigit() and cached.isdigit()):
            return False
        if int(cached) >= int(written):
            memory.written = None
            return False
        return True

    async def write(self, seen: Observation) -> None:
        """Write the status if it changed, only over the version it was computed from.

        The resourceVersion in the patch makes the server refuse (Conflict) a write based on a stale
        copy; the reconcile is then retried on the newer version the watch brings. A change of replica
        counts alone waits until STATUS_BATCH_PERIOD after the last write (the reconcile comes back then and
        writes the counts of that moment). A new job's first report (Created) may wait while other jobs' pods
        are being created (``status_pacing.py``); any other change goes out at once, with the counts.
        """
        current = seen.raw.get("status") or {}
        if seen.status == current:
            self.status_yield.forget(seen.key)
            return
        if not st.is_first_report(current, seen.status):
            self.status_yield.forget(seen.key)
        elif self.status_yield.holds(seen.key):
            return  # the job is woken when the creations stop (or after status_pacing.LONGEST)
        last = self.memories.of(seen.key).status_written_at
        if last is not None and st.only_counts_changed(current, seen.status):
            wait = last + STATUS_BATCH_PERIOD - time.monotonic()
            if wait > 0:
                seen.want_requeue(wait)
                return
        try:
            await self._patch_status(seen)
        except errors.NotFound:
            logger.debug("%s: deleted before its status was written", seen.key)
        except errors.Conflict:
            logger.debug("%s: status computed from a stale copy; retrying on the newer one", seen.key)
            seen.want_requeue(0.05)

    async def _patch_status(self, seen: Observation) -> None:
        """Write ``seen.status`` over the version it was computed from; ``seen.raw`` becomes what the server
        returned, so a later write in the same reconcile diffs against it and goes over its version."""
        meta = seen.raw.get("metadata") or {}
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": seen.status}
        written = await self.client.patch_status(self.resource, seen.job.name, patch, namespace=seen.job.namespace)
        memory = self.memories.of(seen.key)
        memory.status_written_at = time.monotonic()
        version = str((written.get("metadata") or {}).get("resourceVersion") or "")
        if version:
            memory.written = version
        if isinstance(written.get("status"), dict):
            seen.raw = written

    async def persist(self, seen: Observation) -> None:
        """Write what this reconcile decided so far, before an act that destroys its evidence: a failed pod's
        deletion. Once the pod is gone the next reconcile cannot decide again (a restart count, a failure's
        record, a job's failure), so a status write lost after it (a Conflict, or an error on the way) would
        lose them: the budget would not be charged and a failed job's pods would be made again. When the
        write is refused nothing is deleted: the reconcile ends (StaleDecision) and runs again on the newer
        copy, where the pod still is."""
        if st.is_finished(seen.status):
            # The job's end goes out with its final counts, as one write (a reader of Failed reads the failed
            # replica with it); report would count the same.
            self.update_replica_statuses(seen, finished=True)
        if seen.status == (seen.raw.get("status") or {}):
            return
        self.status_yield.forget(seen.key)
        try:
            await self._patch_status(seen)
        except (errors.Conflict, errors.NotFound) as exc:
            raise StaleDecision(f"{seen.key}: its status could not be written before a pod's deletion: {exc}") from exc

    async def write_invalid(self, raw: Object, status: Object, problems: list[str]) -> bool:
        """A job that cannot be parsed goes ``Failed``/``InvalidSpec`` (once); True when it just did."""
        meta = raw.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        message = f"{self.framework.kind} {key} is invalid: " + "; ".join(problems)
        group = group_of(raw.get("apiVersion")) or KUBEDL
        reason = condition_reason(group, self.framework.kind, "Failed", "InvalidSpec")
        if not st.set_condition(status, st.FAILED, reason=reason, message=message):
            return False
        status.setdefault("completionTime", st.timestamp())
        logger.warning("%s", message)
        await self.recorder.warning(raw, "InvalidSpec", "; ".join(problems))
        return True

    async def patch_invalid(self, raw: Object, status: Object) -> None:
        meta = raw.get("metadata") or {}
        with contextlib.suppress(errors.NotFound):
            await self.client.patch_status(
                self.resource, str(meta.get("name")), {"status": status}, namespace=meta.get("namespace")
            )
        self.on_transition(self.framework.kind, st.FAILED, str(meta.get("namespace") or ""))


def _pods_waiting(seen: Observation, waiting: list[tuple[Replica, str]], what: str) -> str:
    """``Worker 0 (pod j-worker-0) <what> (and 1 more pods): <why>``, for the first of ``waiting``."""
    replica, text = waiting[0]
    more = f" (and {len(waiting) - 1} more pods)" if len(waiting) > 1 else ""
    pod = replica_name(seen.job.name, *slot_of(replica))
    return f"{replica.replica_type} {replica.index} (pod {pod}) {what}{more}: {text}"
