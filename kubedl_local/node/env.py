"""A container's environment as the kubelet builds it: service links, envFrom, env with ``$(VAR)``, the
downward API. Pure functions over raw objects, so the process runtime (and tests) can use them with any
source of Services, ConfigMaps and Secrets.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

Obj = dict[str, Any]


class EnvError(ValueError):
    """A container's env cannot be built (missing ConfigMap key, bad fieldRef): CreateContainerConfigError."""


def process_base_env() -> dict[str, str]:
    """What the "image" provides: the cluster's environment, with its own Python first on PATH.

    Why: ``command: ["python", ...]`` should find the interpreter ``local up`` runs under (the venv with
    torch), even when the venv is not activated in the shell that started it.
    """
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    parts = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != bindir]
    env["PATH"] = os.pathsep.join([bindir, *parts])
    env.pop("KUBECONFIG", None)  # a pod has no kubeconfig of the user's
    return env


def field_ref(pod: Obj, path: str, *, pod_ip: str, host_ip: str) -> str:
    """The downward API (``valueFrom.fieldRef.fieldPath``) for the fields the kubelet supports."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": md.get("name", ""),
        "metadata.namespace": md.get("namespace", ""),
        "metadata.uid": md.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path in simple:
        return str(simple[path])
    for prefix, key in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((md.get(key) or {}).get(path[len(prefix) + 2 : -2], ""))
    raise EnvError(f"unsupported fieldPath {path!r}")


def service_link_env(services: list[Obj]) -> dict[str, str]:
    """Docker-link style variables of the namespace's Services (``enableServiceLinks``, on by default)."""
    env: dict[str, str] = {}
    for svc in services:
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP")
        ports = spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        prefix = svc["metadata"]["name"].upper().replace("-", "_")
        env[f"{prefix}_SERVICE_HOST"] = ip
        env[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
        for p in ports:
            if p.get("name"):
                env[f"{prefix}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
        first = ports[0]
        proto = first.get("protocol", "TCP")
        env[f"{prefix}_PORT"] = f"{proto.lower()}://{ip}:{first['port']}"
        for p in ports:
            pr = p.get("protocol", "TCP")
            base = f"{prefix}_PORT_{p['port']}_{pr}"
            env[base] = f"{pr.lower()}://{ip}:{p['port']}"
            env[f"{base}_PROTO"] = pr.lower()
            env[f"{base}_PORT"] = str(p["port"])
            env[f"{base}_ADDR"] = ip
    return env


def resource_field(c: Obj, ref: Obj) -> str:
    """``resourceFieldRef``: the container's limit (or request); no limit means the node's capacity, 1 here."""
    res = ref.get("resource", "")
    section, _, name = res.partition(".")
    value = ((c.get("resources") or {}).get(section) or {}).get(name)
    return str(value) if value is not None else "1"
