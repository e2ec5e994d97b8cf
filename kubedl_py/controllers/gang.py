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

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Final, Literal

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.controllers.observation import Observation
from kubedl_py.controllers.ownership import owner_reference
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.resources import Resource

logger = logging.getLogger(__name__)

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


class PodGroups:
    """The PodGroup lifecycle of the jobs of one kind: made before any pod, removed when the job ends.

    Remembers per job (uid) whether this process made or removed its group, so each costs one create and one
    delete per job (one more of each after a controller restart).
    """

    def __init__(self, client: KubeClient, recorder: EventRecorder, gang: Gang | None) -> None:
        self.client = client
        self.recorder = recorder
        self.gang = gang
        #: job key -> (uid, "created" | "deleted")
        self._done: dict[str, tuple[str, str]] = {}

    def forget(self, key: str) -> None:
        self._done.pop(key, None)

    async def ensure(self, seen: Observation) -> bool:
        """With a gang scheduler, make the job's PodGroup; False while it cannot be made (pods wait)."""
        gang = self.gang
        uid = seen.job.metadata.uid or ""
        if gang is None or self._done.get(seen.key, ("", ""))[0] == uid:
            return True
        job = seen.job
        body = build_podgroup(job, gang, owner_reference(job))
        try:
            await self.client.create(gang.resource, body, namespace=job.namespace)
        except errors.AlreadyExists:
            # Ours if made before a controller restart or by a racing reconcile; but a job deleted and
            # resubmitted under the same name finds its predecessor's group, which the garbage collector
            # is about to remove: adopting it would leave the new pods waiting for a group that vanishes.
            existing = await self.client.get(gang.resource, podgroup_name(job), namespace=job.namespace)
            owners = {ref.get("uid") for ref in (existing.get("metadata") or {}).get("ownerReferences") or []}
            if not owners:
                # Orphaned (its job deleted with propagationPolicy=Orphan): nobody will remove it; adopt it.
                patch = {"metadata": {"ownerReferences": [owner_reference(job)]}, "spec": body["spec"]}
                await self.client.patch(gang.resource, podgroup_name(job), patch, namespace=job.namespace)
            elif uid not in owners:
                logger.info("%s: PodGroup still belongs to a previous job of this name; waiting for it to go", seen.key)
                seen.backoff = True
                return False
        except (errors.NotFound, errors.Forbidden) as exc:
            # The PodGroup CRD is not installed (404) or RBAC lacks it (403): the pods would wait forever
            # for a group that never comes, so none are made; retried with backoff until it works.
            message = (
                f"cannot create {gang.resource} {podgroup_name(job)} ({exc}); is {gang.scheduler} installed "
                "and the controller allowed to create its PodGroups? The job's pods wait for it."
            )
            await self.recorder.warning(seen.raw, "PodGroupCreateFailed", message)
            seen.backoff = True
            return False
        self._done[seen.key] = (uid, "created")
        return True

    async def release(self, seen: Observation) -> None:
        """A finished job's pods no longer need a gang reservation (once per job and controller run)."""
        gang = self.gang
        uid = seen.job.metadata.uid or ""
        if gang is None or self._done.get(seen.key) == (uid, "deleted"):
            return
        with contextlib.suppress(errors.NotFound):
            await self.client.delete(gang.resource, podgroup_name(seen.job), namespace=seen.job.namespace)
        self._done[seen.key] = (uid, "deleted")
