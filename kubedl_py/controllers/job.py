"""The reconcile of one training job, framework-agnostic: observe, plan, act, report.

One :class:`JobReconciler` serves one kind and never branches on which: what differs per kind is asked of
the kind's plug-in (``controllers/kinds/<kind>.py``: rendezvous settings, success rule, extra owned objects,
start order), resolved once per reconciler. A reconcile reads the job, its pods and its Services from the
informers' caches (``observation.py``), decides once what holds for this reconcile (``plan.py``: the kind, the
network mode, the addressing), makes the cluster match the job, then writes the status only if it changed. It
is level-based: it never asks what event woke it, so a missed event, a duplicate or a controller restart
changes nothing. What cuts across every kind (host-network ports and Services, gang PodGroups, Kueue, RDMA and
placement) is a *feature* behind narrow contracts (``features.py``); the reconcile calls them through one
runner and names none. A condition that ends the job is raised as a ``JobFailure`` wherever it is found and
becomes ``Failed``.

**The order of a reconcile** (the one place it is written; docs/architecture.md draws it):

1. **Observe** the job; a job that is gone or being deleted needs nothing (the garbage collector removes
   its pods and Services through their owner references; the reconciler and the features ``forget`` it).
2. **Validate**: a job the CRD schema let through but that cannot run goes ``Failed``/``InvalidSpec``
   and gets no pods.
3. **Plan** (``plan.make_plan``) and begin the features' session for it.
4. **Finished** jobs: the features ``finished`` (PodGroup deleted, reserved ports freed); apply
   ``cleanPodPolicy`` once, then ``ttlSecondsAfterFinished``.
5. **Suspended** jobs (``suspend``, or a feature's ``hold``): no pods, no Services; the features ``suspended``,
   and ``resumed`` when it runs again.
6. **Judge** (``failures.FailureHandling.judge``): ``activeDeadlineSeconds`` (a timer, not only on events),
   ``backoffLimit``, ``pendingTimeoutSeconds``.
7. **Per replica**: the features ``observe``; surplus replicas removed; **recover**
   (``FailureHandling.recover``: lost nodes, disruptions, failed pods replaced or the job failed); pods a feature
   wants made again (``recreate``). Then, in this order, which is a guard of host-network failover
   (``creation.py``): the replacements of terminating pods prepared (``replacing``: a Service re-pointed to its
   replica's new port while the old pod stops), the pods admitted (``admit``: a gang's PodGroup), owned objects
   made, the features ``reserve`` for the pods about to be made (a Service re-pointed to its new port before its
   pod exists), then Services and pods created (each ``shape_pod`` by the features); Services kept as the job
   wants them; a hang looked for (``check_progress``); the features ``report`` and ``settle``.
8. **Report** (``reporting.py``): replica counts and conditions, one status write when something changed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from kubedl_py.api import Framework, JobValidationError, TrainingJob, parse_job, with_defaults
from kubedl_py.api import constants as c
from kubedl_py.api.groups import OWN_MANAGERS
from kubedl_py.api.plain import Object, parse_time
from kubedl_py.api.validation import host_port_errors
from kubedl_py.controllers import status as st
from kubedl_py.controllers.creation import Creation
from kubedl_py.controllers.failures import recovery
from kubedl_py.controllers.failures.handling import FailureHandling
from kubedl_py.controllers.failures.ledger import reaches_backoff_limit
from kubedl_py.controllers.failures.policies import explicit_clean_pod_policy, keeps_pods_after_failure
from kubedl_py.controllers.features import Features, Session
from kubedl_py.controllers.kinds import controller_for
from kubedl_py.controllers.memory import Memories
from kubedl_py.controllers.observation import Expectations, Observation, Replica
from kubedl_py.controllers.outcomes import JobFailure, StaleDecision
from kubedl_py.controllers.plan import Plan, make_plan
from kubedl_py.controllers.podstate import is_active
from kubedl_py.controllers.reporting import NOT_SCHEDULED, UNSCHEDULABLE, Reporter, reason_of
from kubedl_py.controllers.restart_agent import DEFAULT_AGENT_IMAGE
from kubedl_py.controllers.status_pacing import StatusYield
from kubedl_py.controllers.writes import WRITE_CONCURRENCY, Writes
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.informer import OWNER_INDEX, Informer
from kubedl_py.kube.manager import Result
from kubedl_py.kube.priority import WriteGate
from kubedl_py.kube.resources import Resource

logger = logging.getLogger(__name__)

Job = TrainingJob

__all__ = [
    "NOT_SCHEDULED",
    "UNSCHEDULABLE",
    "WRITE_CONCURRENCY",
    "JobReconciler",
    "ReconcilerOptions",
    "explicit_clean_pod_policy",
    "keeps_pods_after_failure",
    "reaches_backoff_limit",
]

#: the longest an urgent reconcile waits for the cache to show the job's last status write (``_caught_up``)
CATCH_UP_SECONDS = 1.0

#: metadata a job's own status writes change on every write, and which no parse reads: ignored when deciding
#: whether the job's document changed since it was last parsed (``_parse``)
VOLATILE_METADATA = ("resourceVersion", "managedFields")

#: an environment variable the test suites set to 1 (inherited by the controllers they start): every parse
#: served from the cache is then checked against a fresh one, so that code which edits a parsed job in place
#: (the cache shares it between reconciles) fails a test instead of corrupting the cache unseen
VERIFY_PARSE_CACHE = "KUBEDL_PY_VERIFY_PARSE_CACHE"


class ReconcilerSettings(Protocol):
    """The controller options a reconciler reads: ``setup.ControllerOptions`` as it is (no copy), or
    :class:`ReconcilerOptions` in tests."""

    @property
    def cluster_domain(self) -> str | None: ...

    @property
    def wait_requeue(self) -> float: ...

    @property
    def max_host_ports_per_pod(self) -> int | None: ...

    @property
    def write_concurrency(self) -> int: ...

    @property
    def node_lost_timeout(self) -> int: ...

    @property
    def infrastructure_backoff_limit(self) -> int: ...

    @property
    def agent_image(self) -> str: ...


@dataclass(frozen=True)
class ReconcilerOptions:
    """The defaults of :class:`ReconcilerSettings`, for a reconciler made without the controller's options."""

    cluster_domain: str | None = None
    #: requeue delay while waiting for something that sends no event (a name taken by an object not the job's)
    wait_requeue: float = 5.0
    #: host ports a pod may declare (``--max-host-ports-per-pod``; None: no limit)
    max_host_ports_per_pod: int | None = c.DEFAULT_MAX_HOST_PORTS_PER_POD
    #: pod/Service writes in flight for the jobs of this kind (``--write-concurrency``)
    write_concurrency: int = WRITE_CONCURRENCY
    #: default of failurePolicy.nodeLostTimeoutSeconds (``--node-lost-timeout``)
    node_lost_timeout: int = recovery.DEFAULT_NODE_LOST_TIMEOUT
    #: default of failurePolicy.infrastructureBackoffLimit (``--infrastructure-backoff-limit``)
    infrastructure_backoff_limit: int = recovery.DEFAULT_INFRASTRUCTURE_BACKOFF_LIMIT
    #: the in-place restart agent's image (``--agent-image``)
    agent_image: str = DEFAULT_AGENT_IMAGE


