"""What happened to a job, and what to do about it: the one entry point of failure handling.

The rules live beside this module: how a failure is classed (``classes.py``), the job's policies (completion,
restart scope, pending causes: ``policies.py``), the evidence and budgets, lost nodes and hangs
(``recovery.py``). :class:`FailureHandling` applies them to one reconcile's observation at two moments:
``judge`` before anything is made (a deadline passed, a budget spent, a pod Pending too long: the job fails),
``recover`` once the job's pods are known (lost nodes, disruptions, failed pods: replaced, restarted whole, or
the job fails) and, after the creates, ``check_progress`` (a hang). A failure that ends the job is raised as a
``JobFailure``; everything decided is written (``Reporter.persist``) before the pods that prove it go.
"""

from __future__ import annotations

import logging
from typing import Protocol

from kubedl_py.api import Framework
from kubedl_py.api.groups import condition_reason
from kubedl_py.api.plain import Object, parse_time
from kubedl_py.controllers import status as st
from kubedl_py.controllers.addressing import replica_name
from kubedl_py.controllers.failures import in_place, recovery, whole_in_place
from kubedl_py.controllers.failures.classes import USER, Failure, classify, disruption, in_place_failure
from kubedl_py.controllers.failures.ledger import Ledger
from kubedl_py.controllers.failures.policies import (
    IN_PLACE_EXIT_CODES,
    VOLUME_EVENT_REASONS,
    completion_of,
    count_phase,
    keeps_pods_after_failure,
    pending_cause,
    restarts_in_place,
    whole_job_restart,
)
from kubedl_py.controllers.failures.whole_job import WholeJobInPlace
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.outcomes import JobFailure
from kubedl_py.controllers.podstate import is_active, slot_of
from kubedl_py.controllers.writes import Writes
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.resources import EVENTS

logger = logging.getLogger(__name__)


class Reports(Protocol):
    """What failure handling needs of the reporter (``reporting.Reporter``): its staged conditions and the
    status write that must precede a pod's deletion."""

    def set_failed(self, seen: Observation, reason: str, message: str) -> None: ...

    def restarting(
        self, seen: Observation, message: str, *, specific: str | None = None, counted_if_changed: bool = False
    ) -> None: ...

    async def restarting_event(self, seen: Observation, message: str) -> None: ...

    async def persist(self, seen: Observation) -> None: ...


