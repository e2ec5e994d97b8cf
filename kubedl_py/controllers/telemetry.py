"""The job metrics an operator charts (the Grafana dashboard in ``charts/kubedl-py/dashboards``), read off the caches.

Why from the caches and not from inside the reconcile: every fact here is already in the informers' objects
(a job's conditions, a pod's phase and restart counts, a Service's ``targetPort``), and the reconcile should
stay the steps of the process, not its bookkeeping. Handlers see every transition once, also those that
happened while the controller was away (the informer diffs a re-list), so nothing is counted twice by a
resync, and nothing here costs an API request.

The series, every one labelled by kind only (no job names, no namespaces: their number must not grow with
the number of jobs):

- ``kubedl_jobs_by_state{kind,state}``: jobs by current state (the last True condition; ``New`` before the first
  reconcile), counted at scrape time;
- ``kubedl_job_time_to_running_seconds{kind}``: from a job's creation to its first ``Running`` condition;
- ``kubedl_hostnetwork_failovers_total{kind}``: a host-network job's Service re-pointed to a new host port
  (a replacement pod, or a Service found pointing elsewhere);
- ``kubedl_pod_failures_total{kind,class}``: replicas that failed, as restarts are counted, by the class
  failures.py gives them (the one the failure budgets charge): ``user`` (the program's own exit, also when
  the kubelet restarts it in place; OOM kills too) or ``infrastructure`` (eviction, preemption, a lost node,
  a disruption the cluster announces with the ``DisruptionTarget`` condition);
- ``kubedl_job_recovery_seconds{kind,mode,class}``: from a rank's failure (its container's ``finishedAt``) to its
  program running again (the next run's ``startedAt``): ``mode="in_place"`` when the kubelet restarted it in its
  pod (``failurePolicy.restartMode``), ``recreate`` when a new pod of the same replica runs; per rank (a whole-job
  restart observes the rank that failed); ``in_place_job`` for a whole job restarted in place (``restartScope:
  Job``): from the controller raising the job's attempt to its release, when every rank starts its program
  again (the pods' own restarts are not counted as failures: the job's one restart is).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kubedl_py import agent
from kubedl_py.api import constants as c
from kubedl_py.api.plain import Object, parse_time
from kubedl_py.controllers import status as st
from kubedl_py.controllers.failures.classes import classify, disruption
from kubedl_py.kube.informer import Handler, Informer
from kubedl_py.kube.metrics import Metrics

__all__ = ["JOB_STATES", "POD_FAILURE_CLASSES", "JobTelemetry", "failure_class"]

logger = logging.getLogger(__name__)


#: the states ``kubedl_jobs_by_state`` reports, every one for every kind (0 when none), so a chart has all its lines
JOB_STATES = ("New", st.CREATED, st.RUNNING, st.RESTARTING, st.SUSPENDED, st.SUCCEEDED, st.FAILED)
USER, INFRASTRUCTURE = "user", "infrastructure"
POD_FAILURE_CLASSES = (USER, INFRASTRUCTURE)
#: time to Running: from seconds (an idle cluster) to many minutes (a queue, a gang waiting for room)
TIME_TO_RUNNING_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
#: recovery: from a restart in place (a second or the kubelet's back-off) to a reschedule of a whole gang
RECOVERY_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
RECOVERY_MODES = ("in_place", "in_place_job", "recreate")
#: failed ranks waiting for their replacement to run (the oldest go first past this many)
MAX_AWAITED_RECOVERIES = 10_000


def _conditions(obj: Object) -> list[Object]:
    return list((obj.get("status") or {}).get("conditions") or [])


def failure_class(pod: Object) -> str:
    """``infrastructure`` when the cluster ended the pod, else ``user``: the classes of failures.py, which
    the failure budgets use too, in a metric label's spelling."""
    return classify(pod, None).failure_class.lower()


def _restarts(pod: Object) -> int:
    return sum(int(cs.get("restartCount") or 0) for cs in (pod.get("status") or {}).get("containerStatuses") or [])


def _restarted_whole(pod: Object) -> bool:
    """Whether the pod carries the in-place agent (its restarts are the job's, ``whole_in_place.py``)."""
    return any(cs.get("name") == agent.BARRIER for cs in (pod.get("status") or {}).get("initContainerStatuses") or [])


def _owner_kind(obj: Object) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind"))
    return None


_parse_time = parse_time


