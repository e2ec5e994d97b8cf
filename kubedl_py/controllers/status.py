"""Job status as a small state machine over conditions, on the wire form (a dict) the API returns.

Conditions: ``Created`` (stays True), then ``Running``, ``Restarting`` while a retry is under way,
``Stalled`` from a hang until the job runs again, ``Suspended`` while ``suspend`` is true, and finally
``Succeeded`` or ``Failed``. They are kept in time order, as the Training Operator keeps them (scripts read
the last one): setting one True moves it to the end of the list, so the printer column
``.status.conditions[-1:].type`` shows the current state, and turns off the ones it replaces (Running <->
Restarting, Stalled; a final state turns off all of them) where they stand. A condition turned False stays
where it is, unless it was the last one: it then goes just before the current state, as a new False one
does, so the last condition is never a False one while any is True (``Created True, Running False,
Succeeded True``).
``lastTransitionTime`` moves only when a condition's status changes; ``lastUpdateTime`` when its reason or
message does. Functions return whether anything changed, so a settled job costs no status write.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"
#: the job wrote nothing for progressDeadlineSeconds; True until it runs again (recovery.py)
STALLED = "Stalled"
FINAL = (SUCCEEDED, FAILED)

_REPLACES = {
    RUNNING: (RESTARTING, STALLED),
    RESTARTING: (RUNNING,),
    STALLED: (RUNNING,),
    SUCCEEDED: (RUNNING, RESTARTING, SUSPENDED, STALLED),
    FAILED: (RUNNING, RESTARTING, SUSPENDED, STALLED),
}


def timestamp(now: datetime | None = None) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes times."""
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def get_condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind:
            found: dict[str, Any] = condition
            return found
    return None


def is_true(status: dict[str, Any], kind: str) -> bool:
    condition = get_condition(status, kind)
    return condition is not None and condition.get("status") == "True"


def is_finished(status: dict[str, Any]) -> bool:
    return any(is_true(status, kind) for kind in FINAL)


def state(status: dict[str, Any]) -> str:
    """The current state: the last condition that is True (what ``kubectl get`` shows)."""
    for condition in reversed(status.get("conditions") or []):
        if condition.get("status") == "True":
            return str(condition.get("type"))
    return ""


def set_condition(
    status: dict[str, Any],
    kind: str,
    *,
    reason: str,
    message: str,
    true: bool = True,
    now: str | None = None,
) -> bool:
    """Set condition ``kind`` in place; True when anything changed.

    Order is time order (see the module docstring): the last condition is always the current state.
    """
    now = now or timestamp()
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    before = copy.deepcopy(conditions)
    value = "True" if true else "False"
    existing = get_condition(status, kind)
    if existing is None:
        existing = {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }
        if true:
            conditions.append(existing)
        else:
            current = max((i for i, cond in enumerate(conditions) if cond.get("status") == "True"), default=None)
            conditions.insert(len(conditions) if current is None else current, existing)
    elif existing.get("status") != value:
        existing.update(status=value, reason=reason, message=message, lastUpdateTime=now, lastTransitionTime=now)
    elif (existing.get("reason"), existing.get("message")) != (reason, message):
        existing.update(reason=reason, message=message, lastUpdateTime=now)
    if true:
        # The condition that just became (or stays) the current state goes last.
        conditions.remove(existing)
        conditions.append(existing)
        for other in _REPLACES.get(kind, ()):
            replaced = get_condition(status, other)
            if replaced is not None and replaced.get("status") == "True":
                replaced.update(
                    status="False", reason=reason, message=message, lastUpdateTime=now, lastTransitionTime=now
                )
    if conditions and conditions[-1].get("status") != "True":
        # A condition just turned False (a resumed job's Suspended): the printer column must not show it.
        current = max((i for i, cond in enumerate(conditions) if cond.get("status") == "True"), default=None)
        if current is not None:
            conditions.insert(current, conditions.pop())
    return conditions != before


def clear_condition(status: dict[str, Any], kind: str, *, reasons: frozenset[str]) -> bool:
    """Remove condition ``kind`` when it is False for one of ``reasons`` (a wait that is over); True when removed."""
    condition = get_condition(status, kind)
    if condition is None or condition.get("status") != "False" or condition.get("reason") not in reasons:
        return False
    status["conditions"].remove(condition)
    return True


def with_changes(status: dict[str, Any] | None) -> dict[str, Any]:
    """A private copy to edit, so the cached object stays untouched until the write succeeds."""
    return copy.deepcopy(status) if status else {}


#: the replica counts of ``replicaStatuses``: what changes with every pod that starts or ends
COUNTS = ("active", "succeeded", "failed")


def only_counts_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """True when ``new`` differs from ``old`` in replica counts (``COUNTS``) and nothing else: no condition,
    time, restart count or new field. Such a change may wait to be written with the next one."""
    old_types, new_types = old.get("replicaStatuses") or {}, new.get("replicaStatuses") or {}
    if set(old_types) != set(new_types):
        return False
    if {k: v for k, v in old.items() if k != "replicaStatuses"} != {
        k: v for k, v in new.items() if k != "replicaStatuses"
    }:
        return False
    for replica_type, entry in new_types.items():
        before = old_types[replica_type] or {}
        if {k: v for k, v in before.items() if k not in COUNTS} != {k: v for k, v in entry.items() if k not in COUNTS}:
            return False
    return True


#: what a type's entry of ``replicaStatuses`` may hold in a job's first report (``is_first_report``): its counts
#: and the selector of its pods; a restart count or a ``lastFailure`` is news
FIRST_REPORT_REPLICA_KEYS = (*COUNTS, "labelSelector", "selector")


def is_first_report(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """True when ``new`` is the job's first report over ``old``: the Created condition added, with the start
    time and each type's counts and selector, and nothing else (no other condition, no reason to wait, no
    failure or restart). Such a write may yield to other jobs' pod creations (``status_yield.py``)."""
    if get_condition(old, CREATED) is not None or get_condition(new, CREATED) is None:
        return False

    def rest(status: dict[str, Any]) -> dict[str, Any]:
        others = [cond for cond in status.get("conditions") or [] if cond.get("type") != CREATED]
        replicas = {
            replica_type: news
            for replica_type, entry in (status.get("replicaStatuses") or {}).items()
            if (news := {k: v for k, v in (entry or {}).items() if k not in FIRST_REPORT_REPLICA_KEYS})
        }
        kept = {k: v for k, v in status.items() if k not in ("replicaStatuses", "startTime", "conditions")}
        return {**kept, "conditions": others, "replicaStatuses": replicas}

    return rest(old) == rest(new)
