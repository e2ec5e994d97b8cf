"""The gang schedulers kubedl-py makes PodGroups for, one class each, and how big a job's gang is.

What differs between them (the PodGroup's resource and fields, how a pod names its group, whether the group
must be admitted before pods exist, whether a group that placed pods must be renewed for the next set) is a
:class:`GangScheduler` subclass: :class:`Volcano`, :class:`Coscheduling` (scheduler-plugins) and :class:`Native`
(kube-scheduler's own, ``scheduling.k8s.io/v1beta1``). The lifecycle every one shares is ``gang.py``'s.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.api.common import SchedulingPolicy
from kubedl_py.api.plain import Object
from kubedl_py.api.quantities import format_quantity, quantity_value
from kubedl_py.kube.resources import Resource

GangSchedulerKind = Literal["volcano", "scheduler-plugins", "kubernetes"]
GANG_SCHEDULERS: Final = ("volcano", "scheduler-plugins", "kubernetes")

VOLCANO_PODGROUPS: Final = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
PLUGINS_PODGROUPS: Final = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
#: Kubernetes' own gang (KEP-4671, GenericWorkload, beta in 1.37 and off by default): kube-scheduler's
#: GangScheduling plug-in reads the PodGroup; the Workload describes the job's groups for tools and humans
NATIVE_PODGROUPS: Final = Resource("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup")
NATIVE_WORKLOADS: Final = Resource("scheduling.k8s.io", "v1beta1", "workloads", "Workload")
#: the one template of a job's Workload, and its PodGroup's ``workloadRef.templateName``
NATIVE_TEMPLATE: Final = "gang"
#: a native PodGroup's (and its template's) topology constraint: all its pods in one domain of a node label
#: (TopologyAwareWorkloadScheduling, alpha in 1.37: the API server refuses the field while the gate is off)
CONSTRAINTS: Final = "schedulingConstraints"
#: the PodGroup condition kube-scheduler sets True once the group has been placed (and never unsets)
INITIALLY_SCHEDULED: Final = "PodGroupInitiallyScheduled"
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
    #: the pods' ``schedulerName`` unless ``--gang-scheduler-name`` says otherwise (None: left as the template has it)
    default_scheduler_name: str | None
    #: what serves its PodGroups, for the message of a create that finds none
    needs: str

    def group_fields(self, policy: SchedulingPolicy) -> Object:
        """The scheduler's own PodGroup spec fields taken from the job's ``schedulingPolicy``."""
        return {}

    def group_spec(self, job: TrainingJob) -> Object:
        """The PodGroup's spec: ``minMember``, ``minResources`` and the scheduler's own fields."""
        spec: Object = {"minMember": min_member(job)}
        resources = min_resources(job)
        if resources:
            spec["minResources"] = resources
        policy = job.run_policy.scheduling_policy
        if policy is not None:
            spec.update(self.group_fields(policy))
        return spec

    def min_count(self, group: Object) -> int | None:
        """How many pods ``group`` waits for (what :meth:`group_spec` wrote)."""
        value = (group.get("spec") or {}).get("minMember")
        return int(value) if value is not None else None

    def follow(self, job: TrainingJob) -> Object:
        """The merge patch that brings a group's size (and what depends on it) to the job's spec."""
        spec: Object = {"minMember": min_member(job)}
        resources = min_resources(job)
        if resources:
            spec["minResources"] = resources
        return {"spec": spec}

    def companion(self, job: TrainingJob, owner: Object) -> tuple[Resource, Object] | None:
        """An object made with the group, before it (the native gang's Workload); None: nothing."""
        return None

    def spent(self, group: Object) -> bool:
        """Whether ``group`` has placed its pods already, so the next set of pods needs a fresh group."""
        return False

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
    needs = "volcano installed"

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
    needs = "scheduler-plugins installed"

    def group_fields(self, policy: SchedulingPolicy) -> Object:
        if policy.schedule_timeout_seconds:
            return {"scheduleTimeoutSeconds": policy.schedule_timeout_seconds}
        return {}

    def bind(self, pod: Object, group: str) -> None:
        pod["metadata"].setdefault("labels", {})[PLUGINS_GROUP_LABEL] = group


class Native(GangScheduler):
    """kube-scheduler's own gang (``scheduling.k8s.io/v1beta1``): a pod joins its group by
    ``spec.schedulingGroup.podGroupName``; the GangScheduling plug-in keeps every pod of the group out of the
    scheduling queue until ``minCount`` of them exist (PreEnqueue), places them in one cycle, and holds them at
    Permit until ``minCount`` fit, so pods are made at once (no admission before them) and none binds early.

    The gate counts pods, not the group's history: a group that placed an earlier set of pods is renewed
    (``spent``) before a whole-job restart's pods are made, so the new set is a gang of its own from a group
    with a fresh status. kube-scheduler checks that every pod has the group's priority, so the group takes the
    job's priority class (``schedulingPolicy.priorityClass``, else the one its templates share).
    """

    kind: GangSchedulerKind = "kubernetes"
    resource = NATIVE_PODGROUPS
    default_scheduler_name = None
    needs = (
        "scheduling.k8s.io/v1beta1 served (kube-apiserver --feature-gates=GenericWorkload=true "
        "--runtime-config=scheduling.k8s.io/v1beta1=true; the same gate on kube-scheduler and kube-controller-manager)"
    )

    @staticmethod
    def _template(job: TrainingJob) -> Object:
        """What the PodGroup and its Workload template say alike: the size, priority class and topology."""
        fields: Object = {"schedulingPolicy": {"gang": {"minCount": min_member(job)}}}
        priority = priority_class(job)
        if priority:
            fields["priorityClassName"] = priority
        constraints = topology_constraints(job)
        if constraints is not None:
            fields[CONSTRAINTS] = constraints
        return fields

    def group_spec(self, job: TrainingJob) -> Object:
        workload_ref = {"workloadName": workload_name(job), "templateName": NATIVE_TEMPLATE}
        return {"workloadRef": workload_ref, **self._template(job)}

    def min_count(self, group: Object) -> int | None:
        gang = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
        value = gang.get("minCount")
        return int(value) if value is not None else None

    def follow(self, job: TrainingJob) -> Object:
        return {"spec": {"schedulingPolicy": {"gang": {"minCount": min_member(job)}}}}

    def companion(self, job: TrainingJob, owner: Object) -> tuple[Resource, Object] | None:
        template: Object = {"name": NATIVE_TEMPLATE, **self._template(job)}
        body: Object = {
            "apiVersion": NATIVE_WORKLOADS.api_version,
            "kind": NATIVE_WORKLOADS.kind,
            "metadata": {
                "name": workload_name(job),
                "namespace": job.namespace,
                "labels": {c.LABEL_CONTROLLER: c.CONTROLLER_NAME, c.LABEL_JOB_NAME: job.name},
                "ownerReferences": [owner],
            },
            "spec": {
                "controllerRef": {"apiGroup": job.api_group.group, "kind": job.kind, "name": job.name},
                "podGroupTemplates": [template],
            },
        }
        return NATIVE_WORKLOADS, body

    def bind(self, pod: Object, group: str) -> None:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}

    def spent(self, group: Object) -> bool:
        conditions = (group.get("status") or {}).get("conditions") or []
        return any(cond.get("type") == INITIALLY_SCHEDULED and cond.get("status") == "True" for cond in conditions)


