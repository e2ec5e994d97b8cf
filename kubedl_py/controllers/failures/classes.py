"""What a failed pod means for its job: whose fault it was (its class), whether it is retried, and the evidence.

**Classes** (docs/policies.md, "Failure classes"). A failure is *infrastructure* when the cluster ended the
pod: the kubelet evicted it (node pressure) or rejected it at admission (``OutOfcpu``, ``NodeAffinity``,
``UnexpectedAdmissionError``), a graceful node shutdown ended it, the pod carries Kubernetes'
``DisruptionTarget`` condition (preemption by the scheduler, the Eviction API, taint eviction, the pod garbage
collector), its node was lost (``NodeLost``: the controller found it so, see recovery.py), or the job hung
(``Stalled``). Everything else is *user*: the container exited on its own, was OOM-killed, or could not start
as written. Each class spends its own budget: user failures ``backoffLimit`` (job-wide and per replica type),
infrastructure failures ``failurePolicy.infrastructureBackoffLimit``, so a long job on a busy cluster does not
die of other people's events.

**Retries**, by restart policy (the table is in docs/controller.md):

- ``Always`` / ``OnFailure``: the kubelet restarts the container in place; every restart counts toward
  ``backoffLimit``. A pod that nonetheless ends Failed (eviction, node loss) is recreated.
- ``Never``: a failed replica fails the job, unless the failure is an infrastructure one: that pod is
  recreated (the program did nothing wrong).
- ``ExitCode``: the pod runs with ``restartPolicy: Never``; the controller recreates it when the failure is
  retryable — every exit by a signal (128+n: 134 SIGABRT from the NCCL watchdog, 137 SIGKILL, 139 SIGSEGV,
  143 SIGTERM, 138 SIGUSR1 as a user's "retry me"...), as the Training Operator decides (KubeDL retries only
  130, 137, 138 and 143), a pod reason of OOMKilled, Evicted, Killed, or any infrastructure failure — and
  fails the job on exit codes 1-127, the program's own errors.

**Evidence**: the container's termination message (with ``terminationMessagePolicy: FallbackToLogsOnError``,
which the controller sets on the framework's container, the kubelet fills it with the last log lines of a
failed container), bounded to :data:`MAX_MESSAGE` characters, goes into the job's status before the pod is
deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from kubedl_py.api.plain import Object

FailureClass = Literal["User", "Infrastructure"]
USER: Final = "User"
INFRASTRUCTURE: Final = "Infrastructure"

#: exit codes from 128 up mean "killed by signal n = code - 128": retryable (the Training Operator's rule)
FIRST_SIGNAL_EXIT_CODE = 128
RETRYABLE_REASONS = frozenset({"OOMKilled", "Evicted", "Killed", "NodeLost", "Preempting", "DeletionByPodGC"})
#: pod reasons that say the cluster ended (or refused) the pod, not its program: the kubelet's eviction and
#: admission rejections, graceful node shutdown, and the controller's own NodeLost and Stalled
INFRASTRUCTURE_REASONS: Final = frozenset(
    {
        "Evicted",
        "Preempting",
        "NodeLost",
        "DeletionByPodGC",
        "DeletionByTaintManager",
        "Terminated",
        "NodeShutdown",
        "Shutdown",
        "UnexpectedAdmissionError",
        "NodeAffinity",
        "NodeName",
        "InvalidNodeInfo",
        "ContainerStatusUnknown",
        "Stalled",
    }
)
#: the kubelet's admission rejections for a resource the node lacks: ``OutOfcpu``, ``OutOfnvidia.com/gpu``
OUT_OF_PREFIX: Final = "OutOf"
#: the condition Kubernetes puts on a pod it is about to end for reasons outside the pod (preemption, the
#: Eviction API, taint eviction, the pod garbage collector, the kubelet)
DISRUPTION_TARGET: Final = "DisruptionTarget"
#: the most of a termination message kept in the job's status (the kubelet's own cap for the log fallback is
#: 2,048 bytes or 80 lines)
MAX_MESSAGE: Final = 2048


@dataclass(frozen=True)
class Failure:
    retryable: bool
    exit_code: int | None
    reason: str
    description: str
    failure_class: FailureClass = USER
    #: the signal that ended the container (exit code 128+n), if one did
    signal: int | None = None
    #: the container's termination message, bounded (None: it left none)
    message: str | None = None
    #: which run of the container failed (0: the first; in-place restarts count up)
    attempt: int = 0

    @property
    def infrastructure(self) -> bool:
        return self.failure_class == INFRASTRUCTURE


def is_infrastructure_reason(reason: str | None) -> bool:
    return bool(reason) and (reason in INFRASTRUCTURE_REASONS or str(reason).startswith(OUT_OF_PREFIX))


def disruption(pod: Object) -> Object | None:
    """The pod's ``DisruptionTarget=True`` condition, if Kubernetes is ending it for a disruption."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == DISRUPTION_TARGET and condition.get("status") == "True":
            found: Object = condition
            return found
    return None


def bounded(message: Any) -> str | None:
    """A termination message as kept in status: its last :data:`MAX_MESSAGE` characters, the end being
    where a failure shows."""
    if not isinstance(message, str) or not message.strip():
        return None
    text = message.rstrip("\n")
    return text if len(text) <= MAX_MESSAGE else "..." + text[-(MAX_MESSAGE - 3) :]


