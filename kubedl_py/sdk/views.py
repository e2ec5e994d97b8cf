"""What the SDK shows of a job: its state, replica counts, age, progress, log lines, pods and events.

Why apart from the client: these are pure functions and plain dataclasses over the API models, shared by
the client, the CLI's tables and the user's own code, with no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from kubedl_py.api.common import JobCondition, ReplicaFailure
from kubedl_py.api.jobs import Job
from kubedl_py.api.plain import parse_time as plain_time

#: the job condition types ``wait`` understands
CONDITION_TYPES: Final = ("Created", "Running", "Restarting", "Succeeded", "Failed")
FINAL: Final = ("Succeeded", "Failed")


def conditions_of(job: Job) -> list[JobCondition]:
    return list((job.status.conditions if job.status else None) or [])


def true_condition(job: Job, kind: str) -> JobCondition | None:
    return next((cond for cond in conditions_of(job) if cond.type == kind and cond.status == "True"), None)


def job_state(job: Job) -> str:
    """The current state: the last condition that is True (as ``kubectl get`` shows it), else ``Pending``."""
    for cond in reversed(conditions_of(job)):
        if cond.status == "True":
            return cond.type
    return "Pending"


def replica_counts(job: Job) -> tuple[int, int, int]:
    """Pods (active, succeeded, failed), summed over the replica types."""
    statuses = (job.status.replica_statuses if job.status else None) or {}
    return (
        sum(s.active or 0 for s in statuses.values()),
        sum(s.succeeded or 0 for s in statuses.values()),
        sum(s.failed or 0 for s in statuses.values()),
    )


def job_age(job: Job, now: datetime | None = None) -> float | None:
    """Seconds since the job was created, when the server said."""
    created = job.metadata.creation_timestamp
    if not created:
        return None
    when = plain_time(created)
    if when is None:
        return None
    return max(((now or datetime.now(UTC)) - when).total_seconds(), 0.0)


@dataclass(frozen=True)
class JobProgress:
    """One observation of a job during :meth:`AsyncTrainingClient.wait`."""

    job: Job
    state: str
    active: int
    succeeded: int
    failed: int
    elapsed: float

    @classmethod
    def of(cls, job: Job, started: float) -> JobProgress:
        active, succeeded, failed = replica_counts(job)
        return cls(job, job_state(job), active, succeeded, failed, time.monotonic() - started)

    def __str__(self) -> str:
        return (
            f"{self.job.name}: {self.state}  replicas {self.active} active / {self.succeeded} succeeded / "
            f"{self.failed} failed  {self.elapsed:.0f}s"
        )


@dataclass(frozen=True)
class JobEvent:
    """One change seen by :meth:`AsyncTrainingClient.watch`: ``ADDED``, ``MODIFIED`` or ``DELETED``, and the job
    as it is after the change (as it was last, for ``DELETED``)."""

    type: str
    job: Job


@dataclass(frozen=True)
class LogLine:
    """One line of a container's log; ``str()`` prefixes it with ``[pod]``."""

    pod: str
    text: str

    def __str__(self) -> str:
        return f"[{self.pod}] {self.text}"


@dataclass(frozen=True)
class PodInfo:
    """A pod of a job as ``describe`` shows it."""

    name: str
    replica_type: str
    index: int
    node: str
    phase: str
    restarts: int
    host_port: int | None
    service: str | None
    target_port: int | str | None


@dataclass(frozen=True)
class DeviceInfo:
    """One device a pod's DRA claim was allocated, as ``describe`` shows it: the scheduler's choice (driver,
    pool, device, per request of the claim) and what the driver reported (``Ready``, a NIC's interface)."""

    pod: str
    claim: str
    request: str
    driver: str
    pool: str
    device: str
    #: the driver's ``Ready`` condition (None: no status reported yet)
    ready: bool | None = None
    interface: str | None = None