#: the gang schedulers by their ``--gang-scheduler`` value
SCHEDULERS: Final[dict[GangSchedulerKind, GangScheduler]] = {
    scheduler.kind: scheduler for scheduler in (Volcano(), Coscheduling(), Native())
}


@dataclass(frozen=True)
class Gang:
    """Which gang scheduler the controller works with (``--gang-scheduler``, ``--gang-scheduler-name``)."""

    scheduler: GangSchedulerKind
    #: the pods' ``schedulerName``; None: the scheduler's usual name
    scheduler_name: str | None = None
    #: every job gets a group (``--gang-scheduler``); False (the native gang chosen because the API server
    #: serves it, no flag given): only jobs that ask for one with ``schedulingPolicy.minAvailable``
    every_job: bool = True

    @property
    def implementation(self) -> GangScheduler:
        return SCHEDULERS[self.scheduler]

    @property
    def resource(self) -> Resource:
        return self.implementation.resource

    @property
    def pod_scheduler_name(self) -> str | None:
        return self.scheduler_name or self.implementation.default_scheduler_name

    def covers(self, job: TrainingJob) -> bool:
        """Whether ``job`` is scheduled as a gang (see :attr:`every_job`)."""
        policy = job.run_policy.scheduling_policy
        return self.every_job or (policy is not None and policy.min_available is not None)


def podgroup_name(job: TrainingJob) -> str:
    return job.name


def workload_name(job: TrainingJob) -> str:
    return job.name


def priority_class(job: TrainingJob) -> str | None:
    """The priority class of the job's pods: ``schedulingPolicy.priorityClass``, else the one its templates
    name (the first replica type's in start order when they differ; kube-scheduler then refuses the group)."""
    policy = job.run_policy.scheduling_policy
    if policy is not None and policy.priority:
        return policy.priority
    order = {name: i for i, name in enumerate(job.framework.start_order)}
    for replica_type in sorted(job.replica_specs, key=lambda t: (order.get(t, len(order)), t)):
        name = job.replica_specs[replica_type].template.spec.to_dict().get("priorityClassName")
        if name:
            return str(name)
    return None


def topology_constraints(job: TrainingJob) -> Object | None:
    """``spec.placement`` with ``mode: Required`` as a native PodGroup's constraint (one domain of its
    ``topologyKey`` for the whole gang); None for a job without it (``Preferred`` stays pod affinity only)."""
    placement = job.run_policy.placement
    if placement is None or placement.mode != "Required":
        return None
    return {"topology": [{"key": placement.topology_key}]}


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
