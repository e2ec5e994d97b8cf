"""The job's failures as its status keeps them, and what each costs: the one place a failure is recorded and
charged to the budget of its class (``backoffLimit``, per replica type, ``infrastructureBackoffLimit``;
docs/policies.md, "Failure classes and their budgets"). ``handling.py`` and ``whole_job.py`` decide when.
"""

from __future__ import annotations

import logging
from typing import Any

from kubedl_py.api import Framework
from kubedl_py.api.defaults import default_container_index
from kubedl_py.api.plain import Object
from kubedl_py.controllers.failures import recovery
from kubedl_py.controllers.failures.classes import Failure
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.outcomes import JobFailure

logger = logging.getLogger(__name__)


def reaches_backoff_limit(restarts: int, limit: int) -> bool:
    """The job fails when its restarts reach ``backoffLimit`` (so a limit of N allows N-1 restarts), and on
    any restart with a limit of 0: how the Training Operator and KubeDL count (``restarts >= limit``)."""
    return restarts >= max(limit, 1)


def restarts_of(seen: Observation, replica_type: str | None = None) -> int:
    """Restarts charged to the program, of the job or of one type: pods replaced and in-place restarts, each
    counted as it happened (``FailureHandling.count_in_place``)."""
    statuses = seen.status.get("replicaStatuses") or {}
    return sum(
        int(value.get("restarts") or 0)
        for name, value in statuses.items()
        if replica_type is None or name == replica_type
    )


class Ledger:
    def __init__(self, *, framework: Framework, infrastructure_backoff_limit: int) -> None:
        self.framework = framework
        self.infrastructure_backoff_limit = infrastructure_backoff_limit

    def limit_reached(self, seen: Observation, *, more: int = 0, replica_type: str | None = None) -> str | None:
        """Which restart limit fails the job (the job-wide ``backoffLimit``, or the ``backoffLimit`` of
        ``replica_type`` or of any type), counting ``more`` restarts about to happen, as a clause for the
        message; None while neither is reached."""
        job = seen.job
        limit = job.run_policy.backoff_limit
        restarts = restarts_of(seen) + more
        if limit is not None and reaches_backoff_limit(restarts, limit):
            if more:
                return f"{restarts} restarts would reach backoffLimit {limit}"
            return f"has restarted {restarts} times, reaching backoffLimit {limit}"
        for name, spec in job.replica_specs.items():
            if spec.backoff_limit is None or (replica_type is not None and name != replica_type):
                continue
            count = restarts_of(seen, name) + more
            if reaches_backoff_limit(count, spec.backoff_limit):
                own = spec.backoff_limit
                if more:
                    return f"{count} restarts of its {name} replicas would reach their backoffLimit {own}"
                return f"its {name} replicas have restarted {count} times, reaching their backoffLimit {own}"
        return None

    def check_budget(self, seen: Observation, replica: Replica, failure: Failure) -> None:
        """Fail the job (JobFailure) when replacing after ``failure`` would reach the limit of its class."""
        job = seen.job
        who = f"{replica.replica_type} {replica.index}"
        if failure.infrastructure:
            limit = recovery.infrastructure_backoff_limit(job, self.infrastructure_backoff_limit)
            count = recovery.infrastructure_restarts(seen.status) + 1
            if reaches_backoff_limit(count, limit):
                message = (
                    f"{job.kind} {seen.key}: {who} {failure.description}; {count} infrastructure restarts would "
                    f"reach failurePolicy.infrastructureBackoffLimit {limit}."
                )
                raise JobFailure("InfrastructureBackoffLimitExceeded", message)
            return
        reached = self.limit_reached(seen, more=1, replica_type=replica.replica_type)
        if reached is not None:
            message = f"{job.kind} {seen.key}: {who} {failure.description}; {reached}."
            raise JobFailure("BackoffLimitExceeded", message)

    def main_container(self, pod: Object) -> str | None:
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            return None
        name = containers[default_container_index(containers, self.framework)].get("name")
        return str(name) if name else None

    def record(self, seen: Observation, replica: Replica, pod: Object | None, failure: Failure, **extra: Any) -> bool:
        """Put a failure in the job's status (once per pod and run, recovery.record) and, with
        ``avoidNodeAfterFailures``, note its node. True when it was new."""
        entry = recovery.failure_entry(replica, pod, failure, now=seen.now, **extra)
        if not recovery.record(seen.status, entry):
            return False
        threshold = recovery.avoid_after(seen.job)
        why = recovery.note_node(
            seen.status, entry.get("node"), threshold=threshold, lost=failure.reason == recovery.NODE_LOST, now=seen.now
        )
        if why is not None:
            logger.info("%s: new pods avoid node %s: %s", seen.key, entry.get("node"), why)
        return True

    def count_restart(self, seen: Observation, replica: Replica, failure: Failure) -> None:
        """Charge a replacement to its class's budget (the pod's in-place restarts were counted as they
        happened: ``count_in_place``)."""
        recovery.charge(seen.status, replica.replica_type, failure.failure_class)
