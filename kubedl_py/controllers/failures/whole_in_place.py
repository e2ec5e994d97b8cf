"""The whole job restarted in place (``restartScope: Job``, ``restartMode`` Auto or InPlace): the rules.

The protocol is ``kubedl_py.agent``'s: each pod carries the job's attempt and the released attempt as
annotations, a barrier init container holds the program until its attempt is released, and a watcher sidecar
restarts the pod whole (``RestartAllContainers``) once the job is past the pod's attempt. This module is the
controller's half, as pure functions of a job's status and pods (``handling.py`` acts on them):

- **state** (``status.restartAttempt``): the job's ``attempt``, the ``released`` one, ``since`` (when the
  attempt was raised), and per live pod (by uid) the attempt it was at and its restarts then (``pods``);
- **where a pod is**: at least the attempt recorded for it plus the restarts of its barrier since (every
  restart of the pod whole ends an attempt: ``agent.next_attempt``); a pod not yet recorded was made at its
  ``kubedl.io/created-attempt``;
- **a failure**: while the attempt is released, a pod past it restarted whole (its program exited with a
  code its rule restarts, or something else of the pod did): the job moves to the next attempt;
- **the release**: once every replica's pod is at the job's attempt (so none runs a program of the one
  before: the kubelet removes a pod's containers before it counts the restart);
- **fallbacks**: a replica without a live pod, a pod that has ended, or an attempt not reached within
  :data:`RESTART_TIMEOUT_SECONDS`: the job is recreated as before; a pod the scheduler cannot place because no
  node declares ``RestartAllContainersOnContainerExits`` (``restartMode: Auto`` only): the job's pods are made
  without the agent from then on (``unavailable``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from kubedl_py import agent
from kubedl_py.api import TrainingJob
from kubedl_py.api.plain import Object, parse_time
from kubedl_py.controllers.failures.policies import restart_mode, whole_job_restart
from kubedl_py.controllers.observation import Observation, Replica

#: where the job's status keeps the state
STATE: Final = "restartAttempt"
#: how long every pod of the job may take to restart whole before the job is recreated instead: the kubelet
#: removes a pod's containers at once (no grace period), so this bounds a node that does not act on the signal
RESTART_TIMEOUT_SECONDS: Final = 60.0
#: the feature a node must declare (``node.status.declaredFeatures``; the scheduler's NodeDeclaredFeatures
#: plugin places a pod with a RestartAllContainers rule only on such a node)
NODE_FEATURE: Final = "RestartAllContainersOnContainerExits"
#: what the scheduler says of a node lacking a feature the pod needs (kube-scheduler 1.37
#: ``nodedeclaredfeatures``)
UNDECLARED: Final = "didn't match Pod's required features"


@dataclass
class State:
    attempt: int = 0
    released: int = 0
    since: str | None = None
    #: pod uid -> (attempt it was at, its barrier's restarts then)
    pods: dict[str, tuple[int, int]] | None = None
    #: why the job's pods are made without the agent (restartMode Auto on a cluster that cannot)
    unavailable: str | None = None

    @property
    def restarting(self) -> bool:
        return self.attempt > self.released


def wanted(job: TrainingJob) -> bool:
    """Whether the job restarts whole in place when it can: ``restartScope: Job`` not asking to be recreated."""
    return whole_job_restart(job) and restart_mode(job) != "Recreate"


def state_of(status: Object) -> State:
    raw = status.get(STATE) or {}
    pods = {str(uid): (int(v[0]), int(v[1])) for uid, v in (raw.get("pods") or {}).items() if len(v) == 2}
    return State(
        attempt=int(raw.get("attempt") or 0),
        released=int(raw.get("released") or 0),
        since=raw.get("since"),
        pods=pods,
        unavailable=raw.get("unavailable"),
    )


def store(status: Object, state: State) -> None:
    raw: dict[str, Any] = {"attempt": state.attempt, "released": state.released}
    if state.since:
        raw["since"] = state.since
    if state.pods:
        raw["pods"] = {uid: [a, r] for uid, (a, r) in sorted(state.pods.items())}
    if state.unavailable:
        raw["unavailable"] = state.unavailable
    status[STATE] = raw


def applies(job: TrainingJob, status: Object) -> bool:
    """Whether the job's pods carry the agent: wanted, and not found unavailable."""
    return wanted(job) and not state_of(status).unavailable


def pod_annotations(status: Object) -> dict[str, str]:
    """What a new pod of the job carries: the job's attempt (also as the one it is made at) and the released."""
    state = state_of(status)
    return {
        agent.ANNOTATION_ATTEMPT: str(state.attempt),
        agent.ANNOTATION_RELEASED: str(state.released),
        agent.ANNOTATION_CREATED: str(state.attempt),
    }


