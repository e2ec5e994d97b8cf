"""What a failed pod means for its job, by restart policy (the table is in docs/controller.md).

- ``Always`` / ``OnFailure``: the kubelet restarts the container in place; every restart counts toward
  ``backoffLimit``. A pod that nonetheless ends Failed (eviction, node loss) is recreated.
- ``Never``: a failed replica fails the job.
- ``ExitCode``: the pod runs with ``restartPolicy: Never``; the controller recreates it when the failure is
  retryable — exit codes that mean "killed by a signal" (130 SIGINT, 137 SIGKILL, 143 SIGTERM) or 138
  (SIGUSR1: the user asks for a retry), or a reason of OOMKilled, Evicted, Killed — and fails the job
  on any other exit code. Recreations count toward ``backoffLimit`` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RETRYABLE_EXIT_CODES = frozenset({130, 137, 138, 143})
RETRYABLE_REASONS = frozenset({"OOMKilled", "Evicted", "Killed", "NodeLost", "Preempting", "DeletionByPodGC"})


@dataclass(frozen=True)
class Failure:
    retryable: bool
    exit_code: int | None
    reason: str
    description: str


def _terminated(pod: dict[str, Any], container: str | None) -> dict[str, Any] | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    chosen = [s for s in statuses if container is None or s.get("name") == container] or statuses
    for status in chosen:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode", 0) != 0:
            return dict(terminated)
    for status in chosen:
        terminated = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
        if terminated:
            return dict(terminated)
    return None


def classify(pod: dict[str, Any], container: str | None) -> Failure:
    """Why ``pod`` (phase Failed) failed, and whether the ExitCode policy retries it."""
    status = pod.get("status") or {}
    pod_reason = status.get("reason") or ""
    if pod_reason in RETRYABLE_REASONS:
        return Failure(True, None, pod_reason, f"{pod_reason}: {status.get('message') or 'no message'}")
    terminated = _terminated(pod, container)
    if terminated is None:
        return Failure(False, None, pod_reason or "Unknown", "failed without a container exit status")
    exit_code = terminated.get("exitCode")
    reason = terminated.get("reason") or pod_reason or "Error"
    if reason in RETRYABLE_REASONS:
        return Failure(True, exit_code, reason, f"container {reason} (exit code {exit_code})")
    retryable = exit_code in RETRYABLE_EXIT_CODES
    return Failure(retryable, exit_code, reason, f"exited with code {exit_code}")
