"""The node lifecycle controller, taint manager and pod garbage collector, for losing nodes in tests.

When a node stops reporting, Kubernetes does not delete its pods at once: once its Lease has not been renewed
for ``node-monitor-grace-period`` (50 s by default; checked every 5 s, the node monitor period), the
node's Ready condition becomes Unknown, the node gets the ``node.kubernetes.io/unreachable``
(or ``not-ready``) taints, its pods are marked not Ready, and the taint manager deletes each pod once its
toleration of that taint runs out (``tolerationSeconds``, 300 s by default through the
DefaultTolerationSeconds admission; configurable here). The deletion is graceful and the node's kubelet is
gone, so the pods stay Terminating until the node comes back or the node object is deleted, when the pod
garbage collector force-deletes them. When its kubelet is back (Lease renewed, Ready posted), the taints are
lifted. This module reproduces exactly that: from the Leases (a node agent stopped by ``kubedl-py local node
stop``), or at once when a test says a node is lost (``LocalCluster.lose_node``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from typing import Any

from kubedl_local import events
from kubedl_local.apiserver.errors import ApiError
from kubedl_local.apiserver.patch import deepcopy_json
from kubedl_local.apiserver.registry import Registry
from kubedl_local.scheduler import tolerates
from kubedl_local.storage.store import Event, Obj, now_iso, with_disruption

log = logging.getLogger(__name__)

_BETA_LABELS = (("kubernetes.io/os", "beta.kubernetes.io/os"), ("kubernetes.io/arch", "beta.kubernetes.io/arch"))
NODES = ("", "nodes")
PODS = ("", "pods")
LEASES = ("coordination.k8s.io", "leases")
NODE_LEASE_NAMESPACE = "kube-node-lease"
#: kube-controller-manager's defaults: --node-monitor-grace-period and --node-monitor-period
NODE_MONITOR_GRACE_PERIOD = 50.0
NODE_MONITOR_PERIOD = 5.0
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"


class NodeLifecycle:
    def __init__(
        self,
        registry: Registry,
        *,
        grace_period: float = NODE_MONITOR_GRACE_PERIOD,
        period: float = NODE_MONITOR_PERIOD,
    ) -> None:
        self.registry = registry
        self.store = registry.store
        self.grace_period = grace_period
        self.period = period
        self.timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.store.listeners.append(self._on_event)
        self._clear_stale_taints()
        self._monitor_timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(period, self._monitor)

    def _clear_stale_taints(self) -> None:
        """A restart (``data_dir``) starts the controller afresh: nodes lost before it are judged anew."""
        for node in list(self.store.iter(NODES)):
            taints = (node.get("spec") or {}).get("taints") or []
            kept = [t for t in taints if t.get("key") not in (UNREACHABLE, NOT_READY)]
            if len(kept) != len(taints):
                new = deepcopy_json(node)
                if kept:
                    new["spec"]["taints"] = kept
                else:
                    new["spec"].pop("taints", None)
                self._put_node(node, new)

    def stop(self) -> None:
        for t in self.timers.values():
            t.cancel()
        self.timers.clear()
        if self._monitor_timer is not None:
            self._monitor_timer.cancel()
            self._monitor_timer = None

    def _monitor(self) -> None:
        """monitorNodeHealth: a node whose Lease is older than the grace period is lost (Unknown); a lost node
        whose Lease is fresh again and whose kubelet posted Ready=True is back. Nodes without a Lease (made by
        hand in tests) are left alone."""
        self._monitor_timer = asyncio.get_running_loop().call_later(self.period, self._monitor)
        now = datetime.now(UTC)
        for node in list(self.store.iter(NODES)):
            name = node["metadata"]["name"]
            lease = self.store.get(LEASES, NODE_LEASE_NAMESPACE, name)
            renewed = _parse_time(((lease or {}).get("spec") or {}).get("renewTime"))
            if renewed is None:
                continue
            stale = (now - renewed).total_seconds() > self.grace_period
            lost = any(t.get("key") in (UNREACHABLE, NOT_READY) for t in (node.get("spec") or {}).get("taints") or [])
            try:
                if stale and not lost:
                    log.info("node %s: Lease not renewed for %.0fs; marking it Unknown", name, self.grace_period)
                    self.lose(name, "Unknown")
                elif not stale and lost and _ready(node):
                    log.info("node %s: reporting again; lifting its taints", name)
                    self.restore(name)
            except ApiError as e:
                log.warning("node lifecycle of %s: %s", name, e.message)

    def _node(self, name: str) -> Obj:
        node = self.store.get(NODES, "", name)
        if node is None:
            raise ApiError(404, f'nodes "{name}" not found', "NotFound")
        return node

    def _put_node(self, old: Obj, new: Obj) -> None:
        new["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(NODES, new, old)

    def lose(self, name: str, status: str = "Unknown") -> None:
        """The node's kubelet stops reporting (``Unknown``) or reports not ready (``False``)."""
        node = self._node(name)
        new = deepcopy_json(node)
        now = now_iso()
        for c in new["status"].get("conditions") or []:
            if status == "Unknown":
                c.update(
                    status="Unknown",
                    reason="NodeStatusUnknown",
                    message="Kubelet stopped posting node status.",
                    lastTransitionTime=now,
                )
            elif c.get("type") == "Ready":
                c.update(
                    status="False",
                    reason="KubeletNotReady",
                    message="container runtime is down",
                    lastTransitionTime=now,
                )
        key = UNREACHABLE if status == "Unknown" else NOT_READY
        taints = [t for t in new["spec"].get("taints") or [] if t.get("key") not in (UNREACHABLE, NOT_READY)]
        taints += [
            {"key": key, "effect": "NoSchedule", "timeAdded": now},
            {"key": key, "effect": "NoExecute", "timeAdded": now},
        ]
        new["spec"]["taints"] = taints
        self._put_node(node, new)
        events.record(
            self.registry,
            new,
            "Normal",
            "NodeNotReady",
            f"Node {name} status is now: NodeNotReady",
            component="node-controller",
        )
        for pod in list(self.store.iter(PODS)):
            if (pod.get("spec") or {}).get("nodeName") != name:
                continue
            self._mark_not_ready(pod)
            self._plan_eviction(pod, {"key": key, "effect": "NoExecute"})

    def restore(self, name: str) -> None:
        """The node's kubelet is back (its agent posts Ready=True itself): lift the taints, stop evicting."""
        node = self._node(name)
        new = deepcopy_json(node)
        now = now_iso()
        for c in new["status"].get("conditions") or []:
            if c.get("status") == "Unknown":
                c.update(lastTransitionTime=now)
        new["spec"]["taints"] = [
            t for t in new["spec"].get("taints") or [] if t.get("key") not in (UNREACHABLE, NOT_READY)
        ]
        if not new["spec"]["taints"]:
            del new["spec"]["taints"]
        self._put_node(node, new)
        for key in [k for k, _ in self.timers.items()]:
            pod = self.store.get(PODS, *key)
            if pod is None or (pod.get("spec") or {}).get("nodeName") == name:
                self.timers.pop(key).cancel()

    def remove(self, name: str) -> None:
        """Delete the node object; the pod garbage collector then force-deletes its pods."""
        node = self._node(name)
        self.store.remove(NODES, node)

    def is_lost(self, name: str) -> bool:
        node = self.store.get(NODES, "", name)
        taints = ((node or {}).get("spec") or {}).get("taints") or []
        return any(t.get("key") in (UNREACHABLE, NOT_READY) for t in taints)

    def _mark_not_ready(self, pod: Obj) -> None:
        status = dict(pod.get("status") or {})
        if status.get("phase") in ("Succeeded", "Failed"):
            return
        conds = []
        for c0 in status.get("conditions") or []:
            c = c0
            if c.get("type") in ("Ready", "ContainersReady") and c.get("status") != "False":
                c = dict(
                    c0,
                    status="False",
                    reason="NodeLost" if c.get("type") == "Ready" else c.get("reason"),
                    lastTransitionTime=now_iso(),
                )
            conds.append(c)
        status["conditions"] = conds
        new = dict(pod, status=status)
        new["metadata"] = dict(pod["metadata"], resourceVersion=str(self.store.next_rv()))
        self.store.put(PODS, new, pod)

    def _plan_eviction(self, pod: Obj, taint: dict[str, Any]) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if pod["metadata"].get("deletionTimestamp") or key in self.timers:
            return
        seconds: float | None = 0.0
        if tolerates(pod, taint):
            seconds = None
            for t in (pod.get("spec") or {}).get("tolerations") or []:
                if tolerates({"spec": {"tolerations": [t]}}, taint):
                    ts = t.get("tolerationSeconds")
                    if ts is None:
                        seconds = None  # tolerated forever
                        break
                    seconds = float(ts) if seconds is None else min(seconds, float(ts))
        if seconds is None:
            return
        self.timers[key] = asyncio.get_running_loop().call_later(
            max(0.0, seconds), self._evict, key, pod["metadata"]["uid"]
        )

    def _evict(self, key: tuple[str, str], uid: str) -> None:
        self.timers.pop(key, None)
        pod = self.store.get(PODS, *key)
        if pod is None or pod["metadata"].get("uid") != uid:
            return
        try:
            events.record(
                self.registry,
                pod,
                "Normal",
                "TaintManagerEviction",
                f"Marking for deletion Pod {key[0]}/{key[1]}",
                component="taint-eviction-controller",
            )
            marked = with_disruption(pod, "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")
            if marked is not None:
                marked["metadata"] = dict(pod["metadata"], resourceVersion=str(self.store.next_rv()))
                self.store.put(PODS, marked, pod)
            self.registry.delete(self.registry.resource("", "pods"), key[0], key[1], {"preconditions": {"uid": uid}})
        except ApiError as e:
            if e.code != 404:
                log.warning("taint eviction of %s/%s: %s", key[0], key[1], e.message)

    def _on_event(self, ev: Event) -> None:
        if ev.rkey == NODES and ev.type == "DELETED":
            asyncio.get_running_loop().call_soon(self._gc_orphans, ev.obj["metadata"]["name"])
        elif ev.rkey == NODES and self._labels_to_reconcile(ev.obj):
            asyncio.get_running_loop().call_soon(self._reconcile_labels, ev.obj["metadata"]["name"])

    @staticmethod
    def _labels_to_reconcile(node: Obj) -> dict[str, str]:
        """reconcileNodeLabels: the deprecated beta os/arch labels follow the stable ones."""
        labels = node["metadata"].get("labels") or {}
        out = {}
        for stable, beta in _BETA_LABELS:
            if stable in labels and labels.get(beta) != labels[stable]:
                out[beta] = labels[stable]
        return out

    def _reconcile_labels(self, name: str) -> None:
        node = self.store.get(NODES, "", name)
        if node is None:
            return
        missing = self._labels_to_reconcile(node)
        if not missing:
            return
        new = dict(node)
        new["metadata"] = dict(node["metadata"], labels={**(node["metadata"].get("labels") or {}), **missing})
        new["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(NODES, new, node)

    def _gc_orphans(self, node: str) -> None:
        if self.store.get(NODES, "", node) is not None:
            return
        rt = self.registry.resource("", "pods")
        for pod in list(self.store.iter(PODS)):
            if (pod.get("spec") or {}).get("nodeName") == node:
                with contextlib.suppress(ApiError):
                    self.registry.delete(
                        rt, pod["metadata"]["namespace"], pod["metadata"]["name"], {"gracePeriodSeconds": 0}
                    )


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _ready(node: Obj) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False
