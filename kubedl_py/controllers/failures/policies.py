"""The decisions behind ``failurePolicy`` and ``completionPolicy`` (docs/policies.md), as pure functions.

Why apart from job.py: each is a rule a user reads in the docs and a unit test pins down (what 75% of 7 is,
which waiting reason names a pod's trouble); job.py only acts on what they decide.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from kubedl_py.api import TrainingJob
from kubedl_py.api.common import CompletionPolicy
from kubedl_py.api.groups import KUBEDL, group_of
from kubedl_py.api.plain import Object, parse_time
from kubedl_py.controllers.failures.classes import FIRST_SIGNAL_EXIT_CODE

#: container waiting reasons that say why a pod cannot start (the kubelet's words)
STUCK_REASONS: Final = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
#: events that say a pod's volume cannot be set up
VOLUME_EVENT_REASONS: Final = ("FailedMount", "FailedAttachVolume")


def whole_job_restart(job: TrainingJob) -> bool:
    policy = job.run_policy.failure_policy
    return policy is not None and policy.restart_scope == "Job"


#: the exits a restartPolicy ExitCode replica retries (a signal: 128+n), as container restart rules give them
#: to the kubelet: 128 values, within the API's 255 per rule
IN_PLACE_EXIT_CODES: Final = tuple(range(FIRST_SIGNAL_EXIT_CODE, 256))


def restart_mode(job: TrainingJob) -> str:
    """``failurePolicy.restartMode``, defaulted (Auto)."""
    policy = job.run_policy.failure_policy
    return (policy.restart_mode if policy is not None else None) or "Auto"


def restarts_in_place(job: TrainingJob, replica_type: str) -> bool:
    """Whether a retryable failure of ``replica_type`` restarts its container in its own pod: a
    ``restartPolicy: ExitCode`` replica, unless the job restarts whole (not built in place yet) or asks to be
    recreated (``restartMode: Recreate``)."""
    spec = job.replica_specs.get(replica_type)
    if spec is None or spec.restart_policy != "ExitCode" or whole_job_restart(job):
        return False
    return restart_mode(job) != "Recreate"


def in_place_rule() -> Object:
    """The main container's restart rule under :func:`restarts_in_place`: a retryable exit restarts it (the
    kubelet's ``restartPolicyRules``, ContainerRestartRules: beta and on since Kubernetes 1.35); any other
    exit ends it (the container's own ``restartPolicy: Never``) and the job's policy decides."""
    return {"action": "Restart", "exitCodes": {"operator": "In", "values": list(IN_PLACE_EXIT_CODES)}}


def share(value: int | str, total: int, *, round_up: bool) -> int:
    """A count as written (``3``) or a share of ``total`` (``"75%"``), rounded up or down."""
    if isinstance(value, int):
        return value
    exact = int(value.rstrip("%")) * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


@dataclass(frozen=True)
class Completion:
    """A job's completionPolicy, resolved against its replica counts."""

    replica_type: str
    total: int
    #: succeeded replicas of the type that make the job succeed (None: the kind's own rule decides)
    min_succeeded: int | None
    #: failed-for-good replicas of the type the job survives (None: none)
    max_failed: int | None

    def tolerates(self, failed: int) -> bool:
        """Whether the job survives ``failed`` replicas of the type that failed for good: at most
        ``max_failed`` of them, and few enough that ``min_succeeded`` can still be reached."""
        return self.refusal(failed) is None and (self.max_failed is not None or self.min_succeeded is not None)

    def refusal(self, failed: int) -> str | None:
        """Why ``failed`` failed-for-good replicas of the type fail the job (None: they do not, by share)."""
        if self.max_failed is not None and failed > self.max_failed:
            return (
                f"{failed} of {self.total} {self.replica_type} replicas failed, more than "
                f"completionPolicy.maxFailed ({self.max_failed})"
            )
        if self.min_succeeded is not None and self.total - failed < self.min_succeeded:
            return (
                f"{failed} of {self.total} {self.replica_type} replicas failed, so completionPolicy.minSucceeded "
                f"({self.min_succeeded}) can no longer be reached"
            )
        return None


def completion_of(job: TrainingJob) -> Completion | None:
    policy: CompletionPolicy | None = job.run_policy.completion_policy
    if policy is None:
        return None
    replica_type = policy.replica_type or job.framework.worker_type
    spec = job.replica_specs.get(replica_type)
    total = (spec.replicas or 0) if spec is not None else 0
    return Completion(
        replica_type=replica_type,
        total=total,
        min_succeeded=None if policy.min_succeeded is None else share(policy.min_succeeded, total, round_up=True),
        max_failed=None if policy.max_failed is None else share(policy.max_failed, total, round_up=False),
    )


def count_phase(pods: Iterable[Object | None], phase: str) -> int:
    return sum(1 for pod in pods if pod is not None and (pod.get("status") or {}).get("phase") == phase)


def pending_cause(pod: Object) -> str | None:
    """Why a Pending pod has not started, from its status: an image that cannot be pulled (or a container
    that cannot be created), or no node that fits it. None when its status names no cause (a volume that
    cannot be mounted shows only in events: :data:`VOLUME_EVENT_REASONS`)."""
    status = pod.get("status") or {}
    for entry in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (entry.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in STUCK_REASONS:
            message = waiting.get("message") or "no message"
            return f"container {entry.get('name')}: {reason}: {message}"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            reason = condition.get("reason") or "Unschedulable"
            return f"not scheduled: {reason}: {condition.get('message') or 'no message'}"
    return None


#: seconds a pod may wait unbound with no scheduler having looked at it (no PodScheduled condition at all) before
#: its job says so: kube-scheduler answers within a second; a schedulerName no scheduler serves, never
UNSEEN_BY_SCHEDULER_SECONDS = 30.0


def unseen_by_scheduler(pod: Object, now: datetime) -> tuple[str | None, float | None]:
    """For an unbound pod that no scheduler has looked at: what to say once it has waited
    ``UNSEEN_BY_SCHEDULER_SECONDS`` (its ``schedulerName``: is that scheduler running?), else in how many seconds
    to look again. ``(None, None)`` for a pod bound or seen by a scheduler."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or any(c.get("type") == "PodScheduled" for c in status.get("conditions") or []):
        return None, None
    if (status.get("phase") or "Pending") != "Pending":
        return None, None
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    if created is None:
        return None, None
    waited = (now - created).total_seconds()
    if waited < UNSEEN_BY_SCHEDULER_SECONDS:
        return None, UNSEEN_BY_SCHEDULER_SECONDS - waited + 0.5
    scheduler = spec.get("schedulerName") or "default-scheduler"
    group = (spec.get("schedulingGroup") or {}).get("podGroupName")
    if group:
        # kube-scheduler's GangScheduling plug-in keeps a group's pods out of its queue, saying nothing on them,
        # until the PodGroup and minCount of its pods exist
        return (
            f"no scheduler has looked at it in {int(waited)}s: it is in PodGroup {group}, whose pods "
            f"{scheduler!r} holds back until the group's minCount of them exist; is minCount more than the pods "
            "made, or is the GenericWorkload feature gate off in kube-scheduler?"
        ), None
    return (
        f"no scheduler has looked at it in {int(waited)}s: its schedulerName is {scheduler!r}; is that scheduler "
        "running in this cluster (or is the name misspelt)?"
    ), None


def unschedulable_message(pod: Object) -> str | None:
    """What the scheduler says when it found no node for a pod (its PodScheduled condition: ``0/3 nodes are
    available: 3 Insufficient nvidia.com/gpu.``), or None when it has not refused it."""
    status = pod.get("status") or {}
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    for condition in status.get("conditions") or []:
        scheduled = (condition.get("type"), condition.get("status"), condition.get("reason"))
        if scheduled == ("PodScheduled", "False", "Unschedulable"):
            return str(condition.get("message") or "no message")
    return None


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