class _JobStates(Collector):
    """``kubedl_jobs_by_state{kind,state}``, counted from the job informers when scraped."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.informers: list[tuple[str, Informer]] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        counts: dict[tuple[str, str], int] = {}
        for kind, informer in self.informers:
            for state in JOB_STATES:
                counts.setdefault((kind, state), 0)
            for job in informer.list():
                state = st.state(job.get("status") or {}) or "New"
                counts[(kind, state)] = counts.get((kind, state), 0) + 1
        for (kind, state), count in sorted(counts.items()):
            family.add_metric([kind, state], count)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            self.name, "Jobs by current state (the last True condition), by kind.", labels=["kind", "state"]
        )


class JobTelemetry:
    """Registers the series of the module docstring and the informer handlers that feed them."""

    def __init__(self, metrics: Metrics) -> None:
        self._states = _JobStates(f"{metrics.prefix}_jobs_by_state")
        metrics.collector(self._states.name, self._states)
        self.time_to_running = metrics.histogram(
            "job_time_to_running_seconds",
            "Seconds from a job's creation to its first Running condition, by kind.",
            ["kind"],
            buckets=TIME_TO_RUNNING_BUCKETS,
        )
        self.failovers = metrics.counter(
            "hostnetwork_failovers_total",
            "Services of host-network jobs re-pointed to a new host port (a replacement pod), by kind.",
            ["kind"],
        )
        self.pod_failures = metrics.counter(
            "pod_failures_total",
            "Replicas that failed (pods ended Failed or disrupted, containers restarted in place), by kind and class:"
            " user (the program's own exit, OOM) or infrastructure (eviction, preemption, lost node, disruption).",
            ["kind", "class"],
        )
        self.recovery = metrics.histogram(
            "job_recovery_seconds",
            "Seconds from a rank's failure to its program running again, by kind, mode (in_place: restarted in its"
            " pod; recreate: a new pod) and class.",
            ["kind", "mode", "class"],
            buckets=RECOVERY_BUCKETS,
        )
        self._kinds: set[str] = set()
        #: pods whose end was counted (a Failed pod may also be disrupted): counted once, forgotten when gone
        self._ended: set[str] = set()
        #: failed ranks (job uid, type, index) -> (the failed pod's uid, when it ended, its class)
        self._awaited: dict[tuple[str, str, str], tuple[str, datetime, str]] = {}

    def _kind(self, kind: str) -> None:
        """Series of a kind exist from the start (0), so rates and dashboards see them before anything happens."""
        if kind in self._kinds:
            return
        self._kinds.add(kind)
        self.time_to_running.labels(kind)
        self.failovers.labels(kind)
        for failure in POD_FAILURE_CLASSES:
            self.pod_failures.labels(kind, failure)
            for mode in RECOVERY_MODES:
                self.recovery.labels(kind, mode, failure)

    # ------------------------------------------------------------------------------------------- jobs

    def watch_jobs(self, kind: str, jobs: Informer) -> None:
        self._kind(kind)
        self._states.informers.append((kind, jobs))
        jobs.add_handler(Handler(on_update=lambda old, new: self._job_updated(kind, old, new)))

    def _job_updated(self, kind: str, old: Object, new: Object) -> None:
        self._observe_whole_in_place(kind, old, new)
        if any(c.get("type") == st.RUNNING for c in _conditions(old)):
            return  # only the first Running: a restart's Running again is not a start
        running = st.get_condition(new.get("status") or {}, st.RUNNING)
        if running is None or running.get("status") != "True":
            return
        created = _parse_time((new.get("metadata") or {}).get("creationTimestamp"))
        started = _parse_time(running.get("lastTransitionTime"))
        if created is not None and started is not None:
            self.time_to_running.labels(kind).observe(max(0.0, (started - created).total_seconds()))

    def _observe_whole_in_place(self, kind: str, old: Object, new: Object) -> None:
        """A whole job restarted in place: one failure when its attempt is raised, its recovery when released."""
        before = (old.get("status") or {}).get("restartAttempt") or {}
        after = (new.get("status") or {}).get("restartAttempt") or {}
        if int(after.get("attempt") or 0) > int(before.get("attempt") or 0) and not after.get("unavailable"):
            self.pod_failures.labels(kind, USER).inc()
        if int(after.get("released") or 0) > int(before.get("released") or 0) and before.get("since"):
            since = _parse_time(before.get("since"))
            if since is not None:
                took = (datetime.now(UTC) - since).total_seconds()
                self.recovery.labels(kind, "in_place_job", USER).observe(max(0.0, took))

    # ------------------------------------------------------------------------------------------- pods

    def watch_pods(self, pods: Informer) -> None:
        """Our pods (the owned-pods informer): failures and in-place restarts, by class."""
        pods.add_handler(Handler(on_update=self._pod_updated, on_delete=lambda pod: self._ended.discard(_uid(pod))))

    def _pod_updated(self, old: Object, new: Object) -> None:
        kind = _owner_kind(new)
        if kind is None or kind not in self._kinds:
            return
        # A pod restarted whole in place (its agent's barrier) is one rank of the job's restart, counted once
        # for the job (``_observe_whole_in_place``).
        in_place = 0 if _restarted_whole(new) else _restarts(new) - _restarts(old)
        if in_place > 0:
            self.pod_failures.labels(kind, USER).inc(in_place)
        self._observe_recovery(kind, old, new)
        uid = _uid(new)
        if uid in self._ended:
            return
        phase = (new.get("status") or {}).get("phase")
        was_failed = (old.get("status") or {}).get("phase") == "Failed"
        if (phase == "Failed" and not was_failed) or (disruption(new) is not None and disruption(old) is None):
            self._ended.add(uid)
            failed_as = failure_class(new)
            self.pod_failures.labels(kind, failed_as).inc()
            slot = _slot(new)
            if slot is not None:
                ended = _last_finish(new) or datetime.now(UTC)
                self._awaited[slot] = (uid, ended, failed_as)
                while len(self._awaited) > MAX_AWAITED_RECOVERIES:
                    del self._awaited[next(iter(self._awaited))]

    def _observe_recovery(self, kind: str, old: Object, new: Object) -> None:
        """A container that runs again: restarted in its pod after a failure (``lastState`` says when it ended),
        or the first run of a failed rank's new pod."""
        for before, after in [] if _restarted_whole(new) else _running_again(old, new):
            if int(after.get("restartCount") or 0) > int(before.get("restartCount") or 0):
                last = (after.get("lastState") or {}).get("terminated") or {}
                ended, started = parse_time(last.get("finishedAt")), _started(after)
                if last.get("exitCode") not in (0, None) and ended is not None and started is not None:
                    self.recovery.labels(kind, "in_place", USER).observe(max(0.0, (started - ended).total_seconds()))
        slot = _slot(new)
        awaited = self._awaited.get(slot) if slot is not None else None
        if slot is None or awaited is None or awaited[0] == _uid(new):
            return
        started = min((t for _, after in _running_again(old, new) if (t := _started(after)) is not None), default=None)
        if started is not None:
            del self._awaited[slot]
            _, ended, failed_as = awaited
            self.recovery.labels(kind, "recreate", failed_as).observe(max(0.0, (started - ended).total_seconds()))

    # ------------------------------------------------------------------------------------------- Services

    def watch_services(self, services: Informer) -> None:
        """Our Services: a changed ``targetPort`` of a host-network job's Service is a failover."""
        services.add_handler(Handler(on_update=self._service_updated))

    def _service_updated(self, old: Object, new: Object) -> None:
        kind = _owner_kind(new)
        if kind is None or kind not in self._kinds:
            return
        before, after = _target_ports(old), _target_ports(new)
        if before and after and before != after:
            self.failovers.labels(kind).inc()


