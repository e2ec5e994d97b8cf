"""What a failed pod means for its job, by restart policy (the table is in docs/controller.md).

- ``Always`` / ``OnFailure``: the kubelet restarts the container in place; every restart counts toward
  ``backoffLimit``. A pod that nonetheless ends Failed (eviction, node loss) is recreated.
- ``Never``: a failed replica fails the job.
- ``ExitCode``: the pod runs with ``restartPolicy: Never``; the controller recreates it when the failure is
  retryable — every exit by a signal (128+n: 134 SIGABRT from the NCCL watchdog, 137 SIGKILL, 139 SIGSEGV,
  143 SIGTERM, 138 SIGUSR1 as a user's "retry me"...), as the Training Operator decides (KubeDL retries only
  130, 137, 138 and 143), or a pod reason of OOMKilled, Evicted, Killed — and fails the job on exit codes
  1-127, the program's own errors. Recreations count toward ``backoffLimit`` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: exit codes from 128 up mean "killed by signal n = code - 128": retryable (the Training Operator's rule)
FIRST_SIGNAL_EXIT_CODE = 128
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
    retryable = isinstance(exit_code, int) and exit_code >= FIRST_SIGNAL_EXIT_CODE
    return Failure(retryable, exit_code, reason, f"exited with code {exit_code}")
