"""When a job has succeeded, per framework.

- PyTorchJob: the Master succeeded; a workers-only job, when every worker succeeded.
- TFJob: the Chief (or Master) succeeded when there is one; otherwise worker 0 (``successPolicy: ""``,
  TensorFlow's convention: worker 0 is the chief) or every worker (``successPolicy: AllWorkers``).
  A job of only PS/Evaluator replicas succeeds when all its pods did.
"""

from __future__ import annotations

from typing import Any

from kubedl_py.api.jobs import PyTorchJob, TFJob

Pods = dict[str, list[dict[str, Any] | None]]


def _succeeded(pod: dict[str, Any] | None) -> bool:
    return pod is not None and (pod.get("status") or {}).get("phase") == "Succeeded"


def _all(pods: list[dict[str, Any] | None]) -> bool:
    return bool(pods) and all(_succeeded(pod) for pod in pods)


def is_succeeded(job: PyTorchJob | TFJob, pods: Pods) -> bool:
    """``pods`` maps replica type to its pods by index (None where a pod is missing)."""
    if isinstance(job, PyTorchJob):
        if pods.get("Master"):
            return _succeeded(pods["Master"][0])
        return _all(pods.get("Worker", []))
    for chief in ("Chief", "Master"):
        if pods.get(chief):
            return _succeeded(pods[chief][0])
    workers = pods.get("Worker", [])
    if workers:
        return _all(workers) if job.spec.success_policy == "AllWorkers" else _succeeded(workers[0])
    return _all([pod for group in pods.values() for pod in group])