def _slot(pod: Object) -> tuple[str, str, str] | None:
    """The replica a pod is (its job's uid, its type, its index), from the contract labels."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    job, replica_type, index = (
        labels.get(key) for key in (c.LABEL_JOB_UID, c.LABEL_REPLICA_TYPE, c.LABEL_REPLICA_INDEX)
    )
    return (str(job), str(replica_type), str(index)) if job and replica_type and index else None


def _statuses(pod: Object) -> dict[str, Object]:
    return {str(s.get("name")): s for s in (pod.get("status") or {}).get("containerStatuses") or []}


def _running_again(old: Object, new: Object) -> Iterator[tuple[Object, Object]]:
    """(before, after) of each container that runs in ``new`` and did not in ``old``."""
    before = _statuses(old)
    for name, after in _statuses(new).items():
        earlier = before.get(name, {})
        if "running" in (after.get("state") or {}) and (
            "running" not in (earlier.get("state") or {}) or earlier.get("restartCount") != after.get("restartCount")
        ):
            yield earlier, after


def _started(status: Object) -> datetime | None:
    return parse_time(((status.get("state") or {}).get("running") or {}).get("startedAt"))


def _last_finish(pod: Object) -> datetime | None:
    """When the failed pod's last container ended."""
    ends = [
        parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt")) for s in _statuses(pod).values()
    ]
    return max((t for t in ends if t is not None), default=None)


def _uid(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _target_ports(service: Object) -> tuple[int, ...]:
    """The numeric target ports of a Service (host-network Services point at a host port by number)."""
    ports = (service.get("spec") or {}).get("ports") or []
    return tuple(int(p["targetPort"]) for p in ports if isinstance(p.get("targetPort"), int))
