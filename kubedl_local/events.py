"""Recording ``v1`` Events from in-process components (scheduler, kubelet, node lifecycle).

Same shape as client-go's event recorder writes, so ``kubectl describe`` and our controller's tests see
``FailedScheduling``, ``Scheduled``, ``Killing``, ``Evicted``, ... on the objects they concern.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

from kubedl_local.apiserver.errors import ApiError
from kubedl_local.apiserver.registry import Registry
from kubedl_local.storage.store import now_iso

_seq = itertools.count(1)


def record(
    registry: Registry, obj: dict[str, Any], type_: str, reason: str, message: str, *, component: str, host: str = ""
) -> None:
    md = obj["metadata"]
    ns = md.get("namespace") or "default"
    ts = now_iso()
    ev = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{md['name']}.{next(_seq):x}{abs(hash(md.get('uid', ''))) % 0xFFFFF:05x}",
            "namespace": ns,
        },
        "involvedObject": {
            "kind": obj.get("kind"),
            "namespace": md.get("namespace", ""),
            "name": md["name"],
            "uid": md.get("uid"),
            "apiVersion": obj.get("apiVersion"),
            "resourceVersion": md.get("resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "source": {"component": component, **({"host": host} if host else {})},
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
        "type": type_,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host,
    }
    with contextlib.suppress(ApiError):  # namespace going away: events are best effort, as in client-go
        registry.create(registry.resource("", "events"), ns, ev)
