"""Paths, object builders and record projections the cases share."""

from __future__ import annotations

from typing import Any

from tests.differential.harness import Reply, Tier

GROUP = "training.kubedl.io"
VERSION = "v1alpha1"
#: the image every pod names (the simulated runtime runs nothing; the name only shows in outputs)
IMAGE = "busybox:1.36"
#: simulated-runtime annotations: how a container ends
EXIT_CODE = "local.kubedl.io/exit-code"
RUN_SECONDS = "local.kubedl.io/run-seconds"


def core(t: Tier, plural: str, name: str | None = None, sub: str | None = None, *, query: str = "") -> str:
    path = f"/api/v1/namespaces/{t.ns}/{plural}"
    return _tail(path, name, sub, query)


def cluster(plural: str, name: str | None = None, sub: str | None = None, *, query: str = "") -> str:
    return _tail(f"/api/v1/{plural}", name, sub, query)


def grouped(
    t: Tier,
    plural: str,
    name: str | None = None,
    sub: str | None = None,
    *,
    group: str = GROUP,
    version: str = VERSION,
    query: str = "",
) -> str:
    return _tail(f"/apis/{group}/{version}/namespaces/{t.ns}/{plural}", name, sub, query)


def _tail(path: str, name: str | None, sub: str | None, query: str) -> str:
    if name is not None:
        path += f"/{name}"
    if sub is not None:
        path += f"/{sub}"
    if query:
        path += "?" + query.lstrip("?")
    return path


def configmap(name: str, data: dict[str, str] | None = None, **metadata: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **metadata}}
    if data is not None:
        body["data"] = data
    return body


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if labels:
        md["labels"] = labels
    if annotations:
        md["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": md,
        "spec": {"containers": containers or [{"name": "main", "image": IMAGE}], **spec},
    }


def service(name: str, ports: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": ports if ports is not None else [{"port": 80}], **spec},
    }


def replica(replicas: int = 1, restart: str = "Never", **template_meta: Any) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": restart,
        "template": {
            **({"metadata": template_meta} if template_meta else {}),
            "spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.3.0"}]},
        },
    }


def pytorchjob(name: str, specs: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": specs or {"Master": replica(1), "Worker": replica(2)}, **spec},
    }


def tfjob(name: str, specs: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    def tf(replicas: int) -> dict[str, Any]:
        return {
            "replicas": replicas,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]}},
        }

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": specs or {"PS": tf(1), "Worker": tf(2)}, **spec},
    }


def owner_ref(obj: dict[str, Any], *, controller: bool = False, block: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
    }
    if controller:
        ref["controller"] = True
    if block:
        ref["blockOwnerDeletion"] = True
    return ref


# ---- what a step keeps ------------------------------------------------------------------------------------


def names(body: Any) -> list[str]:
    """The names of a list's items, in the order served."""
    return [item["metadata"]["name"] for item in body["items"]]


def meta(*keys: str) -> Any:
    """Keep these metadata keys of an object (a Status body is kept whole)."""

    def pick(body: Any) -> Any:
        if isinstance(body, dict) and body.get("kind") == "Status":
            return body
        md = body["metadata"]
        return {k: md.get(k) for k in keys}

    return pick


def field(*path: str) -> Any:
    """Keep one field of an object (a Status body is kept whole)."""

    def pick(body: Any) -> Any:
        if isinstance(body, dict) and body.get("kind") == "Status":
            return body
        value = body
        for p in path:
            value = value.get(p) if isinstance(value, dict) else None
        return value

    return pick


def running(reply: Reply) -> bool:
    return bool(reply.body and (reply.body.get("status") or {}).get("phase") == "Running")


def phase_is(*phases: str) -> Any:
    def check(reply: Reply) -> bool:
        return bool(reply.body and (reply.body.get("status") or {}).get("phase") in phases)

    return check


def gone(reply: Reply) -> bool:
    return reply.status == 404


def pod_summary(body: Any) -> Any:
    """What a running pod's status says, without what the runtime makes up (times, IDs)."""
    if isinstance(body, dict) and body.get("kind") == "Status":
        return body
    status = body.get("status") or {}
    return {
        "phase": status.get("phase"),
        "conditions": sorted((c["type"], c["status"]) for c in status.get("conditions") or []),
        "containers": [
            {"name": c.get("name"), "ready": c.get("ready"), "state": sorted(c.get("state") or {})}
            for c in status.get("containerStatuses") or []
        ],
        "nodeName": body["spec"].get("nodeName"),
        "qosClass": status.get("qosClass"),
    }


async def make(t: Tier, path: str, body: Any, *, record: bool = False) -> Any:
    """Create an object (recorded or not) and return what the server stored."""
    if record:
        reply = await t.post(path, body)
    else:
        reply = await t.quiet("POST", path, body)
    if reply.status != 201:
        raise AssertionError(f"creating {path}: {reply.status} {reply.body}")
    return reply.body


async def run_pod(t: Tier, body: dict[str, Any], *, phases: tuple[str, ...] = ("Running",)) -> Any:
    """Create a pod (unrecorded) and wait (recorded) until it reaches one of ``phases``."""
    await make(t, core(t, "pods"), body)
    return await t.poll(core(t, "pods", body["metadata"]["name"]), phase_is(*phases), keep=pod_summary)
