"""The scheduler: binds pending pods to nodes, as kube-scheduler's default plugins would.

Filters: node name/selector/required node affinity, taints and tolerations, ``spec.unschedulable``,
resource fit (cpu, memory, pods and extended resources against allocatable) and host ports (a pod declaring
``hostPort`` P never lands on a node where a live pod declares P, like the NodePorts plugin). Among feasible
nodes it picks the least loaded. Unschedulable pods get ``PodScheduled=False``/``Unschedulable`` and a
``FailedScheduling`` event and are retried whenever pods or nodes change. It works on the store directly
(in-process), in batches, so a burst of 1,600 pods costs one pass over the cluster per batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from typing import Any

from . import events
from .admission import parse_quantity
from .apiserver import bind_pod
from .errors import ApiError
from .registry import Registry, now_iso
from .selection import Requirement
from .store import Event, Obj

log = logging.getLogger(__name__)

PODS = ("", "pods")
NODES = ("", "nodes")


def pod_requests(pod: Obj) -> dict[str, float]:
    spec = pod.get("spec") or {}
    total: dict[str, float] = defaultdict(float)
    for c in spec.get("containers") or []:
        for r, q in (((c.get("resources") or {}).get("requests")) or {}).items():
            total[r] += parse_quantity(q, r)
    for c in spec.get("initContainers") or []:  # init containers run one at a time: max, not sum
        for r, q in (((c.get("resources") or {}).get("requests")) or {}).items():
            total[r] = max(total[r], parse_quantity(q, r))
    return dict(total)


def host_ports(pod: Obj) -> list[tuple[str, str, int]]:
    out = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            hp = p.get("hostPort")
            if hp:
                out.append((p.get("hostIP") or "0.0.0.0", p.get("protocol", "TCP"), int(hp)))
    return out


def _ports_conflict(want: list[tuple[str, str, int]], used: set[tuple[str, str, int]]) -> bool:
    for ip, proto, port in want:
        for uip, uproto, uport in used:
            if port == uport and proto == uproto and (ip == uip or "0.0.0.0" in (ip, uip)):
                return True
    return False


def tolerates(pod: Obj, taint: dict[str, Any]) -> bool:
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        op = t.get("operator", "Equal")
        if not t.get("key") and op == "Exists":
            return True
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _affinity_ok(pod: Obj, labels: dict[str, str], node_name: str) -> bool:
    req = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not req:
        return True
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!", "Gt": ">", "Lt": "<"}
    for term in req.get("nodeSelectorTerms") or []:
        ok = True
        for e in term.get("matchExpressions") or []:
            r = Requirement(
                e.get("key", ""), ops.get(e.get("operator", ""), "in"), [str(v) for v in e.get("values") or []]
            )
            if not r.matches(labels):
                ok = False
        for e in term.get("matchFields") or []:
            if e.get("key") == "metadata.name":
                r = Requirement("n", ops.get(e.get("operator", ""), "in"), [str(v) for v in e.get("values") or []])
                if not r.matches({"n": node_name}):
                    ok = False
        if ok:
            return True
    return False


class Scheduler:
    def __init__(self, registry: Registry, name: str = "default-scheduler") -> None:
        self.registry = registry
        self.store = registry.store
        self.name = name
        self.pending: dict[tuple[str, str], None] = {}
        self.unschedulable: dict[tuple[str, str], str] = {}  # key -> last message
        # Incremental accounting of live bound pods, so a cycle never rescans every pod in the cluster.
        self.used: dict[str, defaultdict[str, float]] = {}
        self.ports: dict[str, Counter[tuple[str, str, int]]] = {}
        self.accounted: dict[tuple[str, str], tuple[str, dict[str, float], list[tuple[str, str, int]]]] = {}
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.store.listeners.append(self._on_event)

    def start(self) -> None:
        for pod in self.store.iter(PODS):
            self._account((pod["metadata"]["namespace"], pod["metadata"]["name"]), pod)
            if self._wants(pod):
                self.pending[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = None
        self._task = asyncio.create_task(self._run(), name="local-scheduler")
        self.wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _wants(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (
            not spec.get("nodeName")
            and spec.get("schedulerName", "default-scheduler") in ("", self.name)
            and not pod["metadata"].get("deletionTimestamp")
            and not spec.get("schedulingGates")
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
        )

    def _retry_unschedulable(self) -> None:
        if self.unschedulable:
            for key in self.unschedulable:
                self.pending[key] = None
            self.wake.set()

    def _account(self, key: tuple[str, str], pod: Obj | None) -> None:
        node = ((pod or {}).get("spec") or {}).get("nodeName")
        live = bool(node) and ((pod or {}).get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        prev = self.accounted.get(key)
        if prev is not None and live and prev[0] == node:
            return  # requests and ports are immutable: nothing to redo
        if prev is not None:
            del self.accounted[key]
            u = self.used[prev[0]]
            for r, q in prev[1].items():
                u[r] -= q
            u["pods"] -= 1
            self.ports[prev[0]].subtract(prev[2])
        if live and pod is not None and node:
            reqs = pod_requests(pod)
            hp = host_ports(pod)
            u = self.used.setdefault(node, defaultdict(float))
            for r, q in reqs.items():
                u[r] += q
            u["pods"] += 1
            self.ports.setdefault(node, Counter()).update(hp)
            self.accounted[key] = (node, reqs, hp)

    def _on_event(self, ev: Event) -> None:
        if ev.rkey == PODS:
            md = ev.obj["metadata"]
            key = (md["namespace"], md["name"])
            self._account(key, None if ev.type == "DELETED" else ev.obj)
            if ev.type == "DELETED":
                self.pending.pop(key, None)
                self.unschedulable.pop(key, None)
                self._retry_unschedulable()
                return
            if self._wants(ev.obj):
                if key not in self.unschedulable:
                    self.pending[key] = None
                    self.wake.set()
            else:
                self.pending.pop(key, None)
                self.unschedulable.pop(key, None)
                old_phase = ((ev.old or {}).get("status") or {}).get("phase")
                phase = (ev.obj.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed") and old_phase != phase:
                    self._retry_unschedulable()
        elif ev.rkey == NODES:
            self._retry_unschedulable()

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(0)  # let a burst of creates land so one pass schedules them together
            try:
                self._cycle()
            except Exception:
                log.exception("scheduler cycle failed")

    def _cycle(self) -> None:
        if not self.pending:
            return
        batch = list(self.pending)
        self.pending.clear()
        nodes = sorted(self.store.iter(NODES), key=lambda n: n["metadata"]["name"])
        for n in nodes:
            self.used.setdefault(n["metadata"]["name"], defaultdict(float))
            self.ports.setdefault(n["metadata"]["name"], Counter())
        for key in batch:
            found = self.store.get(PODS, key[0], key[1])
            if found is None or not self._wants(found):
                self.unschedulable.pop(key, None)
                continue
            pod = found
            node, why = self._place(pod, nodes)
            if node is None:
                self._mark_unschedulable(pod, key, why)
                continue
            try:
                bound = bind_pod(self.registry, key[0], key[1], node)
            except ApiError as e:
                log.debug("binding %s/%s failed: %s", key[0], key[1], e.message)
                continue
            self.unschedulable.pop(key, None)  # (binding accounted the pod through the store event)
            events.record(
                self.registry,
                bound,
                "Normal",
                "Scheduled",
                f"Successfully assigned {key[0]}/{key[1]} to {node}",
                component=self.name,
            )

    def _place(self, pod: Obj, nodes: list[Obj]) -> tuple[str | None, str]:
        spec = pod.get("spec") or {}
        reqs = pod_requests(pod)
        want_ports = host_ports(pod)
        selector = spec.get("nodeSelector") or {}
        reasons: dict[str, int] = defaultdict(int)
        best: tuple[float, str] | None = None
        for n in nodes:
            name = n["metadata"]["name"]
            labels = n["metadata"].get("labels") or {}
            nspec = n.get("spec") or {}
            if any(labels.get(k) != v for k, v in selector.items()) or not _affinity_ok(pod, labels, name):
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                continue
            if nspec.get("unschedulable") and not tolerates(
                pod, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
            ):
                reasons["node(s) were unschedulable"] += 1
                continue
            bad_taint = next(
                (
                    t
                    for t in nspec.get("taints") or []
                    if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, t)
                ),
                None,
            )
            if bad_taint is not None:
                reasons[
                    f"node(s) had untolerated taint {{{bad_taint.get('key')}: {bad_taint.get('value', '')}}}".replace(
                        ": }", "}"
                    )
                ] += 1
                continue
            alloc = (n.get("status") or {}).get("allocatable") or {}
            u = self.used[name]
            short = None
            if u["pods"] + 1 > parse_quantity(alloc.get("pods", 110)):
                short = "Too many pods"
            for r, q in reqs.items():
                if q <= 0:
                    continue
                cap = parse_quantity(alloc[r], r) if r in alloc else 0.0
                if u[r] + q > cap + 1e-9:
                    short = f"Insufficient {r}"
                    break
            if short:
                reasons[short] += 1
                continue
            if want_ports and _ports_conflict(want_ports, {p for p, n in self.ports[name].items() if n > 0}):
                reasons["node(s) didn't have free ports for the requested pod ports"] += 1
                continue
            score = u["pods"]
            if best is None or score < best[0]:
                best = (score, name)
        if best is not None:
            return best[1], ""
        detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: kv[0]))
        return (
            None,
            f"0/{len(nodes)} nodes are available: {detail}." if detail else f"0/{len(nodes)} nodes are available.",
        )

    def _mark_unschedulable(self, pod: Obj, key: tuple[str, str], why: str) -> None:
        if self.unschedulable.get(key) == why:
            return  # same verdict: no new status write or event, as the scheduler's backoff would dedupe
        self.unschedulable[key] = why
        status = dict(pod.get("status") or {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": why,
                "lastProbeTime": None,
                "lastTransitionTime": now_iso(),
            }
        )
        status["conditions"] = conds
        new = dict(pod, status=status)
        new["metadata"] = dict(pod["metadata"], resourceVersion=str(self.store.next_rv()))
        self.store.put(PODS, new, pod)
        events.record(self.registry, new, "Warning", "FailedScheduling", why, component=self.name)
