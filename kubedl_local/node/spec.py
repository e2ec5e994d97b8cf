"""What a node agent registers: node definitions, their IP addresses, and the Node object built from them.

Why these addresses: a real API server refuses loopback addresses in Endpoints/EndpointSlices ("may not be
in the loopback range"), and a host-network pod's podIP is its node's IP, so node IPs must not be 127.x.
The process runtime's one node is the host itself: its primary IPv4 address (the source address of the
default route). Simulated nodes get addresses from 198.18.0.0/16 and simulated pods from 198.19.0.0/16
(RFC 2544's benchmarking range, not "special" for Kubernetes validation). Their kubelet endpoints must be
reachable on those addresses, so the agent makes the node range local to this host (``ip route add local
198.18.0.0/16 dev lo``, root only, like 127.0.0.0/8 is); without root it falls back to 127.0.10.x and logs
why (fine for the embedded API server, refused by a real one for host-network pods).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubedl_local.node.dra import DraDevices
from kubedl_local.pins import KUBERNETES_VERSION

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: The kubelet version the agents report (nodeInfo.kubeletVersion): the pinned release's, as the real node's
#: kubelet reports it (``kubectl get nodes`` shows it beside a v1.37.2 server, with no skew to explain)
KUBELET_VERSION = f"v{KUBERNETES_VERSION}"
#: The User-Agent of the agents' API requests: tests tell their writes from the controller's by it.
USER_AGENT = f"kubelet/{KUBELET_VERSION} (linux/amd64) kubedl-py-node-agent"
SIMULATED_NODE_CIDR = "198.18.0.0/16"
SIMULATED_POD_CIDR = "198.19.0.0/16"
FALLBACK_NODE_PREFIX = "127.0.10."
DEFAULT_CAPACITY: dict[str, str] = {
    # Deliberately large so scale tests (thousands of pods on one node) fit; override per node.
    "cpu": "1000",
    "memory": "4Ti",
    "pods": "20000",
    "ephemeral-storage": "1Ti",
}
NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40


@dataclass(frozen=True)
class NodeSpec:
    """One node an agent runs: its name, InternalIP, resources and labels.

    ``allocatable`` defaults to ``capacity``. ``kubelet_port`` 0 picks a free port when the kubelet endpoint
    starts (the port is advertised in ``status.daemonEndpoints``).
    """

    name: str
    ip: str
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    allocatable: Mapping[str, str] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    kubelet_port: int = 0
    os_image: str = "kubedl-py node agent"
    runtime_version: str = "simulated://1.0"
    #: ``status.declaredFeatures`` (None: what the runtime implements, :func:`declared_features`)
    declared_features: tuple[str, ...] | None = None
    #: the devices the node's agent publishes as a DRA driver (``--node-devices``; :mod:`.dra`), None: none
    dra: DraDevices | None = None

    def all_labels(self) -> dict[str, str]:
        out = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        out.update(self.labels)
        return out


def node_conditions(now: str, *, ready: bool = True) -> list[Obj]:
    """The kubelet's node conditions, heartbeat at ``now`` (transition times are the server's to keep)."""
    conds = [
        {
            "type": t,
            "status": "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
        }
        for t, reason, message in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conds.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": "kubelet is posting ready status" if ready else "container runtime is down",
            "lastHeartbeatTime": now,
        }
    )
    return conds


#: kube-apiserver 1.37 proxies an exec's WebSocket straight to a node declaring this (execs.py), as to a 1.36+
#: kubelet: every runtime here does
EXEC_WEBSOCKETS = "ExtendWebSocketsToKubelet"
#: the kubelet's RestartAllContainers (a restart rule restarting the pod whole in place): the simulated runtime
#: (simulated.py) and the process runtime, with or without podman (process_kubelet.py), implement it; the
#: scheduler places a pod needing it only on a node declaring it
RESTART_ALL_CONTAINERS = "RestartAllContainersOnContainerExits"
#: the runtimes (``containerRuntimeVersion`` prefixes) that restart a pod whole
RESTART_ALL_RUNTIMES = ("simulated://", "process://", "podman+process://")


#: a node label naming one feature the node does not declare although its runtime has it (a test's node of an
#: older kubelet)
UNDECLARE_LABEL = "local.kubedl.io/undeclare"


def declared_features(spec: NodeSpec) -> list[str]:
    """What the node declares in ``status.declaredFeatures``: the spec's, else what its runtime implements
    less the one its :data:`UNDECLARE_LABEL` label names."""
    if spec.declared_features is not None:
        return list(spec.declared_features)
    features = [EXEC_WEBSOCKETS]
    if spec.runtime_version.startswith(RESTART_ALL_RUNTIMES):
        features.append(RESTART_ALL_CONTAINERS)
    return [feature for feature in features if feature != spec.labels.get(UNDECLARE_LABEL)]


def node_status(spec: NodeSpec, port: int, now: str, boot_id: str) -> Obj:
    """``Node.status`` as the kubelet reports it."""
    allocatable = dict(spec.allocatable if spec.allocatable is not None else spec.capacity)
    conds = node_conditions(now)
    for c in conds:
        c["lastTransitionTime"] = now
    return {
        "capacity": dict(spec.capacity),
        "allocatable": allocatable,
        "conditions": conds,
        "addresses": [{"type": "InternalIP", "address": spec.ip}, {"type": "Hostname", "address": spec.name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "declaredFeatures": declared_features(spec),
        "nodeInfo": {
            "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, spec.name).hex,
            "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, spec.name)),
            "bootID": boot_id,
            "kernelVersion": os.uname().release,
            "osImage": spec.os_image,
            "containerRuntimeVersion": spec.runtime_version,
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def simulated_node_ip(i: int, local_range: bool) -> str:
    """The InternalIP of simulated node ``i``: 198.18.x.y when the range is local here, else 127.0.10.x."""
    if local_range:
        return str(ipaddress.ip_network(SIMULATED_NODE_CIDR).network_address + i + 1)
    return f"{FALLBACK_NODE_PREFIX}{i + 1}" if i < 254 else f"127.0.{10 + (i + 1) // 254}.{(i + 1) % 254 + 1}"


@functools.cache
def ensure_local_range(cidr: str = SIMULATED_NODE_CIDR) -> bool:
    """Make ``cidr`` local to this host (bindable and reachable like 127.0.0.0/8); True when it is.

    Idempotent and left in place on exit (other clusters on the machine may use it); it only affects
    traffic to an address range reserved for benchmarking.
    """
    net = ipaddress.ip_network(cidr)
    probe = str(net.network_address + 1)
    if _bindable(probe):
        return True
    ip = shutil.which("ip")
    if os.geteuid() != 0 or ip is None:
        log.warning(
            "simulated node addresses %s are not local to this host and cannot be made so (%s); using "
            "127.0.10.x instead, which a real API server refuses in Endpoints of host-network pods",
            cidr,
            "not root" if os.geteuid() != 0 else "no 'ip' command",
        )
        return False
    proc = subprocess.run(
        [ip, "route", "replace", "local", cidr, "dev", "lo", "table", "local"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not _bindable(probe):
        log.warning("could not make %s local (%s); using 127.0.10.x node addresses", cidr, proc.stderr.strip())
        return False
    log.info("made %s local to this host (ip route add local %s dev lo) for simulated node endpoints", cidr, cidr)
    return True


def _bindable(ip: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
        return True
    except OSError:
        return False


def primary_ipv4() -> str:
    """The host's primary IPv4 address: the source address of the default route; 127.0.0.1 without one."""
    gateway = _default_gateway()
    if gateway is None:
        log.warning("no IPv4 default route: the node IP is 127.0.0.1 (a real API server refuses it in Endpoints)")
        return "127.0.0.1"
    target = gateway if gateway != "0.0.0.0" else "198.51.100.1"  # a direct default route: any off-link address
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))  # UDP connect sends nothing; it only picks the route and source address
            addr = str(s.getsockname()[0])
    except OSError as e:
        log.warning("cannot find the source address of the default route (%s): the node IP is 127.0.0.1", e)
        return "127.0.0.1"
    return addr


