"""Making what a job is missing: its owned objects, Services and pods, in the order that keeps peers safe.

The order (a guard of host-network failover, features.py): the replacement of a terminating pod is prepared
(``replacing``), the job's pods admitted (a gang), its owned objects made, the features ``reserve`` for the pods
about to be made (in host-network mode each replica's Service re-pointed to its new port before its pod exists),
then Services, then pods, in waves: the replicas peers dial first, and in each wave one pod of each type first
(a template the API server refuses is found before the rest is sent). A name taken by an object not the job's
blocks the job (``ownership.py``): it makes nothing until the name is free, looked at with backoff.
"""

from __future__ import annotations

import logging
import time

from kubedl_py.controllers.addressing import Addressing, replica_name
from kubedl_py.controllers.failures.policies import whole_job_restart
from kubedl_py.controllers.failures.recovery import avoided_nodes, keep_off
from kubedl_py.controllers.failures.whole_in_place import applies as applies_in_place
from kubedl_py.controllers.failures.whole_in_place import pod_annotations
from kubedl_py.controllers.features import Session
from kubedl_py.controllers.memory import Block, Memories
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.outcomes import JobFailure
from kubedl_py.controllers.ownership import Conflict, conflict_of, owner_reference
from kubedl_py.controllers.plan import Plan
from kubedl_py.controllers.pods import build_pod, build_service, service_drift
from kubedl_py.controllers.podstate import slot_of
from kubedl_py.controllers.refusals import Outcome, Refusal, in_template
from kubedl_py.controllers.restart_agent import DEFAULT_AGENT_IMAGE
from kubedl_py.controllers.writes import Writes
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.priority import WriteGate
from kubedl_py.kube.resources import PODS, SERVICES

logger = logging.getLogger(__name__)


#: seconds from a job found blocked by a name taken (``ownership.py``) to the first look at that name again; each
#: look that finds it still taken doubles the wait, up to twice ``wait_requeue``
BLOCKED_RECHECK_FIRST = 1.0


