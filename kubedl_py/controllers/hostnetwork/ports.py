"""Host-port choice for host-network pods: ports unique per node, chosen where they are least used.

What Kubernetes guarantees, and so what this module needs to do: every port a host-network pod listens on is
declared as a ``hostPort`` (``pods.build_pod`` declares the framework port; Kubernetes makes every other
``containerPort`` of a host-network pod a ``hostPort``), and kube-scheduler's ``NodePorts`` filter never puts two
pods declaring the same port on one node. So a port only has to be unique *per node*, and the scheduler enforces
that. The controller's part is to choose, before the pod is scheduled, a port that is *likely* free where the
pod will land, so the scheduler has many nodes to choose from.

The measure of "likely free" is a port's *use*: how many pods hold it. A pod holds its ports when it is bound
to a node (wherever it runs, its node cannot take another pod with that port) or when it is one of ours not yet
bound (it will land soon: counting it spreads a burst of new pods over the range). A foreign pod that is not
bound holds nothing anywhere, so a Pending pod declaring thousands of ports in another namespace changes
nothing for anyone. A reservation (a port chosen for a pod about to be created) counts like a pod until the pod
is seen or the reservation is given back.

``reserve`` returns a port of least use and, among the ports of that use, never one the caller asks to avoid (the
job's other pods' ports, so replicas of one job can share a node; the old port of a failover, so the Service is
re-pointed to a port no stopping process holds) unless nothing else of that use is left; a port no node could
take the pod with comes after every other. It never
refuses: with a small range the ports are used on several nodes each, and the scheduler finds the node where
the chosen one is free; when there is none, the pod is Pending with the scheduler's ``NodePorts`` reason and
the controller chooses again after a while (``hostnetwork.py``).

Ports are kept in buckets by use (an array per use count, with a position index), so choosing a port and
changing a port's use are O(1): no scan of the range per pod. The state is rebuilt from the pod informer
after a restart; reservations are only in memory, which is safe because a reservation becomes a pod (and so is
observed) or is given back when the create fails.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_RANGE = (20000, 30000)

#: random draws from a bucket before it is scanned for a port the caller does not avoid
_DRAWS = 8


def parse_range(text: str) -> tuple[int, int]:
    """``"20000-30000"`` -> (20000, 30000), both bounds inclusive."""
    try:
        low_text, high_text = text.split("-", 1)
        low, high = int(low_text), int(high_text)
    except ValueError:
        raise ValueError(f"port range {text!r} is not LOW-HIGH, e.g. 20000-30000") from None
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"port range {text!r} must satisfy 1 <= LOW <= HIGH <= 65535")
    return low, high


@dataclass
class HostPortAllocator:
    low: int = DEFAULT_RANGE[0]
    high: int = DEFAULT_RANGE[1]
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        #: use -> the ports of the range with that use (any order), and each port's place in its bucket
        self._buckets: dict[int, list[int]] = {0: list(range(self.low, self.high + 1))}
        self._place: dict[int, int] = {port: i for i, port in enumerate(self._buckets[0])}
        self._use: dict[int, int] = {}
        #: pod uid -> the ports it holds (only pods that hold ports: bound, or ours)
        self._pod_ports: dict[str, tuple[int, ...]] = {}
        #: "ns/name" of a pod about to be created -> its reserved ports
        self._reserved: dict[str, list[int]] = {}

    # -- state --------------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self.high - self.low + 1

    def use(self, port: int) -> int:
        """How many pods (and reservations) hold ``port``, wherever they are."""
        return self._use.get(port, 0)

    @property
    def least_use(self) -> int:
        return min(use for use, ports in self._buckets.items() if ports)

    def _move(self, port: int, delta: int) -> None:
        before = self._use.get(port, 0)
        after = before + delta
        if after < 0:
            return
        if after:
            self._use[port] = after
        else:
            self._use.pop(port, None)
        if not self.low <= port <= self.high:
            return
        bucket = self._buckets[before]
        index = self._place[port]
        last = bucket.pop()
        if last != port:
            bucket[index] = last
            self._place[last] = index
        if not bucket and before:
            del self._buckets[before]
        target = self._buckets.setdefault(after, [])
        self._place[port] = len(target)
        target.append(port)

    # -- observing the cluster ----------------------------------------------------------------------

    def observe_pod(self, uid: str, pod_key: str, ports: Iterable[int], *, holds: bool = True) -> None:
        """A live host-network pod declaring ``ports``. ``holds``: whether it holds them (it is bound to a node,
        or it is ours); a pod that does not hold them is forgotten. A pod seen replaces the reservation made for
        its name."""
        new = tuple(sorted(set(ports))) if holds else ()
        old = self._pod_ports.get(uid, ())
        if new != old:
            for port in old:
                self._move(port, -1)
            for port in new:
                self._move(port, +1)
            if new:
                self._pod_ports[uid] = new
            else:
                self._pod_ports.pop(uid, None)
        if holds:
            for port in self._reserved.pop(pod_key, []):
                self._move(port, -1)

    def forget_pod(self, uid: str) -> None:
        """The pod is gone or terminal: it holds nothing any more."""
        for port in self._pod_ports.pop(uid, ()):
            self._move(port, -1)

    # -- choosing for a pod about to be created -----------------------------------------------------

    def reserve(
        self, pod_key: str, *, avoid: Iterable[int] = (), reuse: Iterable[int] = (), bad: Iterable[int] = ()
    ) -> int:
        """A port of least use for the pod ``pod_key`` (``ns/name``), counted until the pod is observed or the
        reservation released. Preferences, in order, each only when nothing better is left: not in ``avoid``
        (the job's other ports) nor ``reuse`` nor ``bad``; then a port in ``reuse`` (its own old port: free again
        once the old pod is gone); then an avoided one; a ``bad`` one (no node could take the pod with it) last."""
        avoided, reused, never = set(avoid), set(reuse), set(bad)
        port = self._choose(avoided, reused, never)
        self._reserved.setdefault(pod_key, []).append(port)
        self._move(port, +1)
        return port

    def _choose(self, avoided: set[int], reused: set[int], never: set[int]) -> int:
        """Least use first, the preferences within one use: a port held on more nodes may be held on every node,
        so it is never taken over a less used one the caller merely avoids (found by an adversary, 2026-12-01:
        in a full range the one free slot, a port the job held on another node, was never offered). Only a
        ``bad`` port waits for every other."""
        for use in sorted(self._buckets):
            bucket = self._buckets[use]
            for excluded in (avoided | reused | never, avoided | never, never):
                port = self._pick(bucket, excluded)
                if port is not None:
                    return port
        for use in sorted(self._buckets):
            port = self._pick(self._buckets[use], set())
            if port is not None:
                return port
        raise AssertionError("the range is never empty")

    def _pick(self, bucket: list[int], avoid: set[int]) -> int | None:
        if not bucket:
            return None
        for _ in range(_DRAWS):
            port = bucket[self.rng.randrange(len(bucket))]
            if port not in avoid:
                return port
        left = [port for port in bucket if port not in avoid]  # a bucket mostly avoided: rare and small
        return self.rng.choice(left) if left else None

    def release(self, pod_key: str, port: int) -> None:
        """Give back a reservation whose pod was not created."""
        reserved = self._reserved.get(pod_key)
        if not reserved or port not in reserved:
            return
        reserved.remove(port)
        if not reserved:
            del self._reserved[pod_key]
        self._move(port, -1)


def pod_host_ports(pod: dict[str, object]) -> list[int]:
    """The host ports a pod declares (for host-network pods Kubernetes sets hostPort = containerPort)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return []
    host_network = bool(spec.get("hostNetwork"))
    ports = []
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for declared in container.get("ports") or []:
            port = declared.get("hostPort") or (declared.get("containerPort") if host_network else None)
            if isinstance(port, int) and port > 0:
                ports.append(port)
    return ports
