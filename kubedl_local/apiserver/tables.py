"""Server-side printing: ``meta.k8s.io/v1`` Table responses for ``kubectl get``.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints whatever columns the
server returns, so the columns users know (READY, STATUS, RESTARTS for pods; CLUSTER-IP for Services; CRD
``additionalPrinterColumns``) come from here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from kubedl_local.apiserver.registry import parse_time
from kubedl_local.apiserver.resources import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, str, int, Callable[[Obj], Any]]  # name, type, format, priority, getter


def human_duration(seconds: float) -> str:
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    return f"{d // 365}y"


def age(obj: Obj) -> str:
    ts = obj["metadata"].get("creationTimestamp")
    if not ts:
        return "<unknown>"
    return human_duration(time.time() - parse_time(ts))


def _name(obj: Obj) -> str:
    return str(obj["metadata"].get("name", ""))


def _pod_status(pod: Obj) -> str:
    st = pod.get("status") or {}
    reason = st.get("reason") or st.get("phase") or "Unknown"
    for cs in st.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            t = state["terminated"]
            reason = t.get("reason") or (f"ExitCode:{t.get('exitCode')}")
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return str(reason)


def _pod_ready(pod: Obj) -> str:
    st = pod.get("status") or {}
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for cs in st.get("containerStatuses") or [] if cs.get("ready"))
    return f"{ready}/{total}"


def _pod_restarts(pod: Obj) -> int:
    return sum(int(cs.get("restartCount", 0)) for cs in (pod.get("status") or {}).get("containerStatuses") or [])


def _svc_external_ip(svc: Obj) -> str:
    """getServiceExternalIP of the real printer (loadBalancerStatusStringer without truncation)."""
    spec = svc.get("spec") or {}
    external = [str(ip) for ip in spec.get("externalIPs") or []]
    kind = spec.get("type", "")
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external) or "<none>"
    if kind == "LoadBalancer":
        ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        lb = sorted({str(i.get("ip") or i.get("hostname")) for i in ingress if i.get("ip") or i.get("hostname")})
        return ",".join(lb + external) or "<pending>"
    if kind == "ExternalName":
        return str(spec.get("externalName", ""))
    return "<unknown>"


def _svc_ports(svc: Obj) -> str:
    parts = []
    for p in (svc.get("spec") or {}).get("ports") or []:
        s = f"{p.get('port')}"
        if p.get("nodePort"):
            s += f":{p['nodePort']}"
        parts.append(f"{s}/{p.get('protocol', 'TCP')}")
    return ",".join(parts) or "<none>"


def _node_status(node: Obj) -> str:
    ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    s = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        s += ",SchedulingDisabled"
    return s


def _roles(node: Obj) -> str:
    roles = [
        k.split("/", 1)[1] for k in (node["metadata"].get("labels") or {}) if k.startswith("node-role.kubernetes.io/")
    ]
    return ",".join(sorted(roles)) or "<none>"


def _event_object(ev: Obj) -> str:
    io = ev.get("involvedObject") or {}
    return f"{str(io.get('kind', '')).lower()}/{io.get('name', '')}"


def _last_seen(ev: Obj) -> str:
    ts = ev.get("lastTimestamp") or ev.get("eventTime") or ev["metadata"].get("creationTimestamp")
    return human_duration(time.time() - parse_time(ts)) if ts else "<unknown>"


def _endpoints(ep: Obj) -> str:
    out = []
    for sub in ep.get("subsets") or []:
        for a in sub.get("addresses") or []:
            for p in sub.get("ports") or [{}]:
                out.append(f"{a.get('ip')}:{p.get('port')}" if p else str(a.get("ip")))
    if not out:
        return "<none>"
    return ",".join(out[:3]) + (f" + {len(out) - 3} more..." if len(out) > 3 else "")


_NAME: Column = ("Name", "string", "name", 0, _name)
_AGE: Column = ("Age", "string", "", 0, age)

BUILTIN: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): [
        _NAME,
        ("Ready", "string", "", 0, _pod_ready),
        ("Status", "string", "", 0, _pod_status),
        ("Restarts", "string", "", 0, lambda o: str(_pod_restarts(o))),
        _AGE,
        ("IP", "string", "", 1, lambda o: (o.get("status") or {}).get("podIP") or "<none>"),
        ("Node", "string", "", 1, lambda o: (o.get("spec") or {}).get("nodeName") or "<none>"),
        ("Nominated Node", "string", "", 1, lambda o: "<none>"),
        ("Readiness Gates", "string", "", 1, lambda o: "<none>"),
    ],
    ("", "services"): [
        _NAME,
        ("Type", "string", "", 0, lambda o: (o.get("spec") or {}).get("type", "")),
        ("Cluster-IP", "string", "", 0, lambda o: (o.get("spec") or {}).get("clusterIP") or "<none>"),
        ("External-IP", "string", "", 0, _svc_external_ip),
        ("Port(s)", "string", "", 0, _svc_ports),
        _AGE,
        (
            "Selector",
            "string",
            "",
            1,
            lambda o: (
                ",".join(f"{k}={v}" for k, v in ((o.get("spec") or {}).get("selector") or {}).items()) or "<none>"
            ),
        ),
    ],
    ("", "nodes"): [
        _NAME,
        ("Status", "string", "", 0, _node_status),
        ("Roles", "string", "", 0, _roles),
        _AGE,
        (
            "Version",
            "string",
            "",
            0,
            lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""),
        ),
        (
            "Internal-IP",
            "string",
            "",
            1,
            lambda o: next(
                (
                    a.get("address")
                    for a in (o.get("status") or {}).get("addresses") or []
                    if a.get("type") == "InternalIP"
                ),
                "<none>",
            ),
        ),
    ],
    ("", "namespaces"): [_NAME, ("Status", "string", "", 0, lambda o: (o.get("status") or {}).get("phase", "")), _AGE],
    ("", "configmaps"): [
        _NAME,
        ("Data", "integer", "", 0, lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})),
        _AGE,
    ],
    ("", "secrets"): [
        _NAME,
        ("Type", "string", "", 0, lambda o: o.get("type", "")),
        ("Data", "integer", "", 0, lambda o: len(o.get("data") or {})),
        _AGE,
    ],
    ("", "serviceaccounts"): [_NAME, _AGE],
    ("", "endpoints"): [_NAME, ("Endpoints", "string", "", 0, _endpoints), _AGE],
    ("", "events"): [
        ("Last Seen", "string", "", 0, _last_seen),
        ("Type", "string", "", 0, lambda o: o.get("type", "")),
        ("Reason", "string", "", 0, lambda o: o.get("reason", "")),
        ("Object", "string", "", 0, _event_object),
        ("Message", "string", "", 0, lambda o: o.get("message", "")),
    ],
    ("coordination.k8s.io", "leases"): [
        _NAME,
        ("Holder", "string", "", 0, lambda o: (o.get("spec") or {}).get("holderIdentity", "")),
        _AGE,
    ],
    ("apiextensions.k8s.io", "customresourcedefinitions"): [
        _NAME,
        ("Created At", "date", "", 0, lambda o: o["metadata"].get("creationTimestamp", "")),
    ],
}


# ---- a JSONPath subset for additionalPrinterColumns -------------------------------------------------------

_TOKEN = re.compile(
    r"\.([A-Za-z0-9_\-/]+)|\[(-?\d+)\]|\[(-?\d*):(-?\d*)\]"
    r"|\[\?\(@\.([\w.]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]|\['([^']*)'\]"
)


def jsonpath(obj: Any, path: str) -> Any:
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    cur: list[Any] = [obj]
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m:
            return None
        pos = m.end()
        nxt: list[Any] = []
        for c in cur:
            if m.group(1) is not None or m.group(7) is not None:
                key = m.group(1) if m.group(1) is not None else m.group(7)
                if isinstance(c, dict) and key in c:
                    nxt.append(c[key])
            elif m.group(2) is not None:
                i = int(m.group(2))
                if isinstance(c, list) and -len(c) <= i < len(c):
                    nxt.append(c[i])
            elif m.group(5) is not None:
                if isinstance(c, list):
                    for item in c:
                        if str(jsonpath(item, "." + m.group(5))) == m.group(6):
                            nxt.append(item)
            elif isinstance(c, list):
                a = int(m.group(3)) if m.group(3) else None
                b = int(m.group(4)) if m.group(4) else None
                nxt.extend(c[a:b])
        cur = nxt
    if not cur:
        return None
    return cur[0] if len(cur) == 1 else cur


def _cell(value: Any, typ: str) -> Any:
    if value is None:
        return None
    if typ == "date" and isinstance(value, str):
        try:
            return human_duration(time.time() - parse_time(value))
        except ValueError:
            return value
    if isinstance(value, dict | list):
        import orjson

        return orjson.dumps(value).decode()
    return value


def _column_getter(path: str, typ: str) -> Callable[[Obj], Any]:
    return lambda o: _cell(jsonpath(o, path), typ)


def columns_for(rt: ResourceType, version: str) -> list[Column]:
    if rt.custom:
        cols: list[Column] = [_NAME]
        extra = rt.printer_columns.get(version) or []
        for c in extra:
            path = str(c.get("jsonPath", ""))
            typ = str(c.get("type", "string"))
            cols.append(
                (
                    str(c.get("name", "")),
                    typ,
                    str(c.get("format", "")),
                    int(c.get("priority", 0)),
                    _column_getter(path, typ),
                )
            )
        if not extra:  # a CRD's own columns replace the default AGE one
            cols.append(_AGE)
        return cols
    return BUILTIN.get(rt.key, [_NAME, _AGE])


def partial_metadata(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(
    rt: ResourceType,
    version: str,
    objs: list[Obj],
    list_meta: dict[str, Any] | None,
    *,
    include_object: str = "Metadata",
    headers: bool = True,
) -> Obj:
    cols = columns_for(rt, version)
    rows = []
    for o in objs:
        cells = []
        for *_, get in cols:
            try:
                cells.append(get(o))
            except (KeyError, TypeError, ValueError, AttributeError):
                cells.append(None)
        row: Obj = {"cells": cells}
        if include_object == "Object":
            row["object"] = o
        elif include_object != "None":
            row["object"] = partial_metadata(o)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta or {},
        "columnDefinitions": [
            {"name": n, "type": t, "format": f, "description": "", "priority": p} for n, t, f, p, _ in cols
        ]
        if headers
        else [],
        "rows": rows,
    }