@dataclass(frozen=True)
class PreviousAttempt:
    """The last failed run of one rank, as ``logs --previous`` shows it: from the kubelet (the container's
    previous run, while its pod lives) or from the job's status (the termination message kept when the pod
    was replaced: its last log lines, bounded)."""

    pod: str
    replica_type: str
    index: int
    #: ``kubelet`` (the whole previous log) or ``status`` (the kept termination message)
    source: str
    text: str
    failure: ReplicaFailure | None = None

    def summary(self) -> str:
        """One line: which rank, when, and why it failed."""
        head = f"{self.pod} ({self.replica_type} {self.index})"
        if self.failure is None:
            return f"{head}: previous run of its container"
        return f"{head}: {failure_summary(self.failure)}"


def failure_summary(failure: ReplicaFailure) -> str:
    """``User failure Error, exit code 1, node n1, at 2026-...``: a recorded failure in one line."""
    parts = [f"{failure.failure_class.lower()} failure {failure.reason}"]
    if failure.exit_code is not None:
        parts.append(f"exit code {failure.exit_code}")
    if failure.signal is not None:
        parts.append(f"signal {failure.signal}")
    if failure.node:
        parts.append(f"node {failure.node}")
    if failure.time is not None:
        parts.append(f"at {failure.time.strftime('%Y-%m-%dT%H:%M:%SZ')}")
    return ", ".join(parts)


@dataclass(frozen=True)
class JobDescription:
    """Everything ``describe`` shows: the job, its pods and Services, and recent events (oldest first)."""

    job: Job
    pods: list[PodInfo] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    #: the devices the pods' DRA claims hold; a pod's claim not (yet) allocated has none
    devices: list[DeviceInfo] = field(default_factory=list)
    #: why the claims could not be read (e.g. no right to get resourceclaims), None when they were
    devices_unreadable: str | None = None


#: how many events ``describe`` shows (the newest)
DESCRIBE_EVENTS = 20


def event_time(event: Mapping[str, Any]) -> str:
    """When an event last happened (RFC 3339): ``lastTimestamp``, else ``eventTime``, else creation."""
    meta = event.get("metadata") or {}
    return str(event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp") or "")


def events_of(
    job: Job, pods: list[dict[str, Any]], services: list[dict[str, Any]], events: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The events of this job (by uid), of its pods and Services, and of its earlier pods (replaced in a
    failover: same names, newer than the job) — never those of a previous job of the same name. Oldest
    first."""
    uids = {job.metadata.uid} | {str(o["metadata"].get("uid")) for o in [*pods, *services]}
    created = job.metadata.creation_timestamp or ""
    replica_names = {o["metadata"]["name"] for o in [*pods, *services]}
    prefix = f"{job.name}-"
    mine = []
    for event in events:
        involved = event.get("involvedObject") or {}
        if involved.get("uid") in uids or (
            involved.get("kind") in ("Pod", "Service")
            and (involved.get("name") in replica_names or str(involved.get("name", "")).startswith(prefix))
            and parse_time(event_time(event)) >= parse_time(created)
        ):
            mine.append(event)
    mine.sort(key=_event_order)
    return mine


_EPOCH: Final = datetime.fromtimestamp(0, UTC)


def parse_time(value: str | None) -> datetime:
    """An RFC 3339 time (``Z`` or an offset, any precision) as an aware datetime; the epoch when unreadable, so
    a bad value sorts first instead of failing a read."""
    return plain_time(value) or _EPOCH


def _event_order(event: Mapping[str, Any]) -> tuple[datetime, datetime, int, str]:
    """Oldest first: by when it last happened; events of one second (``lastTimestamp`` has no fraction) by
    when they were first recorded, then by the order the server stored them."""
    meta = event.get("metadata") or {}
    version = str(meta.get("resourceVersion") or "")
    return (
        parse_time(event_time(event)),
        parse_time(str(event.get("firstTimestamp") or meta.get("creationTimestamp") or "")),
        int(version) if version.isdigit() else 0,
        str(meta.get("name") or ""),
    )


def is_finished(obj: Mapping[str, Any]) -> bool:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") in FINAL and cond.get("status") == "True":
            return True
    return False
