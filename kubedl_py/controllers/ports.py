"""Host-port allocation for host-network pods: collision-free across the cluster, O(1) per port.

A port is *held* while a live host-network pod anywhere in the cluster declares it (learned from a
cluster-wide pod informer), or while a reconcile has reserved it for a pod it is about to create. The
allocator hands out a random port from the configured range that nobody holds; the scheduler's host-port
rule then keeps two pods with the same port off one node even if two controllers disagreed.

The free ports of the range live in an array with a position index, so picking a random free port and
taking or returning one are O(1) — no scan of the range per pod. The state is rebuilt from the informer
after a restart; reservations are only in memory, which is safe because a reservation becomes a pod (and
so is observed) or is released when the create fails.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_RANGE = (20000, 30000)


class PortsExhausted(Exception):
    """No port of the range is free."""


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
        self._free: list[int] = list(range(self.low, self.high + 1))
        self._position: dict[int, int] = {port: i for i, port in enumerate(self._free)}
        self._holders: dict[int, set[str]] = {}
        self._pod_ports: dict[str, tuple[int, ...]] = {}

    # -- state --------------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self.high - self.low + 1

    @property
    def free_count(self) -> int:
        return len(self._free)

    def is_held(self, port: int) -> bool:
        return bool(self._holders.get(port))

    def _take(self, port: int, holder: str) -> None:
        holders = self._holders.setdefault(port, set())
        if not holders and port in self._position:
            last = self._free.pop()
            index = self._position.pop(port)
            if last != port:
                self._free[index] = last
                self._position[last] = index
        holders.add(holder)

    def _give_back(self, port: int, holder: str) -> None:
        holders = self._holders.get(port)
        if not holders or holder not in holders:
            return
        holders.discard(holder)
        if not holders:
            del self._holders[port]
            if self.low <= port <= self.high:
                self._position[port] = len(self._free)
                self._free.append(port)

    # -- observing the cluster ----------------------------------------------------------------------

    def observe_pod(self, uid: str, pod_key: str, ports: Iterable[int]) -> None:
        """A live host-network pod holds ``ports``; it replaces any reservation made for its name."""
        new = tuple(sorted(set(ports)))
        old = self._pod_ports.get(uid, ())
        if new == old:
            return
        for port in old:
            self._give_back(port, f"pod:{uid}")
        for port in new:
            self._take(port, f"pod:{uid}")
            self._give_back(port, f"reserved:{pod_key}")
        self._pod_ports[uid] = new

    def forget_pod(self, uid: str) -> None:
        """The pod is gone or terminal: its ports are free unless someone else holds them."""
        for port in self._pod_ports.pop(uid, ()):
            self._give_back(port, f"pod:{uid}")

    # -- reserving for a pod about to be created ----------------------------------------------------

    def reserve(self, pod_key: str, *, avoid: Iterable[int] = ()) -> int:
        """A free port for the pod ``pod_key`` (``ns/name``), held until the pod is observed or released."""
        avoid_set = set(avoid)
        if not self._free or (len(self._free) <= len(avoid_set) and set(self._free) <= avoid_set):
            raise PortsExhausted(f"no free host port in {self.low}-{self.high}")
        while True:
            port = self._free[self.rng.randrange(len(self._free))]
            if port not in avoid_set:
                break
        self._take(port, f"reserved:{pod_key}")
        return port

    def release(self, pod_key: str, port: int) -> None:
        """Give back a reservation whose pod was not created."""
        self._give_back(port, f"reserved:{pod_key}")


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