class JobReconciler:
    """Reconciles every job of one kind. See the module docstring for the order of a reconcile."""

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
        features: Features | None = None,
        options: ReconcilerSettings | None = None,
        on_transition: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.client = client
        self.framework = framework
        self.resource = resource
        self.jobs = jobs
        self.pods = pods
        self.services = services
        #: the cross-cutting features, in registry order (``setup.FEATURES``)
        self.features = features or Features()
        self.recorder = recorder
        self.options: ReconcilerSettings = options or ReconcilerOptions()
        #: the kind's controller half: one per reconciler, resolved once
        self.kind = controller_for(framework.kind)
        #: a new job's first status write waits while pods are being created (``status_pacing.py``); its ``wake``
        #: is the controller's work queue, set by ``setup.build_manager`` (unset: nothing is held)
        self.status_yield = StatusYield()
        #: what is kept about each job between reconciles (``memory.py``)
        self.memories = Memories()
        self._verify_parses = os.environ.get(VERIFY_PARSE_CACHE) == "1"
        self.writes = Writes(client, self.memories, self.status_yield, concurrency=self.options.write_concurrency)
        self.reporter = Reporter(
            client=client,
            resource=resource,
            framework=framework,
            kind=self.kind,
            recorder=recorder,
            memories=self.memories,
            status_yield=self.status_yield,
            on_transition=on_transition or (lambda kind, condition, namespace: None),
        )
        self.failures = FailureHandling(
            client=client,
            framework=framework,
            recorder=recorder,
            reporter=self.reporter,
            writes=self.writes,
            node_lost_timeout=self.options.node_lost_timeout,
            infrastructure_backoff_limit=self.options.infrastructure_backoff_limit,
        )
        self.creation = Creation(
            client=client,
            recorder=recorder,
            writes=self.writes,
            memories=self.memories,
            wait_requeue=self.options.wait_requeue,
            agent_image=self.options.agent_image,
        )

    @property
    def expectations(self) -> Expectations:
        return self.writes.expectations

    # ------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result:
        raw = self.jobs.get_by_key(key)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            self.forget(key)
            return Result()
        if self.reporter.cache_behind(key, raw):
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
        plan = make_plan(seen, self.kind, cluster_domain=self.options.cluster_domain)
        session = self.features.begin(plan)
        try:
            if st.is_finished(status):
                await self._finish(plan, session)
            else:
                await self._run(plan, session)
        except StaleDecision as stale:
            logger.debug("%s; deciding again on the newer copy", stale)
            return Result(requeue_after=0.05)
        await self.reporter.report(seen)
        if seen.requeue_after is not None:
            return Result(requeue_after=max(seen.requeue_after, 0.05))
        return Result(requeue=seen.backoff)

    def forget(self, key: str) -> None:
        """The job is gone: everything kept about it goes."""
        self.features.forget(key)
        self.memories.forget(key)
        self.status_yield.forget(key)
        self.failures.forget(key)

    async def _caught_up(self, key: str) -> Object | None:
        """The job from the cache once our last status write is in it (at most ``CATCH_UP_SECONDS``), or None."""
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            raw = self.jobs.get_by_key(key)
            if raw is None or not self.reporter.cache_behind(key, raw):
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
        memory = self.memories.of(key)
        cached = memory.parsed
        if cached is not None and cached[0] == document:
            if self._verify_parses and _dumped(self._parse_document(document)) != _dumped((cached[1], cached[2])):
                raise RuntimeError(f"{key}: a parsed job was edited in place; the parse cache would serve it")
            return cached[1], cached[2]
        job, problems = self._parse_document(document)
        memory.parsed = (document, job, problems)
        return job, problems

    def _parse_document(self, document: Object) -> tuple[Job | None, list[str]]:
        try:
            job = parse_job(document)
        except JobValidationError as exc:
            return None, [str(error) for error in exc.errors]
        too_many = host_port_errors(job, self.options.max_host_ports_per_pod)
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
        expectations = self.writes.expectations
        for pod in pods:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            owner_type = by_lower.get(labels.get(c.LABEL_REPLICA_TYPE, ""), "")
            index_text = labels.get(c.LABEL_REPLICA_INDEX, "")
            slot = replicas.get((owner_type, int(index_text) if index_text.isdigit() else -1))
            if slot is None:
                surplus.append(pod)
                continue
            if meta.get("deletionTimestamp") or expectations.pending_delete(str(meta.get("uid"))):
                slot.terminating = True
                slot.leaving = pod
                continue
            slot.pod = pod
        return Observation(
            raw=raw, job=job, status=status, pods=pods, services=services, replicas=replicas, surplus=surplus, now=now
        )

    # ------------------------------------------------------------------------------------------------ act

    async def _run(self, plan: Plan, session: Session) -> None:
        seen = plan.seen
        job, status = seen.job, seen.status
        if st.get_condition(status, st.CREATED) is None:
            message = f"{job.kind} {seen.key} is created."
            st.set_condition(status, st.CREATED, reason=reason_of(job, "Created"), message=message)
        if job.run_policy.suspend:
            await self._suspend(plan, session)
            return
        held = await session.hold(plan)
        if held is not None:
            await self._suspend(plan, session, why=held)
            return
        if st.is_true(status, st.SUSPENDED):
            await self._resume(plan, session)
        if not status.get("startTime"):
            status["startTime"] = st.timestamp(seen.now)
        if await self.failures.judge(seen):
            return

        await session.observe(plan)
        await self.creation.remove_surplus(seen)
        try:
            await self.failures.recover(seen)
            await self.creation.recreate(plan, session)
            terminating = [r for r in seen.replicas.values() if r.terminating]
            if terminating and WriteGate.passing():
                self.writes.repairing()  # a running job losing a pod: new jobs go slower for a while
            await self.creation.make(plan, session, terminating)
            await self.creation.repair_services(plan, session)
            await self.failures.check_progress(seen)
        except JobFailure as failure:
            await session.report(plan)
            self.reporter.set_failed(seen, failure.reason, failure.message)
            await self.recorder.warning(seen.raw, failure.reason, failure.event)
            await self.failures.stop_pods(seen)
            return
        except Exception:
            await session.report(plan)  # a re-pointed Service is told about even when its pod could not be sent
            raise
        await session.report(plan)
        await session.settle(plan)

    async def _suspend(self, plan: Plan, session: Session, *, why: str | None = None) -> None:
        """``suspend: true`` (what Kueue's own integration sets while a job waits for quota), or a feature holding
        the job (``why``: a queued job whose Workload is not admitted, ``kueue.py``): no pods, no Services, no
        PodGroup; the job is ``Suspended`` and no longer ``Running``. Finished pods go too, as with the Training
        Operator: a resumed job starts from scratch."""
        seen = plan.seen
        job, status = seen.job, seen.status
        await self.writes.delete_pods(r.pod for r in seen.replicas.values() if r.pod is not None)
        await self.writes.delete_pods(pod for pod in seen.surplus if not self.writes.leaving(pod))
        for replica in seen.replicas.values():
            if replica.pod is not None:
                replica.pod, replica.terminating = None, True
        await self.writes.delete_services(seen.services.values())
        await session.suspended(plan)
        message = f"{job.kind} {seen.key} is suspended" + (f": {why}" if why else ".")
        reason = reason_of(job, "Suspended")
        if st.is_true(status, st.RUNNING):
            st.set_condition(status, st.RUNNING, true=False, reason=reason, message=message)
        if not st.is_true(status, st.SUSPENDED):
            st.set_condition(status, st.SUSPENDED, reason=reason, message=message)
            await self.recorder.normal(seen.raw, reason, message)
            logger.info("%s: suspended%s", seen.key, f" ({why})" if why else "")
        else:
            st.set_condition(status, st.SUSPENDED, reason=reason, message=message)

    async def _resume(self, plan: Plan, session: Session) -> None:
        """``suspend`` back to false: ``Suspended`` turns False and the job starts with a fresh ``startTime``,
        so ``activeDeadlineSeconds`` counts from the resumption (the Training Operator's rule)."""
        seen = plan.seen
        job, status = seen.job, seen.status
        message = f"{job.kind} {seen.key} is resumed."
        st.set_condition(status, st.SUSPENDED, true=False, reason=reason_of(job, "Resumed"), message=message)
        status["startTime"] = st.timestamp(seen.now)
        await session.resumed(plan)
        await self.recorder.normal(seen.raw, reason_of(job, "Resumed"), message)
        logger.info("%s: resumed", seen.key)

    # ----------------------------------------------------------------------------------------- finished

    async def _finish(self, plan: Plan, session: Session) -> None:
        """A finished job: the features give back what it held; honour the TTL, else clean pods up by
        cleanPodPolicy (idempotent).

        Cleanup deletes the job's own objects one by one, each on its uid; when the TTL has already run out,
        deleting the job is enough — the garbage collector removes what it owns.
        """
        seen = plan.seen
        await session.finished(plan)
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
        live = [pod for pod in seen.pods if not self.writes.leaving(pod)]
        running = [pod for pod in live if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        # One delete per object, each on its uid: the job's own, found by owner. A delete by label selector
        # (job-name=<name>) would also take another job's of the same name: a TFJob and a PyTorchJob, or a
        # kubeflow.org and a training.kubedl.io job, may share a name in one namespace.
        await self.writes.delete_pods(live if policy == "All" else running)
        if policy == "All":
            gone = list(seen.services.values())
        else:
            names = {(pod.get("metadata") or {}).get("name") for pod in running}
            gone = [service for name, service in seen.services.items() if name in names]
        await self.writes.delete_services(gone)

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

    async def _fail_invalid(self, raw: Object, status: Object, problems: list[str]) -> None:
        if not await self.reporter.write_invalid(raw, status, problems):
            return
        if not keeps_pods_after_failure(raw):
            # A job edited into an invalid one keeps no pod running (it cannot be parsed: its pods are found
            # by owner, not by replica slot).
            uid = str((raw.get("metadata") or {}).get("uid") or "")
            await self.writes.delete_pods(pod for pod in self.pods.list(OWNER_INDEX, uid) if is_active(pod))
        await self.reporter.patch_invalid(raw, status)


def _dumped(parsed: tuple[Job | None, list[str]]) -> tuple[Any, list[str]]:
    """A parse's result as plain data, to compare two (VERIFY_PARSE_CACHE)."""
    job, problems = parsed
    return (None if job is None else job.model_dump(mode="json")), problems
