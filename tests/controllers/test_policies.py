"""The rules behind failurePolicy and completionPolicy (controllers/policies.py)."""

from __future__ import annotations

import pytest

from kubedl_py.controllers.failures.policies import Completion, pending_cause, share


@pytest.mark.parametrize(
    ("value", "total", "up", "want"),
    [
        (3, 10, True, 3),
        ("75%", 4, True, 3),
        ("75%", 7, True, 6),
        ("75%", 7, False, 5),
        ("0%", 5, True, 0),
        ("100%", 5, False, 5),
    ],
)
def test_shares_round_as_asked(value: int | str, total: int, up: bool, want: int) -> None:
    assert share(value, total, round_up=up) == want


def test_max_failed_tolerates_up_to_its_count() -> None:
    completion = Completion("Worker", total=4, min_succeeded=None, max_failed=1)
    assert completion.tolerates(1)
    assert not completion.tolerates(2)
    assert "more than completionPolicy.maxFailed (1)" in (completion.refusal(2) or "")


def test_min_succeeded_alone_tolerates_failures_while_it_can_still_be_reached() -> None:
    completion = Completion("Worker", total=4, min_succeeded=3, max_failed=None)
    assert completion.tolerates(1)
    assert not completion.tolerates(2)
    assert "can no longer be reached" in (completion.refusal(2) or "")


def test_no_thresholds_tolerate_nothing() -> None:
    assert not Completion("Worker", total=4, min_succeeded=None, max_failed=None).tolerates(0)


def test_pending_causes_come_from_the_pods_status() -> None:
    pulling = {
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "pytorch", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "m"}}}
            ],
        }
    }
    assert pending_cause(pulling) == "container pytorch: ImagePullBackOff: m"
    unschedulable = {
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes"}
            ],
        }
    }
    assert pending_cause(unschedulable) == "not scheduled: Unschedulable: 0/2 nodes"
    creating = {
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "x", "state": {"waiting": {"reason": "ContainerCreating"}}}],
        }
    }
    assert pending_cause(creating) is None  # a mount failure shows only in events
