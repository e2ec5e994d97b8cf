"""Small facts about one of a job's pods, as the reconcile reads them."""

from __future__ import annotations

from kubedl_py.api.plain import Object
from kubedl_py.controllers.observation import Replica


def slot_of(replica: Replica) -> tuple[str, int]:
    return replica.replica_type, replica.index


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
