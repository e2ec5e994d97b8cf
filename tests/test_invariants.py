"""The chaos soak's invariant checker (bench/invariants.py): each rule caught on the event that breaks it, once,
with the events before it, and left quiet by what the controller does right (a replacement after its old pod
finished, a Service re-pointed within the bound, a job's objects gone soon after it)."""

from __future__ import annotations

from typing import Any

from bench.invariants import (
    NO_JOB_STUCK,
    NO_SERVICE_STORM,
    NOTHING_OUTLIVES_JOB,
    ONE_LIVE_POD,
    ONE_POD_PER_PORT,
    RUNNING_MEANS_RUNNING,
    SERVICE_FOLLOWS_POD,
    Checker,
)
from kubedl_py.api.constants import LABEL_JOB_UID, LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def labels(job: str, index: int) -> dict[str, str]:
    return {LABEL_JOB_UID: job, LABEL_REPLICA_TYPE: "worker", LABEL_REPLICA_INDEX: str(index)}


def pod(
    name: str, *, job: str = "j1", index: int = 0, port: int = 20001, node: str = "n1", phase: str = "Running"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "a", "uid": f"uid-{name}", "labels": labels(job, index)},
        "spec": {
            "hostNetwork": True,
            "nodeName": node,
            "containers": [{"name": "main", "ports": [{"name": "pytorchjob-port", "containerPort": port}]}],
        },
        "status": {"phase": phase},
    }


def service(name: str, target: int, *, job: str = "j1", index: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "a", "labels": labels(job, index)},
        "spec": {"ports": [{"name": "pytorchjob-port", "port": 23456, "targetPort": target}]},
    }


def terminating(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2026-12-06T00:00:00Z"}}


def test_two_live_pods_of_one_replica_are_caught_once_and_a_replacement_after_the_old_one_is_not() -> None:
    checker = Checker()
    assert checker.pod("ADDED", pod("w0-a")) == []
    assert checker.pod("MODIFIED", terminating(pod("w0-a"))) == []  # stopping: not live any more
    assert checker.pod("ADDED", pod("w0-b", port=20002)) == []  # its replacement, on a new port
    found = checker.pod("ADDED", pod("w0-c", port=20003))  # a second live pod for the same replica
    assert [v.invariant for v in found] == [ONE_LIVE_POD]
    assert "w0-b" in found[0].message and "w0-c" in found[0].message
    assert found[0].events[-1] == "ADDED pod a/w0-c"
    assert checker.pod("MODIFIED", pod("w0-c", port=20003)) == []  # said once


def test_a_port_of_a_node_held_twice_counts_a_terminating_pod_until_it_is_gone() -> None:
    checker = Checker()
    checker.pod("ADDED", pod("old", index=0, port=20001))
    checker.pod("MODIFIED", terminating(pod("old", index=0, port=20001)))
    found = checker.pod("ADDED", pod("new", index=1, port=20001))  # the old one still runs there
    assert [v.invariant for v in found] == [ONE_POD_PER_PORT]
    fresh = Checker()
    fresh.pod("ADDED", pod("old", index=0, port=20001))
    fresh.pod("DELETED", pod("old", index=0, port=20001))
    assert fresh.pod("ADDED", pod("new", index=1, port=20001)) == []  # gone first: the port is free
    assert fresh.pod("ADDED", pod("elsewhere", index=2, port=20001, node="n2")) == []  # another node


def test_a_service_left_on_the_old_port_is_caught_after_the_bound_and_not_before() -> None:
    clock = Clock()
    checker = Checker(repoint_bound=5.0, clock=clock)
    checker.pod("ADDED", pod("w0-a", port=20001))
    assert checker.service("ADDED", service("j-worker-0", 20001)) == []
    checker.pod("DELETED", pod("w0-a", port=20001))
    checker.pod("ADDED", pod("w0-b", port=20002))  # the replacement runs; the Service still says 20001
    clock.now += 4.0
    assert checker.tick() == []
    clock.now += 2.0
    found = checker.tick()
    assert [v.invariant for v in found] == [SERVICE_FOLLOWS_POD]
    assert "targetPort 20001" in found[0].message and "20002" in found[0].message
    # re-pointed in time: quiet
    quick = Checker(repoint_bound=5.0, clock=clock)
    quick.pod("ADDED", pod("w0-b", port=20002))
    quick.service("ADDED", service("j-worker-0", 20001))
    clock.now += 1.0
    quick.service("MODIFIED", service("j-worker-0", 20002))
    clock.now += 10.0
    assert quick.tick() == []


def test_a_pod_or_service_left_after_its_job_is_caught_after_the_bound() -> None:
    clock = Clock()
    checker = Checker(orphan_bound=30.0, clock=clock)
    checker.pod("ADDED", pod("w0-a"))
    checker.service("ADDED", service("j-worker-0", 20001))
    checker.pod("ADDED", pod("other", job="j2", port=20009))
    checker.job_deleted("j1")
    checker.pod("DELETED", pod("w0-a"))  # the garbage collector took the pod, not the Service
    clock.now += 31.0
    found = checker.tick()
    assert [(v.invariant, v.message.split(" is there")[0]) for v in found] == [
        (NOTHING_OUTLIVES_JOB, "service a/j-worker-0")
    ]


def job(uid: str = "j1", *, workers: int = 2, conditions: tuple[str, ...] = ("Created", "Running")) -> dict[str, Any]:
    return {
        "metadata": {"name": f"job-{uid}", "namespace": "a", "uid": uid},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers}}},
        "status": {"conditions": [{"type": kind, "status": "True"} for kind in conditions]},
    }


