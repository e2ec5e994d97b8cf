"""Recovery from what breaks at scale: lost nodes, failures charged to the right budget, hangs, and the evidence.

Why a module apart from the reconcile: each part is a rule a user reads in docs/policies.md and a unit test
pins down (when a pod counts as lost, which failures are recorded once, how a node is avoided, when a job is
stalled); ``handling.py`` applies them and acts on what they find.

**Lost nodes.** Kubernetes does not replace what a lost node ran: after ``node-monitor-grace-period`` the node
is ``Unknown``, its pods are marked not Ready, and once their toleration of the ``unreachable`` taint runs out
(300 s by default) they are deleted *gracefully*, which no kubelet ever confirms, so they stay ``Terminating``
and their names stay taken until someone deletes the Node (the pod garbage collector then force-deletes them)
or taints it ``node.kubernetes.io/out-of-service``. A training job would claim to run with nothing running.
So: a pod of a running job whose node has not been Ready (``Unknown`` or ``False``) for
``failurePolicy.nodeLostTimeoutSeconds`` (default: the controller's ``--node-lost-timeout``, 60 s) is deleted
with grace period 0, a ``NodeLost`` event names the node, and the replica is replaced like any failed one
(host-network mode: a new port, its Service re-pointed first). Force deletion is safe for a rank of a
collective job in a way it is not for a database: its peers have lost it anyway (their collectives fail or
hang without it), it holds no volume the replacement needs, and with ``restartScope: Job`` every rank restarts
into a new rendezvous, so a process still running on a partitioned machine talks to no one.

Only pods that look wrong cost a request: a pod marked not Ready, past its deletion grace, or Pending on a node
for longer than the timeout. For those the node is read with one GET, kept :data:`NODE_CACHE_SECONDS`, so a
node losing the pods of 100 jobs costs one request per few seconds, not one per pod; a healthy cluster costs
none (no node watch: a watch on every node of a large cluster would be the controller's biggest cache).

**Failures and their budgets** (``classes.py`` classifies). Each failure goes into the job's status
once (keyed by the pod's uid and which run of its container failed): the latest of each replica type as
``replicaStatuses.<type>.lastFailure``, the job's last :data:`MAX_FAILURES` in ``status.failures`` (what
``describe`` lists and ``logs --previous`` prints for ranks whose pods are gone), each with its class, reason,
exit code or signal, node, time and termination message. A replacement is charged to ``restarts`` (user) or
``infrastructureRestarts`` (infrastructure) of its type.

**Avoiding a bad node** (opt-in, ``failurePolicy.avoidNodeAfterFailures: N``): a node where N of the job's
recorded failures happened, or that was lost, goes into ``status.avoidedNodes``; every pod the job makes from
then on carries a required node affinity keeping it off those nodes. The list is dropped when the job finishes.

**Hangs** (opt-in, ``progressDeadlineSeconds``): while the job runs, the last log line of its rendezvous host
(the Master/Chief/Launcher, else worker 0) is read with ``tailLines=1&timestamps=true``, at most once per
quarter of the deadline per job (1,000 jobs with a 10-minute deadline: 1,000 / 150 s = 6.7 requests a second,
each a few hundred bytes through the API server from the kubelet). A line older than the deadline (none at all:
the container's start counts) makes the job ``Stalled``; it is restarted whole and charged as an
infrastructure failure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from kubedl_py.api import TrainingJob
from kubedl_py.api.defaults import default_container_index
from kubedl_py.api.plain import Object, parse_time
from kubedl_py.controllers.addressing import replica_name
from kubedl_py.controllers.failures.classes import INFRASTRUCTURE, USER, Failure, FailureClass, bounded
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import NODES

logger = logging.getLogger(__name__)


#: how many failures ``status.failures`` keeps (the oldest go first)
MAX_FAILURES: Final = 10
#: how long a node read for a suspect pod is trusted: one request per node per this, however many pods
NODE_CACHE_SECONDS: Final = 5.0
#: default of ``failurePolicy.nodeLostTimeoutSeconds`` (``--node-lost-timeout``): counted from the moment the node
#: stopped being Ready, which Kubernetes itself decides only after ``node-monitor-grace-period`` (50 s)
DEFAULT_NODE_LOST_TIMEOUT: Final = 60
#: default of ``failurePolicy.infrastructureBackoffLimit`` (``--infrastructure-backoff-limit``)
DEFAULT_INFRASTRUCTURE_BACKOFF_LIMIT: Final = 100
#: the reason of a failure found by the controller on a lost node, and of its event
NODE_LOST: Final = "NodeLost"
STALLED: Final = "Stalled"


# ------------------------------------------------------------------------------------------ failures in status


def failure_entry(
    replica: Replica, pod: Object | None, failure: Failure, *, now: datetime, node: str | None = None
) -> Object:
    """A failure as status keeps it (``ReplicaFailure`` in api/common.py)."""
    meta = (pod or {}).get("metadata") or {}
    entry: Object = {
        "replicaType": replica.replica_type,
        "index": replica.index,
        "class": failure.failure_class,
        "reason": failure.reason,
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "attempt": failure.attempt,
    }
    if meta.get("name"):
        entry["pod"] = meta["name"]
    if meta.get("uid"):
        entry["podUID"] = str(meta["uid"])
    if failure.exit_code is not None:
        entry["exitCode"] = failure.exit_code
    if failure.signal is not None:
        entry["signal"] = failure.signal
    where = node or (pod or {}).get("spec", {}).get("nodeName")
    if where:
        entry["node"] = str(where)
    if failure.message:
        entry["message"] = failure.message
    return entry


def recorded(status: Object, pod_uid: str | None, attempt: int) -> bool:
    """Whether the failure of that run of that pod is in the status already (a reconcile runs many times)."""
    if not pod_uid:
        return False
    for entry in status.get("failures") or []:
        if entry.get("podUID") == pod_uid and int(entry.get("attempt") or 0) == attempt:
            return True
    for entry in (status.get("replicaStatuses") or {}).values():
        last = (entry or {}).get("lastFailure") or {}
        if last.get("podUID") == pod_uid and int(last.get("attempt") or 0) == attempt:
            return True
    return False


def record(status: Object, entry: Object) -> bool:
    """Put a failure in ``status``: its type's ``lastFailure`` and the job's ``failures`` (bounded). False
    when it was there already."""
    if recorded(status, entry.get("podUID"), int(entry.get("attempt") or 0)):
        return False
    failures = [*(status.get("failures") or []), entry]
    status["failures"] = failures[-MAX_FAILURES:]
    replica_type = str(entry.get("replicaType"))
    last = {key: value for key, value in entry.items() if key != "replicaType"}
    status.setdefault("replicaStatuses", {}).setdefault(replica_type, {})["lastFailure"] = last
    return True


def charge(status: Object, replica_type: str, failure_class: FailureClass, restarts: int = 1) -> None:
    """Count a replacement against the budget of its class: ``restarts`` (user) or ``infrastructureRestarts``."""
    entry = status.setdefault("replicaStatuses", {}).setdefault(replica_type, {})
    key = "restarts" if failure_class == USER else "infrastructureRestarts"
    entry[key] = int(entry.get(key) or 0) + restarts


def infrastructure_restarts(status: Object) -> int:
    return sum(
        int((entry or {}).get("infrastructureRestarts") or 0)
        for entry in (status.get("replicaStatuses") or {}).values()
    )


def last_failure_clause(status: Object) -> str:
    """The latest recorded failure as a clause for a message: ``last: Master 0 exited with code 1 on node n``."""
    failures = status.get("failures") or []
    if not failures:
        return ""
    return "; last failure: " + describe_failure(failures[-1])


def describe_failure(entry: Object) -> str:
    """One recorded failure in words (messages, events, ``describe``)."""
    who = f"{entry.get('replicaType')} {entry.get('index')}"
    reason = entry.get("reason") or "Unknown"
    code = entry.get("exitCode")
    if code is not None and reason in ("Error", "Completed"):
        what = f"exited with code {code}"
    elif code is not None:
        what = f"{reason} (exit code {code})"
    else:
        what = str(reason)
    node = entry.get("node")
    return f"{who} {what} ({str(entry.get('class', '')).lower()} failure{f', node {node}' if node else ''})"


# ------------------------------------------------------------------------------------------------- nodes


@dataclass(frozen=True)
class NodeState:
    """What the controller knows of a node: Ready or not, and since when not."""

    name: str
    ready: bool
    #: when it stopped being Ready (the Ready condition's lastTransitionTime); None while Ready
    since: datetime | None = None
    #: the Node object is gone (deleted): its pods are lost for good
    gone: bool = False
    #: the Ready condition as words: ``Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)``
    why: str = ""


def node_state(node: Object, now: datetime) -> NodeState:
    name = str((node.get("metadata") or {}).get("name") or "")
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") != "Ready":
            continue
        status = str(condition.get("status") or "Unknown")
        if status == "True":
            return NodeState(name, True)
        since = parse_time(condition.get("lastTransitionTime")) or now
        why = f"{status} ({condition.get('reason') or 'no reason'}: {condition.get('message') or 'no message'})"
        return NodeState(name, False, since, why=why)
    return NodeState(name, False, now, why="Unknown (no Ready condition)")


class NodeHealth:
    """Nodes read on demand (GET) for suspect pods, each kept :data:`NODE_CACHE_SECONDS`. Without the right
    to read nodes (an install without it), nothing is judged lost: it says so once, and jobs wait as before."""

    def __init__(
        self, client: KubeClient, *, ttl: float = NODE_CACHE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.clock = clock
        self._cache: dict[str, tuple[float, NodeState | None]] = {}
        self._forbidden_said = False

    async def of(self, name: str, now: datetime) -> NodeState | None:
        cached = self._cache.get(name)
        if cached is not None and cached[0] > self.clock():
            return cached[1]
        state: NodeState | None
        try:
            state = node_state(await self.client.get(NODES, name), now)
        except errors.NotFound:
            state = NodeState(name, False, now, gone=True, why="deleted")
        except errors.Forbidden as exc:
            if not self._forbidden_said:
                logger.warning("cannot read nodes, so pods on lost nodes are not replaced: %s", exc)
                self._forbidden_said = True
            state = None
        self._cache[name] = (self.clock() + self.ttl, state)
        return state


def node_of(pod: Object) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def suspect(pod: Object, now: datetime, timeout: float) -> bool:
    """Whether a pod might be on a lost node, so its node is worth a read: marked not Ready while Running
    (what the node lifecycle controller does to a lost node's pods, and stays so once taint eviction deletes
    them), past the end of its deletion grace (no kubelet confirmed it), or Pending on a node for longer than
    the timeout (counted from when it was bound, else from its creation)."""
    if not node_of(pod):
        return False
    meta = pod.get("metadata") or {}
    deleted = parse_time(meta.get("deletionTimestamp"))
    if deleted is not None and now >= deleted:
        return True
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Running":
        return any(c.get("type") == "Ready" and c.get("status") != "True" for c in status.get("conditions") or [])
    if phase == "Pending" and deleted is None:
        bound = bound_at(pod) or parse_time(meta.get("creationTimestamp")) or now
        return (now - bound).total_seconds() >= timeout
    return False


def bound_at(pod: Object) -> datetime | None:
    """When the scheduler put the pod on its node (``PodScheduled`` True's transition), if it says. A pod that
    waited a minute for the scheduler is not a minute on its node: counted from its creation, every pod of a
    large job the scheduler took its time over looked lost and cost its node a read (issue 53)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def node_lost_timeout(job: TrainingJob, default: int) -> int:
    policy = job.run_policy.failure_policy
    value = policy.node_lost_timeout_seconds if policy is not None else None
    return default if value is None else value


def infrastructure_backoff_limit(job: TrainingJob, default: int) -> int:
    policy = job.run_policy.failure_policy
    value = policy.infrastructure_backoff_limit if policy is not None else None
    return default if value is None else value


@dataclass
class LostPod:
    """A pod on a node that has not been Ready: replaced once ``remaining`` is 0."""

    replica: Replica
    pod: Object
    node: NodeState
    #: seconds until the timeout runs out (0: now)
    remaining: float


async def lost_pods(seen: Observation, health: NodeHealth, lost_after: int) -> list[LostPod]:
    """The pods of the job (live or terminating) on nodes that are not Ready, with the time left before each
    is deleted. A node is read only when one of its pods is :func:`suspect`; every pod of the job on a node
    found not Ready counts, suspect or not."""
    candidates: list[tuple[Replica, Object]] = []
    for replica in seen.replicas.values():
        for pod in (replica.pod, replica.leaving):
            ended = (pod or {}).get("status", {}).get("phase") in ("Succeeded", "Failed")
            if pod is not None and node_of(pod) and not ended:
                candidates.append((replica, pod))
    nodes = {node_of(pod) for _, pod in candidates if suspect(pod, seen.now, lost_after)}
    states: dict[str, NodeState] = {}
    for name in sorted(nodes):
        state = await health.of(name, seen.now)
        if state is not None and not state.ready:
            states[name] = state
    found = []
    for replica, pod in candidates:
        state = states.get(node_of(pod))
        if state is None:
            continue
        waited = 0.0 if state.since is None else (seen.now - state.since).total_seconds()
        remaining = 0.0 if state.gone else max(0.0, lost_after - waited)
        found.append(LostPod(replica, pod, state, remaining))
    return found


def deletion_due(pod: Object, now: datetime) -> float | None:
    """Seconds until a terminating pod's grace runs out (when it becomes :func:`suspect`); None if not due."""
    deleted = parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    if deleted is None or now >= deleted:
        return None
    return (deleted - now).total_seconds()


# ---------------------------------------------------------------------------------------------- avoidance


def avoid_after(job: TrainingJob) -> int | None:
    policy = job.run_policy.failure_policy
    return policy.avoid_node_after_failures if policy is not None else None


def note_node(status: Object, node: str | None, *, threshold: int | None, lost: bool, now: datetime) -> str | None:
    """With ``avoidNodeAfterFailures`` set: add ``node`` to ``status.avoidedNodes`` when it was lost or has
    seen ``threshold`` of the recorded failures. Returns why it was added (None: not added)."""
    if threshold is None or not node:
        return None
    avoided = status.get("avoidedNodes") or []
    if any(entry.get("node") == node for entry in avoided):
        return None
    count = sum(1 for entry in status.get("failures") or [] if entry.get("node") == node)
    if lost:
        why = "the node was lost"
    elif count >= threshold:
        why = f"{count} of the job's failures happened there (failurePolicy.avoidNodeAfterFailures {threshold})"
    else:
        return None
    status["avoidedNodes"] = [*avoided, {"node": node, "reason": why, "time": now.strftime("%Y-%m-%dT%H:%M:%SZ")}]
    return why


def keep_off(pod: Object, nodes: list[str]) -> None:
    """Add a required node affinity keeping ``pod`` off ``nodes`` (by name), to every term the template has
    (terms are ORed: the condition must be in each)."""
    if not nodes:
        return
    spec = pod.setdefault("spec", {})
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    expression = {"key": "metadata.name", "operator": "NotIn", "values": sorted(nodes)}
    required["nodeSelectorTerms"] = [
        {**term, "matchFields": [*(term.get("matchFields") or []), expression]} for term in terms
    ]


def avoided_nodes(status: Object) -> list[str]:
    return [str(entry.get("node")) for entry in status.get("avoidedNodes") or [] if entry.get("node")]


# --------------------------------------------------------------------------------------------------- hangs


def rendezvous_replica(seen: Observation) -> Replica | None:
    """The replica whose log tells whether the job progresses: the kind's master (Master, Chief, Launcher),
    else worker 0, else the first replica."""
    framework = seen.job.framework
    for replica_type in (*framework.master_types, framework.worker_type):
        replica = seen.replicas.get((replica_type, 0))
        if replica is not None:
            return replica
    return next(iter(seen.replicas.values()), None)


def last_line_time(text: str) -> datetime | None:
    """The timestamp of the last line of a ``timestamps=true`` log (RFC 3339, nanoseconds allowed)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    stamp = lines[-1].split(" ", 1)[0]
    if "." in stamp:  # Python parses at most microseconds
        head, _, tail = stamp.partition(".")
        digits = "".join(ch for ch in tail if ch.isdigit())
        zone = tail[len(digits) :]
        stamp = f"{head}.{digits[:6] or '0'}{zone}"
    return parse_time(stamp)


def started_at(pod: Object, container: str | None) -> datetime | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if container is not None and status.get("name") != container:
            continue
        running = (status.get("state") or {}).get("running") or {}
        return parse_time(running.get("startedAt"))
    return None


class Progress:
    """When each job's rendezvous host was last asked for its log (at most once per quarter deadline)."""

    def __init__(self, client: KubeClient, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._next: dict[str, float] = {}
        #: the last line seen per job key, quoted in the Stalled message
        self.last_line: dict[str, str] = {}

    def forget(self, key: str) -> None:
        self._next.pop(key, None)
        self.last_line.pop(key, None)

    async def stalled(self, seen: Observation, deadline: int) -> tuple[Replica, str] | None:
        """The replica and why, when the job has written nothing for ``deadline`` seconds; else None (and
        the job is requeued for its next check)."""
        key = seen.key
        period = max(deadline / 4, 1.0)
        due = self._next.get(key)
        if due is not None and due > self.clock():
            seen.want_requeue(due - self.clock())
            return None
        replica = rendezvous_replica(seen)
        pod = replica.pod if replica is not None else None
        if replica is None or pod is None or (pod.get("status") or {}).get("phase") != "Running":
            return None
        containers = (pod.get("spec") or {}).get("containers") or []
        container = (
            containers[default_container_index(containers, seen.job.framework)].get("name") if containers else None
        )
        self._next[key] = self.clock() + period
        seen.want_requeue(period)
        meta = pod.get("metadata") or {}
        try:
            text = await self.client.read_log(
                str(meta.get("name")), namespace=seen.job.namespace, container=container, tail_lines=1, timestamps=True
            )
        except (errors.NotFound, errors.BadRequest):
            return None
        except errors.Forbidden as exc:
            logger.warning("%s: cannot read logs for progressDeadlineSeconds: %s", key, exc)
            return None
        last = last_line_time(text)
        if text.strip():
            self.last_line[key] = bounded(text.strip().split(" ", 1)[-1]) or ""
        since = last or started_at(pod, container)
        if since is None:
            return None
        quiet = (seen.now - since).total_seconds()
        if quiet < deadline:
            self._next[key] = self.clock() + min(period, max(deadline - quiet, 1.0))
            seen.want_requeue(self._next[key] - self.clock())
            return None
        what = "its last log line" if last is not None else "its start, with no log line since"
        name = replica_name(seen.job.name, replica.replica_type, replica.index)
        return replica, (
            f"{replica.replica_type} {replica.index} (pod {name}) has written nothing for {int(quiet)}s since {what}, "
            f"over progressDeadlineSeconds ({deadline}s)"
        )


def stalled_failure(replica: Replica, pod: Object | None, message: str, last_line: str) -> Failure:
    detail = f"{message}; last line: {last_line}" if last_line else message
    restarts = 0
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        restarts = max(restarts, int(status.get("restartCount") or 0))
    return Failure(True, None, STALLED, message, INFRASTRUCTURE, None, bounded(detail), attempt=restarts)


def lost_failure(lost: LostPod) -> Failure:
    node = lost.node
    since = f" since {node.since.strftime('%Y-%m-%dT%H:%M:%SZ')}" if node.since is not None and not node.gone else ""
    message = (
        f"node {node.name} was deleted" if node.gone else f"node {node.name} has not been Ready{since}: {node.why}"
    )
    restarts = 0
    for status in (lost.pod.get("status") or {}).get("containerStatuses") or []:
        restarts = max(restarts, int(status.get("restartCount") or 0))
    return Failure(True, None, NODE_LOST, message, INFRASTRUCTURE, None, message, attempt=restarts)


def when(now: datetime, seconds: float) -> str:
    return (now + timedelta(seconds=seconds)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
