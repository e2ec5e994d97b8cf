"""Which pods and containers of a job a call means: replica selection, order, the container to read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubedl_py.api import constants as c
from kubedl_py.api.defaults import DEFAULT_REPLICAS
from kubedl_py.api.jobs import Job
from kubedl_py.kube.informer import by_owner_uid


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
        worker = job.framework.worker_type
        first = worker if worker in types or not types else types[0]
        return first, 0 if index is None else index
    match = next((t for t in types if t.lower() == replica.lower()), None)
    if match is None:
        raise ValueError(f'job "{job.name}" has no replica type {replica!r}; it has {", ".join(types)}')
    return match, index


def check_replica_index(job: Job, replica_type: str | None, index: int | None) -> None:
    """ValueError when ``index`` is not one of the type's replicas: such a pod will never exist, so saying
    "no pod (yet)" would send the user waiting for nothing."""
    if replica_type is None or index is None:
        return
    spec = job.replica_specs.get(replica_type)
    count = DEFAULT_REPLICAS if spec is None or spec.replicas is None else spec.replicas
    if not 0 <= index < count:
        have = f"indexes 0 to {count - 1}" if count > 1 else ("index 0" if count else "no replicas")
        raise ValueError(
            f'job "{job.name}" has {count} {replica_type} replica{"s" if count != 1 else ""} ({have}); '
            f"index {index} is not one of them"
        )


def check_container(job: Job, replica_type: str | None, container: str) -> None:
    """ValueError when a container asked for by name is not in the pods of the replica type (every type
    when ``None``), as kubectl refuses ``logs -c`` of a container the pod does not have; reading another
    container's log instead would answer a question that was not asked."""
    types = [replica_type] if replica_type is not None else list(job.replica_specs)
    for name in types:
        spec = job.replica_specs.get(name)
        if spec is None:
            continue
        pod_spec = spec.template.spec
        names = [ct.name for ct in pod_spec.containers]
        extra = pod_spec.model_extra or {}
        names += [str(ct.get("name")) for ct in extra.get("initContainers") or [] if isinstance(ct, dict)]
        if container not in names:
            raise ValueError(
                f'container "{container}" is not valid for the {name} pods of job "{job.name}": '
                f"use one of {', '.join(names)}"
            )


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


def pending_reason(pod: Mapping[str, Any]) -> str:
    """Why a Pending pod has not started, in the scheduler's or the kubelet's words: an unschedulable pod's
    ``PodScheduled`` message (``0/1 nodes are available: 1 Insufficient cpu.``), else a waiting container's
    reason and message (``ErrImagePull``); empty when it says nothing (yet)."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message") or cond.get("reason") or "not scheduled")
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason and reason != "ContainerCreating":
            message = str(waiting.get("message") or "")
            return f"container {container.get('name')}: {reason}" + (f": {message}" if message else "")
    return ""


def owned_by(objects: list[dict[str, Any]], uid: str | None) -> list[dict[str, Any]]:
    """The objects of the job with ``uid`` (by owner reference; all of them when the uid is unknown). A label
    selector on the job's name also finds another job's of the same name: a TFJob and a PyTorchJob, or a
    ``kubeflow.org`` and a ``training.kubedl.io`` job, may share a name in one namespace."""
    if not uid:
        return objects
    return [obj for obj in objects if uid in by_owner_uid(obj)]
