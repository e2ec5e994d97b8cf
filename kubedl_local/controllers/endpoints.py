"""The endpoints and endpoint slice controllers: one ``Endpoints`` object and its ``EndpointSlices`` per
Service with a selector.

Clients that resolve a Service to its backends read them (a Service proxy reads Endpoints, ``kubectl
describe svc`` EndpointSlices): ready pods matching the selector under ``addresses``, others under
``notReadyAddresses``, with each Service port's ``targetPort`` resolved (a name is looked up among the pod's
container ports). The slices are the real EndpointSlice controller's: one per distinct set of resolved
ports (one with neither endpoints nor ports when no pod matches), named after the Service, labelled with it
and owned by it, each endpoint with its ready/serving/terminating conditions (terminating pods are kept,
not ready). It indexes pods and Services by label pairs, so a change touches only the Services it can
concern.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from typing import Any

from kubedl_local.apiserver.errors import ApiError
from kubedl_local.apiserver.registry import Registry
from kubedl_local.storage.store import Event, Obj, now_iso

log = logging.getLogger(__name__)

PODS = ("", "pods")
SERVICES = ("", "services")
ENDPOINTS = ("", "endpoints")
SLICES = ("discovery.k8s.io", "endpointslices")
SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
SLICE_CONTROLLER = "endpointslice-controller.k8s.io"
TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"
Pair = tuple[str, str, str]  # namespace, label key, label value


class EndpointsController:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.store = registry.store
        self.pods_by_pair: defaultdict[Pair, set[str]] = defaultdict(set)
        # Services by (namespace, frozenset(selector)): a pod's candidates are looked up exactly by the
        # subsets of its labels, so a change only touches Services that select it.
        self.svcs_by_selector: defaultdict[tuple[str, frozenset[tuple[str, str]]], set[str]] = defaultdict(set)
        self.dirty: set[tuple[str, str]] = set()
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.store.listeners.append(self._on_event)

    def start(self) -> None:
        for p in self.store.iter(PODS):
            self._index(self.pods_by_pair, None, p)
        for s in self.store.iter(SERVICES):
            self._index_service(None, s)
            self.dirty.add((s["metadata"]["namespace"], s["metadata"]["name"]))
        self._task = asyncio.create_task(self._run(), name="local-endpoints")
        self.wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    @staticmethod
    def _pairs(obj: Obj | None, selector: bool) -> set[Pair]:
        if obj is None:
            return set()
        ns = obj["metadata"].get("namespace", "")
        labels = (obj.get("spec") or {}).get("selector") if selector else obj["metadata"].get("labels")
        return {(ns, k, str(v)) for k, v in (labels or {}).items()}

    def _index(
        self, index: defaultdict[Pair, set[str]], old: Obj | None, new: Obj | None, selector: bool = False
    ) -> None:
        before, after = self._pairs(old, selector), self._pairs(new, selector)
        name = (new or old or {"metadata": {"name": ""}})["metadata"]["name"]
        for pair in before - after:
            index[pair].discard(name)
            if not index[pair]:
                del index[pair]
        for pair in after - before:
            index[pair].add(name)

    def _index_service(self, old: Obj | None, new: Obj | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            sel = (obj.get("spec") or {}).get("selector")
            if not sel:
                continue
            key = (obj["metadata"].get("namespace", ""), frozenset((k, str(v)) for k, v in sel.items()))
            if add:
                self.svcs_by_selector[key].add(obj["metadata"]["name"])
            else:
                names = self.svcs_by_selector.get(key)
                if names is not None:
                    names.discard(obj["metadata"]["name"])
                    if not names:
                        del self.svcs_by_selector[key]

    def _services_selecting(self, pod: Obj | None) -> set[str]:
        if pod is None or not self.svcs_by_selector:
            return set()
        ns = pod["metadata"].get("namespace", "")
        labels = sorted((k, str(v)) for k, v in (pod["metadata"].get("labels") or {}).items())
        out: set[str] = set()
        if len(labels) > 12:  # too many subsets: test every selector of the namespace instead
            have = set(labels)
            for (sns, sel), hit in self.svcs_by_selector.items():
                if sns == ns and sel <= have:
                    out |= hit
            return out
        for mask in range(1, 1 << len(labels)):
            key = (ns, frozenset(labels[i] for i in range(len(labels)) if mask >> i & 1))
            names = self.svcs_by_selector.get(key)
            if names:
                out |= names
        return out

    def _on_event(self, ev: Event) -> None:
        if ev.rkey == PODS:
            new = None if ev.type == "DELETED" else ev.obj
            old = ev.old if ev.type != "DELETED" else ev.obj
            if ev.type == "MODIFIED" and not self._relevant_change(ev.old, ev.obj):
                return
            self._index(self.pods_by_pair, old if ev.type != "ADDED" else None, new)
            ns = ev.obj["metadata"]["namespace"]
            svcs = self._services_selecting(new)
            labels_changed = new is None or (old or {}).get("metadata", {}).get("labels") != new["metadata"].get(
                "labels"
            )
            if old is not None and old is not new and labels_changed:
                svcs |= self._services_selecting(old)
            for svc in svcs:
                self.dirty.add((ns, svc))
        elif ev.rkey == SERVICES:
            self._index_service(ev.old, None if ev.type == "DELETED" else ev.obj)
            self.dirty.add((ev.obj["metadata"]["namespace"], ev.obj["metadata"]["name"]))
        else:
            return
        if self.dirty:
            self.wake.set()

    @staticmethod
    def _relevant_change(old: Obj | None, new: Obj) -> bool:
        if old is None:
            return True
        o_st, n_st = old.get("status") or {}, new.get("status") or {}
        return (
            old["metadata"].get("labels") != new["metadata"].get("labels")
            or o_st.get("podIP") != n_st.get("podIP")
            or o_st.get("phase") != n_st.get("phase")
            or _ready(old) != _ready(new)
            or bool(old["metadata"].get("deletionTimestamp")) != bool(new["metadata"].get("deletionTimestamp"))
        )

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(0)  # coalesce a burst of pod updates
            batch, self.dirty = self.dirty, set()
            for ns, name in batch:
                try:
                    self._sync(ns, name)
                except Exception:
                    log.exception("endpoints of %s/%s", ns, name)

    def _sync(self, ns: str, name: str) -> None:
        svc = self.store.get(SERVICES, ns, name)
        current = self.store.get(ENDPOINTS, ns, name)
        rt = self.registry.resource("", "endpoints")
        if svc is None or not (svc.get("spec") or {}).get("selector"):
            if current is not None and svc is None:
                with contextlib.suppress(ApiError):
                    self.registry.delete(rt, ns, name, {})
            self._sync_slices(ns, name, svc, {})
            return
        selector: dict[str, str] = {k: str(v) for k, v in svc["spec"]["selector"].items()}
        sets = sorted((self.pods_by_pair.get((ns, k, v), set()) for k, v in selector.items()), key=len)
        names: set[str] = set(sets[0]).intersection(*sets[1:]) if sets else set()
        groups: dict[tuple[tuple[str, int, str], ...], dict[str, list[Any]]] = {}
        slice_groups: dict[tuple[tuple[str, int, str], ...], list[Obj]] = {}
        for pod_name in sorted(names):
            pod = self.store.get(PODS, ns, pod_name)
            if pod is None:
                continue
            st = pod.get("status") or {}
            if not st.get("podIP") or st.get("phase") in ("Succeeded", "Failed"):
                continue
            ports = tuple(p for p in (_resolve(sp, pod) for sp in svc["spec"].get("ports") or []) if p is not None)
            slice_groups.setdefault(ports, []).append(_slice_endpoint(pod, svc))
            if pod["metadata"].get("deletionTimestamp") and not svc["spec"].get("publishNotReadyAddresses"):
                continue
            addr: Obj = {
                "ip": st["podIP"],
                "targetRef": {"kind": "Pod", "namespace": ns, "name": pod_name, "uid": pod["metadata"]["uid"]},
            }
            if (pod.get("spec") or {}).get("nodeName"):
                addr["nodeName"] = pod["spec"]["nodeName"]
            group = groups.setdefault(ports, {"addresses": [], "notReadyAddresses": []})
            ready = _ready(pod) or bool(svc["spec"].get("publishNotReadyAddresses"))
            group["addresses" if ready else "notReadyAddresses"].append(addr)
        subsets = []
        for ports, addrs in groups.items():
            subset: Obj = {k: v for k, v in addrs.items() if v}
            if ports:
                subset["ports"] = [
                    {"name": n, "port": p, "protocol": proto} if n else {"port": p, "protocol": proto}
                    for n, p, proto in ports
                ]
            subsets.append(subset)
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": name, "namespace": ns, "labels": dict(svc["metadata"].get("labels") or {})},
        }
        if subsets:
            body["subsets"] = subsets
        self._sync_slices(ns, name, svc, slice_groups)
        if current is None:
            with contextlib.suppress(ApiError):
                self.registry.create(rt, ns, body)
            return
        if (
            current.get("subsets") == body.get("subsets")
            and current["metadata"].get("labels") == body["metadata"]["labels"]
        ):
            return
        new = dict(current)
        new.pop("subsets", None)
        if subsets:
            new["subsets"] = subsets
        new["metadata"] = dict(current["metadata"], labels=body["metadata"]["labels"])
        with contextlib.suppress(ApiError):
            self.registry._update(rt, current, new, None)

    def _sync_slices(
        self, ns: str, name: str, svc: Obj | None, groups: dict[tuple[tuple[str, int, str], ...], list[Obj]]
    ) -> None:
        """The Service's slices: one per distinct port set (one empty slice when no pod matches)."""
        rt = self.registry.catalogue.types.get(SLICES)
        if rt is None:
            return
        existing = [
            o
            for o in self.store.iter(SLICES, ns)
            if (o["metadata"].get("labels") or {}).get(SERVICE_NAME) == name
            and (o["metadata"].get("labels") or {}).get(MANAGED_BY) == SLICE_CONTROLLER
        ]
        if svc is None or not (svc.get("spec") or {}).get("selector"):
            for o in existing:
                with contextlib.suppress(ApiError):
                    self.registry.delete(rt, ns, o["metadata"]["name"], {})
            return
        wanted = groups or {(): []}
        labels = {**(svc["metadata"].get("labels") or {}), SERVICE_NAME: name, MANAGED_BY: SLICE_CONTROLLER}
        by_ports = {_port_key(o.get("ports")): o for o in existing}
        bodies: list[Obj] = []
        for ports, endpoints in wanted.items():
            port_list = [{"name": n, "protocol": proto, "port": p} for n, p, proto in ports] if endpoints else None
            bodies.append({"addressType": "IPv4", "endpoints": endpoints or None, "ports": port_list})
        matched = [by_ports.pop(_port_key(body["ports"]), None) for body in bodies]
        # As the real reconciler: a slice that would be created reuses one that would be deleted (its name).
        spare = list(by_ports.values())
        for i, current in enumerate(matched):
            if current is None and spare:
                matched[i] = spare.pop()
        for body, current in zip(bodies, matched, strict=True):
            if current is None:
                owner = {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": name,
                    "uid": svc["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
                md = {
                    "generateName": f"{name}-",
                    "namespace": ns,
                    "labels": labels,
                    "annotations": {TRIGGER_TIME: now_iso()},
                    "ownerReferences": [owner],
                }
                created = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": md, **body}
                with contextlib.suppress(ApiError):
                    self.registry.create(rt, ns, created)
                continue
            if all(current.get(k) == v for k, v in body.items()) and current["metadata"].get("labels") == labels:
                continue
            new = {**current, **body}
            annotations = {**(current["metadata"].get("annotations") or {}), TRIGGER_TIME: now_iso()}
            new["metadata"] = dict(current["metadata"], labels=labels, annotations=annotations)
            with contextlib.suppress(ApiError):
                self.registry._update(rt, current, new, None)
        for stale in spare:
            with contextlib.suppress(ApiError):
                self.registry.delete(rt, ns, stale["metadata"]["name"], {})


def _port_key(ports: Any) -> Any:
    return tuple(sorted((p.get("name"), p.get("port"), p.get("protocol")) for p in ports or []))


def _slice_endpoint(pod: Obj, svc: Obj) -> Obj:
    """One pod as an EndpointSlice endpoint (ready only when not terminating; serving as the pod's Ready)."""
    ready = _ready(pod)
    terminating = bool(pod["metadata"].get("deletionTimestamp"))
    publish = bool(svc["spec"].get("publishNotReadyAddresses"))
    out: Obj = {
        "addresses": [pod["status"]["podIP"]],
        "conditions": {
            "ready": publish or (ready and not terminating),
            "serving": publish or ready,
            "terminating": terminating,
        },
        "targetRef": {
            "kind": "Pod",
            "namespace": pod["metadata"]["namespace"],
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        },
    }
    if (pod.get("spec") or {}).get("nodeName"):
        out["nodeName"] = pod["spec"]["nodeName"]
    return out


def _ready(pod: Obj) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def _resolve(svc_port: Obj, pod: Obj) -> tuple[str, int, str] | None:
    target = svc_port.get("targetPort", svc_port.get("port"))
    proto = svc_port.get("protocol", "TCP")
    name = svc_port.get("name", "")
    if isinstance(target, int):
        return (name, target, proto)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == target and p.get("protocol", "TCP") == proto:
                return (name, int(p["containerPort"]), proto)
    return None