def _default_gateway() -> str | None:
    best: tuple[int, str] | None = None
    try:
        with open("/proc/net/route") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 8 or parts[1] != "00000000" or parts[7] != "00000000":
            continue
        if not int(parts[3], 16) & 0x1:  # RTF_UP
            continue
        gw = socket.inet_ntoa(int(parts[2], 16).to_bytes(4, "little"))
        metric = int(parts[6])
        if best is None or metric < best[0]:
            best = (metric, gw)
    return best[1] if best else None


class IPPool:
    """Pod IPs of one agent's simulated pods: handed out once, given back when the pod object is gone."""

    def __init__(self, cidr: str) -> None:
        self.net = ipaddress.ip_network(cidr, strict=False)
        self.free_list: list[str] = []
        self.next = 2
        self.used: set[str] = set()

    def take(self) -> str:
        while self.free_list:
            ip = self.free_list.pop()
            if ip not in self.used:
                self.used.add(ip)
                return ip
        while self.next < self.net.num_addresses - 1:
            ip = str(self.net.network_address + self.next)
            self.next += 1
            if ip not in self.used:
                self.used.add(ip)
                return ip
        raise RuntimeError(f"pod CIDR {self.net} exhausted")

    def mark(self, ip: str | None) -> None:
        if ip:
            self.used.add(ip)

    def give(self, ip: str | None) -> None:
        if ip and ip in self.used:
            self.used.discard(ip)
            self.free_list.append(ip)
