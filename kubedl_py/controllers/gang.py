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
reservation); deleting the job removes it through the garbage collector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.kube.resources import Resource

Object = dict[str, Any]
GangSchedulerKind = Literal["volcano", "scheduler-plugins"]
GANG_SCHEDULERS: Final = ("volcano", "scheduler-plugins")

VOLCANO_PODGROUPS: Final = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
PLUGINS_PODGROUPS: Final = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
#: Volcano reads the group from this pod annotation
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
#: scheduler-plugins' coscheduling reads the group from this pod label
PLUGINS_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
DEFAULT_SCHEDULER_NAMES: Final[dict[str, str]] = {
    "volcano": "volcano",
    # the name scheduler-plugins' "as a second scheduler" install gives itself
    "scheduler-plugins": "scheduler-plugins-scheduler",
}


@dataclass(frozen=True)
class Gang:
    """Which gang scheduler the controller works with (``--gang-scheduler``, ``--gang-scheduler-name``)."""

    scheduler: GangSchedulerKind
    #: the pods' ``schedulerName``; None: the scheduler's usual name
    scheduler_name: str | None = None

    @property
    def resource(self) -> Resource:
        return VOLCANO_PODGROUPS if self.scheduler == "volcano" else PLUGINS_PODGROUPS

    @property
    def pod_scheduler_name(self) -> str:
        return self.scheduler_name or DEFAULT_SCHEDULER_NAMES[self.scheduler]


def podgroup_name(job: TrainingJob) -> str:
    return job.name


def min_member(job: TrainingJob) -> int:
    """``schedulingPolicy.minAvailable``, else every replica of the job (job already defaulted)."""
    policy = job.run_policy.scheduling_policy
    if policy is not None and policy.min_available is not None:
        return policy.min_available
    return sum(spec.replicas or 0 for spec in job.replica_specs.values())


def build_podgroup(job: TrainingJob, gang: Gang, owner: Object) -> Object:
    """The PodGroup of a job: Volcano's carries queue and priority class, scheduler-plugins' only minMember."""
    spec: Object = {"minMember": min_member(job)}
    policy = job.run_policy.scheduling_policy
    if gang.scheduler == "volcano" and policy is not None:
        if policy.queue:
            spec["queue"] = policy.queue
        if policy.priority_class_name:
            spec["priorityClassName"] = policy.priority_class_name
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
    metadata = pod["metadata"]
    spec.setdefault("schedulerName", gang.pod_scheduler_name)
    policy = job.run_policy.scheduling_policy
    if policy is not None and policy.priority_class_name:
        spec.setdefault("priorityClassName", policy.priority_class_name)
    group = podgroup_name(job)
    if gang.scheduler == "volcano":
        metadata.setdefault("annotations", {})[VOLCANO_GROUP_ANNOTATION] = group
    else:
        metadata.setdefault("labels", {})[PLUGINS_GROUP_LABEL] = group
