"""The conditions of a Kueue Workload as kubedl-py reads and writes them (``kueue.py``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from kubedl_py.api.plain import Object


def condition(workload: Object | None, kind: str) -> Object | None:
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: Object = cond
            return found
    return None


def workload_is(workload: Object | None, kind: str) -> bool:
    cond = condition(workload, kind)
    return cond is not None and cond.get("status") == "True"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_REASON = re.compile(r"[^A-Za-z0-9_,:]")


def set_condition(conditions: list[Object], kind: str, status: bool, *, reason: str, message: str, gen: int) -> None:
    """metav1.Condition semantics: lastTransitionTime moves only when the status does."""
    value = "True" if status else "False"
    reason = _REASON.sub("", reason) or "Unknown"
    for cond in conditions:
        if cond.get("type") == kind:
            if cond.get("status") != value:
                cond["lastTransitionTime"] = now()
            cond.update(status=value, reason=reason, message=message[:32768], observedGeneration=gen)
            return
    conditions.append(
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": now(),
            "observedGeneration": gen,
        }
    )
