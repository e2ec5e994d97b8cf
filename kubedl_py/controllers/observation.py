"""One reconcile's view of a job: the job, its pods and Services by replica slot, and what it decided.

Why a module of its own: the reconcile (``job.py``) and its features (host-network ports, gang PodGroups) all
read the same observation; keeping it apart lets the features import it without importing the reconcile.

*Expectations* (creates and deletes sent but not yet seen in the informer cache) keep a lagging cache from
causing a second action on the same pod. What the informers keep of a pod is ``trimming.trim_pod``; small facts
about a pod are in ``podstate.py``; how a reconcile ends early, in ``outcomes.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

from kubedl_py.api import TrainingJob
from kubedl_py.api.plain import Object
from kubedl_py.controllers.addressing import replica_name
from kubedl_py.controllers.ownership import Conflict

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
