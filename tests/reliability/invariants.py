"""Watches a cluster and records every violation of the controller's safety promises as it happens.

Checked on every pod and Service event (not only at the end, when the evidence may be gone):

- no pod name is created while a predecessor of that name still lives;
- no two live host-network pods on one node hold the same host port;
- a Service is never re-pointed away from a live, running pod that holds the old target port (a terminating
  pod is on its way out: the controller re-points its Service to the replacement's port while it stops,
  docs/host-network.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from kubedl_py.api import constants as c
from kubedl_py.controllers.hostnetwork.feature import pod_port
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import Gone
from kubedl_py.kube.resources import PODS, SERVICES, Resource

OURS = f"{c.LABEL_CONTROLLER}={c.CONTROLLER_NAME}"


@dataclass
class LivePod:
    uid: str
    node: str
    port: int | None
    phase: str
    host: bool
    terminating: bool = False


@dataclass
class InvariantMonitor:
    kube: KubeClient
    #: the test's namespace (a real cluster is shared by the session)
    namespace: str | None = None
    violations: list[str] = field(default_factory=list)
    pods: dict[str, LivePod] = field(default_factory=dict)
    targets: dict[str, int] = field(default_factory=dict)
    created: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        for resource in (PODS, SERVICES):
            listed = await self.kube.list(resource, namespace=self.namespace, label_selector=OURS)
            for obj in listed.items:
                self._on(resource, "ADDED", obj)
            self._tasks.append(asyncio.create_task(self._watch(resource, listed.resource_version)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _watch(self, resource: Resource, version: str) -> None:
        while True:
            try:
                async with contextlib.aclosing(
                    self.kube.watch(
                        resource,
                        namespace=self.namespace,
                        label_selector=OURS,
                        resource_version=version,
                        timeout_seconds=60,
                    )
                ) as events:
                    async for event in events:
                        version = event.object.get("metadata", {}).get("resourceVersion", version)
                        self._on(resource, event.type, event.object)
            except Gone:
                listed = await self.kube.list(resource, namespace=self.namespace, label_selector=OURS)
                version = listed.resource_version
                for obj in listed.items:
                    self._on(resource, "MODIFIED", obj)
            except Exception:  # a cut watch under chaos: resume from the last version
                await asyncio.sleep(0.05)

    def _on(self, resource: Resource, kind: str, obj: dict[str, Any]) -> None:
        if kind == "BOOKMARK":
            return
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if resource is PODS:
            self._on_pod(key, kind, obj)
        elif kind != "DELETED":
            self._on_service(key, obj)
        else:
            self.targets.pop(key, None)

    def _on_pod(self, key: str, kind: str, pod: dict[str, Any]) -> None:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        uid = str(meta.get("uid"))
        phase = str(status.get("phase") or "")
        gone = kind == "DELETED" or phase in ("Succeeded", "Failed")
        previous = self.pods.get(key)
        if gone:
            if previous is not None and previous.uid == uid:
                del self.pods[key]
            return
        if previous is not None and previous.uid != uid:
            self.violations.append(f"pod {key} created (uid {uid}) while its predecessor {previous.uid} lived")
        if previous is None or previous.uid != uid:
            self.created += 1
        node, host = str(spec.get("nodeName") or ""), bool(spec.get("hostNetwork"))
        live = LivePod(uid, node, pod_port(pod), phase, host, terminating=bool(meta.get("deletionTimestamp")))
        self.pods[key] = live
        if live.host and live.node and live.port is not None:
            for other_key, other in self.pods.items():
                if other_key != key and other.host and other.node == live.node and other.port == live.port:
                    self.violations.append(f"{key} and {other_key} share host port {live.port} on {live.node}")

    def _on_service(self, key: str, service: dict[str, Any]) -> None:
        ports = (service.get("spec") or {}).get("ports") or []
        target = ports[0].get("targetPort") if ports else None
        if not isinstance(target, int):
            return
        old = self.targets.get(key)
        self.targets[key] = target
        if old is None or old == target:
            return
        pod = self.pods.get(key)
        if pod is not None and pod.phase == "Running" and not pod.terminating and pod.port == old:
            self.violations.append(f"Service {key} re-pointed {old} -> {target} away from live pod {pod.uid}")
