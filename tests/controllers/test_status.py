"""Condition transitions: order, transition times, and no change when nothing changed."""

from __future__ import annotations

import copy
from typing import Any

from kubedl_py.controllers import status as s


def test_lifecycle_keeps_current_state_last() -> None:
    st: dict[str, Any] = {}
    assert s.set_condition(st, s.CREATED, reason="JobCreated", message="created", now="t1")
    assert s.set_condition(st, s.RUNNING, reason="JobRunning", message="running", now="t2")
    assert s.state(st) == s.RUNNING
    assert s.set_condition(st, s.RESTARTING, reason="JobRestarting", message="worker 1 restarting", now="t3")
    assert s.state(st) == s.RESTARTING
    assert s.get_condition(st, s.RUNNING) == {
        "type": "Running",
        "status": "False",
        "reason": "JobRestarting",
        "message": "worker 1 restarting",
        "lastUpdateTime": "t3",
        "lastTransitionTime": "t3",
    }
    assert s.set_condition(st, s.RUNNING, reason="JobRunning", message="running", now="t4")
    assert s.set_condition(st, s.SUCCEEDED, reason="JobSucceeded", message="done", now="t5")
    # Time order, as the Training Operator keeps them: the replaced ones turned False where they stood.
    assert [(c["type"], c["status"]) for c in st["conditions"]] == [
        ("Created", "True"),
        ("Restarting", "False"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ]
    assert s.is_finished(st)
    assert not s.is_true(st, s.RUNNING)


def test_setting_the_same_condition_again_changes_nothing() -> None:
    st: dict[str, Any] = {}
    s.set_condition(st, s.CREATED, reason="JobCreated", message="created", now="t1")
    s.set_condition(st, s.RUNNING, reason="JobRunning", message="running", now="t2")
    snapshot = [dict(c) for c in st["conditions"]]
    assert not s.set_condition(st, s.RUNNING, reason="JobRunning", message="running", now="t9")
    assert st["conditions"] == snapshot


def test_new_message_moves_update_time_not_transition_time() -> None:
    st: dict[str, Any] = {}
    s.set_condition(st, s.RUNNING, reason="JobRunning", message="a", now="t1")
    assert s.set_condition(st, s.RUNNING, reason="JobRunning", message="b", now="t2")
    cond = s.get_condition(st, s.RUNNING)
    assert cond is not None
    assert (cond["lastTransitionTime"], cond["lastUpdateTime"], cond["message"]) == ("t1", "t2", "b")


def test_false_condition_does_not_become_the_displayed_state() -> None:
    st: dict[str, Any] = {}
    s.set_condition(st, s.CREATED, reason="JobCreated", message="created", now="t1")
    s.set_condition(st, s.RUNNING, true=False, reason="HostPortsExhausted", message="no ports", now="t2")
    assert s.state(st) == s.CREATED
    assert st["conditions"][-1]["type"] == "Created"


def test_timestamp_format() -> None:
    from datetime import UTC, datetime

    assert s.timestamp(datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC)) == "2026-01-02T03:04:05Z"


def test_only_a_change_of_replica_counts_may_wait() -> None:
    base: dict[str, Any] = {
        "conditions": [{"type": "Created", "status": "True"}],
        "startTime": "2026-11-23T10:00:00Z",
        "replicaStatuses": {"Worker": {"active": 1, "succeeded": 0, "failed": 0, "restarts": 1, "selector": "a=b"}},
    }

    def changed(**worker: int) -> dict[str, Any]:
        new = copy.deepcopy(base)
        new["replicaStatuses"]["Worker"].update(worker)
        return new

    assert s.only_counts_changed(base, changed(active=2))
    assert s.only_counts_changed(base, changed(active=0, succeeded=1))
    assert not s.only_counts_changed(base, changed(restarts=2))  # a restart is counted against backoffLimit
    assert not s.only_counts_changed(base, {**changed(active=2), "completionTime": "2026-11-23T10:01:00Z"})
    running = changed(active=2)
    running["conditions"] = [*base["conditions"], {"type": "Running", "status": "True"}]
    assert not s.only_counts_changed(base, running)
    assert not s.only_counts_changed(base, {**base, "replicaStatuses": {**base["replicaStatuses"], "Master": {}}})
    assert not s.only_counts_changed({}, base)  # the first status: selectors and times are new


def test_stalled_stays_until_the_job_runs_again() -> None:
    st: dict[str, Any] = {}
    s.set_condition(st, s.RUNNING, reason="JobRunning", message="running", now="t1")
    s.set_condition(st, s.STALLED, reason="Stalled", message="no log line for 25s", now="t2")
    assert not s.is_true(st, s.RUNNING)
    s.set_condition(st, s.RESTARTING, reason="JobRestarting", message="restarting every pod", now="t3")
    assert s.state(st) == s.RESTARTING and s.is_true(st, s.STALLED)
    s.set_condition(st, s.RUNNING, reason="JobRunning", message="running", now="t4")
    assert s.state(st) == s.RUNNING and not s.is_true(st, s.STALLED) and not s.is_true(st, s.RESTARTING)


def test_a_job_that_ran_and_succeeded_lists_its_conditions_in_time_order() -> None:
    """What the Training Operator reports and scripts reading the last condition rely on (issue 36)."""
    st: dict[str, Any] = {}
    s.set_condition(st, s.CREATED, reason="PyTorchJobCreated", message="created", now="t1")
    s.set_condition(st, s.RUNNING, reason="PyTorchJobRunning", message="running", now="t2")
    s.set_condition(st, s.SUCCEEDED, reason="PyTorchJobSucceeded", message="done", now="t3")
    assert [(c["type"], c["status"]) for c in st["conditions"]] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ]


def test_a_false_condition_never_hides_the_current_state_from_the_printer_column() -> None:
    st: dict[str, Any] = {}
    s.set_condition(st, s.CREATED, reason="JobCreated", message="created", now="t1")
    s.set_condition(st, s.RUNNING, true=False, reason="Unschedulable", message="no node", now="t2")
    assert st["conditions"][-1]["type"] == s.CREATED  # kubectl get: Created, not a False Running
    s.set_condition(st, s.SUSPENDED, reason="JobSuspended", message="suspended", now="t3")
    s.set_condition(st, s.SUSPENDED, true=False, reason="JobResumed", message="resumed", now="t4")
    assert [(c["type"], c["status"]) for c in st["conditions"]] == [
        ("Running", "False"),
        ("Suspended", "False"),
        ("Created", "True"),
    ]
    assert s.state(st) == s.CREATED
