"""The reconcile of one training job, framework-agnostic: observe, decide, act, report.

One :class:`JobReconciler` serves one kind and never branches on which: what differs per kind is asked of
the kind's plug-in (``controllers/kinds/<kind>.py``: rendezvous settings, success rule, extra owned objects,
start order). A reconcile reads the job, its pods and its Services from the informers' caches
(``observation.py``) and makes the cluster match the job, then writes the status only if it changed. It is
level-based: it never asks what event woke it, so a missed event, a duplicate or a controller restart
changes nothing. What cuts across every kind (host-network ports and Services, gang PodGroups, RDMA and
placement, the kinds' owned objects) is a *step* with state and clients of its own, behind one contract
(``steps.py``): the reconcile calls each phase of all of them at one place, in the order below, and names
no step. A condition that ends the job is raised as a ``JobFailure`` wherever it is found and becomes
``Failed``.

The steps, in order:

1. **Observe** the job; a job that is gone or being deleted needs nothing (the garbage collector removes
   its pods and Services through their owner references; the steps ``forget`` it).
2. **Validate**: a job the CRD schema let through but that cannot run goes ``Failed``/``InvalidSpec``
   and gets no pods.
3. **Finished** jobs: the steps ``finish`` (PodGroup deleted, reserved ports freed); apply ``cleanPodPolicy``
   once, then ``ttlSecondsAfterFinished``.
4. **Suspended** jobs (``suspend``, or a step's ``hold``): no pods, no Services; the steps ``suspend``, and
   ``resume`` when it runs again.
5. **Limits**: ``activeDeadlineSeconds`` (a timer, not only on events) and ``backoffLimit``.
6. **Per replica**: the steps ``observe``; remove surplus replicas, replace what failed and may be retried
   and what a step wants made again (``recreate``), fail the job on a failure that may not. Then, in this
   order, which is a guard of host-network failover: the steps prepare the replacements of terminating pods
   (``replacing``: a Service re-pointed to its replica's new port while the old pod stops), ``admit`` the pods
   (a gang's PodGroup made and admitted), their ``owned_objects`` are made, they ``reserve`` for the pods
   about to be made (a Service re-pointed to its new port before its pod exists), then Services and pods are
   created (each pod ``build_pod`` by the steps); the steps ``report`` and ``settle``.
7. **Report**: replica counts and conditions, one status write when something changed.

Names are deterministic (``<job>-<type>-<i>``), so a create that races a stale cache gets AlreadyExists,
which is not an error; expectations (``observation.py``) keep a lagging cache from causing a second action.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubedl_py.api import Framework, JobValidationError, TrainingJob, parse_job, with_defaults
from kubedl_py.api import constants as c
from kubedl_py.api.defaults import default_container_index
from kubedl_py.api.groups import KUBEDL, OWN_MANAGERS, condition_reason, group_of
from kubedl_py.api.validation import host_port_errors
from kubedl_py.controllers import recovery
from kubedl_py.controllers import status as st
from kubedl_py.controllers.addressing import Addressing, replica_name
from kubedl_py.controllers.failures import USER, Failure, classify, disruption, in_place_failure
from kubedl_py.controllers.kinds import controller_for
from kubedl_py.controllers.observation import (
    Expectations,
    JobFailure,
    Observation,
    Replica,
    StaleDecision,
    in_place_restarts,
    is_active,
    is_crashing,
    parse_time,
    slot_of,
)
from kubedl_py.controllers.ownership import (
    NAME_IN_USE,
    PREVIOUS_JOB_TERMINATING,
    Conflict,
    conflict_of,
    owner_reference,
)
from kubedl_py.controllers.pods import (
    addressing_for,
    build_pod,
    build_service,
    service_drift,
    type_selector,
)
from kubedl_py.controllers.policies import (
    VOLUME_EVENT_REASONS,
    completion_of,
    count_phase,
    pending_cause,
    unschedulable_message,
    unseen_by_scheduler,
    whole_job_restart,
)
from kubedl_py.controllers.refusals import Outcome, Refusal, classify_refusal, in_template
from kubedl_py.controllers.rendezvous import service_slots
from kubedl_py.controllers.status_yield import StatusYield
from kubedl_py.controllers.steps import Steps
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.informer import OWNER_INDEX, Informer
from kubedl_py.kube.manager import Result
from kubedl_py.kube.priority import WriteGate
from kubedl_py.kube.resources import EVENTS, PODS, SERVICES, Resource

logger = logging.getLogger(__name__)

Object = dict[str, Any]
Job = TrainingJob


#: ``Running`` False reasons of a job whose pods wait for a scheduler or for a name (cleared when that ends)
UNSCHEDULABLE = "Unschedulable"
#: no scheduler has looked at a pod for a while (its schedulerName names no running scheduler)
NOT_SCHEDULED = "NotScheduled"
#: the reasons of a create the API server refused for now (refusals.py, Outcome.RETRY)
RETRYING_REASONS = frozenset({"FailedCreate", "QuotaExceeded"})
WAITING_REASONS = frozenset({UNSCHEDULABLE, NOT_SCHEDULED, NAME_IN_USE, PREVIOUS_JOB_TERMINATING, *RETRYING_REASONS})


def reaches_backoff_limit(restarts: int, limit: int) -> bool:
    """The job fails when its restarts reach ``backoffLimit`` (so a limit of N allows N-1 restarts), and on
    any restart with a limit of 0: how the Training Operator and KubeDL count (``restarts >= limit``)."""
    return restarts >= max(limit, 1)


def explicit_clean_pod_policy(raw: Object) -> str | None:
    """``cleanPodPolicy`` as written in the job (inline, or under ``runPolicy``), not defaulted."""
    spec = raw.get("spec") or {}
    value = spec.get("cleanPodPolicy") or (spec.get("runPolicy") or {}).get("cleanPodPolicy")
    return str(value) if value else None


def keeps_pods_after_failure(raw: Object) -> bool:
    """Whether a failed job keeps its running pods: when it asks to (``cleanPodPolicy: None`` written in it, to
    debug them in place), and for a ``kubeflow.org`` job that says nothing, as the Training Operator keeps them
    (its default None: scripts written for it read a failed job's running pods). Otherwise a failed job holds
    no node."""
    written = explicit_clean_pod_policy(raw)
    if written is not None:
        return written == "None"
    return group_of(raw.get("apiVersion")) is not KUBEDL and group_of(raw.get("apiVersion")) is not None


def _reason(job: Job, word: str, specific: str | None = None) -> str:
    """A condition reason in the job's API group's words (``groups.condition_reason``)."""
    return condition_reason(job.api_group, job.kind, word, specific)


#: seconds a change of replica counts alone waits after the job's last status write, to go out with the next
#: change: a job's pods start and end within moments of each other, one write per pod would be wasted (the
#: Kubernetes Job controller batches its pods' updates the same way, once a second)
STATUS_BATCH_PERIOD = 1.0

#: the longest an urgent reconcile waits for the cache to show the job's last status write (``_caught_up``)
CATCH_UP_SECONDS = 1.0

#: metadata a job's own status writes change on every write, and which no parse reads: ignored when deciding
#: whether the job's document changed since it was last parsed (``_parse``)
VOLATILE_METADATA = ("resourceVersion", "managedFields")

#: an environment variable the test suites set to 1 (inherited by the controllers they start): every parse
#: served from the cache is then checked against a fresh one, so that code which edits a parsed job in place
#: (the cache shares it between reconciles) fails a test instead of corrupting the cache unseen
VERIFY_PARSE_CACHE = "KUBEDL_PY_VERIFY_PARSE_CACHE"

#: seconds from a job found blocked by a name taken (``ownership.py``) to the first look at that name again; each
#: look that finds it still taken doubles the wait, up to twice ``wait_requeue``
BLOCKED_RECHECK_FIRST = 1.0

#: pod/Service writes in flight per job kind, shared by its reconciles (default of ``--write-concurrency``)
WRITE_CONCURRENCY = 32
#: writes in flight per job kind for replacing pods of running jobs, beside WRITE_CONCURRENCY
URGENT_WRITE_CONCURRENCY = 8


@dataclass
class ReconcilerOptions:
    cluster_domain: str | None = None
    #: requeue delay while waiting for something that sends no event (a name taken by an object not the job's)
    wait_requeue: float = 5.0
    #: host ports a pod may declare (``--max-host-ports-per-pod``; None: no limit)
    max_host_ports: int | None = c.DEFAULT_MAX_HOST_PORTS_PER_POD
    #: pod/Service writes in flight for the jobs of this kind (``--write-concurrency``)
    write_concurrency: int = WRITE_CONCURRENCY
    #: default of failurePolicy.nodeLostTimeoutSeconds (``--node-lost-timeout``)
    node_lost_timeout: int = recovery.DEFAULT_NODE_LOST_TIMEOUT
    #: default of failurePolicy.infrastructureBackoffLimit (``--infrastructure-backoff-limit``)
    infrastructure_backoff_limit: int = recovery.DEFAULT_INFRASTRUCTURE_BACKOFF_LIMIT


class JobReconciler:
    """Reconciles every job of one kind. See the module docstring for the steps."""

    def __init__(
        self,
        *,
        client: KubeClient,
        framework: Framework,
        resource: Resource,
        jobs: Informer,
        pods: Informer,
        services: Informer,
        recorder: EventRecorder,
        steps: Steps | None = None,
        options: ReconcilerOptions | None = None,
        on_transition: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.client = client
        self.framework = framework
        self.resource = resource
        self.jobs = jobs
        self.pods = pods
        self.services = services
        #: the cross-cutting steps, in registry order (``setup.STEPS``)
        self.steps = steps or Steps()
        self.recorder = recorder
        self.options = options or ReconcilerOptions()
        self.expectations = Expectations()
        self._on_transition = on_transition or (lambda kind, condition, namespace: None)
        self._writes = asyncio.Semaphore(self.options.write_concurrency)
        # Replacements of a running job's pods (and their Services) do not queue behind the writes of jobs
        # being created: a few slots of their own.
        self._urgent_writes = asyncio.Semaphore(URGENT_WRITE_CONCURRENCY)
        #: a new job's first status write waits while pods are being created (``status_yield.py``); its ``wake``
        #: is the controller's work queue, set by ``setup.build_manager`` (unset: nothing is held)
        self.status_yield = StatusYield()
        #: resourceVersion of each job after our last status write (read-your-writes on a lagging cache)
        self._written: dict[str, str] = {}
        #: when each job's status was last written (monotonic), for STATUS_BATCH_PERIOD
        self._status_written_at: dict[str, float] = {}
        #: per job: the last reason to wait told in an event (``_report_waiting``), so a resync tells nothing new
        self._waiting_said: dict[str, str] = {}
        #: per job: the resourceVersion of each of its Services when last found as the job wants it
        self._services_checked: dict[str, dict[str, str]] = {}
        #: per job: its uid and the (plural, name) of its extra objects found to be its own (``_take_over``)
        self._owned: dict[str, tuple[str, set[tuple[str, str]]]] = {}
        #: per job: its document as last parsed (status and VOLATILE_METADATA left out) and what the parse gave
        self._parsed: dict[str, tuple[Object, Job | None, list[str]]] = {}
        self._verify_parses = os.environ.get(VERIFY_PARSE_CACHE) == "1"
        #: per job: the names that blocked it, found taken (``_blocked``), and when to look at them again
        self._blocks: dict[str, _Block] = {}
        #: the resource of each kind a Conflict was found for (``_take_over``), to read it again
        self._conflict_resources: dict[str, Resource] = {PODS.kind: PODS, SERVICES.kind: SERVICES}
        #: nodes read for pods that look lost (recovery.py), and the log checks of progressDeadlineSeconds
        self.nodes = recovery.NodeHealth(client)
        self.progress = recovery.Progress(client)

    def _cache_behind(self, key: str, raw: Object) -> bool:
        written = self._written.get(key)
        cached = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        if written is None or not (written.isdigit() and cached.isdigit()):
            return False
        if int(cached) >= int(written):
            del self._written[key]
            return False
        return True

    # ------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result:
        raw = self.jobs.get_by_key(key)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            self.steps.forget(key)
            self._written.pop(key, None)
            self._status_written_at.pop(key, None)
            self._owned.pop(key, None)
            self._services_checked.pop(key, None)
            self._waiting_said.pop(key, None)
            self._parsed.pop(key, None)
            self._blocks.pop(key, None)
            self.status_yield.forget(key)
            self.progress.forget(key)
            return Result()
        if self._cache_behind(key, raw):
            # Our last status write is not in the cache yet; acting on the older copy would undo it. The watch
            # event of that write wakes us again, but as an ordinary key: a job that lost a pod (an urgent
            # reconcile) waits for its write here instead, so its repair keeps its place ahead of new work.
            raw = await self._caught_up(key) if WriteGate.passing() else None
            if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
                return Result(requeue_after=1.0 if raw is None else 0.05)  # a safety net only
        now = datetime.now(UTC)
        status = st.with_changes(raw.get("status"))

        job, problems = self._parse(key, raw)
        if job is None:
            await self._fail_invalid(raw, status, problems)
            return Result()

        manager = job.run_policy.managed_by
        if manager and manager not in OWN_MANAGERS:
            # Another controller's job (MultiKueue dispatches it to a worker cluster): not ours to touch.
            logger.debug("%s: managed by %s; left alone", key, manager)
            return Result()
        seen = self._observe(raw, job, status, now)
        steps = self.steps.begin(seen)
        try:
            if st.is_finished(status):
                await self._finish(seen, steps)
            else:
                await self._run(seen, steps)
        except StaleDecision as stale:
            logger.debug("%s; deciding again on the newer copy", stale)
            return Result(requeue_after=0.05)
        await self._report(seen)
        if seen.requeue_after is not None:
            return Result(requeue_after=max(seen.requeue_after, 0.05))
        return Result(requeue=seen.backoff)

    async def _caught_up(self, key: str) -> Object | None:
        """The job from the cache once our last status write is in it (at most ``CATCH_UP_SECONDS``), or None."""
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            raw = self.jobs.get_by_key(key)
            if raw is None or not self._cache_behind(key, raw):
                return raw
        return None

    # -------------------------------------------------------------------------------------------- observe

    def _parse(self, key: str, raw: Object) -> tuple[Job | None, list[str]]:
        """The job validated and defaulted, or the problems that make it invalid.

        A job is reconciled once per event of each of its pods, and its spec almost never changes between two
        of them: validating and defaulting it every time was a tenth of the controller's CPU while 200 jobs
        were created (py-spy, bench/real_controller.py). So the result is kept per job and reused while the
        document, less its status and VOLATILE_METADATA, is the same; the parsed job is shared between
        reconciles and never edited (VERIFY_PARSE_CACHE checks that in the tests)."""
        document = {k: v for k, v in raw.items() if k != "status"}
        metadata = document.get("metadata")
        if isinstance(metadata, dict) and any(field in metadata for field in VOLATILE_METADATA):
            document["metadata"] = {k: v for k, v in metadata.items() if k not in VOLATILE_METADATA}
        cached = self._parsed.get(key)
        if cached is not None and cached[0] == document:
            if self._verify_parses and _dumped(self._parse_document(document)) != _dumped((cached[1], cached[2])):
                raise RuntimeError(f"{key}: a parsed job was edited in place; the parse cache would serve it")
            return cached[1], cached[2]
        job, problems = self._parse_document(document)
        self._parsed[key] = (document, job, problems)
        return job, problems

    def _parse_document(self, document: Object) -> tuple[Job | None, list[str]]:
        try:
            job = parse_job(document)
        except JobValidationError as exc:
            return None, [str(error) for error in exc.errors]
        too_many = host_port_errors(job, self.options.max_host_ports)
        if too_many:
            return None, [str(error) for error in too_many]
        return with_defaults(job), []

    def _observe(self, raw: Object, job: Job, status: Object, now: datetime) -> Observation:
        uid = job.metadata.uid or ""
        pods = self.pods.list(OWNER_INDEX, uid)
        services = {(svc.get("metadata") or {}).get("name", ""): svc for svc in self.services.list(OWNER_INDEX, uid)}
        replicas: dict[tuple[str, int], Replica] = {}
        for replica_type, spec in job.replica_specs.items():
            for index in range(spec.replicas or 0):
                replicas[(replica_type, index)] = Replica(replica_type, index)
        surplus: list[Object] = []
        by_lower = {t.lower(): t for t in job.replica_specs}
        for pod in pods:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            owner_type = by_lower.get(labels.get(c.LABEL_REPLICA_TYPE, ""), "")
            index_text = labels.get(c.LABEL_REPLICA_INDEX, "")
            slot = replicas.get((owner_type, int(index_text) if index_text.isdigit() else -1))
            if slot is None:
                surplus.append(pod)
                continue
            if meta.get("deletionTimestamp") or self.expectations.pending_delete(str(meta.get("uid"))):
                slot.terminating = True
                slot.leaving = pod
                continue
            slot.pod = pod
        return Observation(
            raw=raw,
            job=job,
            status=status,
            pods=pods,
            services=services,
            replicas=replicas,
            surplus=surplus,
            now=now,
        )

    # ------------------------------------------------------------------------------------- decide + act

    async def _run(self, seen: Observation, steps: Steps) -> None:
        job, status = seen.job, seen.status
        if st.get_condition(status, st.CREATED) is None:
            message = f"{job.kind} {seen.key} is created."
            st.set_condition(status, st.CREATED, reason=_reason(job, "Created"), message=message)
        if job.run_policy.suspend:
            await self._suspend(seen, steps)
            return
        held = await steps.hold(seen)
        if held is not None:
            await self._suspend(seen, steps, why=held)
            return
        if st.is_true(status, st.SUSPENDED):
            await self._resume(seen, steps)
        if not status.get("startTime"):
            status["startTime"] = st.timestamp(seen.now)
        # The evidence of in-place restarts first: a limit reached below names the latest one.
        self._note_in_place_failures(seen)

        if self._deadline_passed(seen) or self._backoff_exceeded(seen):
            failed = st.get_condition(status, st.FAILED) or {}
            reason = str(failed.get("reason") or "Failed")
            await self.recorder.warning(seen.raw, reason, str(failed.get("message") or reason))
            await self._stop_pods(seen)
            return
        if await self._pending_too_long(seen):
            await self._stop_pods(seen)
            return

        await steps.observe(seen)
        await self._remove_surplus(seen)
        try:
            await self._recover_lost(seen)
            await self._note_disruptions(seen)
            await self._handle_failures(seen)
            await self._recreate(seen, steps)
            terminating = [r for r in seen.replicas.values() if r.terminating]
            if terminating and WriteGate.passing():
                self._repairing()  # a running job losing a pod: new jobs go slower for a while (the repair window)
            # A guard, in this order: the replacement of a terminating pod is prepared now (in host-network mode
            # its Service re-pointed to the new port), then the pods are admitted, then the missing ones made,
            # each replica's Service re-pointed (``reserve``) before its pod is created.
            if not await self._still_blocked(seen):
                await steps.replacing(seen, terminating)
                if not await steps.admit(seen):
                    return
                if await self._create_owned(seen, steps):
                    await self._create_missing(seen, steps)
            await self._repair_services(seen, steps)
            await self._check_progress(seen)
        except JobFailure as failure:
            await steps.report(seen)
            self._set_failed(seen, failure.reason, failure.message)
            await self.recorder.warning(seen.raw, failure.reason, failure.event)
            await self._stop_pods(seen)
            return
        except Exception:
            await steps.report(seen)  # a re-pointed Service is told about even when its pod could not be sent
            raise
        await steps.report(seen)
        await steps.settle(seen)

    def _addressing(self, seen: Observation, steps: Steps, *, served: bool = False) -> Addressing:
        """How the job's replicas are reached, as the steps say (host network: each on its host port)."""
        base = addressing_for(seen.job, cluster_domain=self.options.cluster_domain)
        return steps.address(seen, base, served=served)

    async def _recreate(self, seen: Observation, steps: Steps) -> None:
        """Pods a step wants made again (in host-network mode: pods no node can take for their host port): each,
        never bound, is deleted at once, and made again like any replacement."""
        due = steps.recreate(seen)
        await self._gather(self._delete_pod(r.pod) for r in due if r.pod is not None)
        for replica in due:
            replica.pod, replica.terminating = None, True

    async def _repair_services(self, seen: Observation, steps: Steps) -> None:
        """Every Service of the job kept as the job wants it (selector, ports, type; in host-network mode the
        targetPort is the step's, kept by its ``settle``): a hand edit is undone with one write, a Service whose
        clusterIP kind was changed is deleted and made again. A Service is compared once per version of it."""
        job = seen.job
        checked = self._services_checked.setdefault(seen.key, {})
        todo = {
            name: live
            for name, live in seen.services.items()
            if checked.get(name) != (live.get("metadata") or {}).get("resourceVersion")
        }
        if not todo:
            return
        addressing = self._addressing(seen, steps, served=True)
        for slot in seen.replicas:
            name = replica_name(job.name, *slot)
            live = todo.get(name)
            if live is None or not addressing.reachable(*slot):
                continue
            patch, drifted = service_drift(live, build_service(job, *slot, addressing))
            checked[name] = str((live.get("metadata") or {}).get("resourceVersion"))
            if not drifted:
                continue
            message = f"Service {name}: {', '.join(drifted)} changed by someone else; "
            if patch is None:
                await self._delete_service(live)
                message += "deleted, to be made again as the job wants it"
            else:
                version = (live.get("metadata") or {}).get("resourceVersion")
                if version:
                    patch["metadata"] = {"resourceVersion": version}  # over the version compared, never blindly
                with contextlib.suppress(errors.NotFound):
                    await self.client.patch(SERVICES, name, patch, namespace=job.namespace)
                message += "put back as the job wants it"
            checked.pop(name, None)
            logger.info("%s: %s", seen.key, message)
            await self.recorder.warning(seen.raw, "ServiceRepaired", message)

    async def _suspend(self, seen: Observation, steps: Steps, *, why: str | None = None) -> None:
        """``suspend: true`` (what Kueue's own integration sets while a job waits for quota), or a step holding
        the job (``why``: a queued job whose Workload is not admitted, ``kueue.py``): no pods, no Services, no
        PodGroup; the job is ``Suspended`` and no longer ``Running``. Finished pods go too, as with the Training
        Operator: a resumed job starts from scratch."""
        job, status = seen.job, seen.status
        await self._gather(self._delete_pod(r.pod) for r in seen.replicas.values() if r.pod is not None)
        await self._gather(
            self._delete_pod(pod)
            for pod in seen.surplus
            if not (pod.get("metadata") or {}).get("deletionTimestamp")
            and not self.expectations.pending_delete(str((pod.get("metadata") or {}).get("uid")))
        )
        for replica in seen.replicas.values():
            if replica.pod is not None:
                replica.pod, replica.terminating = None, True
        await self._gather(self._delete_service(service) for service in seen.services.values())
        await steps.suspend(seen)
        message = f"{job.kind} {seen.key} is suspended" + (f": {why}" if why else ".")
        if st.is_true(status, st.RUNNING):
            st.set_condition(status, st.RUNNING, true=False, reason=_reason(job, "Suspended"), message=message)
        if not st.is_true(status, st.SUSPENDED):
            st.set_condition(status, st.SUSPENDED, reason=_reason(job, "Suspended"), message=message)
            await self.recorder.normal(seen.raw, _reason(job, "Suspended"), message)
            logger.info("%s: suspended%s", seen.key, f" ({why})" if why else "")
        else:
            st.set_condition(status, st.SUSPENDED, reason=_reason(job, "Suspended"), message=message)

    async def _resume(self, seen: Observation, steps: Steps) -> None:
        """``suspend`` back to false: ``Suspended`` turns False and the job starts with a fresh ``startTime``,
        so ``activeDeadlineSeconds`` counts from the resumption (the Training Operator's rule)."""
        job, status = seen.job, seen.status
        message = f"{job.kind} {seen.key} is resumed."
        st.set_condition(status, st.SUSPENDED, true=False, reason=_reason(job, "Resumed"), message=message)
        status["startTime"] = st.timestamp(seen.now)
        await steps.resume(seen)
        await self.recorder.normal(seen.raw, _reason(job, "Resumed"), message)
        logger.info("%s: resumed", seen.key)

    def _deadline_passed(self, seen: Observation) -> bool:
        deadline = seen.job.run_policy.active_deadline_seconds
        if deadline is None:
            return False
        started = parse_time(seen.status.get("startTime")) or seen.now
        remaining = deadline - (seen.now - started).total_seconds()
        if remaining > 0:
            seen.want_requeue(remaining)
            return False
        self._set_failed(
            seen,
            "DeadlineExceeded",
            f"{seen.job.kind} {seen.key} has run longer than activeDeadlineSeconds ({deadline}s).",
        )
        return True

    def _restarts(self, seen: Observation, replica_type: str | None = None) -> int:
        """Restarts recorded in the status plus the live pods' in-place ones: of the job, or of one type."""
        statuses = seen.status.get("replicaStatuses") or {}
        recorded = sum(
            int(value.get("restarts") or 0)
            for name, value in statuses.items()
            if replica_type is None or name == replica_type
        )
        live = sum(
            in_place_restarts(r.pod)
            for r in seen.replicas.values()
            if r.pod and (replica_type is None or r.replica_type == replica_type)
        )
        return recorded + live

    def _limit_reached(self, seen: Observation, *, more: int = 0, replica_type: str | None = None) -> str | None:
        """Which restart limit fails the job (the job-wide ``backoffLimit``, or the ``backoffLimit`` of
        ``replica_type`` or of any type), counting ``more`` restarts about to happen, as a clause for the
        message; None while neither is reached."""
        job = seen.job
        limit = job.run_policy.backoff_limit
        restarts = self._restarts(seen) + more
        if limit is not None and reaches_backoff_limit(restarts, limit):
            if more:
                return f"{restarts} restarts would reach backoffLimit {limit}"
            return f"has restarted {restarts} times, reaching backoffLimit {limit}"
        for name, spec in job.replica_specs.items():
            if spec.backoff_limit is None or (replica_type is not None and name != replica_type):
                continue
            count = self._restarts(seen, name) + more
            if reaches_backoff_limit(count, spec.backoff_limit):
                own = spec.backoff_limit
                if more:
                    return f"{count} restarts of its {name} replicas would reach their backoffLimit {own}"
                return f"its {name} replicas have restarted {count} times, reaching their backoffLimit {own}"
        return None

    def _backoff_exceeded(self, seen: Observation) -> bool:
        clause = self._limit_reached(seen)
        if clause is None:
            return False
        last = recovery.last_failure_clause(seen.status)
        self._set_failed(seen, "BackoffLimitExceeded", f"{seen.job.kind} {seen.key} {clause}{last}.")
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
            cause = pending_cause(pod) or await self._volume_trouble(pod) or "no cause reported"
            name = meta.get("name")
            message = (
                f"{seen.job.kind} {seen.key}: pod {name} has been Pending for {int(waited)}s, over "
                f"failurePolicy.pendingTimeoutSeconds ({timeout}s): {cause}."
            )
            self._set_failed(seen, "PendingTimeout", message)
            await self.recorder.warning(seen.raw, "PendingTimeout", f"pod {name}: {cause}")
            return True
        return False

    async def _volume_trouble(self, pod: Object) -> str | None:
        """A volume that cannot be mounted shows only in the pod's events (asked once, at the timeout)."""
        meta = pod.get("metadata") or {}
        try:
            listed = await self.client.list(
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

    async def _remove_surplus(self, seen: Observation) -> None:
        """Pods (and their Services) of replicas the spec no longer has: replicas lowered or type removed."""
        # Pods already on their way out are left alone: a delete per reconcile would be a write per event.
        doomed = [
            pod
            for pod in seen.surplus
            if not (pod.get("metadata") or {}).get("deletionTimestamp")
            and not self.expectations.pending_delete(str((pod.get("metadata") or {}).get("uid")))
        ]
        names = [(pod.get("metadata") or {}).get("name", "") for pod in doomed]
        await self._gather(self._delete_pod(pod) for pod in doomed)
        expected = {replica_name(seen.job.name, t, i) for t, i in seen.replicas}
        stale = [service for name, service in seen.services.items() if name not in expected]
        await self._gather(self._delete_service(service) for service in stale)
        if names:
            logger.info("%s: removed surplus replicas %s", seen.key, ", ".join(sorted(names)))

    async def _handle_failures(self, seen: Observation) -> None:
        """Replace retryable failures (the failed pod alone, or with ``failurePolicy.restartScope: Job`` every
        pod of the job); a failure that may not be retried ends the job (JobFailure), unless the job's
        ``completionPolicy`` tolerates that many failed replicas of its type. Each failure is recorded in the
        status (its evidence) and charged to the budget of its class (failures.py) before its pod goes."""
        job = seen.job
        completion = completion_of(job)
        doomed: list[Replica] = []
        for replica in seen.replicas.values():
            if replica.pod is None or replica.phase != "Failed":
                continue
            spec = job.replica_specs[replica.replica_type]
            failure = classify(replica.pod, self._main_container(replica.pod))
            new = self._record(seen, replica, replica.pod, failure)
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
                # (_persist), so a reconcile that finds the failure recorded (the delete failed after the
                # write) replaces the pod without charging it again.
                self._check_budget(seen, replica, failure)
                self._count_restart(seen, replica, failure)
            if whole_job_restart(job):
                await self._restart_job(seen, f"{who} {failure.description}")
                return  # one restart of the whole job, however many pods failed with it
            name = replica_name(job.name, *slot_of(replica))
            message = f"{who} {failure.description} ({failure.failure_class.lower()} failure); replacing pod {name}."
            st.set_condition(seen.status, st.RESTARTING, reason=_reason(job, "Restarting"), message=message)
            self._on_transition(job.kind, st.RESTARTING, job.namespace)
            await self.recorder.normal(seen.raw, "JobRestarting", message)
            doomed.append(replica)
        if not doomed:
            return
        await self._persist(seen)  # the records and charges above, before the pods that prove them go
        await self._gather(self._delete_pod(replica.pod) for replica in doomed if replica.pod is not None)
        for replica in doomed:
            replica.pod, replica.terminating = None, True

    def _check_budget(self, seen: Observation, replica: Replica, failure: Failure) -> None:
        """Fail the job (JobFailure) when replacing after ``failure`` would reach the limit of its class."""
        job = seen.job
        who = f"{replica.replica_type} {replica.index}"
        if failure.infrastructure:
            limit = recovery.infrastructure_backoff_limit(job, self.options.infrastructure_backoff_limit)
            count = recovery.infrastructure_restarts(seen.status) + 1
            if reaches_backoff_limit(count, limit):
                message = (
                    f"{job.kind} {seen.key}: {who} {failure.description}; {count} infrastructure restarts would "
                    f"reach failurePolicy.infrastructureBackoffLimit {limit}."
                )
                raise JobFailure("InfrastructureBackoffLimitExceeded", message)
            return
        reached = self._limit_reached(seen, more=1, replica_type=replica.replica_type)
        if reached is not None:
            message = f"{job.kind} {seen.key}: {who} {failure.description}; {reached}."
            raise JobFailure("BackoffLimitExceeded", message)

    def _main_container(self, pod: Object) -> str | None:
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            return None
        name = containers[default_container_index(containers, self.framework)].get("name")
        return str(name) if name else None

    def _record(self, seen: Observation, replica: Replica, pod: Object | None, failure: Failure, **extra: Any) -> bool:
        """Put a failure in the job's status (once per pod and run, recovery.record) and, with
        ``avoidNodeAfterFailures``, note its node. True when it was new."""
        entry = recovery.failure_entry(replica, pod, failure, now=seen.now, **extra)
        if not recovery.record(seen.status, entry):
            return False
        threshold = recovery.avoid_after(seen.job)
        why = recovery.note_node(
            seen.status, entry.get("node"), threshold=threshold, lost=failure.reason == recovery.NODE_LOST, now=seen.now
        )
        if why is not None:
            logger.info("%s: new pods avoid node %s: %s", seen.key, entry.get("node"), why)
        return True

    def _note_in_place_failures(self, seen: Observation) -> None:
        """The evidence of in-place restarts (``OnFailure``/``Always``): the kubelet restarted the program and
        kept only the last run's end in ``lastState``; record it before the next one replaces it. Charged as
        today: the live pods' restart counts are what backoffLimit adds up (``_restarts``)."""
        for replica in seen.replicas.values():
            pod = replica.pod
            if pod is None:
                continue
            failure = in_place_failure(pod, self._main_container(pod))
            if failure is not None:
                self._record(seen, replica, pod, failure)

    async def _note_disruptions(self, seen: Observation) -> None:
        """Pods Kubernetes is ending for a disruption (``DisruptionTarget``: preemption, the Eviction API, taint
        eviction, the pod garbage collector) are replaced once gone, charged as infrastructure failures, and
        the job says it is restarting. Pods deleted by hand are replaced without a charge."""
        job = seen.job
        for replica in seen.replicas.values():
            pod = replica.leaving
            if pod is None or disruption(pod) is None:
                continue
            failure = classify(pod, self._main_container(pod))
            if not self._record(seen, replica, pod, failure):
                continue
            self._check_budget(seen, replica, failure)
            self._count_restart(seen, replica, failure, pod=pod)
            who = f"{replica.replica_type} {replica.index}"
            if whole_job_restart(job):
                await self._restart_job(seen, f"{who} {failure.description}")
                return
            message = f"{who} {failure.description} (infrastructure failure); its pod is replaced once it is gone."
            st.set_condition(seen.status, st.RESTARTING, reason=_reason(job, "Restarting"), message=message)
            self._on_transition(job.kind, st.RESTARTING, job.namespace)
            await self.recorder.normal(seen.raw, "JobRestarting", message)

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
        timeout = recovery.node_lost_timeout(job, self.options.node_lost_timeout)
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
            if st.set_condition(
                seen.status, st.RESTARTING, reason=_reason(job, "Restarting", "NodeNotReady"), message=message
            ):
                self._on_transition(job.kind, st.RESTARTING, job.namespace)
            return
        charged: list[tuple[Replica, Failure, Object]] = []
        failures = [recovery.lost_failure(item) for item in due]
        for item, lost_as in zip(due, failures, strict=True):
            if self._record(seen, item.replica, item.pod, lost_as, node=item.node.name):
                charged.append((item.replica, lost_as, item.pod))
        whole = whole_job_restart(job)
        refused: JobFailure | None = None
        try:
            for replica, charge, pod in charged[: 1 if whole else None]:
                self._check_budget(seen, replica, charge)
                self._count_restart(seen, replica, charge, pod=pod)
        except JobFailure as exc:
            refused = exc  # the job fails; its lost pods are deleted all the same, as nothing else will end them
            self._set_failed(seen, exc.reason, exc.message)
        # Recorded and charged (or failed) before the pods go: once they are gone nothing shows they were lost.
        await self._persist(seen)
        for item, lost_as in zip(due, failures, strict=True):
            name = replica_name(job.name, *slot_of(item.replica))
            await self._force_delete_pod(item.pod)
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
        reason = _reason(job, "Restarting", recovery.NODE_LOST)
        st.set_condition(seen.status, st.RESTARTING, reason=reason, message=message)
        self._on_transition(job.kind, st.RESTARTING, job.namespace)

    async def _check_progress(self, seen: Observation) -> None:
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
        self._record(seen, replica, replica.pod, failure)
        self._check_budget(seen, replica, failure)
        self._count_restart(seen, replica, failure, pod=None)
        message = f"{job.kind} {seen.key} is stalled: {why}; restarting every pod of the job."
        st.set_condition(status, st.STALLED, reason=_reason(job, "Stalled", recovery.STALLED), message=message)
        await self.recorder.warning(seen.raw, recovery.STALLED, why)
        self.progress.forget(seen.key)
        await self._restart_job(seen, f"{job.kind} {seen.key} stalled")

    async def _restart_job(self, seen: Observation, what: str) -> None:
        """``restartScope: Job``: every pod goes (running, succeeded, failed), and new ones come only once
        all are gone (``_create_missing``), so the new rendezvous has no member of the old one; in
        host-network mode each new pod gets a new host port and its Service is re-pointed first."""
        job = seen.job
        message = f"{what}; restarting every pod of the job together (failurePolicy.restartScope: Job)."
        st.set_condition(seen.status, st.RESTARTING, reason=_reason(job, "Restarting"), message=message)
        self._on_transition(job.kind, st.RESTARTING, job.namespace)
        await self.recorder.normal(seen.raw, "JobRestarting", message)
        await self._persist(seen)
        doomed = [(r, r.pod) for r in seen.replicas.values() if r.pod is not None]
        await self._gather(self._delete_pod(pod) for _, pod in doomed)
        for replica, _ in doomed:
            replica.pod, replica.terminating = None, True
        logger.info("%s: restarting the whole job: %s", seen.key, what)

    def _count_restart(
        self, seen: Observation, replica: Replica, failure: Failure, *, pod: Object | bool | None = True
    ) -> None:
        """Charge a replacement to its class's budget; the in-place restarts the pod had made (the program's
        own) move into ``restarts`` with it, as the live pod no longer carries them."""
        gone = replica.pod if pod is True else pod
        in_place = in_place_restarts(gone) if isinstance(gone, dict) else 0
        recovery.charge(seen.status, replica.replica_type, failure.failure_class)
        if in_place:
            recovery.charge(seen.status, replica.replica_type, USER, in_place)

    async def _create_owned(self, seen: Observation, steps: Steps) -> bool:
        """The objects the steps say the job owns besides pods and Services (the kind's: MPI's hostfile and SSH
        key), before any pod; AlreadyExists is fine when the object is the job's. Only tried while a pod is
        missing: a running job costs no request. False when one of their names is taken by an object not the
        job's: no pod may be made then (it would read it)."""
        if not any(r.pod is None and not r.terminating for r in seen.replicas.values()):
            return True
        for item in steps.owned_objects(seen, self._addressing(seen, steps)):
            body = dict(item.body)
            meta = dict(body.get("metadata") or {})
            meta.setdefault("namespace", seen.job.namespace)
            meta["ownerReferences"] = [owner_reference(seen.job)]
            body["metadata"] = meta
            result = await self._create(item.resource, body)
            if isinstance(result, Conflict):
                self._blocked(seen, [result])
            elif result is not None:
                await self._refused(seen, [result])
                if result.outcome is Outcome.GONE:
                    return False
        return not seen.conflicts

    async def _create_missing(self, seen: Observation, steps: Steps) -> None:
        job = seen.job
        if whole_job_restart(job) and any(r.terminating for r in seen.replicas.values()):
            return  # a whole-job restart: no new pod while one of the old rendezvous is still stopping
        plugin = controller_for(job.kind)
        pods_by_type = seen.pods_by_type()
        missing = [
            r
            for r in seen.replicas.values()
            if r.pod is None
            and not r.terminating
            and not self.expectations.pending_create(seen.pod_key(r))
            and plugin.may_start(job, r.replica_type, pods_by_type)
        ]
        # The steps first (host network: each replica's Service re-pointed to its new port), then the pods.
        await steps.reserve(seen, missing)
        # What was reserved for a pod never tried (an error on the way: a lost API server, a lost Lease) is given
        # back, as for a pod the API server refused: nothing reserved outlives the reconcile unless its pod exists.
        untried = list(missing)
        try:
            await self._make(seen, steps, missing, untried)
        except BaseException:
            self._give_back(seen, steps, untried)
            raise

    async def _make(self, seen: Observation, steps: Steps, missing: list[Replica], untried: list[Replica]) -> None:
        """The Services and pods of ``missing`` (their steps reserved); each replica leaves ``untried`` once its
        pod is tried (made, refused, or given back)."""
        job = seen.job
        addressing = self._addressing(seen, steps)
        # Services first (also for live pods whose Service was deleted): a starting process finds its peers.
        # Only for the replicas peers dial (rendezvous.service_slots); a Service the job has beyond those (made
        # before, or with kubedl.io/replica-services: all) is kept and kept pointed, never deleted here.
        dialed = service_slots(job)
        need_service = [
            r
            for r in seen.replicas.values()
            if slot_of(r) in dialed
            and replica_name(job.name, *slot_of(r)) not in seen.services
            and (r in missing or r.pod is not None)
            and addressing.reachable(*slot_of(r))
        ]
        # Some replicas still have their pods: usually replacements, whose peers wait for them (or the later
        # step of a staged start, e.g. an MPI launcher after its workers: also work of a job already running).
        urgent = any(r.pod is not None for r in seen.replicas.values())
        if urgent and missing and WriteGate.passing():
            self._repairing()  # replacing a running job's lost pods
        service_results = await self._gather(
            (self._create(SERVICES, build_service(job, r.replica_type, r.index, addressing)) for r in need_service),
            urgent=urgent,
        )
        conflicts = [result for result in service_results if isinstance(result, Conflict)]
        if conflicts:
            # A Service of another's in the place of one of ours: a rank would dial it. No pod is made.
            self._give_back(seen, steps, untried)
            self._blocked(seen, conflicts)
            return
        if not missing and not any(isinstance(result, Refusal) for result in service_results):
            return
        if any(isinstance(result, Refusal) for result in service_results):
            self._give_back(seen, steps, untried)
            await self._refused(seen, [result for result in service_results if isinstance(result, Refusal)])
            return  # a refused Service: no pod is made
        # The replicas the others dial first (rendezvous.service_slots: PyTorch's Master), then the rest: no rank
        # is made while the name of one it dials is held by a pod not the job's. In each wave one pod of each type
        # first: a template the API server refuses is found before the rest is sent.
        waves = [[r for r in missing if slot_of(r) in dialed], [r for r in missing if slot_of(r) not in dialed]]
        waves = [wave for wave in waves if wave]
        for wave in waves:
            firsts: dict[str, Replica] = {}
            for replica in wave:
                firsts.setdefault(replica.replica_type, replica)
            rest = [r for r in wave if firsts.get(r.replica_type) is not r]
            for batch in (list(firsts.values()), rest):
                if not batch:
                    continue
                for replica in batch:
                    untried.remove(replica)  # _create_pod gives back what it does not make, whatever happens
                results = await self._gather(
                    (self._create_pod(seen, r, addressing, steps) for r in batch), urgent=urgent
                )
                refusals = [result for result in results if isinstance(result, Refusal)]
                conflicts = [result for result in results if isinstance(result, Conflict)]
                if refusals or conflicts:
                    self._give_back(seen, steps, untried)
                    self._blocked(seen, conflicts)
                    if refusals:
                        await self._refused(seen, refusals)
                    return

    @staticmethod
    def _give_back(seen: Observation, steps: Steps, untried: list[Replica]) -> None:
        """The pods not tried yet will not be made in this reconcile: the steps give back what they reserved."""
        for replica in untried:
            steps.not_created(seen, replica)
        untried.clear()

    def _blocked(self, seen: Observation, conflicts: list[Conflict]) -> None:
        """Names the job needs are taken (``ownership.py``): reported by ``_report``, and remembered: until the
        names are free the job makes nothing (``_still_blocked``)."""
        if not conflicts:
            return
        seen.conflicts.extend(conflicts)
        memo = self._blocks.get(seen.key)
        if memo is None or memo.uid != seen.job.metadata.uid:
            memo = _Block(seen.job.metadata.uid or "", conflicts, 0, time.monotonic() + self._recheck_after(0))
            self._blocks[seen.key] = memo
        seen.want_requeue(max(memo.next_check - time.monotonic(), 0.05))

    def _recheck_after(self, checks: int) -> float:
        """Seconds to the next look at the names that block a job, after ``checks`` looks that found them taken:
        BLOCKED_RECHECK_FIRST, doubling, at most twice ``wait_requeue``."""
        first = min(BLOCKED_RECHECK_FIRST, self.options.wait_requeue)
        return float(min(first * 2**checks, 2 * self.options.wait_requeue))

    async def _still_blocked(self, seen: Observation) -> bool:
        """Whether the names that blocked the job are still taken. A blocked job costs no write: until its next
        look (backed off: ``_recheck_after``) it only says why it waits; the look is one read of each object in
        the way. Nothing the job does (re-pointing a Service, reserving a host port) may wake it sooner, so a
        stranger's Service cannot make it write in a loop."""
        memo = self._blocks.get(seen.key)
        if memo is None:
            return False
        if memo.uid != seen.job.metadata.uid:
            del self._blocks[seen.key]
            return False
        now = time.monotonic()
        if now < memo.next_check:
            seen.conflicts.extend(memo.conflicts)
            seen.want_requeue(memo.next_check - now)
            return True
        owner = owner_reference(seen.job)
        still: list[Conflict] = []
        for conflict in memo.conflicts:
            resource = self._conflict_resources.get(conflict.kind)
            if resource is None:
                continue
            try:
                found = await self.client.get(resource, conflict.name, namespace=conflict.namespace)
            except errors.NotFound:
                continue
            again = conflict_of(owner, found, conflict.kind)
            if again is not None:
                still.append(again)
        if not still:
            del self._blocks[seen.key]
            logger.info("%s: the names that blocked it are free; making its objects", seen.key)
            return False
        memo.conflicts, memo.checks = still, memo.checks + 1
        memo.next_check = time.monotonic() + self._recheck_after(memo.checks)
        seen.conflicts.extend(still)
        seen.want_requeue(memo.next_check - time.monotonic())
        return True

    async def _refused(self, seen: Observation, refusals: list[Refusal]) -> None:
        """The API server refused one of the job's objects (see refusals.py): the job fails (JobFailure) when
        it cannot run as written, else a Warning event says why and it is retried with backoff. Never a
        silent retry loop."""
        refusals = [r for r in refusals if r.outcome is not Outcome.GONE]  # nothing to say or retry: going away
        if not refusals:
            return
        final = next((r for r in refusals if r.outcome is Outcome.FAIL), None)
        if final is not None:
            message = f"{seen.job.kind} {seen.key}: the API server refused a pod or Service: {final}"
            raise JobFailure(final.reason, message, event=final.message)
        first = refusals[0]
        logger.warning("%s: the API server refused a pod or Service (retrying): %s", seen.key, first)
        await self.recorder.warning(seen.raw, first.reason, first.message)
        seen.retrying = (first.reason, f"a pod or Service could not be created (retried with backoff): {first}")
        seen.backoff = True

    async def _create_pod(
        self, seen: Observation, replica: Replica, addressing: Addressing, steps: Steps
    ) -> Refusal | Conflict | None:
        pod = build_pod(seen.job, replica.replica_type, replica.index, addressing)
        pod_key = seen.pod_key(replica)
        try:
            steps.build_pod(seen, replica, pod)  # a step may refuse the pod (JobFailure)
        except BaseException:
            self._not_created(seen, replica, steps)
            raise
        recovery.keep_off(pod, recovery.avoided_nodes(seen.status))
        self.expectations.expect_create(pod_key)
        try:
            refused = await self._create(PODS, pod)
        except BaseException:
            self._not_created(seen, replica, steps)
            raise
        if refused is not None:
            self._not_created(seen, replica, steps)
        if isinstance(refused, Refusal):
            refused = in_template(
                refused, specs_field=seen.job.framework.replica_specs_field, replica_type=replica.replica_type
            )
        return refused

    def _not_created(self, seen: Observation, replica: Replica, steps: Steps) -> None:
        """A pod that was not made: nothing to expect, and the steps give back what they reserved for it (its
        host port)."""
        self.expectations.creates.pop(seen.pod_key(replica), None)
        steps.not_created(seen, replica)

    # ----------------------------------------------------------------------------------------- finished

    async def _finish(self, seen: Observation, steps: Steps) -> None:
        """A finished job: the steps give back what it held; honour the TTL, else clean pods up by
        cleanPodPolicy (idempotent).

        Cleanup deletes the job's own objects one by one, each on its uid; when the TTL has already run out,
        deleting the job is enough — the garbage collector removes what it owns.
        """
        await steps.finish(seen)
        ttl = seen.job.run_policy.ttl_seconds_after_finished
        finished = parse_time(seen.status.get("completionTime"))
        if ttl is not None and finished is not None:
            remaining = ttl - (seen.now - finished).total_seconds()
            if remaining <= 0:
                await self._delete_job(seen, ttl)
                return
            seen.want_requeue(remaining)
        policy = seen.job.run_policy.clean_pod_policy
        if policy == "None" and st.is_true(seen.status, st.FAILED) and not keeps_pods_after_failure(seen.raw):
            # A failed job holds no node (also pods made in the reconcile that failed it, which that reconcile
            # did not see), unless the job itself asks to keep its pods: the default None keeps only a
            # succeeded job's finishing workers.
            policy = "Running"
        if policy not in ("All", "Running"):
            return
        live = [
            pod
            for pod in seen.pods
            if not (pod.get("metadata") or {}).get("deletionTimestamp")
            and not self.expectations.pending_delete(str((pod.get("metadata") or {}).get("uid")))
        ]
        running = [pod for pod in live if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        doomed = live if policy == "All" else running
        # One delete per object, each on its uid: the job's own, found by owner. A delete by label selector
        # (job-name=<name>) would also take another job's of the same name: a TFJob and a PyTorchJob, or a
        # kubeflow.org and a training.kubedl.io job, may share a name in one namespace.
        await self._gather(self._delete_pod(pod) for pod in doomed)
        if policy == "All":
            gone = list(seen.services.values())
        else:
            names = {(pod.get("metadata") or {}).get("name") for pod in running}
            gone = [service for name, service in seen.services.items() if name in names]
        await self._gather(self._delete_service(service) for service in gone)

    async def _delete_job(self, seen: Observation, ttl: int) -> None:
        try:
            await self.client.delete(
                self.resource,
                seen.job.name,
                namespace=seen.job.namespace,
                uid=seen.job.metadata.uid,
                propagation_policy="Background",
            )
            logger.info("%s: deleted after ttlSecondsAfterFinished=%s", seen.key, ttl)
        except errors.NotFound:
            pass

    # ------------------------------------------------------------------------------------------- report

    async def _report(self, seen: Observation) -> None:
        status = seen.status
        finished_before = st.is_finished(status)
        if not finished_before:
            self._update_conditions(seen)
        # Counted after the conditions, so the reconcile that ends a job reports the pods' final phases, and
        # counted on after the end: pods keep finishing (a TF worker after worker 0) and cleanup removes them.
        self._update_replica_statuses(seen, finished=st.is_finished(status))
        if not st.is_finished(status):
            await self._report_waiting(seen)
        elif status.get("avoidedNodes"):
            # failurePolicy.avoidNodeAfterFailures: for the job's life only (null: a merge patch removes it)
            status["avoidedNodes"] = None
        # A job that just finished is woken by the watch event of this write; _finish then times the TTL.
        await self._write_status(seen)

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
        if st.is_true(status, st.RUNNING) or st.is_true(status, st.RESTARTING):
            # A running job with one pod waiting (a replacement): Running/Restarting stay; the event says why.
            changed = self._waiting_said.get(seen.key) != message
        else:
            changed = st.set_condition(status, st.RUNNING, true=False, reason=reason, message=message)
        if changed:
            self._waiting_said[seen.key] = message
            await self.recorder.warning(seen.raw, reason, message)

    def _update_replica_statuses(self, seen: Observation, *, finished: bool) -> None:
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
            return controller_for(job.kind).succeeded(job, pods)
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
                reason=_reason(job, "Succeeded"),
                message=f"{job.kind} {seen.key} successfully completed.",
            )
            status["completionTime"] = st.timestamp(seen.now)
            self._fold_in_place_restarts(seen)
            self._on_transition(job.kind, st.SUCCEEDED, job.namespace)
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
            st.set_condition(status, st.RESTARTING, reason=_reason(job, "Restarting"), message=f"{who}; replacing it.")
            self._on_transition(job.kind, st.RESTARTING, job.namespace)
        restarting = missing or any(r.pod is not None and is_crashing(r.pod) for r in slots)
        if restarting:
            return  # Restarting was set when the replacement started; stays until all are up again
        if all_up and not st.is_true(status, st.RUNNING):
            message = f"{job.kind} {seen.key} is running."
            st.set_condition(status, st.RUNNING, reason=_reason(job, "Running"), message=message)
            self._on_transition(job.kind, st.RUNNING, job.namespace)

    def _fold_in_place_restarts(self, seen: Observation) -> None:
        """The job just finished: the live pods' in-place restarts join ``replicaStatuses.<type>.restarts``, so
        the counts stay what the job was judged by once cleanup deletes the pods (nothing counts after)."""
        for replica in seen.replicas.values():
            restarts = in_place_restarts(replica.pod)
            if restarts:
                recovery.charge(seen.status, replica.replica_type, USER, restarts)

    def _set_failed(self, seen: Observation, reason: str, message: str) -> None:
        if st.set_condition(seen.status, st.FAILED, reason=_reason(seen.job, "Failed", reason), message=message):
            self._fold_in_place_restarts(seen)
            seen.status["completionTime"] = st.timestamp(seen.now)
            self._on_transition(seen.job.kind, st.FAILED, seen.job.namespace)
            logger.info("%s: failed (%s): %s", seen.key, reason, message)

    async def _write_status(self, seen: Observation) -> None:
        """Write the status if it changed, only over the version it was computed from.

        The resourceVersion in the patch makes the server refuse (Conflict) a write based on a stale
        copy; the reconcile is then retried on the newer version the watch brings. A change of replica
        counts alone waits until STATUS_BATCH_PERIOD after the last write (the reconcile comes back then and
        writes the counts of that moment). A new job's first report (Created) may wait while other jobs' pods
        are being created (``status_yield.py``); any other change goes out at once, with the counts.
        """
        current = seen.raw.get("status") or {}
        if seen.status == current:
            self.status_yield.forget(seen.key)
            return
        if not st.is_first_report(current, seen.status):
            self.status_yield.forget(seen.key)
        elif self.status_yield.holds(seen.key):
            return  # the job is woken when the creations stop (or after status_yield.LONGEST)
        last = self._status_written_at.get(seen.key)
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
        self._status_written_at[seen.key] = time.monotonic()
        version = str((written.get("metadata") or {}).get("resourceVersion") or "")
        if version:
            self._written[seen.key] = version
        if isinstance(written.get("status"), dict):
            seen.raw = written

    async def _persist(self, seen: Observation) -> None:
        """Write what this reconcile decided so far, before an act that destroys its evidence: a failed pod's
        deletion. Once the pod is gone the next reconcile cannot decide again (a restart count, a failure's
        record, a job's failure), so a status write lost after it (a Conflict, or an error on the way) would
        lose them: the budget would not be charged and a failed job's pods would be made again. When the
        write is refused nothing is deleted: the reconcile ends (StaleDecision) and runs again on the newer
        copy, where the pod still is."""
        if st.is_finished(seen.status):
            # The job's end goes out with its final counts, as one write (a reader of Failed reads the failed
            # replica with it); _report would count the same.
            self._update_replica_statuses(seen, finished=True)
        if seen.status == (seen.raw.get("status") or {}):
            return
        self.status_yield.forget(seen.key)
        try:
            await self._patch_status(seen)
        except (errors.Conflict, errors.NotFound) as exc:
            raise StaleDecision(f"{seen.key}: its status could not be written before a pod's deletion: {exc}") from exc

    async def _fail_invalid(self, raw: Object, status: Object, problems: list[str]) -> None:
        meta = raw.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        message = f"{self.framework.kind} {key} is invalid: " + "; ".join(problems)
        group = group_of(raw.get("apiVersion")) or KUBEDL
        reason = condition_reason(group, self.framework.kind, "Failed", "InvalidSpec")
        changed = st.set_condition(status, st.FAILED, reason=reason, message=message)
        if not changed:
            return
        status.setdefault("completionTime", st.timestamp())
        logger.warning("%s", message)
        await self.recorder.warning(raw, "InvalidSpec", "; ".join(problems))
        if not keeps_pods_after_failure(raw):
            # A job edited into an invalid one keeps no pod running (it cannot be parsed: its pods are found
            # by owner, not by replica slot).
            running = [pod for pod in self.pods.list(OWNER_INDEX, str(meta.get("uid") or "")) if is_active(pod)]
            await self._gather(self._delete_pod(pod) for pod in running)
        with contextlib.suppress(errors.NotFound):
            await self.client.patch_status(
                self.resource, str(meta.get("name")), {"status": status}, namespace=meta.get("namespace")
            )
        self._on_transition(self.framework.kind, st.FAILED, str(meta.get("namespace") or ""))

    # --------------------------------------------------------------------------------------------- writes

    def _repairing(self) -> None:
        """Open (or extend) the repair window: kubedl_py.kube.priority."""
        if self.client.write_gate is not None:
            self.client.write_gate.repaired()

    async def _gather(self, calls: Iterable[Awaitable[Any]], *, urgent: bool = False) -> list[Any]:
        # A reconcile from the urgent lane always writes through the urgent slots: the shared ones may all be
        # held by other jobs' writes that wait for it at the write gate (kubedl_py.kube.priority).
        slots = self._urgent_writes if urgent or WriteGate.passing() else self._writes

        async def bounded(call: Awaitable[Any]) -> Any:
            with self.status_yield.writing():
                async with slots:
                    return await call

        # Every call runs to its end (no half-cancelled batch); then the first failure is raised.
        results = await asyncio.gather(*(bounded(call) for call in calls), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results

    async def _create(self, resource: Resource, body: Object) -> Refusal | Conflict | None:
        """Create; AlreadyExists is success when the object there is the job's own (deterministic names), and a
        :class:`Conflict` when it is not (``ownership.py``). A refusal of the object (400, 403, 422) is returned
        classified, not raised, so a batch of creates can tell it from a failure a retry may fix."""
        meta = body["metadata"]
        # Strict for pods: a typo in the user's template is refused by name, not dropped (refusals.py).
        strict = "Strict" if resource == PODS else None
        for attempt in (1, 2):
            try:
                await self.client.create(resource, body, namespace=meta["namespace"], field_validation=strict)
            except errors.AlreadyExists:
                taken = await self._take_over(resource, body)
                if not isinstance(taken, _Vanished):
                    return taken
                # The object there went between our create and our read: the name is free, so create again.
                # Counting it made would let a pod start before its Service (found by a test, 2026-11-28).
                if attempt == 2:
                    raise RuntimeError(
                        f"{resource.kind} {meta['namespace']}/{meta['name']}: the name was taken and freed twice "
                        "while it was created; trying again later"
                    ) from None
                logger.info("%s/%s: freed while it was created; creating it again", meta["namespace"], meta["name"])
                continue
            except (errors.Invalid, errors.BadRequest, errors.Forbidden, errors.NotFound) as exc:
                refusal = classify_refusal(exc)
                if refusal.outcome is Outcome.GONE:
                    # The namespace is going away, or the job was deleted: nothing to do, but it was not made
                    # (what was reserved for it is given back: a port of a host-network pod).
                    logger.info("%s/%s: not created: %s", meta["namespace"], meta["name"], exc)
                return refusal
            return None
        return None  # unreachable: the second attempt returns or raises

    async def _take_over(self, resource: Resource, body: Object) -> Conflict | _Vanished | None:
        """An object with the name of one of the job's is there. Usually the job's own (an earlier reconcile, or
        one racing a lagging cache, made it); it may be the job's own made by the controller we replace (KubeDL
        or the Training Operator: same job, so same uid), which our informers do not see for want of our
        labels: it gets them, so the job counts it, and keeps running. Anything else is a Conflict: never used.
        Verified ownership is remembered per job, so the kinds' extra objects (tried while any pod is missing)
        cost one read per job, not one per reconcile."""
        meta = body["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        owner = meta["ownerReferences"][0]
        key = f"{namespace}/{owner['name']}"
        if key not in self._owned or self._owned[key][0] != owner["uid"]:
            self._owned[key] = (owner["uid"], set())
        known = self._owned[key][1]
        if (resource.plural, name) in known:
            return None
        if resource.plural == "secrets":
            # The controller may not read Secrets (they hold keys): a job's Secret is named after its uid, which
            # no one knows before the job exists (MPI's ``secret_name``).
            return None
        try:
            existing = await self.client.get(resource, name, namespace=namespace)
        except errors.NotFound:
            return _VANISHED  # gone since our create was refused: the caller creates again
        conflict = conflict_of(owner, existing, resource.kind)
        if conflict is not None:
            self._conflict_resources[resource.kind] = resource
            logger.info("%s/%s: %s", namespace, name, conflict.message)
            return conflict
        labels = (existing.get("metadata") or {}).get("labels") or {}
        if resource in (PODS, SERVICES) and labels.get(c.LABEL_CONTROLLER) != c.CONTROLLER_NAME:
            patch = {"metadata": {"labels": meta["labels"]}}
            with contextlib.suppress(errors.NotFound):
                await self.client.patch(resource, name, patch, namespace=namespace)
                logger.info("%s/%s: adopted %s made by another controller", namespace, name, resource.kind)
        elif resource not in (PODS, SERVICES):
            known.add((resource.plural, name))
        return None

    async def _delete_pod(self, pod: Object) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        self.expectations.expect_delete(uid)
        try:
            await self.client.delete(PODS, str(meta.get("name")), namespace=meta.get("namespace"), uid=uid)
        except errors.NotFound:
            self.expectations.deletes.pop(uid, None)
        except Exception:
            # Conflict (the uid precondition: a newer pod took the name) or a server error: forget the
            # expectation and let the reconcile fail, so it runs again on what the cache then shows.
            self.expectations.deletes.pop(uid, None)
            raise

    async def _force_delete_pod(self, pod: Object) -> None:
        """Delete a pod on a lost node at once (grace period 0): no kubelet will confirm a graceful deletion."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        self.expectations.expect_delete(uid)
        try:
            await self.client.delete(
                PODS, str(meta.get("name")), namespace=meta.get("namespace"), uid=uid, grace_period_seconds=0
            )
        except (errors.NotFound, errors.Conflict):
            self.expectations.deletes.pop(uid, None)  # gone already, or a newer pod has the name

    async def _stop_pods(self, seen: Observation) -> None:
        """A failed job holds no node: its pods still running are deleted, unless it keeps them
        (:func:`keeps_pods_after_failure`)."""
        if keeps_pods_after_failure(seen.raw):
            return
        active = [r.pod for r in seen.replicas.values() if r.pod and is_active(r.pod)]
        if active:
            await self._persist(seen)  # the failure first: a job whose pods went must not look like a new one
        await self._gather(self._delete_pod(pod) for pod in active)

    async def _delete_service(self, service: Object) -> None:
        """Delete one of the job's Services, on its uid: if the name now holds another Service (ours went and a
        stranger's took the name), that one is not ours to delete. That Conflict fails the reconcile, which
        runs again on what the cache then shows (the stranger's is not the job's, so it is left alone)."""
        meta = service.get("metadata") or {}
        with contextlib.suppress(errors.NotFound):
            await self.client.delete(
                SERVICES, str(meta.get("name")), namespace=meta.get("namespace"), uid=str(meta.get("uid"))
            )


class _Vanished:
    """``_take_over`` found no object: the one that refused our create went meanwhile."""


@dataclass
class _Block:
    """The names that block one incarnation (uid) of a job, and when to look at them again."""

    uid: str
    conflicts: list[Conflict]
    #: looks that found them still taken
    checks: int
    #: when (monotonic) the next look is due
    next_check: float


_VANISHED = _Vanished()


def _pods_waiting(seen: Observation, waiting: list[tuple[Replica, str]], what: str) -> str:
    """``Worker 0 (pod j-worker-0) <what> (and 1 more pods): <why>``, for the first of ``waiting``."""
    replica, text = waiting[0]
    more = f" (and {len(waiting) - 1} more pods)" if len(waiting) > 1 else ""
    pod = replica_name(seen.job.name, *slot_of(replica))
    return f"{replica.replica_type} {replica.index} (pod {pod}) {what}{more}: {text}"


def _dumped(parsed: tuple[Job | None, list[str]]) -> tuple[Any, list[str]]:
    """A parse's result as plain data, to compare two (VERIFY_PARSE_CACHE)."""
    job, problems = parsed
    return (None if job is None else job.model_dump(mode="json")), problems
