"""In-place restarts, as rules: which of a job's live pods restarted a container since the last look, and what
to say when a node could not restart one in place (docs/policies.md, ``failurePolicy.restartMode``).

The kubelet restarts a container in its pod (``OnFailure``, ``Always``, or the restart rule of an ``ExitCode``
replica, ``pods.build_pod``) without a word to the controller beyond the pod's ``restartCount``. So that each
restart is charged once, as it happens, and none twice after a controller restart, the job's status keeps
how many of each live pod's restarts are counted (``status.inPlaceCounted``, by pod uid, dropped with the pod).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kubedl_py.api.plain import Object, parse_time
from kubedl_py.controllers.failures.classes import Failure
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.podstate import in_place_restarts

#: where the status keeps the restarts counted of each live pod (by uid)
COUNTED = "inPlaceCounted"


@dataclass(frozen=True)
class Restarted:
    """A live pod whose containers restarted ``new`` times since they were last counted (``restarts`` in all)."""

    replica: Replica
    pod: Object
    restarts: int
    new: int


def restarted(seen: Observation) -> list[Restarted]:
    """The job's live pods with restarts not yet counted; ``status.inPlaceCounted`` is brought up to date (the
    caller charges them in the same status write)."""
    before: dict[str, int] = dict(seen.status.get(COUNTED) or {})
    counted: dict[str, int] = {}
    found: list[Restarted] = []
    for replica in seen.replicas.values():
        pod = replica.pod
        uid = str(((pod or {}).get("metadata") or {}).get("uid") or "")
        if pod is None or not uid:
            continue
        restarts, known = in_place_restarts(pod), before.get(uid, 0)
        if max(restarts, known):
            counted[uid] = max(restarts, known)
        if restarts > known:
            found.append(Restarted(replica, pod, restarts, restarts - known))
    if counted:
        seen.status[COUNTED] = counted
    else:
        seen.status.pop(COUNTED, None)
    return found


def restarted_message(item: Restarted, failure: Failure | None) -> str:
    """What the ``RestartedInPlace`` event and the ``Restarting`` condition say."""
    who = f"{item.replica.replica_type} {item.replica.index}"
    what = failure.description if failure is not None else "ended"
    name = (item.pod.get("metadata") or {}).get("name")
    return f"{who} {what}; restarted in place in pod {name} (restart {item.restarts} of its containers)."


def unavailable_message(replica: Replica, failure: Failure) -> str:
    """What the ``InPlaceRestartUnavailable`` event says: a retryable exit the pod's restart rule should have
    restarted in place ended the pod instead, as its node's kubelet does not apply container restart rules
    (before Kubernetes 1.35, or ContainerRestartRules off); the pod is recreated as before."""
    node = ((replica.pod or {}).get("spec") or {}).get("nodeName") or "unknown"
    return (
        f"{replica.replica_type} {replica.index} {failure.description} on node {node}, whose kubelet did not "
        "restart it in place (container restart rules need Kubernetes 1.35+ with ContainerRestartRules on); "
        "recreating its pod (failurePolicy.restartMode)."
    )


#: how long a container restarted in place may wait in the kubelet's crash-loop back-off (10 s doubling to
#: 5 minutes) before its pod is recreated instead: a new pod starts at once, and may land on a better node
BACK_OFF_BOUND_SECONDS = 60.0


def stuck_in_back_off(pod: Object, container: str | None, now: datetime) -> float | None:
    """Seconds the pod's ``container`` has waited in ``CrashLoopBackOff`` since its last run ended, when that is
    past :data:`BACK_OFF_BOUND_SECONDS`; else None."""
    for entry in (pod.get("status") or {}).get("containerStatuses") or []:
        if container is not None and entry.get("name") != container:
            continue
        waiting = (entry.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") != "CrashLoopBackOff":
            return None
        ended = parse_time(((entry.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
        if ended is None:
            return None
        waited = (now - ended).total_seconds()
        return waited if waited >= BACK_OFF_BOUND_SECONDS else None
    return None