class Creation:
    def __init__(
        self,
        *,
        client: KubeClient,
        recorder: EventRecorder,
        writes: Writes,
        memories: Memories,
        wait_requeue: float,
        agent_image: str = DEFAULT_AGENT_IMAGE,
    ) -> None:
        self.client = client
        #: the image of the in-place restart agent (``restart_agent.py``) in pods of jobs restarted whole in place
        self.agent_image = agent_image
        self.recorder = recorder
        self.writes = writes
        self.memories = memories
        self.wait_requeue = wait_requeue

    async def remove_surplus(self, seen: Observation) -> None:
        """Pods (and their Services) of replicas the spec no longer has: replicas lowered or type removed."""
        # Pods already on their way out are left alone: a delete per reconcile would be a write per event.
        doomed = [pod for pod in seen.surplus if not self.writes.leaving(pod)]
        names = [(pod.get("metadata") or {}).get("name", "") for pod in doomed]
        await self.writes.delete_pods(doomed)
        expected = {replica_name(seen.job.name, t, i) for t, i in seen.replicas}
        await self.writes.delete_services(service for name, service in seen.services.items() if name not in expected)
        if names:
            logger.info("%s: removed surplus replicas %s", seen.key, ", ".join(sorted(names)))

    async def recreate(self, plan: Plan, session: Session) -> None:
        """Pods a feature wants made again (in host-network mode: pods no node can take for their host port): each,
        never bound, is deleted at once, and made again like any replacement."""
        due = session.recreate(plan)
        await self.writes.delete_pods(r.pod for r in due if r.pod is not None)
        for replica in due:
            replica.pod, replica.terminating = None, True

    async def make(self, plan: Plan, session: Session, terminating: list[Replica]) -> None:
        """What the job is missing, in the order of the module docstring, unless it is blocked."""
        if await self.still_blocked(plan.seen):
            return
        await session.replacing(plan, terminating)
        if not await session.admit(plan):
            return
        if await self._create_owned(plan, session):
            await self._create_missing(plan, session)

    async def repair_services(self, plan: Plan, session: Session) -> None:
        """Every Service of the job kept as the job wants it (selector, ports, type; in host-network mode the
        targetPort is the feature's, kept by its ``settle``): a hand edit is undone with one write, a Service whose
        clusterIP kind was changed is deleted and made again. A Service is compared once per version of it."""
        seen, job = plan.seen, plan.job
        checked = self.memories.of(seen.key).services_checked
        todo = {
            name: live
            for name, live in seen.services.items()
            if checked.get(name) != (live.get("metadata") or {}).get("resourceVersion")
        }
        if not todo:
            return
        addressing = session.address(plan, served=True)
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
                await self.writes.delete_service(live)
                message += "deleted, to be made again as the job wants it"
            else:
                version = (live.get("metadata") or {}).get("resourceVersion")
                if version:
                    patch["metadata"] = {"resourceVersion": version}  # over the version compared, never blindly
                await self.writes.patch_service(name, job.namespace, patch)
                message += "put back as the job wants it"
            checked.pop(name, None)
            logger.info("%s: %s", seen.key, message)
            await self.recorder.warning(seen.raw, "ServiceRepaired", message)

    async def _create_owned(self, plan: Plan, session: Session) -> bool:
        """The objects the job owns besides pods and Services (the kind's: MPI's hostfile and SSH key; the
        features'), before any pod; AlreadyExists is fine when the object is the job's. Only tried while a pod is
        missing: a running job costs no request. False when one of their names is taken by an object not the
        job's: no pod may be made then (it would read it)."""
        seen = plan.seen
        if not any(r.pod is None and not r.terminating for r in seen.replicas.values()):
            return True
        addressing = session.address(plan)
        for item in [*plan.kind.owned_objects(plan.job, addressing), *session.owned_objects(plan, addressing)]:
            body = dict(item.body)
            meta = dict(body.get("metadata") or {})
            meta.setdefault("namespace", seen.job.namespace)
            meta["ownerReferences"] = [owner_reference(seen.job)]
            body["metadata"] = meta
            result = await self.writes.create(item.resource, body)
            if isinstance(result, Conflict):
                self._blocked(seen, [result])
            elif result is not None:
                await self._refused(seen, [result])
                if result.outcome is Outcome.GONE:
                    return False
        return not seen.conflicts

    async def _create_missing(self, plan: Plan, session: Session) -> None:
        seen, job = plan.seen, plan.job
        if whole_job_restart(job) and any(r.terminating for r in seen.replicas.values()):
            return  # a whole-job restart: no new pod while one of the old rendezvous is still stopping
        pods_by_type = seen.pods_by_type()
        expectations = self.writes.expectations
        missing = [
            r
            for r in seen.replicas.values()
            if r.pod is None
            and not r.terminating
            and not expectations.pending_create(seen.pod_key(r))
            and plan.kind.may_start(job, r.replica_type, pods_by_type)
        ]
        # The features first (host network: each replica's Service re-pointed to its new port), then the pods.
        await session.reserve(plan, missing)
        # What was reserved for a pod never tried (an error on the way: a lost API server, a lost Lease) is given
        # back, as for a pod the API server refused: nothing reserved outlives the reconcile unless its pod exists.
        untried = list(missing)
        try:
            await self._make(plan, session, missing, untried)
        except BaseException:
            self._give_back(plan, session, untried)
            raise

    async def _make(self, plan: Plan, session: Session, missing: list[Replica], untried: list[Replica]) -> None:
        """The Services and pods of ``missing`` (their features reserved); each replica leaves ``untried`` once its
        pod is tried (made, refused, or given back)."""
        seen, job = plan.seen, plan.job
        addressing = session.address(plan)
        # Services first (also for live pods whose Service was deleted): a starting process finds its peers.
        # Only for the replicas peers dial (plan.dialed); a Service the job has beyond those (made before, or with
        # kubedl.io/replica-services: all) is kept and kept pointed, never deleted here.
        dialed = plan.dialed
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
            self.writes.repairing()  # replacing a running job's lost pods
        service_results = await self.writes.gather(
            (
                self.writes.create(SERVICES, build_service(job, r.replica_type, r.index, addressing))
                for r in need_service
            ),
            urgent=urgent,
        )
        conflicts = [result for result in service_results if isinstance(result, Conflict)]
        if conflicts:
            # A Service of another's in the place of one of ours: a rank would dial it. No pod is made.
            self._give_back(plan, session, untried)
            self._blocked(seen, conflicts)
            return
        if not missing and not any(isinstance(result, Refusal) for result in service_results):
            return
        if any(isinstance(result, Refusal) for result in service_results):
            self._give_back(plan, session, untried)
            await self._refused(seen, [result for result in service_results if isinstance(result, Refusal)])
            return  # a refused Service: no pod is made
        # The replicas the others dial first (PyTorch's Master), then the rest: no rank is made while the name of
        # one it dials is held by a pod not the job's. In each wave one pod of each type first: a template the API
        # server refuses is found before the rest is sent.
        waves = [[r for r in missing if slot_of(r) in dialed], [r for r in missing if slot_of(r) not in dialed]]
        for wave in (wave for wave in waves if wave):
            firsts: dict[str, Replica] = {}
            for replica in wave:
                firsts.setdefault(replica.replica_type, replica)
            rest = [r for r in wave if firsts.get(r.replica_type) is not r]
            for batch in (list(firsts.values()), rest):
                if not batch:
                    continue
                for replica in batch:
                    untried.remove(replica)  # _create_pod gives back what it does not make, whatever happens
                results = await self.writes.gather(
                    (self._create_pod(plan, session, r, addressing) for r in batch), urgent=urgent
                )
                refusals = [result for result in results if isinstance(result, Refusal)]
                conflicts = [result for result in results if isinstance(result, Conflict)]
                if refusals or conflicts:
                    self._give_back(plan, session, untried)
                    self._blocked(seen, conflicts)
                    if refusals:
                        await self._refused(seen, refusals)
                    return

    @staticmethod
    def _give_back(plan: Plan, session: Session, untried: list[Replica]) -> None:
        """The pods not tried yet will not be made in this reconcile: the features give back what they reserved."""
        for replica in untried:
            session.not_created(plan, replica)
        untried.clear()

    def _blocked(self, seen: Observation, conflicts: list[Conflict]) -> None:
        """Names the job needs are taken (``ownership.py``): reported, and remembered: until the names are free
        the job makes nothing (``still_blocked``)."""
        if not conflicts:
            return
        seen.conflicts.extend(conflicts)
        memory = self.memories.of(seen.key)
        block = memory.block
        if block is None or block.uid != seen.job.metadata.uid:
            block = Block(seen.job.metadata.uid or "", conflicts, 0, time.monotonic() + self._recheck_after(0))
            memory.block = block
        seen.want_requeue(max(block.next_check - time.monotonic(), 0.05))

    def _recheck_after(self, checks: int) -> float:
        """Seconds to the next look at the names that block a job, after ``checks`` looks that found them taken:
        BLOCKED_RECHECK_FIRST, doubling, at most twice ``wait_requeue``."""
        first = min(BLOCKED_RECHECK_FIRST, self.wait_requeue)
        return float(min(first * 2**checks, 2 * self.wait_requeue))

    async def still_blocked(self, seen: Observation) -> bool:
        """Whether the names that blocked the job are still taken. A blocked job costs no write: until its next
        look (backed off: ``_recheck_after``) it only says why it waits; the look is one read of each object in
        the way. Nothing the job does (re-pointing a Service, reserving a host port) may wake it sooner, so a
        stranger's Service cannot make it write in a loop."""
        memory = self.memories.peek(seen.key)
        block = memory.block if memory is not None else None
        if memory is None or block is None:
            return False
        if block.uid != seen.job.metadata.uid:
            memory.block = None
            return False
        now = time.monotonic()
        if now < block.next_check:
            seen.conflicts.extend(block.conflicts)
            seen.want_requeue(block.next_check - now)
            return True
        owner = owner_reference(seen.job)
        still: list[Conflict] = []
        for conflict in block.conflicts:
            resource = self.writes.conflict_resources.get(conflict.kind)
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
            memory.block = None
            logger.info("%s: the names that blocked it are free; making its objects", seen.key)
            return False
        block.conflicts, block.checks = still, block.checks + 1
        block.next_check = time.monotonic() + self._recheck_after(block.checks)
        seen.conflicts.extend(still)
        seen.want_requeue(block.next_check - time.monotonic())
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
        self, plan: Plan, session: Session, replica: Replica, addressing: Addressing
    ) -> Refusal | Conflict | None:
        seen = plan.seen
        whole_in_place = applies_in_place(seen.job, seen.status)
        pod = build_pod(
            seen.job,
            replica.replica_type,
            replica.index,
            addressing,
            kind=plan.kind,
            annotations=pod_annotations(seen.status) if whole_in_place else None,
            agent_image=self.agent_image if whole_in_place else None,
        )
        pod_key = seen.pod_key(replica)
        try:
            session.shape_pod(plan, replica, pod)  # a feature may refuse the pod (JobFailure)
        except BaseException:
            self._not_created(plan, session, replica)
            raise
        keep_off(pod, avoided_nodes(seen.status))
        self.writes.expectations.expect_create(pod_key)
        try:
            refused = await self.writes.create(PODS, pod)
        except BaseException:
            self._not_created(plan, session, replica)
            raise
        if refused is not None:
            self._not_created(plan, session, replica)
        if isinstance(refused, Refusal):
            refused = in_template(
                refused, specs_field=seen.job.framework.replica_specs_field, replica_type=replica.replica_type
            )
        return refused

    def _not_created(self, plan: Plan, session: Session, replica: Replica) -> None:
        """A pod that was not made: nothing to expect, and the features give back what they reserved for it (its
        host port)."""
        self.writes.expectations.creates.pop(plan.seen.pod_key(replica), None)
        session.not_created(plan, replica)
