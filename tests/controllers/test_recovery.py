"""The rules of controllers/recovery.py as pure functions: when a pod looks lost, how failures are recorded
once and charged to their class, how a node is avoided, and how a hang is read from a log line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kubedl_py.controllers.failures import recovery
from kubedl_py.controllers.failures.classes import Failure
from kubedl_py.controllers.observation import Replica

NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)


def stamp(seconds: float) -> str:
    return (NOW + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    phase: str = "Running", *, ready: bool = True, deleted: float | None = None, created: float = -3600
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "j-worker-0", "uid": "u1", "creationTimestamp": stamp(created)}
    if deleted is not None:
        meta["deletionTimestamp"] = stamp(deleted)
    return {
        "metadata": meta,
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


@pytest.mark.parametrize(
    ("candidate", "looks_lost"),
    [
        (pod(), False),  # healthy: no request for its node
        (pod(ready=False), True),  # marked not Ready: what the node lifecycle controller does
        (pod(deleted=30), False),  # a graceful deletion still within its grace
        (pod(deleted=30, ready=False), True),  # taint eviction of a pod already marked not Ready
        (pod(deleted=-1), True),  # past its grace: no kubelet confirmed it
        (pod("Pending", ready=False, created=-10), False),  # starting
        (pod("Pending", ready=False, created=-120), True),  # bound long ago and never started
        (pod("Succeeded", ready=False), False),
    ],
)
def test_which_pods_are_worth_a_look_at_their_node(candidate: dict[str, Any], looks_lost: bool) -> None:
    assert recovery.suspect(candidate, NOW, 60) is looks_lost
    del candidate["spec"]["nodeName"]
    assert not recovery.suspect(candidate, NOW, 60)  # not scheduled: no node to lose


def test_a_pending_pod_counts_its_time_on_the_node_from_its_binding() -> None:
    """A pod the scheduler bound late is not long on its node: created two minutes ago, bound 10 s ago, it
    costs no read of its node; bound two minutes ago, it does."""
    late = pod("Pending", ready=False, created=-120)
    late["status"]["conditions"].append({"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(-10)})
    assert not recovery.suspect(late, NOW, 60)
    late["status"]["conditions"][-1]["lastTransitionTime"] = stamp(-90)
    assert recovery.suspect(late, NOW, 60)


def test_a_nodes_readiness_and_since_when() -> None:
    node = {
        "metadata": {"name": "n1"},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "Unknown"},
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastTransitionTime": stamp(-42),
                },
            ]
        },
    }
    state = recovery.node_state(node, NOW)
    assert (state.ready, state.since) == (False, NOW - timedelta(seconds=42))
    assert state.why == "Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)"
    node["status"]["conditions"][1]["status"] = "True"
    assert recovery.node_state(node, NOW).ready


def failure(**fields: Any) -> Failure:
    values: dict[str, Any] = {
        "retryable": True,
        "exit_code": 1,
        "reason": "Error",
        "description": "exited with code 1",
        "failure_class": "User",
        "attempt": 0,
    } | fields
    return Failure(**values)


def test_a_failure_is_recorded_once_and_the_list_is_bounded() -> None:
    status: dict[str, Any] = {}
    replica = Replica("Worker", 1)
    failed = pod()
    entry = recovery.failure_entry(replica, failed, failure(message="boom"), now=NOW)
    assert entry == {
        "replicaType": "Worker",
        "index": 1,
        "class": "User",
        "reason": "Error",
        "time": stamp(0),
        "attempt": 0,
        "pod": "j-worker-0",
        "podUID": "u1",
        "exitCode": 1,
        "node": "n1",
        "message": "boom",
    }
    assert recovery.record(status, entry)
    assert not recovery.record(status, dict(entry))  # the same run of the same pod: once
    assert status["replicaStatuses"]["Worker"]["lastFailure"]["message"] == "boom"
    for n in range(1, 15):
        later = recovery.failure_entry(replica, failed, failure(attempt=n), now=NOW)
        assert recovery.record(status, later)
    assert len(status["failures"]) == recovery.MAX_FAILURES
    assert status["failures"][-1]["attempt"] == 14
    assert status["replicaStatuses"]["Worker"]["lastFailure"]["attempt"] == 14


def test_each_class_spends_its_own_budget() -> None:
    status: dict[str, Any] = {}
    recovery.charge(status, "Worker", "Infrastructure")
    recovery.charge(status, "Worker", "Infrastructure")
    recovery.charge(status, "Master", "User", 3)
    assert status["replicaStatuses"] == {"Worker": {"infrastructureRestarts": 2}, "Master": {"restarts": 3}}
    assert recovery.infrastructure_restarts(status) == 2


def test_a_node_is_avoided_after_enough_failures_or_at_once_when_lost() -> None:
    status: dict[str, Any] = {"failures": [{"node": "n1"}, {"node": "n2"}]}
    assert recovery.note_node(status, "n1", threshold=None, lost=True, now=NOW) is None  # not opted in
    assert recovery.note_node(status, "n1", threshold=2, lost=False, now=NOW) is None
    status["failures"].append({"node": "n1"})
    assert recovery.note_node(status, "n1", threshold=2, lost=False, now=NOW) is not None
    assert recovery.note_node(status, "n3", threshold=2, lost=True, now=NOW) == "the node was lost"
    assert recovery.avoided_nodes(status) == ["n1", "n3"]
    assert recovery.note_node(status, "n1", threshold=2, lost=True, now=NOW) is None  # once


def test_keeping_a_pod_off_nodes_joins_every_term_of_its_own() -> None:
    own = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}
    body: dict[str, Any] = {
        "spec": {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [own, own]}}
            }
        }
    }
    recovery.keep_off(body, ["n2", "n1"])
    terms = body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    not_in = {"key": "metadata.name", "operator": "NotIn", "values": ["n1", "n2"]}
    assert terms["nodeSelectorTerms"] == [{**own, "matchFields": [not_in]}, {**own, "matchFields": [not_in]}]
    empty: dict[str, Any] = {}
    recovery.keep_off(empty, [])
    assert empty == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-27T11:59:30.123456789Z step 10 loss 0.5\n", NOW - timedelta(seconds=29.876544)),
        ("2026-11-27T11:59:00Z one\n2026-11-27T11:59:40Z two\n", NOW - timedelta(seconds=20)),
        ("", None),
    ],
)
def test_the_time_of_the_last_log_line(text: str, expected: datetime | None) -> None:
    assert recovery.last_line_time(text) == expected
