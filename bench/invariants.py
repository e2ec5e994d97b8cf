"""Invariants of kubedl-py's objects, checked on every watch event (issue 55, the checker's first part).

The chaos soak (issue 55) feeds this checker every event of the pods, Services and jobs it watches and calls
:meth:`Checker.tick` between events; each call returns the violations it found, once per invariant and
subject, each with the events that came before it (what a replay needs). Nothing here injects faults or talks
to a cluster: the checker is plain state over the objects, so each rule is pinned down by a unit test
(tests/test_invariants.py) and a controller that breaks one is caught the moment the event shows it.

``tests/reliability/invariants.py`` (``InvariantMonitor``, the chaos tests of ``make test``) checks three
stricter safety rules of the same objects from its own watches; the two should become one, here.

The invariants so far (the rest of issue 55's list: budgets by class, namespaces, a deposed leader's writes,
ranks wired to strangers' objects, need the soak's knowledge of what it injected and are not written yet):

- **one live pod per replica**: never two pods of one replica (job uid, type, index) that are neither
  terminating nor finished;
- **one pod per host port**: never two pods of a node on the host network that declare the same port, counted
  from the moment a pod is bound until it is gone or finished (a terminating pod still holds its port);
- **Services follow their pods**: a replica's Service whose ``targetPort`` is not the port of the same name on
  the replica's live, Running pod for longer than ``repoint_bound`` seconds;
- **nothing outlives its job**: a pod or Service of a deleted job still there ``orphan_bound`` seconds after;
- **Running means running**: a job whose ``Running`` condition is True while one of its replicas has no live
  pod for longer than ``running_bound`` seconds;
- **no job stuck**: a job neither Succeeded nor Failed ``stuck_bound`` seconds after the checker first saw it;
- **no Service write storm**: more than ``service_writes`` changes of one job's Services within
  ``service_window`` seconds (an adversary found a controller fight that rewrote them without end).
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubedl_py.api.constants import LABEL_JOB_UID, LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE

Object = dict[str, Any]
#: (namespace, job uid, replica type, index)
ReplicaKey = tuple[str, str, str, str]

ONE_LIVE_POD = "one live pod per replica"
ONE_POD_PER_PORT = "one pod per host port"
SERVICE_FOLLOWS_POD = "Services follow their pods"
NOTHING_OUTLIVES_JOB = "nothing outlives its job"
RUNNING_MEANS_RUNNING = "Running means running"
NO_JOB_STUCK = "no job stuck"
NO_SERVICE_STORM = "no Service write storm"


@dataclass(frozen=True)
class Violation:
    invariant: str
    #: the checker's clock when it was found
    at: float
    message: str
    #: the events before it, oldest first (``ADDED pod ns/name``...)
    events: tuple[str, ...]


def _meta(obj: Object) -> Object:
    meta: Object = obj.get("metadata") or {}
    return meta


def replica_of(obj: Object) -> ReplicaKey | None:
    """The replica a pod or Service of kubedl-py's belongs to, from its labels (None: not a replica's)."""
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    uid, rtype, index = labels.get(LABEL_JOB_UID), labels.get(LABEL_REPLICA_TYPE), labels.get(LABEL_REPLICA_INDEX)
    if not (uid and rtype and index is not None):
        return None
    return (str(meta.get("namespace") or ""), str(uid), str(rtype), str(index))


def _finished(pod: Object) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def live(pod: Object) -> bool:
    """Neither terminating nor finished: the pod the replica has now."""
    return not _meta(pod).get("deletionTimestamp") and not _finished(pod)


def host_ports(pod: Object) -> list[tuple[str, int]]:
    """(node, port) of every port a bound, unfinished host-network pod holds."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not spec.get("hostNetwork") or not node or _finished(pod):
        return []
    return [
        (str(node), int(port.get("hostPort") or port["containerPort"]))
        for container in spec.get("containers") or []
        for port in container.get("ports") or []
        if port.get("containerPort")
    ]


def condition_true(job: Object, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in (job.get("status") or {}).get("conditions") or []
    )


def replica_counts(job: Object) -> dict[str, int]:
    """``{type (lower case, as the pods' label): replicas}`` from the job's ``*ReplicaSpecs`` (any kind)."""
    counts: dict[str, int] = {}
    for key, specs in (job.get("spec") or {}).items():
        if key.endswith("ReplicaSpecs") and isinstance(specs, dict):
            for rtype, spec in specs.items():
                counts[str(rtype).lower()] = int((spec or {}).get("replicas", 1))
    return counts


def named_port(pod: Object, name: str) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == name and port.get("containerPort"):
                return int(port["containerPort"])
    return None


