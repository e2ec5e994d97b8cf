"""One reconcile's view of a job: the job, its pods and Services by replica slot, and what it decided.

Why a module of its own: the reconcile (``job.py``) and its steps (host-network ports, gang PodGroups) all
read the same observation; keeping it apart lets the steps import it without importing the reconcile.

*Expectations* (creates and deletes sent but not yet seen in the informer cache) keep a lagging cache from
causing a second action on the same pod.
``trim_pod`` is what the informers keep of a pod: the fields the reconcile and its steps read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubedl_py.api import TrainingJob
from kubedl_py.controllers.addressing import replica_name
from kubedl_py.controllers.ownership import Conflict

Object = dict[str, Any]
#: (replica type, index)
Slot = tuple[str, int]

# How long an expectation (a create or delete we sent) may stay unobserved before we stop trusting it.
EXPECTATION_TIMEOUT = 30.0


@dataclass
class Expectations:
    """Writes sent but not yet seen in the informer cache, so a lagging cache does not cause a repeat."""

    creates: dict[str, float] = field(default_factory=dict)
    deletes: dict[str, float] = field(default_factory=dict)

    def expect_create(self, pod_key: str) -> None:
        self.creates[pod_key] = time.monotonic() + EXPECTATION_TIMEOUT

    def expect_delete(self, uid: str) -> None:
        self.deletes[uid] = time.monotonic() + EXPECTATION_TIMEOUT

    def pending_create(self, pod_key: str) -> bool:
        deadline = self.creates.get(pod_key)
        if deadline is not None and deadline < time.monotonic():
            del self.creates[pod_key]
            return False
        return deadline is not None

    def pending_delete(self, uid: str) -> bool:
        deadline = self.deletes.get(uid)
        if deadline is not None and deadline < time.monotonic():
            del self.deletes[uid]
            return False
        return deadline is not None

    def observed(self, pod: Object) -> None:
        meta = pod.get("metadata") or {}
        self.creates.pop(f"{meta.get('namespace')}/{meta.get('name')}", None)

    def observed_delete(self, pod: Object) -> None:
        self.deletes.pop(str((pod.get("metadata") or {}).get("uid")), None)


@dataclass
class Replica:
    """What the cache says about one replica slot (type, index)."""

    replica_type: str
    index: int
    pod: Object | None = None
    terminating: bool = False
    #: the pod on its way out (deletionTimestamp set, or deleted by us and not yet seen so), if the cache has it
    leaving: Object | None = None

    @property
    def phase(self) -> str:
        return str(((self.pod or {}).get("status") or {}).get("phase") or "")


@dataclass
class Observation:
    """One reconcile's view of the world and what it decided to write."""

    raw: Object
    job: TrainingJob
    status: Object
    pods: list[Object]
    services: dict[str, Object]
    replicas: dict[tuple[str, int], Replica]
    surplus: list[Object]
    now: datetime
    requeue_after: float | None = None
    #: names the job needs that are taken by objects not its own (``ownership.py``): no pod is made
    conflicts: list[Conflict] = field(default_factory=list)
    #: retry with the work queue's per-key backoff (something failed that an event will not announce)
    backoff: bool = False
    #: a create the API server refused that may work later (quota, a ServiceAccount not found), as (reason,
    #: message): the job says so while it waits (``Running`` False), not only in a Warning event
    retrying: tuple[str, str] | None = None
    #: replicas whose pod is there but not of use (on a node that is not Ready), with why: the job is not
    #: Running meanwhile (recovery.py)
    unavailable: dict[Slot, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.job.namespace}/{self.job.name}"

    def pod_key(self, replica: Replica) -> str:
        """``ns/<job>-<type>-<i>``: the key of a replica's pod in caches and expectations."""
        return f"{self.job.namespace}/{replica_name(self.job.name, replica.replica_type, replica.index)}"

    def pods_by_type(self) -> dict[str, list[Object | None]]:
        """Replica type -> its pods by index (None where a slot has no pod): what the kinds' rules read."""
        grouped: dict[str, list[Object | None]] = {}
        for replica in self.replicas.values():
            grouped.setdefault(replica.replica_type, []).append(replica.pod)
        return grouped

    def want_requeue(self, seconds: float) -> None:
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


class JobFailure(Exception):
    """A step found that the job cannot go on (a terminal condition): the reconcile marks it Failed with
    ``reason`` and records a Warning event. Raised, not returned, so no step has to thread it back."""

    def __init__(self, reason: str, message: str, *, event: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        #: the event's text (default: the message)
        self.event = event or message


class StaleDecision(Exception):
    """The status a reconcile decided could not be written before an act that needs it written first (a
    failed pod's deletion): the copy it was computed from is stale, or the job is gone. The reconcile ends
    without acting and runs again on the newer copy."""


def trim_pod(pod: Object) -> Object:
    """The fields of a pod the reconcilers read; everything else is dropped from the cache."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {
            key: meta[key]
            for key in (
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "labels",
                "annotations",
                "ownerReferences",
                "deletionTimestamp",
                "creationTimestamp",
            )
            if key in meta
        },
        "spec": {
            "hostNetwork": spec.get("hostNetwork", False),
            # where it runs: a host port is taken on that node only (ports.py); a pod on a node that is not
            # Ready may be lost with it (recovery.py)
            "nodeName": spec.get("nodeName"),
            # which scheduler a pod no scheduler has looked at waits for (policies.unseen_by_scheduler)
            **({"schedulerName": spec["schedulerName"]} if spec.get("schedulerName") else {}),
            "containers": [
                {"name": ctr.get("name"), "ports": ctr.get("ports") or []} for ctr in spec.get("containers") or []
            ],
        },
        "status": {
            "phase": status.get("phase"),
            "reason": status.get("reason"),
            "message": status.get("message"),
            "containerStatuses": [
                {key: cs[key] for key in ("name", "restartCount", "state", "lastState") if key in cs}
                for cs in status.get("containerStatuses") or []
            ],
            # why a pod is Pending (failurePolicy.pendingTimeoutSeconds): image pulls and scheduling
            "initContainerStatuses": [
                {key: cs[key] for key in ("name", "state") if key in cs}
                for cs in status.get("initContainerStatuses") or []
            ],
            # PodScheduled: why a pod is Pending; Ready: false on a lost node; DisruptionTarget: ended by the
            # cluster (an infrastructure failure, failures.py)
            "conditions": [
                {key: cond[key] for key in ("type", "status", "reason", "message", "lastTransitionTime") if key in cond}
                for cond in status.get("conditions") or []
                if cond.get("type") in ("PodScheduled", "Ready", "DisruptionTarget")
            ],
        },
    }


def slot_of(replica: Replica) -> tuple[str, int]:
    return replica.replica_type, replica.index


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def in_place_restarts(pod: Object | None) -> int:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


def is_active(pod: Object) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def is_crashing(pod: Object) -> bool:
    """A running pod whose container is down between in-place restarts (kubelet backoff)."""
    if (pod.get("status") or {}).get("phase") != "Running":
        return False
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if "waiting" in state or "terminated" in state:
            return True
    return False
