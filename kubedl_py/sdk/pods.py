"""Which pods and containers of a job a call means: replica selection, order, the container to read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubedl_py.api import constants as c
from kubedl_py.api.jobs import Job


def replica_selector(job: Job, replica: str | None, index: int | None) -> tuple[str | None, int | None]:
    """(replica type, index) to select pods by; ``None`` means any."""
    if replica is None:
        return None, index
    types = list(job.replica_specs)
    if replica.lower() == "master":
        # the kind's one-pod head (PyTorch's Master, TF's Chief or Master), else worker 0 (JAX has only Workers)
        head = next((t for t in job.framework.master_types if t in types), None)
        if head is not None:
            return head, 0
        first = "Worker" if "Worker" in types or not types else types[0]
        return first, 0 if index is None else index
    match = next((t for t in types if t.lower() == replica.lower()), None)
    if match is None:
        raise ValueError(f'job "{job.name}" has no replica type {replica!r}; it has {", ".join(types)}')
    return match, index


def pod_order(pod: Mapping[str, Any]) -> tuple[int, str, int]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    role = 0 if labels.get(c.LABEL_JOB_ROLE) == "master" else 1
    index = str(labels.get(c.LABEL_REPLICA_INDEX, "0"))
    return role, str(labels.get(c.LABEL_REPLICA_TYPE, "")), int(index) if index.isdigit() else 0


def container_of(pod: Mapping[str, Any], preferred: str) -> str:
    """The container to read: ``preferred`` (the framework's) when the pod has it, else the first."""
    names = [str(ct.get("name")) for ct in (pod.get("spec") or {}).get("containers") or []]
    return preferred if preferred in names or not names else names[0]


def container_status(pod: Mapping[str, Any], preferred: str) -> dict[str, Any] | None:
    wanted = container_of(pod, preferred)
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == wanted:
            found: dict[str, Any] = status
            return found
    return None
