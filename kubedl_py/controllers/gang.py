"""Gang scheduling: a PodGroup per job and the pod fields that bind pods to it.

A distributed training job is all or nothing: DDP and TF's parameter servers block until every replica
has joined, so a job that gets half its pods holds GPUs and does no work, and two such jobs can deadlock
each other. A gang scheduler (Volcano, the scheduler-plugins coscheduling plugin, or kube-scheduler's own
GangScheduling plug-in) places a group's pods only when ``minMember`` (``minCount``) of them fit at once.

With ``--gang-scheduler`` every job gets a PodGroup (not only those with ``schedulingPolicy.minAvailable``):
``minMember`` is ``minAvailable`` when set, else the job's total replicas, because an ungrouped training
job under a gang scheduler is exactly the partial-start problem above. Without the flag, where discovery finds
``scheduling.k8s.io/v1beta1`` PodGroups served (Kubernetes 1.37 with GenericWorkload on), the jobs that set
``minAvailable`` get kube-scheduler's own gang and the others nothing; ``--gang-scheduler none`` turns even
that off. Pods out of a gang keep whatever scheduler their template names.

The PodGroup is named after the job and owned by it (controller owner reference), created before the pods,
and deleted when the job finishes (so a finished job's pods, kept for their logs, no longer hold a gang
reservation); deleting the job removes it through the garbage collector. Its ``minResources`` is what the
first ``minMember`` pods request (``schedulingPolicy.minResources`` overrides it): Volcano admits a group
into its queue by it, and coscheduling rejects a group early when the cluster cannot hold it. Its size
follows the job's ``minAvailable`` when the spec changes (a kubeflow.org job may ask for more than it has,
as the Training Operator allows: it waits, saying so, until the spec is fixed).

**No half-started gang.** With Volcano, a job gets no pod before its PodGroup is admitted (phase ``Inqueue``
or later): pods created earlier would sit Pending, visible to quota and autoscalers, for a gang the queue
has not accepted. Coscheduling and kube-scheduler have no admission before pods exist: their PreEnqueue or
Permit stage holds every pod of the group unbound until ``minMember`` of them fit at once, so pods are made at
once and none binds early. kube-scheduler's gate counts the group's pods, so a group that has placed pods is
renewed (deleted, then made again once gone) before a whole-job restart's pods are made.

What differs between the schedulers is one ``GangScheduler`` subclass each (``gang_schedulers.py``); nothing
here asks which scheduler it is.

When the API server serves the PodGroup resource at start, the controller watches the PodGroups it made
(an informer, ``cache``): a group deleted by hand while its job runs is made again, and an admission wakes
the job. Without it (the CRD installed later) PodGroups are found with requests, and a deleted one is noticed
only when the job next needs pods.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Final, Protocol

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.api.plain import Object, parse_time
from kubedl_py.controllers import gang_schedulers
from kubedl_py.controllers.features import Wiring
from kubedl_py.controllers.gang_schedulers import (
    CONSTRAINTS,
    GANG_SCHEDULERS,
    SCHEDULERS,
    Coscheduling,
    Gang,
    GangSchedulerKind,
    Native,
    Volcano,
    min_member,
    min_resources,
    podgroup_name,
)
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.ownership import conflict_of, owner_reference
from kubedl_py.controllers.plan import Plan
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.informer import Informer

__all__ = [
    "GANG_INCOMPLETE",
    "GANG_SCHEDULERS",
    "GROUP_TERMINATING",
    "SCHEDULERS",
    "Coscheduling",
    "Gang",
    "GangSchedulerKind",
    "Native",
    "PodGroups",
    "Volcano",
    "admitted",
    "apply_gang",
    "build_podgroup",
    "install",
    "min_member",
    "min_resources",
]

logger = logging.getLogger(__name__)


def build_podgroup(job: TrainingJob, gang: Gang, owner: Object) -> Object:
    """The PodGroup of a job: minMember and minResources; Volcano's also carries queue and priority class,
    scheduler-plugins' the schedule timeout; the native one ``schedulingPolicy.gang.minCount``."""
    spec = gang.implementation.group_spec(job)
    return {
        "apiVersion": gang.resource.api_version,
        "kind": gang.resource.kind,
        "metadata": {
            "name": podgroup_name(job),
            "namespace": job.namespace,
            "labels": {c.LABEL_CONTROLLER: c.CONTROLLER_NAME, c.LABEL_JOB_NAME: job.name},
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


def apply_gang(pod: Object, job: TrainingJob, gang: Gang) -> None:
    """Point ``pod`` (in place) at the job's PodGroup; the template's schedulerName and priority win."""
    spec = pod["spec"]
    if gang.pod_scheduler_name is not None:
        spec.setdefault("schedulerName", gang.pod_scheduler_name)
    policy = job.run_policy.scheduling_policy
    if policy is not None and policy.priority:
        spec.setdefault("priorityClassName", policy.priority)
    gang.implementation.bind(pod, podgroup_name(job))


def admitted(gang: Gang, group: Object) -> bool:
    """Whether the scheduler has admitted ``group``, so its pods may be made (see the module docstring)."""
    return gang.implementation.admitted(group)


#: the job's ``Running`` False reason while its gang is larger than the job (kubeflow.org only: training.kubedl.io
#: refuses such a job)
GANG_INCOMPLETE: Final = "GangIncomplete"


def _say_if_incomplete(seen: Observation) -> None:
    """A gang larger than the job never starts: the job says so (``Running`` False) until the spec is fixed."""
    job = seen.job
    total = sum(spec.replicas or 0 for spec in job.replica_specs.values())
    want = min_member(job)
    if want > total:
        seen.retrying = (
            GANG_INCOMPLETE,
            f"its gang waits for {want} pods (schedulingPolicy.minAvailable) but the job has {total} replicas in "
            f"all: no pod runs until minAvailable is at most {total} or replicas are added",
        )


#: seconds a PodGroup may take to go before the job says what it waits for
STUCK_DELETING_SECONDS: Final = 15.0
#: the job's ``Running`` False reason while its previous PodGroup does not go
GROUP_TERMINATING: Final = "PodGroupTerminating"


def _say_if_stuck(seen: Observation, group: Object) -> None:
    metadata = group.get("metadata") or {}
    since = parse_time(metadata.get("deletionTimestamp"))
    if since is None or (seen.now - since).total_seconds() < STUCK_DELETING_SECONDS:
        return
    finalizers = ", ".join(metadata.get("finalizers") or []) or "none"
    seen.retrying = (
        GROUP_TERMINATING,
        f"waits for its previous PodGroup {metadata.get('name')} to be deleted (finalizers: {finalizers}); "
        "kube-controller-manager removes scheduling.k8s.io/podgroup-protection once no pod of the group is left, "
        "if its GenericWorkload feature gate is on",
    )


def _deleting(group: Object) -> bool:
    return bool((group.get("metadata") or {}).get("deletionTimestamp"))


def _owner_uids(group: Object) -> set[str]:
    return {str(ref.get("uid")) for ref in (group.get("metadata") or {}).get("ownerReferences") or []}


class GangSettings(Protocol):
    """The controller options this feature reads (``setup.ControllerOptions``)."""

    @property
    def gang(self) -> Gang | None: ...


def install(wiring: Wiring[GangSettings]) -> PodGroups | None:
    """The feature's factory (``setup.FEATURES``): with ``--gang-scheduler``, the PodGroups of one reconciler's jobs,
    watched when the API server serves them (else read with requests, see the module docstring). With no flag,
    the native gang for the jobs that ask for one, only where discovery found the API server serving it."""
    gang = wiring.options.gang
    if gang is None:
        return None
    if not gang.every_job and not wiring.discovered(gang.resource):
        return None
    cache = wiring.owned_informer(gang.resource) if wiring.serves(gang.resource) else None
    return PodGroups(wiring.client, wiring.recorder, gang, cache)


class PodGroups:
    """The PodGroup lifecycle of the jobs of one kind, a feature of the reconcile (``features.py``: it gates,
    shapes pods, suspends, finishes, watches): made before any pod (``admit``), pods only once it is admitted, made
    again if deleted while the job runs, its size following the job's ``schedulingPolicy.minAvailable``, renewed
    before a new set of pods where the scheduler needs that (``GangScheduler.spent``), removed when the job ends
    or is suspended; every pod points at it (``shape_pod``).

    With ``cache`` (an informer of the PodGroups this controller made) a running job costs no request. Without
    it, remembers per job (uid) what this process did, so each job costs one create and one delete (one more
    of each after a controller restart) plus, with Volcano, a read per reconcile until the group is admitted;
    a size change then reaches the group only while the job has no pods.
    """

    def __init__(self, client: KubeClient, recorder: EventRecorder, gang: Gang, cache: Informer | None = None) -> None:
        self.client = client
        self.recorder = recorder
        self.gang = gang
        self.cache = cache
        #: job key -> (uid, "created" | "admitted" | "renewing" | "deleted")
        self._done: dict[str, tuple[str, str]] = {}
        #: may groups carry a topology constraint? False once the API server refused one (its gate is off)
        self.topology = True

    def watches(self) -> tuple[Informer, ...]:
        """A PodGroup deleted by hand, or admitted by the scheduler, wakes its job."""
        return (self.cache,) if self.cache is not None else ()

    def forget(self, key: str) -> None:
        self._done.pop(key, None)

    async def finished(self, plan: Plan) -> None:
        await self.release(plan.seen)

    async def suspended(self, plan: Plan) -> None:
        await self.release(plan.seen)

    async def resumed(self, plan: Plan) -> None:
        self.forget(plan.key)

    async def hold(self, plan: Plan) -> str | None:
        return None

    async def admit(self, plan: Plan) -> bool:
        if not self.gang.covers(plan.job):
            return True
        return await self._admit(plan.seen)

    def shape_pod(self, plan: Plan, replica: Replica, pod: Object) -> None:
        if self.gang.covers(plan.job):
            apply_gang(pod, plan.job, self.gang)

    async def _admit(self, seen: Observation) -> bool:
        """Make the job's PodGroup; False while pods must wait (it cannot be made yet, it is on its way out, or
        the scheduler has not admitted it and the job has no pod yet)."""
        gang = self.gang
        uid = seen.job.metadata.uid or ""
        done = self._done.get(seen.key)
        #: what this process did for this incarnation of the job (None: nothing yet)
        state = done[1] if done is not None and done[0] == uid else None
        group: Object | None
        if self.cache is None:
            if state in ("created", "admitted") and seen.pods:
                return True
            group = await self._get(seen) if state is not None else None
        else:
            group = self._cached(seen)
            if group is not None and state == "deleted":
                group = None  # the cache still shows the group this controller deleted (suspend, then resume)
        if group is not None and (state == "renewing" or _deleting(group)):
            # Renewed, or deleted by hand: kube-scheduler's group stays until no pod of it is left (the
            # podgroup-protection finalizer); a pod made now would join the group that is going.
            logger.debug("%s: waiting for PodGroup %s to be gone", seen.key, podgroup_name(seen.job))
            _say_if_stuck(seen, group)
            seen.want_requeue(1.0)
            return False
        if group is not None and uid in _owner_uids(group) and not seen.pods and gang.implementation.spent(group):
            await self._renew(seen)
            return False
        if group is None or uid not in _owner_uids(group):
            group, made = await self._create(seen)
            if group is None:
                return False
            if made and state in ("created", "admitted"):
                message = f"PodGroup {podgroup_name(seen.job)} was deleted while the job ran; made it again"
                logger.info("%s: %s", seen.key, message)
                await self.recorder.normal(seen.raw, "PodGroupRecreated", message)
            self._done[seen.key] = (uid, "created")
        else:
            await self._follow(seen, group)
        _say_if_incomplete(seen)
        if seen.pods or admitted(gang, group):
            self._done[seen.key] = (uid, "admitted")
            return True
        logger.debug("%s: waiting for %s to admit PodGroup %s", seen.key, gang.scheduler, podgroup_name(seen.job))
        if self.cache is None:
            seen.want_requeue(2.0)  # nothing announces the admission without a watch
        return False

    async def _renew(self, seen: Observation) -> None:
        """The job's pods are all gone and its group has placed them (a whole-job restart): delete it, so the
        new pods come with a fresh group (made once this one is gone)."""
        name = podgroup_name(seen.job)
        with contextlib.suppress(errors.NotFound):
            await self.client.delete(self.gang.resource, name, namespace=seen.job.namespace)
        self._done[seen.key] = (seen.job.metadata.uid or "", "renewing")
        logger.info("%s: PodGroup %s placed the job's previous pods; renewing it for the new ones", seen.key, name)
        seen.want_requeue(1.0)

    async def _follow(self, seen: Observation, group: Object) -> None:
        """The job's ``schedulingPolicy.minAvailable`` changed: the group (and its Workload) follows."""
        job = seen.job
        implementation = self.gang.implementation
        want = min_member(job)
        have = implementation.min_count(group)
        if have is None or have == want:
            return
        await self.client.patch(
            self.gang.resource, podgroup_name(job), implementation.follow(job), namespace=job.namespace
        )
        companion = implementation.companion(job, owner_reference(job))
        if companion is not None:
            resource, body = companion
            patch = {"spec": {"podGroupTemplates": body["spec"]["podGroupTemplates"]}}
            try:
                await self.client.patch(resource, body["metadata"]["name"], patch, namespace=job.namespace)
            except (errors.NotFound, errors.Invalid) as exc:
                # the Workload only describes the job; the PodGroup above is what the scheduler reads
                logger.info("%s: the Workload keeps its old size: %s", seen.key, exc)
        message = f"PodGroup {podgroup_name(job)} now waits for {want} pods (was {have}): schedulingPolicy.minAvailable"
        logger.info("%s: %s", seen.key, message)
        await self.recorder.normal(seen.raw, "PodGroupResized", message)

    def _cached(self, seen: Observation) -> Object | None:
        assert self.cache is not None
        return self.cache.get_by_key(f"{seen.job.namespace}/{podgroup_name(seen.job)}")

    async def _get(self, seen: Observation) -> Object | None:
        try:
            return await self.client.get(self.gang.resource, podgroup_name(seen.job), namespace=seen.job.namespace)
        except errors.NotFound:
            return None

    async def _topology_dropped(self, seen: Observation) -> None:
        """kube-apiserver dropped the group's topology constraint (TopologyAwareWorkloadScheduling is off there, as
        its strategy drops a field of a gate that is off): said on every job that asked, none is sent again."""
        self.topology = False
        placement = seen.job.run_policy.placement
        key = placement.topology_key if placement is not None else ""
        message = (
            f"kube-apiserver dropped the PodGroup's topology constraint (its TopologyAwareWorkloadScheduling gate is "
            f"off): spec.placement {key} applies to each pod as pod affinity, and kube-scheduler does not keep the "
            "gang to one domain"
        )
        logger.info("%s: %s", seen.key, message)
        await self.recorder.warning(seen.raw, "PodGroupTopologyUnsupported", message)

    async def _make_companion(self, seen: Observation) -> bool:
        """The group's companion object (the native gang's Workload), made once per job; False when its name is
        someone else's (a conflict the job reports)."""
        job = seen.job
        companion = self.gang.implementation.companion(job, owner_reference(job))
        if companion is None:
            return True
        resource, body = companion
        if not self.topology:
            for template in body["spec"].get("podGroupTemplates") or []:
                template.pop(CONSTRAINTS, None)
        try:
            await self.client.create(resource, body, namespace=job.namespace)
            return True
        except errors.AlreadyExists:
            try:
                existing = await self.client.get(resource, body["metadata"]["name"], namespace=job.namespace)
            except errors.NotFound:
                seen.backoff = True
                return False
            conflict = conflict_of(owner_reference(job), existing, resource.kind)
            if conflict is not None:
                seen.conflicts.append(conflict)
                seen.want_requeue(10.0)
                return False
            return True

    async def _create(self, seen: Observation) -> tuple[Object | None, bool]:
        """Create the group (or take the existing one when it is this job's): the group and whether this call
        made it; no group while pods must wait."""
        gang = self.gang
        job = seen.job
        body = build_podgroup(job, gang, owner_reference(job))
        if not self.topology:
            body["spec"].pop(CONSTRAINTS, None)
            if gang_schedulers.topology_constraints(job) is not None:
                await self._topology_dropped(seen)
        try:
            if not await self._make_companion(seen):
                return None, False
            created: Object = await self.client.create(gang.resource, body, namespace=job.namespace)
            if CONSTRAINTS in body["spec"] and CONSTRAINTS not in (created.get("spec") or {}):
                await self._topology_dropped(seen)
            return created, True
        except errors.AlreadyExists:
            # Ours if made before a controller restart or by a racing reconcile; but a job deleted and
            # resubmitted under the same name finds its predecessor's group, which the garbage collector
            # is about to remove: adopting it would leave the new pods waiting for a group that vanishes.
            existing = await self._get(seen)
            if existing is None or _deleting(existing):
                seen.want_requeue(1.0)  # deleted in between, or on its way out: made on a later try
                return None, False
            owners = _owner_uids(existing)
            labels = (existing.get("metadata") or {}).get("labels") or {}
            ours = labels.get(c.LABEL_CONTROLLER) == c.CONTROLLER_NAME and labels.get(c.LABEL_JOB_NAME) == job.name
            if not owners and ours:
                # Made by kubedl-py for a job of this name, then orphaned (the job deleted with
                # propagationPolicy=Orphan): nobody will remove it; adopt it. A stranger's is never taken.
                metadata = {"ownerReferences": [owner_reference(job)], "labels": body["metadata"]["labels"]}
                patch = {"metadata": metadata, "spec": body["spec"]}
                adopted: Object = await self.client.patch(
                    gang.resource, podgroup_name(job), patch, namespace=job.namespace
                )
                return adopted, False
            conflict = conflict_of(owner_reference(job), existing, gang.resource.kind)
            if conflict is not None:
                # A previous job of this name (its group is about to be collected) or someone else's group.
                logger.info("%s: %s", seen.key, conflict.message)
                seen.conflicts.append(conflict)
                seen.want_requeue(10.0)
                return None, False
            return existing, False
        except (errors.NotFound, errors.Forbidden) as exc:
            # The PodGroup CRD or API is not served (404) or RBAC lacks it (403): the pods would wait forever
            # for a group that never comes, so none are made; retried with backoff until it works.
            message = (
                f"cannot create {gang.resource} {podgroup_name(job)} ({exc}); is {gang.implementation.needs} "
                "and the controller allowed to create its PodGroups? The job's pods wait for it."
            )
            await self.recorder.warning(seen.raw, "PodGroupCreateFailed", message)
            seen.backoff = True
            return None, False

    async def release(self, seen: Observation) -> None:
        """A finished (or suspended) job's pods no longer need a gang reservation (once per job and run)."""
        gang = self.gang
        uid = seen.job.metadata.uid or ""
        if self._done.get(seen.key) == (uid, "deleted"):
            return
        done = self._done.get(seen.key)
        if self.cache is not None and self._cached(seen) is None and (done is None or done[0] != uid):
            self._done[seen.key] = (uid, "deleted")  # none made by this run, and the cache has none
            return
        with contextlib.suppress(errors.NotFound):
            await self.client.delete(gang.resource, podgroup_name(seen.job), namespace=seen.job.namespace)
        self._done[seen.key] = (uid, "deleted")
