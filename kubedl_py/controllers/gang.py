"""Gang scheduling: a PodGroup per job and the pod fields that bind pods to it.

A distributed training job is all or nothing: DDP and TF's parameter servers block until every replica
has joined, so a job that gets half its pods holds GPUs and does no work, and two such jobs can deadlock
each other. A gang scheduler (Volcano, or the scheduler-plugins coscheduling plugin) places a group's pods
only when ``minMember`` of them fit at once.

With ``--gang-scheduler`` every job gets a PodGroup (not only those with ``schedulingPolicy.minAvailable``):
``minMember`` is ``minAvailable`` when set, else the job's total replicas, because an ungrouped training
job under a gang scheduler is exactly the partial-start problem above. Without the flag nothing here is
used and pods keep whatever scheduler their template names.

The PodGroup is named after the job and owned by it (controller owner reference), created before the pods,
and deleted when the job finishes (so a finished job's pods, kept for their logs, no longer hold a gang
reservation); deleting the job removes it through the garbage collector. Its ``minResources`` is what the
first ``minMember`` pods request (``schedulingPolicy.minResources`` overrides it): Volcano admits a group
into its queue by it, and coscheduling rejects a group early when the cluster cannot hold it.

**No half-started gang.** With Volcano, a job gets no pod before its PodGroup is admitted (phase ``Inqueue``
or later): pods created earlier would sit Pending, visible to quota and autoscalers, for a gang the queue
has not accepted. Coscheduling has no admission before pods exist: its Permit stage holds every pod of the
group unbound until ``minMember`` of them fit at once, so pods are made at once and none binds early.

What differs between the two schedulers (the PodGroup's resource and fields, how a pod names its group, whether
the group must be admitted first) is one :class:`GangScheduler` subclass each, :class:`Volcano` and
:class:`Coscheduling`; nothing else here asks which scheduler it is.

When the API server serves the PodGroup resource at start, the controller watches the PodGroups it made
(an informer, ``cache``): a group deleted by hand while its job runs is made again, and an admission wakes
the job. Without it (the CRD installed later) PodGroups are found with requests, and a deleted one is noticed
only when the job next needs pods.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal, Protocol

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.api.common import SchedulingPolicy
from kubedl_py.api.plain import Object
from kubedl_py.api.quantities import format_quantity, quantity_value
from kubedl_py.controllers.features import Wiring
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.ownership import conflict_of, owner_reference
from kubedl_py.controllers.plan import Plan
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.informer import Informer
from kubedl_py.kube.resources import Resource

logger = logging.getLogger(__name__)

GangSchedulerKind = Literal["volcano", "scheduler-plugins"]
GANG_SCHEDULERS: Final = ("volcano", "scheduler-plugins")

VOLCANO_PODGROUPS: Final = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
PLUGINS_PODGROUPS: Final = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
#: Volcano reads the group from this pod annotation
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
#: scheduler-plugins' coscheduling reads the group from this pod label
PLUGINS_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
#: Volcano's PodGroup phases from which its pods may be made: the queue has admitted the group
VOLCANO_ADMITTED: Final = frozenset({"Inqueue", "Running", "Completed"})


class GangScheduler:
    """What differs between gang schedulers: their PodGroup resource and fields, how a pod names its group, and
    whether a group must be admitted before its pods are made. One subclass per scheduler."""

    #: the ``--gang-scheduler`` value
    kind: GangSchedulerKind
    resource: Resource
    #: the pods' ``schedulerName`` unless ``--gang-scheduler-name`` says otherwise
    default_scheduler_name: str

    def group_fields(self, policy: SchedulingPolicy) -> Object:
        """The scheduler's own PodGroup spec fields taken from the job's ``schedulingPolicy``."""
        return {}

    def bind(self, pod: Object, group: str) -> None:
        """Name the PodGroup ``group`` on ``pod`` (in place) the way the scheduler reads it."""
        raise NotImplementedError

    def admitted(self, group: Object) -> bool:
        """Whether ``group`` lets its pods be made (see the module docstring)."""
        return True


class Volcano(GangScheduler):
    """Volcano: a queue admits the group (``Inqueue``) before its pods may exist; queue and priority class."""

    kind: GangSchedulerKind = "volcano"
    resource = VOLCANO_PODGROUPS
    default_scheduler_name = "volcano"

    def group_fields(self, policy: SchedulingPolicy) -> Object:
        fields: Object = {}
        if policy.queue:
            fields["queue"] = policy.queue
        if policy.priority:
            fields["priorityClassName"] = policy.priority
        return fields

    def bind(self, pod: Object, group: str) -> None:
        pod["metadata"].setdefault("annotations", {})[VOLCANO_GROUP_ANNOTATION] = group

    def admitted(self, group: Object) -> bool:
        return (group.get("status") or {}).get("phase") in VOLCANO_ADMITTED


class Coscheduling(GangScheduler):
    """scheduler-plugins' coscheduling: no admission before pods exist (its Permit stage holds them); a
    schedule timeout."""

    kind: GangSchedulerKind = "scheduler-plugins"
    resource = PLUGINS_PODGROUPS
    # the name scheduler-plugins' "as a second scheduler" install gives itself
    default_scheduler_name = "scheduler-plugins-scheduler"

    def group_fields(self, policy: SchedulingPolicy) -> Object:
        if policy.schedule_timeout_seconds:
            return {"scheduleTimeoutSeconds": policy.schedule_timeout_seconds}
        return {}

    def bind(self, pod: Object, group: str) -> None:
        pod["metadata"].setdefault("labels", {})[PLUGINS_GROUP_LABEL] = group


#: the gang schedulers by their ``--gang-scheduler`` value
SCHEDULERS: Final[dict[GangSchedulerKind, GangScheduler]] = {
    scheduler.kind: scheduler for scheduler in (Volcano(), Coscheduling())
}


@dataclass(frozen=True)
class Gang:
    """Which gang scheduler the controller works with (``--gang-scheduler``, ``--gang-scheduler-name``)."""

    scheduler: GangSchedulerKind
    #: the pods' ``schedulerName``; None: the scheduler's usual name
    scheduler_name: str | None = None

    @property
    def implementation(self) -> GangScheduler:
        return SCHEDULERS[self.scheduler]

    @property
    def resource(self) -> Resource:
        return self.implementation.resource

    @property
    def pod_scheduler_name(self) -> str:
        return self.scheduler_name or self.implementation.default_scheduler_name


def podgroup_name(job: TrainingJob) -> str:
    return job.name


def min_member(job: TrainingJob) -> int:
    """``schedulingPolicy.minAvailable``, else every replica of the job (job already defaulted)."""
    policy = job.run_policy.scheduling_policy
    if policy is not None and policy.min_available is not None:
        return policy.min_available
    return sum(spec.replicas or 0 for spec in job.replica_specs.values())


def pod_requests(template_spec: Object) -> dict[str, Decimal]:
    """What one pod asks the scheduler for: the containers' requests summed (a limit stands in for a missing
    request, as Kubernetes defaults it), or the largest init container's when that is more, plus overhead."""

    def requests(container: Object) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        values: dict[str, Decimal] = {}
        for name, value in merged.items():
            # Not a quantity: the API server refuses the pod itself, with a message that says why.
            with contextlib.suppress(ValueError):
                values[name] = quantity_value(value)
        return values

    total: dict[str, Decimal] = {}
    for container in template_spec.get("containers") or []:
        for name, value in requests(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in template_spec.get("initContainers") or []:
        for name, value in requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    for name, value in (template_spec.get("overhead") or {}).items():
        total[name] = total.get(name, Decimal(0)) + quantity_value(value)
    return total


def min_resources(job: TrainingJob) -> dict[str, str]:
    """What the first ``minMember`` pods of the job request, in the kind's start order (masters first):
    ``schedulingPolicy.minResources`` when given, else computed from the replica templates."""
    policy = job.run_policy.scheduling_policy
    if policy is not None and policy.min_resources:
        return {name: str(value) for name, value in policy.min_resources.items()}
    order = {name: i for i, name in enumerate(job.framework.start_order)}
    left = min_member(job)
    total: dict[str, Decimal] = {}
    for replica_type in sorted(job.replica_specs, key=lambda t: (order.get(t, len(order)), t)):
        spec = job.replica_specs[replica_type]
        count = min(spec.replicas or 0, left)
        left -= count
        per_pod = pod_requests(spec.template.spec.to_dict())
        for name, value in per_pod.items():
            total[name] = total.get(name, Decimal(0)) + value * count
    return {name: format_quantity(value) for name, value in sorted(total.items()) if value > 0}


def build_podgroup(job: TrainingJob, gang: Gang, owner: Object) -> Object:
    """The PodGroup of a job: minMember and minResources; Volcano's also carries queue and priority class,
    scheduler-plugins' the schedule timeout."""
    spec: Object = {"minMember": min_member(job)}
    resources = min_resources(job)
    if resources:
        spec["minResources"] = resources
    policy = job.run_policy.scheduling_policy
    if policy is not None:
        spec.update(gang.implementation.group_fields(policy))
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
    spec.setdefault("schedulerName", gang.pod_scheduler_name)
    policy = job.run_policy.scheduling_policy
    if policy is not None and policy.priority:
        spec.setdefault("priorityClassName", policy.priority)
    gang.implementation.bind(pod, podgroup_name(job))


def admitted(gang: Gang, group: Object) -> bool:
    """Whether the scheduler has admitted ``group``, so its pods may be made (see the module docstring)."""
    return gang.implementation.admitted(group)


def _owner_uids(group: Object) -> set[str]:
    return {str(ref.get("uid")) for ref in (group.get("metadata") or {}).get("ownerReferences") or []}


class GangSettings(Protocol):
    """The controller options this feature reads (``setup.ControllerOptions``)."""

    @property
    def gang(self) -> Gang | None: ...


def install(wiring: Wiring[GangSettings]) -> PodGroups | None:
    """The feature's factory (``setup.FEATURES``): with ``--gang-scheduler``, the PodGroups of one reconciler's jobs,
    watched when the API server serves them (else read with requests, see the module docstring)."""
    gang = wiring.options.gang
    if gang is None:
        return None
    cache = wiring.owned_informer(gang.resource) if wiring.serves(gang.resource) else None
    return PodGroups(wiring.client, wiring.recorder, gang, cache)


class PodGroups:
    """The PodGroup lifecycle of the jobs of one kind, a feature of the reconcile (``features.py``: it gates,
    shapes pods, suspends, finishes, watches): made before any pod (``admit``), pods only once it is admitted, made
    again if deleted while the job runs, removed when the job ends or is suspended; every pod points at it
    (``shape_pod``).

    With ``cache`` (an informer of the PodGroups this controller made) a running job costs no request. Without
    it, remembers per job (uid) what this process did, so each job costs one create and one delete (one more
    of each after a controller restart) plus, with Volcano, a read per reconcile until the group is admitted.
    """

    def __init__(self, client: KubeClient, recorder: EventRecorder, gang: Gang, cache: Informer | None = None) -> None:
        self.client = client
        self.recorder = recorder
        self.gang = gang
        self.cache = cache
        #: job key -> (uid, "created" | "admitted" | "deleted")
        self._done: dict[str, tuple[str, str]] = {}

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
        return await self._admit(plan.seen)

    def shape_pod(self, plan: Plan, replica: Replica, pod: Object) -> None:
        apply_gang(pod, plan.job, self.gang)

    async def _admit(self, seen: Observation) -> bool:
        """Make the job's PodGroup; False while pods must wait (it cannot be made yet, or the scheduler has not
        admitted it and the job has no pod yet)."""
        gang = self.gang
        uid = seen.job.metadata.uid or ""
        done = self._done.get(seen.key)
        group: Object | None
        if self.cache is None:
            if done == (uid, "admitted") or (done == (uid, "created") and seen.pods):
                return True
            group = await self._get(seen) if done == (uid, "created") else None
        else:
            group = self._cached(seen)
            if group is not None and done is not None and done[1] == "deleted":
                group = None  # the cache still shows the group this controller deleted (suspend, then resume)
        if group is None or uid not in _owner_uids(group):
            group, made = await self._create(seen)
            if group is None:
                return False
            if made and done is not None and done[0] == uid and done[1] in ("created", "admitted"):
                message = f"PodGroup {podgroup_name(seen.job)} was deleted while the job ran; made it again"
                logger.info("%s: %s", seen.key, message)
                await self.recorder.normal(seen.raw, "PodGroupRecreated", message)
            self._done[seen.key] = (uid, "created")
        if seen.pods or admitted(gang, group):
            self._done[seen.key] = (uid, "admitted")
            return True
        logger.debug("%s: waiting for %s to admit PodGroup %s", seen.key, gang.scheduler, podgroup_name(seen.job))
        if self.cache is None:
            seen.want_requeue(2.0)  # nothing announces the admission without a watch
        return False

    def _cached(self, seen: Observation) -> Object | None:
        assert self.cache is not None
        return self.cache.get_by_key(f"{seen.job.namespace}/{podgroup_name(seen.job)}")

    async def _get(self, seen: Observation) -> Object | None:
        try:
            return await self.client.get(self.gang.resource, podgroup_name(seen.job), namespace=seen.job.namespace)
        except errors.NotFound:
            return None

    async def _create(self, seen: Observation) -> tuple[Object | None, bool]:
        """Create the group (or take the existing one when it is this job's): the group and whether this call
        made it; no group while pods must wait."""
        gang = self.gang
        job = seen.job
        body = build_podgroup(job, gang, owner_reference(job))
        try:
            created: Object = await self.client.create(gang.resource, body, namespace=job.namespace)
            return created, True
        except errors.AlreadyExists:
            # Ours if made before a controller restart or by a racing reconcile; but a job deleted and
            # resubmitted under the same name finds its predecessor's group, which the garbage collector
            # is about to remove: adopting it would leave the new pods waiting for a group that vanishes.
            existing = await self._get(seen)
            if existing is None:
                seen.backoff = True  # deleted in between: made on the next try
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
            # The PodGroup CRD is not installed (404) or RBAC lacks it (403): the pods would wait forever
            # for a group that never comes, so none are made; retried with backoff until it works.
            message = (
                f"cannot create {gang.resource} {podgroup_name(job)} ({exc}); is {gang.scheduler} installed "
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