def restarts_whole(pod: Object) -> int:
    """How many times the kubelet restarted the pod whole: its barrier's ``restartCount`` (a plain init
    container that succeeded runs again only then)."""
    for entry in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if entry.get("name") == agent.BARRIER:
            return int(entry.get("restartCount") or 0)
    return 0


def _uid(pod: Object) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def attempt_of(pod: Object, state: State) -> int:
    """The least attempt the pod is at (see the module docstring)."""
    recorded = (state.pods or {}).get(_uid(pod))
    if recorded is None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        try:
            recorded = (int(annotations.get(agent.ANNOTATION_CREATED) or 0), 0)
        except ValueError:
            recorded = (0, 0)
    attempt, restarts = recorded
    return attempt + max(0, restarts_whole(pod) - restarts)


def live(replica: Replica) -> bool:
    pod = replica.pod
    if pod is None or replica.terminating or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def restarting_now(pod: Object) -> bool:
    """Whether the kubelet is restarting the pod whole for an exit of one of its containers (the pod's
    ``AllContainersRestarting`` condition) and that container still shows its exit: seen before the restart is
    counted, so the job moves on at once and with the exit code as evidence."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "AllContainersRestarting" and c.get("status") == "True" for c in conditions):
        return False
    for entry in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (entry.get("state") or {}).get("terminated") or {}
        if terminated and terminated.get("exitCode") not in (0, None):
            return True
    return False


def failed_pods(seen: Observation, state: State) -> list[Replica]:
    """While the attempt is released: the replicas whose pod restarted whole since, or is restarting whole for
    an exit (a failure)."""
    return [
        replica
        for replica in seen.replicas.values()
        if replica.pod is not None
        and live(replica)
        and (attempt_of(replica.pod, state) > state.released or restarting_now(replica.pod))
    ]


def cannot_restart(seen: Observation) -> str | None:
    """Why the job cannot restart in place now (a replica without a live pod of its own), or None."""
    for replica in seen.replicas.values():
        if replica.pod is None or replica.terminating:
            return f"{replica.replica_type} {replica.index} has no pod"
        if not live(replica):
            return f"{replica.replica_type} {replica.index}'s pod has ended ({replica.phase or 'terminating'})"
    return None


def behind(seen: Observation, state: State) -> list[Replica]:
    """While restarting: the replicas whose pod has not reached the job's attempt yet."""
    return [
        replica
        for replica in seen.replicas.values()
        if replica.pod is None or attempt_of(replica.pod, state) < state.attempt
    ]


def stale(seen: Observation, key: str, value: int, told: dict[tuple[str, str], str]) -> list[Object]:
    """The job's live pods whose annotation ``key`` is not ``value`` yet, less those already told so whose
    change the cache does not show yet (``told``, by pod uid and key: kept until the cache shows it), so
    each pod is patched once."""
    found = []
    for replica in seen.replicas.values():
        if replica.pod is None or not live(replica):
            continue
        uid = _uid(replica.pod)
        annotations = (replica.pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(key) == str(value):
            told.pop((uid, key), None)
        elif told.get((uid, key)) != str(value):
            told[(uid, key)] = str(value)
            found.append(replica.pod)
    return found


def time_left(state: State, now: datetime) -> float:
    """Seconds the restart under way may still take before the job is recreated instead (0: past the bound)."""
    since = parse_time(state.since) if state.since else None
    if since is None:
        return RESTART_TIMEOUT_SECONDS
    return max(0.0, RESTART_TIMEOUT_SECONDS - (now - since).total_seconds())


def release_attempt(seen: Observation, state: State) -> None:
    """Every pod is at the job's attempt: record each where it is, the attempt released."""
    state.released = state.attempt
    state.since = None
    state.pods = {
        _uid(r.pod): (state.attempt, restarts_whole(r.pod)) for r in seen.replicas.values() if r.pod is not None
    }


def reset(status: Object) -> None:
    """The job is recreated whole (a fallback, or a failure in place cannot answer): its new pods start at the
    job's attempt, released at once, as no old pod is left when they are made."""
    state = state_of(status)
    if not (status.get(STATE) or {}):
        return
    state.released, state.since, state.pods = state.attempt, None, {}
    store(status, state)


def undeclared(pod: Object) -> str | None:
    """The scheduler's refusal of a pod because no node declares what it needs, or None."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = str(condition.get("message") or "")
            if UNDECLARED in message:
                return message
    return None