@dataclass
class Checker:
    """Each event updates indexes by replica, by node port and by job, and checks only what it touched; so a
    soak's thousands of objects cost each event a few dictionary lookups, not a scan."""

    repoint_bound: float = 5.0
    orphan_bound: float = 30.0
    running_bound: float = 30.0
    stuck_bound: float = 900.0
    service_writes: int = 20
    service_window: float = 10.0
    clock: Callable[[], float] = time.monotonic
    history: int = 50
    _pods: dict[str, Object] = field(default_factory=dict)  # by uid
    _services: dict[str, Object] = field(default_factory=dict)  # by namespace/name
    _by_replica: dict[ReplicaKey, set[str]] = field(default_factory=dict)  # pod uids
    _services_of: dict[ReplicaKey, set[str]] = field(default_factory=dict)  # Service keys
    _ports: dict[tuple[str, int], set[str]] = field(default_factory=dict)  # pod uids holding a node's port
    _deleted_jobs: dict[str, float] = field(default_factory=dict)  # job uid -> when it was deleted
    _mismatch: dict[str, tuple[float, str]] = field(default_factory=dict)  # Service key -> (since, what)
    _jobs: dict[str, Object] = field(default_factory=dict)  # by uid
    _missing: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (job uid, type, index) -> since
    _deadlines: list[tuple[float, str]] = field(default_factory=list)  # heap of (stuck deadline, job uid)
    _service_writes: dict[str, deque[float]] = field(default_factory=dict)  # job uid -> times of changes
    _said: set[tuple[str, str]] = field(default_factory=set)
    _events: deque[str] = field(default_factory=deque)

    # ------------------------------------------------------------------------------------------ events

    def pod(self, event: str, pod: Object) -> list[Violation]:
        uid = str(_meta(pod).get("uid") or "")
        self._note(event, "pod", pod)
        old = self._pods.pop(uid, None)
        if old is not None:
            self._index_pod(uid, old, add=False)
        if event != "DELETED":
            self._pods[uid] = pod
            self._index_pod(uid, pod)
        found = [*self._one_live_pod(pod), *self._one_pod_per_port(pod)] if event != "DELETED" else []
        replica = replica_of(pod)
        if replica is not None:
            for key in self._services_of.get(replica, set()):
                self._compare(key)
            self._count_missing(replica[1])
        return [*found, *self.tick()]

    def service(self, event: str, service: Object) -> list[Violation]:
        meta = _meta(service)
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        self._note(event, "service", service)
        old = self._services.pop(key, None)
        if old is not None and (replica := replica_of(old)) is not None:
            self._services_of.get(replica, set()).discard(key)
        found: list[Violation] = []
        if event == "DELETED":
            self._mismatch.pop(key, None)
        else:
            self._services[key] = service
            if (replica := replica_of(service)) is not None:
                self._services_of.setdefault(replica, set()).add(key)
                if event == "MODIFIED":
                    found += self._count_service_write(replica[1], key)
            self._compare(key)
        return [*found, *self.tick()]

    def job(self, event: str, job: Object) -> list[Violation]:
        uid = str(_meta(job).get("uid") or "")
        self._note(event, "job", job)
        if event == "DELETED":
            self._jobs.pop(uid, None)
            self._count_missing(uid)
            return self.job_deleted(uid)
        if uid not in self._jobs:
            heapq.heappush(self._deadlines, (self.clock() + self.stuck_bound, uid))
        self._jobs[uid] = job
        self._count_missing(uid)
        return self.tick()

    def job_deleted(self, uid: str) -> list[Violation]:
        self._events.append(f"DELETED job uid={uid}")
        self._deleted_jobs.setdefault(uid, self.clock())
        return self.tick()

    def tick(self) -> list[Violation]:
        """The time-bound invariants, as of now (call it between events too)."""
        return [
            *self._services_follow_pods(),
            *self._nothing_outlives_jobs(),
            *self._running_means_running(),
            *self._no_job_stuck(),
        ]

    # -------------------------------------------------------------------------------------- invariants

    def _one_live_pod(self, pod: Object) -> list[Violation]:
        replica = replica_of(pod)
        if replica is None or not live(pod):
            return []
        names = sorted(
            str(_meta(self._pods[uid]).get("name")) for uid in self._by_replica.get(replica, set())
            if live(self._pods[uid])
        )  # fmt: skip
        if len(names) < 2:
            return []
        return self._say(ONE_LIVE_POD, "/".join(replica), f"replica {'/'.join(replica)} has live pods {names}")

    def _one_pod_per_port(self, pod: Object) -> list[Violation]:
        found: list[Violation] = []
        for node, port in host_ports(pod):
            holders = sorted(str(_meta(self._pods[uid]).get("name")) for uid in self._ports.get((node, port), set()))
            if len(holders) > 1:
                found += self._say(ONE_POD_PER_PORT, f"{node}:{port}", f"port {port} of node {node} held by {holders}")
        return found

    def _compare(self, key: str) -> None:
        """Whether Service ``key`` points at its replica's live Running pod; a mismatch is timed from now."""
        service = self._services.get(key)
        replica = replica_of(service) if service is not None else None
        pod = None
        for uid in self._by_replica.get(replica, set()) if replica is not None else ():
            candidate = self._pods[uid]
            if live(candidate) and (candidate.get("status") or {}).get("phase") == "Running":
                pod = candidate
        wrong = []
        for port in ((service or {}).get("spec") or {}).get("ports") or []:
            target = port.get("targetPort")
            want = named_port(pod, str(port.get("name"))) if pod is not None else None
            if want is not None and isinstance(target, int) and target != want:
                wrong.append(f"targetPort {target}, its pod {_meta(pod or {}).get('name')} listens on {want}")
        if not wrong:
            self._mismatch.pop(key, None)
        elif key not in self._mismatch:
            self._mismatch[key] = (self.clock(), "; ".join(wrong))
        else:
            self._mismatch[key] = (self._mismatch[key][0], "; ".join(wrong))

    def _services_follow_pods(self) -> list[Violation]:
        now = self.clock()
        found: list[Violation] = []
        for key, (since, wrong) in list(self._mismatch.items()):
            if now - since > self.repoint_bound:
                found += self._say(SERVICE_FOLLOWS_POD, key, f"Service {key}: {wrong} for {now - since:.1f} s")
        return found

    def _nothing_outlives_jobs(self) -> list[Violation]:
        now = self.clock()
        late = {uid for uid, deleted in self._deleted_jobs.items() if now - deleted > self.orphan_bound}
        if not late:
            return []
        found: list[Violation] = []
        objects = [("pod", p) for p in self._pods.values()] + [("service", s) for s in self._services.values()]
        for what, obj in objects:
            replica = replica_of(obj)
            if replica is not None and replica[1] in late:
                meta = _meta(obj)
                name = f"{meta.get('namespace')}/{meta.get('name')}"
                after = now - self._deleted_jobs[replica[1]]
                found += self._say(
                    NOTHING_OUTLIVES_JOB, f"{what} {name}", f"{what} {name} is there {after:.1f} s after its job"
                )
        return found

    def _count_missing(self, uid: str) -> None:
        """Which replicas of job ``uid`` lack a live pod while it says Running (each timed from when first seen)."""
        job = self._jobs.get(uid)
        namespace = str(_meta(job).get("namespace") or "") if job is not None else ""
        wanted: set[tuple[str, str, str]] = set()
        if job is not None and condition_true(job, "Running") and not condition_true(job, "Restarting"):
            for rtype, count in replica_counts(job).items():
                for index in range(count):
                    uids = self._by_replica.get((namespace, uid, rtype, str(index)), set())
                    if not any(live(self._pods[pod]) for pod in uids):
                        wanted.add((uid, rtype, str(index)))
        for key in [key for key in self._missing if key[0] == uid and key not in wanted]:
            del self._missing[key]
        for key in wanted:
            self._missing.setdefault(key, self.clock())

    def _running_means_running(self) -> list[Violation]:
        now = self.clock()
        found: list[Violation] = []
        for (uid, rtype, index), since in list(self._missing.items()):
            if now - since > self.running_bound:
                name = _meta(self._jobs.get(uid) or {}).get("name")
                message = f"job {name} says Running, its {rtype} {index} has had no live pod for {now - since:.1f} s"
                found += self._say(RUNNING_MEANS_RUNNING, f"{uid}/{rtype}/{index}", message)
        return found

    def _no_job_stuck(self) -> list[Violation]:
        now = self.clock()
        found: list[Violation] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, uid = heapq.heappop(self._deadlines)
            job = self._jobs.get(uid)
            if job is None or condition_true(job, "Succeeded") or condition_true(job, "Failed"):
                continue
            meta = _meta(job)
            message = f"job {meta.get('namespace')}/{meta.get('name')} unfinished {self.stuck_bound:.0f} s on"
            found += self._say(NO_JOB_STUCK, uid, message)
        return found

    def _count_service_write(self, uid: str, key: str) -> list[Violation]:
        now = self.clock()
        times = self._service_writes.setdefault(uid, deque())
        times.append(now)
        while times and now - times[0] > self.service_window:
            times.popleft()
        if len(times) <= self.service_writes:
            return []
        message = f"{len(times)} changes of job {uid}'s Services within {self.service_window:.0f} s (last: {key})"
        return self._say(NO_SERVICE_STORM, uid, message)

    # ------------------------------------------------------------------------------------------ helpers

    def _index_pod(self, uid: str, pod: Object, *, add: bool = True) -> None:
        """File pod ``uid`` under its replica and the node ports it holds (``add=False``: take it out)."""
        replica = replica_of(pod)
        places = [
            *([self._by_replica.setdefault(replica, set())] if replica is not None else []),
            *(self._ports.setdefault(held, set()) for held in host_ports(pod)),
        ]
        for place in places:
            if add:
                place.add(uid)
            else:
                place.discard(uid)

    def _note(self, event: str, what: str, obj: Object) -> None:
        meta = _meta(obj)
        self._events.append(f"{event} {what} {meta.get('namespace')}/{meta.get('name')}")
        while len(self._events) > self.history:
            self._events.popleft()

    def _say(self, invariant: str, subject: str, message: str) -> list[Violation]:
        if (invariant, subject) in self._said:
            return []
        self._said.add((invariant, subject))
        return [Violation(invariant, self.clock(), message, tuple(self._events))]
