"""Condition transitions: order, transition times, and no change when nothing changed."""

from __future__ import annotations

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
    assert [c["type"] for c in st["conditions"]] == ["Restarting", "Running", "Created", "Succeeded"]
    assert st["conditions"][-1]["status"] == "True"
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