class FailureHandling:
    def __init__(
        self,
        *,
        client: KubeClient,
        framework: Framework,
        recorder: EventRecorder,
        reporter: Reports,
        writes: Writes,
        node_lost_timeout: int,
        infrastructure_backoff_limit: int,
    ) -> None:
        self.client = client
        self.framework = framework
        self.recorder = recorder
        self.reporter = reporter
        self.writes = writes
        self.node_lost_timeout = node_lost_timeout
        #: the job's failures recorded and charged to the budgets of their classes (``ledger.py``)
        self.ledger = Ledger(framework=framework, infrastructure_backoff_limit=infrastructure_backoff_limit)
        #: nodes read for pods that look lost, and the log checks of progressDeadlineSeconds
        self.nodes = recovery.NodeHealth(client)
        self.progress = recovery.Progress(client)
        #: ``restartScope: Job`` in place (``whole_job.py``)
        self.whole = WholeJobInPlace(
            recorder=recorder,
            reporter=reporter,
            writes=writes,
            ledger=self.ledger,
            restart_job=self._restart_job,
        )

    def forget(self, key: str) -> None:
        self.progress.forget(key)

    # ------------------------------------------------------------------------------------------- judge

    async def judge(self, seen: Observation) -> bool:
        """Before anything is made: the evidence of in-place restarts recorded; True when the job fails now
        (``activeDeadlineSeconds``, ``backoffLimit``, ``pendingTimeoutSeconds``), its pods stopped."""
        # In-place restarts first, counted and recorded: a limit reached below counts them and names the latest.
        await self.count_in_place(seen)
        if self._deadline_passed(seen) or self._backoff_exceeded(seen):
            failed = st.get_condition(seen.status, st.FAILED) or {}
            reason = str(failed.get("reason") or "Failed")
            await self.recorder.warning(seen.raw, reason, str(failed.get("message") or reason))
            await self.stop_pods(seen)
            return True
        if await self._pending_too_long(seen):
            await self.stop_pods(seen)
            return True
        return False

    async def stop_pods(self, seen: Observation) -> None:
        """A failed job holds no node: its pods still running are deleted, unless it keeps them
        (:func:`~kubedl_py.controllers.failures.policies.keeps_pods_after_failure`)."""
        if keeps_pods_after_failure(seen.raw):
            return
        active = [r.pod for r in seen.replicas.values() if r.pod and is_active(r.pod)]
        if active:
            await self.reporter.persist(seen)  # the failure first: a job whose pods went must not look like a new one
        await self.writes.delete_pods(active)

    def _deadline_passed(self, seen: Observation) -> bool:
        deadline = seen.job.run_policy.active_deadline_seconds
        if deadline is None:
            return False
        started = parse_time(seen.status.get("startTime")) or seen.now
        remaining = deadline - (seen.now - started).total_seconds()
        if remaining > 0:
            seen.want_requeue(remaining)
            return False
        self.reporter.set_failed(
            seen,
            "DeadlineExceeded",
            f"{seen.job.kind} {seen.key} has run longer than activeDeadlineSeconds ({deadline}s).",
        )
        return True

    def _backoff_exceeded(self, seen: Observation) -> bool:
        clause = self.ledger.limit_reached(seen)
        if clause is None:
            return False
        last = recovery.last_failure_clause(seen.status)
        self.reporter.set_failed(seen, "BackoffLimitExceeded", f"{seen.job.kind} {seen.key} {clause}{last}.")
        return True

    async def _pending_too_long(self, seen: Observation) -> bool:
        """``failurePolicy.pendingTimeoutSeconds``: a pod Pending that long fails the job, naming the pod and
        why it waits (its status, else a volume event, else "no cause reported")."""
        policy = seen.job.run_policy.failure_policy
        timeout = policy.pending_timeout_seconds if policy is not None else None
        if timeout is None:
            return False
        for replica in seen.replicas.values():
            pod = replica.pod
            if pod is None or replica.terminating or replica.phase != "Pending":
                continue
            meta = pod.get("metadata") or {}
            created = parse_time(meta.get("creationTimestamp")) or seen.now
            waited = (seen.now - created).total_seconds()
            if waited < timeout:
                seen.want_requeue(timeout - waited)
                continue
            cause = pending_cause(pod) or await volume_trouble(self.client, pod) or "no cause reported"
            name = meta.get("name")
            message = (
                f"{seen.job.kind} {seen.key}: pod {name} has been Pending for {int(waited)}s, over "
                f"failurePolicy.pendingTimeoutSeconds ({timeout}s): {cause}."
            )
            self.reporter.set_failed(seen, "PendingTimeout", message)
            await self.recorder.warning(seen.raw, "PendingTimeout", f"pod {name}: {cause}")
            return True
        return False

    # ----------------------------------------------------------------------------------------- recover

    async def recover(self, seen: Observation) -> None:
        """Once the job's pods are known: lost nodes, disruptions, failed pods (see the module docstring)."""
        await self._recover_lost(seen)
        await self._note_disruptions(seen)
        await self.whole.step(seen)
        await self._recreate_backed_off(seen)
        await self._handle_failures(seen)

    async def _handle_failures(self, seen: Observation) -> None:
        """Replace retryable failures (the failed pod alone, or with ``failurePolicy.restartScope: Job`` every
        pod of the job); a failure that may not be retried ends the job (JobFailure), unless the job's
        ``completionPolicy`` tolerates that many failed replicas of its type. Each failure is recorded in the
        status (its evidence) and charged to the budget of its class (classes.py) before its pod goes."""
        job = seen.job
        completion = completion_of(job)
        doomed: list[Replica] = []
        for replica in seen.replicas.values():
            if replica.pod is None or replica.phase != "Failed":
                continue
            spec = job.replica_specs[replica.replica_type]
            failure = classify(replica.pod, self.ledger.main_container(replica.pod))
            new = self.ledger.record(seen, replica, replica.pod, failure)
            who = f"{replica.replica_type} {replica.index}"
            retry = (
                failure.infrastructure
                or spec.restart_policy in ("OnFailure", "Always")
                or (spec.restart_policy == "ExitCode" and failure.retryable)
            )
            if not retry:
                why = "" if spec.restart_policy == "Never" else " (not retryable under restartPolicy ExitCode)"
                if completion is not None and replica.replica_type == completion.replica_type:
                    failed = count_phase(seen.pods_by_type().get(completion.replica_type, []), "Failed")
                    if completion.tolerates(failed):
                        continue  # left Failed, not replaced: the job may still succeed by share
                    refusal = completion.refusal(failed)
                    if refusal is not None:
                        message = (
                            f"{job.kind} {seen.key} has failed: {refusal}; last: {who} {failure.description}{why}."
                        )
                        raise JobFailure("ReplicaFailed", message, event=message)
                raise JobFailure(
                    "ReplicaFailed",
                    f"{job.kind} {seen.key} has failed: {who} {failure.description}{why}.",
                    event=f"{who} {failure.description}{why}",
                )
            if new:
                # Charged once per failure: the charge is written with the record before the pod goes
                # (persist), so a reconcile that finds the failure recorded (the delete failed after the
                # write) replaces the pod without charging it again.
                self.ledger.check_budget(seen, replica, failure)
                self.ledger.count_restart(seen, replica, failure)
                # Only an exit the rule covers says the kubelet ignored it (a pod failed for a reason, or an
                # exit below 128 retried for its reason, was never the rule's to restart).
                ruled = failure.exit_code in IN_PLACE_EXIT_CODES and not failure.infrastructure
                if ruled and restarts_in_place(job, replica.replica_type):
                    unavailable = in_place.unavailable_message(replica, failure)
                    await self.recorder.warning(seen.raw, "InPlaceRestartUnavailable", unavailable)
            if whole_job_restart(job):
                await self._restart_job(seen, f"{who} {failure.description}")
                return  # one restart of the whole job, however many pods failed with it
            name = replica_name(job.name, *slot_of(replica))
            message = f"{who} {failure.description} ({failure.failure_class.lower()} failure); replacing pod {name}."
            await self.reporter.restarting_event(seen, message)
            doomed.append(replica)
        if not doomed:
            return
        await self.reporter.persist(seen)  # the records and charges above, before the pods that prove them go
        await self.writes.delete_pods(replica.pod for replica in doomed if replica.pod is not None)
        for replica in doomed:
            replica.pod, replica.terminating = None, True

    async def count_in_place(self, seen: Observation) -> None:
        """In-place restarts, as they happen (``in_place.py``): each charged once to its class, the latest run's
        end recorded as evidence (the kubelet keeps only it, in ``lastState``), the job saying it restarts, and
        a ``RestartedInPlace`` event naming the rank. A job restarted whole in place is counted once per restart
        of the job, not per pod (``_restart_whole_in_place``)."""
        if whole_in_place.applies(seen.job, seen.status):
            return
        for item in in_place.restarted(seen):
            failure = in_place_failure(item.pod, self.ledger.main_container(item.pod))
            if failure is not None:
                self.ledger.record(seen, item.replica, item.pod, failure)
            recovery.charge(
                seen.status, item.replica.replica_type, failure.failure_class if failure else USER, item.new
            )
            message = in_place.restarted_message(item, failure)
            self.reporter.restarting(seen, message)
            await self.recorder.normal(seen.raw, "RestartedInPlace", message)

    async def _note_disruptions(self, seen: Observation) -> None:
        """Pods Kubernetes is ending for a disruption (``DisruptionTarget``: preemption, the Eviction API, taint
        eviction, the pod garbage collector) are replaced once gone, charged as infrastructure failures, and
        the job says it is restarting. Pods deleted by hand are replaced without a charge."""
        job = seen.job
        for replica in seen.replicas.values():
            pod = replica.leaving
            if pod is None or disruption(pod) is None:
                continue
            failure = classify(pod, self.ledger.main_container(pod))
            if not self.ledger.record(seen, replica, pod, failure):
                continue
            self.ledger.check_budget(seen, replica, failure)
            self.ledger.count_restart(seen, replica, failure)
            who = f"{replica.replica_type} {replica.index}"
            if whole_job_restart(job):
                await self._restart_job(seen, f"{who} {failure.description}")
                return
            message = f"{who} {failure.description} (infrastructure failure); its pod is replaced once it is gone."
            await self.reporter.restarting_event(seen, message)

    async def _recover_lost(self, seen: Observation) -> None:
        """Pods on nodes that are not Ready (recovery.py): after ``nodeLostTimeoutSeconds`` deleted with grace
        period 0 and replaced, charged as infrastructure failures, with a ``NodeLost`` event naming the node;
        until then the job is not Running (a ``Restarting`` condition says which replica waits for what)."""
        job = seen.job
        for replica in seen.replicas.values():
            if replica.leaving is not None:
                grace_left = recovery.deletion_due(replica.leaving, seen.now)
                if grace_left is not None:
                    seen.want_requeue(grace_left + 0.5)  # then it is past its grace: worth a look at its node
        timeout = recovery.node_lost_timeout(job, self.node_lost_timeout)
        lost = await recovery.lost_pods(seen, self.nodes, timeout)
        if not lost:
            return
        waiting = [item for item in lost if item.remaining > 0]
        for item in waiting:
            slot = slot_of(item.replica)
            name = replica_name(job.name, *slot)
            at = recovery.when(seen.now, item.remaining)
            seen.unavailable[slot] = (
                f"{slot[0]} {slot[1]}: pod {name} is on node {item.node.name}, which is not Ready: {item.node.why}; "
                f"replaced at {at} (failurePolicy.nodeLostTimeoutSeconds {timeout})"
            )
            seen.want_requeue(item.remaining)
        due = [item for item in lost if item.remaining <= 0]
        if waiting and not due:
            message = "; ".join(seen.unavailable[slot_of(item.replica)] for item in waiting) + "."
            self.reporter.restarting(seen, message, specific="NodeNotReady", counted_if_changed=True)
            return
        charged: list[tuple[Replica, Failure, Object]] = []
        failures = [recovery.lost_failure(item) for item in due]
        for item, lost_as in zip(due, failures, strict=True):
            if self.ledger.record(seen, item.replica, item.pod, lost_as, node=item.node.name):
                charged.append((item.replica, lost_as, item.pod))
        whole = whole_job_restart(job)
        refused: JobFailure | None = None
        try:
            for replica, charge, _ in charged[: 1 if whole else None]:
                self.ledger.check_budget(seen, replica, charge)
                self.ledger.count_restart(seen, replica, charge)
        except JobFailure as exc:
            refused = exc  # the job fails; its lost pods are deleted all the same, as nothing else will end them
            self.reporter.set_failed(seen, exc.reason, exc.message)
        # Recorded and charged (or failed) before the pods go: once they are gone nothing shows they were lost.
        await self.reporter.persist(seen)
        for item, lost_as in zip(due, failures, strict=True):
            name = replica_name(job.name, *slot_of(item.replica))
            await self.writes.force_delete_pod(item.pod)
            item.replica.pod, item.replica.leaving, item.replica.terminating = None, None, True
            seen.unavailable.pop(slot_of(item.replica), None)
            who = f"{item.replica.replica_type} {item.replica.index}"
            event = f"{who}: pod {name} deleted (grace period 0): {lost_as.description}"
            logger.info("%s: %s", seen.key, event)
            await self.recorder.warning(seen.raw, recovery.NODE_LOST, event)
        if refused is not None:
            raise refused
        if not charged:
            return
        replica, failure, _ = charged[0]
        who = f"{replica.replica_type} {replica.index}"
        if whole:
            await self._restart_job(seen, f"{who} lost: {failure.description}")
            return
        lost_replicas = ", ".join(f"{r.replica_type} {r.index}" for r, _, _ in charged)
        message = f"{lost_replicas} lost with their node ({failure.description}); replacing their pods."
        self.reporter.restarting(seen, message, specific=recovery.NODE_LOST)

    async def check_progress(self, seen: Observation) -> None:
        """``progressDeadlineSeconds``: a running job whose rendezvous host has written nothing for that long
        is ``Stalled`` and restarted whole, charged as an infrastructure failure (recovery.py)."""
        job = seen.job
        deadline = job.run_policy.progress_deadline_seconds
        if deadline is None:
            return
        status = seen.status
        if not st.is_true(status, st.RUNNING) or seen.unavailable:
            return
        if any(r.pod is None or r.terminating for r in seen.replicas.values()):
            return
        found = await self.progress.stalled(seen, deadline)
        if found is None:
            return
        replica, why = found
        failure = recovery.stalled_failure(replica, replica.pod, why, self.progress.last_line.get(seen.key, ""))
        self.ledger.record(seen, replica, replica.pod, failure)
        self.ledger.check_budget(seen, replica, failure)
        self.ledger.count_restart(seen, replica, failure)
        message = f"{job.kind} {seen.key} is stalled: {why}; restarting every pod of the job."
        st.set_condition(
            status,
            st.STALLED,
            reason=condition_reason(job.api_group, job.kind, "Stalled", recovery.STALLED),
            message=message,
        )
        await self.recorder.warning(seen.raw, recovery.STALLED, why)
        self.progress.forget(seen.key)
        await self._restart_job(seen, f"{job.kind} {seen.key} stalled")

    async def _restart_job(self, seen: Observation, what: str) -> None:
        """``restartScope: Job``: every pod goes (running, succeeded, failed), and new ones come only once
        all are gone (``Creation.create_missing``), so the new rendezvous has no member of the old one; in
        host-network mode each new pod gets a new host port and its Service is re-pointed first."""
        message = f"{what}; restarting every pod of the job together (failurePolicy.restartScope: Job)."
        await self.reporter.restarting_event(seen, message)
        whole_in_place.reset(seen.status)  # the new pods start released: none is made while an old one is left
        await self.reporter.persist(seen)
        doomed = [(r, r.pod) for r in seen.replicas.values() if r.pod is not None]
        await self.writes.delete_pods(pod for _, pod in doomed)
        for replica, _ in doomed:
            replica.pod, replica.terminating = None, True
        logger.info("%s: restarting the whole job: %s", seen.key, what)

    async def _recreate_backed_off(self, seen: Observation) -> None:
        """A rank restarted in place (``restartPolicy: ExitCode``) left in the kubelet's crash-loop back-off past
        ``in_place.BACK_OFF_BOUND_SECONDS`` is recreated (its restarts were counted as they happened), with an
        ``InPlaceRestartTimedOut`` event."""
        job = seen.job
        doomed: list[Replica] = []
        for replica in seen.replicas.values():
            pod = replica.pod
            if pod is None or replica.terminating or not restarts_in_place(job, replica.replica_type):
                continue
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            waited = in_place.stuck_in_back_off(pod, self.ledger.main_container(pod), seen.now)
            if waited is None:
                continue
            name = (pod.get("metadata") or {}).get("name")
            message = (
                f"{replica.replica_type} {replica.index} has waited {int(waited)}s in the kubelet's crash-loop "
                f"back-off in pod {name} (over {int(in_place.BACK_OFF_BOUND_SECONDS)}s); recreating its pod."
            )
            await self.recorder.warning(seen.raw, "InPlaceRestartTimedOut", message)
            doomed.append(replica)
        if not doomed:
            for replica in seen.replicas.values():
                if replica.pod is not None and restarts_in_place(job, replica.replica_type):
                    for entry in (replica.pod.get("status") or {}).get("containerStatuses") or []:
                        if ((entry.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff":
                            seen.want_requeue(in_place.BACK_OFF_BOUND_SECONDS)  # look again once it could be due
            return
        await self.writes.delete_pods(replica.pod for replica in doomed if replica.pod is not None)
        for replica in doomed:
            replica.pod, replica.terminating = None, True


async def volume_trouble(client: KubeClient, pod: Object) -> str | None:
    """A volume that cannot be mounted shows only in the pod's events (asked once, at the timeout)."""
    meta = pod.get("metadata") or {}
    try:
        listed = await client.list(
            EVENTS,
            namespace=meta.get("namespace"),
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={meta.get('name')}",
        )
    except (errors.Forbidden, errors.NotFound):
        return None
    for event in reversed(listed.items):
        if event.get("reason") in VOLUME_EVENT_REASONS:
            return f"{event.get('reason')}: {event.get('message') or 'no message'}"
    return None
