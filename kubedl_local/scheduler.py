"""The scheduler: binds pending pods to nodes, as kube-scheduler's default plugins would.

Filters: node name/selector/required node affinity, taints and tolerations, ``spec.unschedulable``,
resource fit (cpu, memory, pods and extended resources against allocatable), host ports (a pod declaring
``hostPort`` P never lands on a node where a live pod declares P, like the NodePorts plugin) and inter-pod
affinity (below). Among feasible nodes it picks the best inter-pod affinity score, then the least loaded.

Inter-pod affinity follows kube-scheduler's InterPodAffinity plugin: terms select pods by ``labelSelector``
(``matchLabels``/``matchExpressions``) in ``namespaces``/``namespaceSelector`` (default: the pod's own
namespace) and compare nodes by the value of their ``topologyKey`` label. Required affinity needs the
topology label on the node and an existing pod matching all terms in the node's domain -- except for the
first pod of a group: when no pod in the cluster matches and the pod matches its own terms, any node with
the labels will do. Required anti-affinity, the pod's and (symmetrically) existing pods', excludes domains.
Scores add the weights of preferred terms (the pod's, and existing pods' that match it; anti-affinity
subtracts) and 1 per existing pod whose required affinity the pod matches, per topology domain.
Differences, deliberate: the affinity score always outranks load (kube-scheduler normalizes and blends
plugin scores; with weight-100 terms on a lightly loaded cluster the choice is the same), and
``matchLabelKeys``/``mismatchLabelKeys`` are ignored. Affinity costs nothing while neither the incoming pod
nor any placed pod has affinity terms.

Unschedulable pods get ``PodScheduled=False``/``Unschedulable`` and a ``FailedScheduling`` event and are
retried whenever nodes change, a pod goes away or finishes, or the pod's own spec or labels change. It
works on the store directly (in-process), in batches, so a burst of 1,600 pods costs one pass over the
cluster per batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from typing import Any

from kubedl_local import events
from kubedl_local.apiserver.admission import parse_quantity
from kubedl_local.apiserver.errors import ApiError
from kubedl_local.apiserver.registry import Registry
from kubedl_local.apiserver.selection import Requirement
from kubedl_local.apiserver.server import bind_pod
from kubedl_local.storage.store import Event, Obj, now_iso

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


#: kube-scheduler 1.37's NodeDeclaredFeatures plugin, refusing a node that lacks a feature the pod needs
UNDECLARED_FEATURES = "node(s) didn't match Pod's required features"


def needed_features(pod: Obj) -> set[str]:
    """The node features a pod needs (kube-scheduler's inference, ``component-helpers/nodedeclaredfeatures``):
    RestartAllContainersOnContainerExits for a container with a ``RestartAllContainers`` rule."""
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if any(rule.get("action") == "RestartAllContainers" for rule in container.get("restartPolicyRules") or []):
            return {"RestartAllContainersOnContainerExits"}
    return set()


def declares_needed_features(pod: Obj, node: Obj) -> bool:
    needed = needed_features(pod)
    return not needed or needed <= set((node.get("status") or {}).get("declaredFeatures") or [])


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


_SELECTOR_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector: None matches nothing, ``{}`` everything (as affinity terms define it)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        op = _SELECTOR_OPS.get(e.get("operator", ""))
        if op is None or not Requirement(e.get("key", ""), op, [str(v) for v in e.get("values") or []]).matches(labels):
            return False
    return True


class AffinityTerm:
    """One pod (anti-)affinity term of an owner pod, with its namespaces resolved (None: all)."""

    __slots__ = ("namespaces", "selector", "topology_key", "weight")

    def __init__(self, term: Obj, owner_namespace: str, namespace_labels: dict[str, dict[str, str]], weight: int):
        self.selector: Obj | None = term.get("labelSelector")
        self.topology_key: str = term.get("topologyKey", "")
        self.weight = weight
        listed = set(term.get("namespaces") or [])
        ns_selector = term.get("namespaceSelector")
        if ns_selector is None:
            self.namespaces: set[str] | None = listed or {owner_namespace}
        elif not ns_selector:
            self.namespaces = None
        else:
            self.namespaces = listed | {n for n, lab in namespace_labels.items() if selector_matches(ns_selector, lab)}

    def matches(self, pod: Obj) -> bool:
        md = pod.get("metadata") or {}
        if self.namespaces is not None and md.get("namespace") not in self.namespaces:
            return False
        return selector_matches(self.selector, md.get("labels") or {})


def has_pod_affinity(pod: Obj) -> bool:
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    return bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity"))


def affinity_terms(
    pod: Obj, kind: str, required: bool, namespace_labels: dict[str, dict[str, str]]
) -> list[AffinityTerm]:
    """``kind`` is podAffinity or podAntiAffinity; required terms get weight 0."""
    section = (((pod.get("spec") or {}).get("affinity") or {}).get(kind)) or {}
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    if required:
        return [
            AffinityTerm(t, namespace, namespace_labels, 0)
            for t in section.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        ]
    return [
        AffinityTerm(w.get("podAffinityTerm") or {}, namespace, namespace_labels, int(w.get("weight") or 0))
        for w in section.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    ]


# kube-scheduler's default hardPodAffinityWeight: an existing pod's required affinity, seen from the pod it
# attracts, counts this much in scoring.
HARD_POD_AFFINITY_WEIGHT = 1
TopologyPair = tuple[str, str]


class InterPodAffinity:
    """What the pods already placed say about one incoming pod: filter verdicts and scores per domain."""

    def __init__(self, pod: Obj, placed: list[tuple[Obj, dict[str, str]]], ns_labels: dict[str, dict[str, str]]):
        self.required = affinity_terms(pod, "podAffinity", True, ns_labels)
        self.required_anti = affinity_terms(pod, "podAntiAffinity", True, ns_labels)
        preferred = affinity_terms(pod, "podAffinity", False, ns_labels)
        preferred_anti = affinity_terms(pod, "podAntiAffinity", False, ns_labels)
        #: domains with existing pods matching all required terms (one count per term's domain)
        self.affinity_counts: Counter[TopologyPair] = Counter()
        #: domains the pod's required anti-affinity excludes
        self.anti_counts: Counter[TopologyPair] = Counter()
        #: domains existing pods' required anti-affinity excludes for this pod
        self.existing_anti: Counter[TopologyPair] = Counter()
        self.scores: defaultdict[TopologyPair, int] = defaultdict(int)
        for other, node_labels in placed:
            if self.required and all(t.matches(other) for t in self.required):
                for t in self.required:
                    if t.topology_key in node_labels:
                        self.affinity_counts[(t.topology_key, node_labels[t.topology_key])] += 1
            for t in self.required_anti:
                if t.topology_key in node_labels and t.matches(other):
                    self.anti_counts[(t.topology_key, node_labels[t.topology_key])] += 1
            for t, sign in [(t, 1) for t in preferred] + [(t, -1) for t in preferred_anti]:
                if t.topology_key in node_labels and t.matches(other):
                    self.scores[(t.topology_key, node_labels[t.topology_key])] += sign * t.weight
            if not has_pod_affinity(other):
                continue
            for t in affinity_terms(other, "podAntiAffinity", True, ns_labels):
                if t.topology_key in node_labels and t.matches(pod):
                    self.existing_anti[(t.topology_key, node_labels[t.topology_key])] += 1
            symmetric = [(t, HARD_POD_AFFINITY_WEIGHT) for t in affinity_terms(other, "podAffinity", True, ns_labels)]
            symmetric += [(t, t.weight) for t in affinity_terms(other, "podAffinity", False, ns_labels)]
            symmetric += [(t, -t.weight) for t in affinity_terms(other, "podAntiAffinity", False, ns_labels)]
            for t, weight in symmetric:
                if t.topology_key in node_labels and t.matches(pod):
                    self.scores[(t.topology_key, node_labels[t.topology_key])] += weight
        self.first_of_group = not self.affinity_counts and all(t.matches(pod) for t in self.required)

    def reject(self, labels: dict[str, str]) -> str | None:
        """Why a node with ``labels`` may not take the pod, or None."""
        if self.required:
            if any(t.topology_key not in labels for t in self.required):
                return "node(s) didn't match pod affinity rules"
            exist = all(self.affinity_counts[(t.topology_key, labels[t.topology_key])] > 0 for t in self.required)
            if not exist and not self.first_of_group:
                return "node(s) didn't match pod affinity rules"
        if any(labels.get(k) == v and n > 0 for (k, v), n in self.anti_counts.items()):
            return "node(s) didn't match pod anti-affinity rules"
        if any(labels.get(k) == v and n > 0 for (k, v), n in self.existing_anti.items()):
            return "node(s) didn't satisfy existing pods anti-affinity rules"
        return None

    def score(self, labels: dict[str, str]) -> int:
        return sum(weight for (k, v), weight in self.scores.items() if labels.get(k) == v)


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
        # Live bound pods and their nodes (for inter-pod affinity), and which of them carry affinity terms:
        # while none does and the incoming pod has none, affinity costs nothing.
        self.placed: dict[tuple[str, str], tuple[str, Obj]] = {}
        self.placed_with_affinity: set[tuple[str, str]] = set()
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
        if live and pod is not None and node:
            self.placed[key] = (node, pod)  # labels may change on a bound pod: keep the newest copy
            if has_pod_affinity(pod):
                self.placed_with_affinity.add(key)
        else:
            self.placed.pop(key, None)
            self.placed_with_affinity.discard(key)
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
                if key not in self.unschedulable or self._pod_changed(ev):
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

    @staticmethod
    @staticmethod
    def _pod_changed(ev: Event) -> bool:
        """The pod itself changed in a way that may make it fit (a toleration added, a label its own affinity
        terms need) -- not the scheduler's own status writes."""
        if ev.old is None:
            return True
        old_labels, labels = ev.old["metadata"].get("labels"), ev.obj["metadata"].get("labels")
        return ev.old.get("spec") != ev.obj.get("spec") or old_labels != labels

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
        best: tuple[float, float, str] | None = None
        inter = self._inter_pod_affinity(pod, nodes)
        for n in nodes:
            name = n["metadata"]["name"]
            labels = n["metadata"].get("labels") or {}
            nspec = n.get("spec") or {}
            if not declares_needed_features(pod, n):
                reasons[UNDECLARED_FEATURES] += 1
                continue
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
            if inter is not None:
                rejected = inter.reject(labels)
                if rejected:
                    reasons[rejected] += 1
                    continue
            rank = (-inter.score(labels) if inter is not None else 0.0, u["pods"])
            if best is None or rank < best[:2]:
                best = (*rank, name)
        if best is not None:
            return best[2], ""
        detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: kv[0]))
        return (
            None,
            f"0/{len(nodes)} nodes are available: {detail}." if detail else f"0/{len(nodes)} nodes are available.",
        )

    def _inter_pod_affinity(self, pod: Obj, nodes: list[Obj]) -> InterPodAffinity | None:
        if not has_pod_affinity(pod) and not self.placed_with_affinity:
            return None
        node_labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
        ns_labels = {
            ns["metadata"]["name"]: ns["metadata"].get("labels") or {} for ns in self.store.iter(("", "namespaces"))
        }
        placed = [(other, node_labels.get(node, {})) for node, other in self.placed.values()]
        return InterPodAffinity(pod, placed, ns_labels)

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