def test_a_job_that_says_running_with_a_replica_lacking_a_pod_beyond_the_bound() -> None:
    clock = Clock()
    checker = Checker(running_bound=30.0, clock=clock)
    checker.pod("ADDED", pod("w0", index=0))
    checker.pod("ADDED", pod("w1", index=1, port=20002))
    assert checker.job("ADDED", job()) == []
    checker.pod("DELETED", pod("w1", index=1, port=20002))  # a failover: replaced within the bound is fine
    clock.now += 10.0
    checker.pod("ADDED", pod("w1-b", index=1, port=20003))
    clock.now += 60.0
    assert checker.tick() == []
    checker.pod("DELETED", pod("w1-b", index=1, port=20003))  # never replaced, the job still says Running
    clock.now += 31.0
    found = checker.tick()
    assert [v.invariant for v in found] == [RUNNING_MEANS_RUNNING]
    assert "worker 1" in found[0].message


def test_a_job_unfinished_past_its_deadline_is_stuck_and_a_finished_one_is_not() -> None:
    clock = Clock()
    checker = Checker(stuck_bound=100.0, clock=clock)
    checker.job("ADDED", job("done", workers=0))
    checker.job("ADDED", job("hung", workers=0))
    clock.now += 50.0
    checker.job("MODIFIED", job("done", workers=0, conditions=("Created", "Succeeded")))
    clock.now += 51.0
    assert [(v.invariant, v.message) for v in checker.tick()] == [(NO_JOB_STUCK, "job a/job-hung unfinished 100 s on")]


def test_a_storm_of_service_writes_is_caught_and_a_failovers_few_are_not() -> None:
    clock = Clock()
    checker = Checker(service_writes=20, service_window=10.0, clock=clock)
    checker.service("ADDED", service("j-worker-0", 20001))
    for port in range(20002, 20007):  # five failovers' re-points, one a second
        clock.now += 1.0
        assert checker.service("MODIFIED", service("j-worker-0", port)) == []
    clock.now += 20.0
    found = []
    for step in range(25):  # two controllers fighting over it
        clock.now += 0.1
        found += checker.service("MODIFIED", service("j-worker-0", 20001 + step % 2))
    assert [v.invariant for v in found] == [NO_SERVICE_STORM]


def test_the_soaks_jobs_are_valid_pytorchjobs_of_both_network_modes_from_one_seed() -> None:
    import random

    from bench.chaos import chaos_job
    from kubedl_py.api import parse_job

    assert chaos_job("j0", "chaos-a", random.Random(7)) == chaos_job("j0", "chaos-a", random.Random(7))  # seeded
    rng = random.Random(3)
    jobs = [chaos_job(f"j{i}", "chaos-a", rng) for i in range(40)]
    for document in jobs:
        parse_job(document)  # refused by the models if the soak wrote something the API would refuse
    modes = {(job["metadata"].get("annotations") or {}).get("kubedl.io/network-mode", "pod") for job in jobs}
    assert modes == {"host", "pod"}