def signal_of(exit_code: int | None) -> int | None:
    if isinstance(exit_code, int) and exit_code > FIRST_SIGNAL_EXIT_CODE:
        return exit_code - FIRST_SIGNAL_EXIT_CODE
    return None


def _statuses(pod: Object, container: str | None) -> list[Object]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return [s for s in statuses if container is None or s.get("name") == container] or statuses


def _terminated(pod: Object, container: str | None) -> tuple[Object, int] | None:
    """The container's latest terminated state (its failed run, else the run before) and that run's number."""
    chosen = _statuses(pod, container)
    for status in chosen:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode", 0) != 0:
            return dict(terminated), int(status.get("restartCount") or 0)
    for status in chosen:
        restarts = int(status.get("restartCount") or 0)
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return dict(terminated), restarts
        terminated = (status.get("lastState") or {}).get("terminated")
        if terminated:
            return dict(terminated), max(restarts - 1, 0)
    return None


def classify(pod: Object, container: str | None) -> Failure:
    """Why ``pod`` (phase Failed, or ended by a disruption) failed, its class, and whether the ExitCode
    policy retries it."""
    status = pod.get("status") or {}
    pod_reason = status.get("reason") or ""
    disrupted = disruption(pod)
    found = _terminated(pod, container)
    terminated = found[0] if found is not None else {}
    # The run that failed is the container's current one: earlier runs were in-place restarts, recorded
    # as such (in_place_failure), so a pod-level failure never shares their key.
    attempt = max((int(s.get("restartCount") or 0) for s in _statuses(pod, container)), default=0)
    exit_code = terminated.get("exitCode") if found is not None else None
    message = bounded(terminated.get("message"))
    signal = signal_of(exit_code)
    if is_infrastructure_reason(pod_reason) or disrupted is not None:
        reason = pod_reason if is_infrastructure_reason(pod_reason) else str((disrupted or {}).get("reason") or "")
        reason = reason or DISRUPTION_TARGET
        why = status.get("message") or (disrupted or {}).get("message") or "no message"
        return Failure(True, exit_code, reason, f"{reason}: {why}", INFRASTRUCTURE, signal, message, attempt=attempt)
    if pod_reason in RETRYABLE_REASONS:
        description = f"{pod_reason}: {status.get('message') or 'no message'}"
        return Failure(True, exit_code, pod_reason, description, USER, signal, message, attempt=attempt)
    if found is None:
        return Failure(False, None, pod_reason or "Unknown", "failed without a container exit status")
    reason = terminated.get("reason") or pod_reason or "Error"
    if is_infrastructure_reason(reason):
        description = f"container {reason} (exit code {exit_code})"
        return Failure(True, exit_code, reason, description, INFRASTRUCTURE, signal, message, attempt=attempt)
    if reason in RETRYABLE_REASONS:
        description = f"container {reason} (exit code {exit_code})"
        return Failure(True, exit_code, reason, description, USER, signal, message, attempt=attempt)
    retryable = isinstance(exit_code, int) and exit_code >= FIRST_SIGNAL_EXIT_CODE
    return Failure(retryable, exit_code, reason, f"exited with code {exit_code}", USER, signal, message, attempt)


def in_place_failure(pod: Object, container: str | None) -> Failure | None:
    """The latest in-place restart of a running pod's container (``lastState.terminated`` with a non-zero
    exit), as a user failure: the kubelet restarted the program after it ended on its own."""
    for status in _statuses(pod, container):
        restarts = int(status.get("restartCount") or 0)
        terminated = (status.get("lastState") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if not restarts or not terminated or code in (0, None):
            continue
        reason = str(terminated.get("reason") or "Error")
        description = f"exited with code {code}" if reason == "Error" else f"container {reason} (exit code {code})"
        return Failure(
            True, code, reason, description, USER, signal_of(code), bounded(terminated.get("message")), restarts - 1
        )
    return None


#: the reason the kubelet gives every container of a pod it restarts whole (RestartAllContainers, Kubernetes
#: 1.37), the one whose exit triggered it included once its container is removed
RESTARTING_ALL_CONTAINERS: Final = "RestartingAllContainers"


def whole_restart_failure(pod: Object, container: str | None) -> Failure:
    """Why a pod restarted whole in place: its container's exit while the kubelet restarts the pod (state
    ``terminated``), or after (``lastState``); a user failure. Once the kubelet has removed the container its
    status shows only ``RestartingAllContainers``: the exit was one the pod's restart rule restarts."""
    for status in _statuses(pod, container):
        restarts = int(status.get("restartCount") or 0)
        for terminated, run in (
            ((status.get("state") or {}).get("terminated") or {}, restarts),
            ((status.get("lastState") or {}).get("terminated") or {}, max(0, restarts - 1)),
        ):
            code = terminated.get("exitCode")
            if not terminated or code in (0, None) or terminated.get("reason") == RESTARTING_ALL_CONTAINERS:
                continue
            reason = str(terminated.get("reason") or "Error")
            description = f"exited with code {code}" if reason == "Error" else f"container {reason} (exit code {code})"
            return Failure(
                True, code, reason, description, USER, signal_of(code), bounded(terminated.get("message")), run
            )
        return Failure(
            True,
            None,
            RESTARTING_ALL_CONTAINERS,
            "ended with an exit its restart rule restarts (the kubelet's status no longer shows which)",
            USER,
            attempt=max(0, restarts - 1),
        )
    return Failure(True, None, RESTARTING_ALL_CONTAINERS, "restarted its pod", USER)
