"""Pod network mode (root only): a network namespace and IP per pod on one Linux bridge.

Why: pods that are not in host-network mode expect their own IP, so every replica can listen on the same
port (23456, 2222) and peers reach each other by pod IP — that is what the controller's default mode
produces. Host-network pods need none of this and work without root.

Topology (names derive from the bridge name, so a crashed run's leftovers can be found and removed)::

    host netns                                     pod netns "<bridge>-<n>"
    ----------                                     ------------------------
    bridge <bridge>  <gateway IP>/<plen>   <--->   eth0 <pod IP>/<plen>, default route via gateway
      `- veth "<bridge>v<n>" ----------------------'   lo up (127.0.0.0/8 local, as everywhere)

Pod <-> pod and host <-> pod traffic is switched on the bridge (same subnet): no IP forwarding, no NAT, no
iptables/nft (neither is installed here). A pod reaches processes on the host, such as host-network pods,
at the gateway IP.

How pods reach Services. ClusterIPs live in a loopback range (127.N.0.0/16) and the Service proxy listens on
them in the host netns, but inside a pod netns 127.0.0.0/8 is that netns's own loopback: packets to
127.N.x.y never leave the pod. Options considered:

1. DNAT clusterIP -> gateway with iptables/nft: not always installed, and we install nothing at runtime.
2. (chosen when the Service CIDR is known, ``PodNetwork(service_cidr=...)``) Route the Service CIDR via the
   gateway inside each pod netns, in its *local* table (which the kernel consults first, and where the
   longer prefix beats ``local 127.0.0.0/8``), with ``route_localnet`` on the pod's ``eth0`` and on the
   bridge so that neither side drops the loopback destination (or, on the way back, the loopback source) as
   martian. The host delivers the packets to the proxy's host-netns listeners like any local traffic.
   Nothing listens inside the pod netns, so a pod may serve on ``0.0.0.0:<any Service's port>`` (the
   controller's metrics port 8080 is also its Service's port), and backends see the client pod's own IP.
3. Have the proxy also listen on the gateway IP and map Service names to it: one port space for all
   Services, so two Services with the same port collide.
4. (without a Service CIDR) The proxy *also opens its listeners inside each pod netns*: a socket belongs to
   the netns it was created in, so a helper thread ``setns()``-es into the pod netns, creates and binds the
   listening socket on ``clusterIP:port`` (on that netns's loopback), and switches back; the event loop then
   accepts on it like on any socket. Limits: one listening socket per (Service port, pod netns); a pod
   cannot bind the wildcard address on a port any Service uses (the listener on ``clusterIP:port`` in its
   netns conflicts); backends see the gateway IP.

Either way the backend connection is made from the host netns, so it can reach pod IPs (via the bridge)
*and* host-network pods (the node IP and hostPort); every pod, whatever its network mode, uses the same
clusterIPs and the same hosts file. Pods have no route to the outside world (that would need IP forwarding
plus NAT). IPv4 only.

Default pod CIDR 10.244.0.0/16 (the flannel/kind default): it is checked against the host's routes at
start and refused if it overlaps, so pick another with ``PodNetwork(cidr=...)`` on such hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import ipaddress
import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .sandbox import NETNS_DIR, Sandbox, is_root

log = logging.getLogger(__name__)

T = TypeVar("T")

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_setns = _libc.setns
_setns.argtypes = [ctypes.c_int, ctypes.c_int]
_setns.restype = ctypes.c_int

_MAX_IFNAME = 15  # IFNAMSIZ - 1
_LOCK_DIR = Path("/run/lock")


class PodNetworkUnavailable(RuntimeError):
    """Pod-network mode cannot run here. Host-network pods (annotation kubedl.io/network-mode: host or
    hostNetwork: true) work without it."""


def _require_root() -> None:
    if not is_root():
        raise PodNetworkUnavailable(
            "pod-network pods need root (network namespaces, veth pairs and a bridge); run the cluster as "
            "root, or use host-network pods (annotation kubedl.io/network-mode: host), which work without root"
        )


def run_in_netns(netns: str, fn: Callable[[], T]) -> T:
    """Call ``fn`` in a fresh thread switched into network namespace ``netns``; return its result.

    Why a fresh thread: ``setns(CLONE_NEWNET)`` changes only the calling thread, so the event loop's thread
    stays in the host netns; the helper thread switches back before ending and is discarded either way.
    Sockets created by ``fn`` stay in ``netns`` for their whole life. Needs root (CAP_SYS_ADMIN).
    """
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                target_fd = os.open(NETNS_DIR / netns, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    if _setns(target_fd, _CLONE_NEWNET) != 0:
                        e = ctypes.get_errno()
                        raise OSError(e, f"setns into {netns}: {os.strerror(e)}")
                finally:
                    os.close(target_fd)
                try:
                    result.append(fn())
                finally:
                    if _setns(own, _CLONE_NEWNET) != 0:
                        log.error("could not switch helper thread back from netns %s", netns)
            finally:
                os.close(own)
        except BaseException as e:  # re-raised in the caller's thread
            error.append(e)

    t = threading.Thread(target=target, name=f"netns-{netns}", daemon=True)
    t.start()
    t.join()
    if error:
        raise error[0]
    return result[0]


@dataclass(frozen=True, kw_only=True)
class PodInterface:
    """What the kubelet needs to know about a pod's network: put ``ip`` in ``status.podIP``."""

    key: str
    netns: str
    ip: str
    gateway: str
    host_veth: str

    def sandbox(self, *, hosts_file: Path | None = None, hostname: str | None = None) -> Sandbox:
        """A ``Sandbox`` entering this pod's netns, optionally with its hosts file and hostname."""
        return Sandbox(netns=self.netns, hosts_file=hosts_file, hostname=hostname)


async def _ip(*args: str, stdin: str | None = None, check: bool = True) -> str:
    proc = await asyncio.create_subprocess_exec(
        "ip",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({proc.returncode}): {err.decode().strip()}")
    return out.decode()


class PodNetwork:
    """Bridge + per-pod netns/veth/IP allocation. ``start()`` first (also removes a crashed run's leftovers),
    ``create_pod()``/``delete_pod()`` per pod, ``close()`` at the end. One per bridge name: a second live
    cluster using the same bridge name is refused (lock file), so stale-cleanup never hits a live network.
    """

    def __init__(
        self, *, bridge: str = "kubedl0", cidr: str = "10.244.0.0/16", service_cidr: str | None = None
    ) -> None:
        if not bridge.isalnum() or len(bridge) > _MAX_IFNAME - 6:
            raise ValueError(f"bridge name {bridge!r}: use at most {_MAX_IFNAME - 6} letters/digits")
        self.bridge = bridge
        self.network = ipaddress.IPv4Network(cidr)
        #: routed to the host from inside each pod (see the module docstring); None: the proxy listens in pods
        self.service_cidr = str(ipaddress.IPv4Network(service_cidr, strict=False)) if service_cidr else None
        if self.network.num_addresses < 4:
            raise ValueError(f"pod CIDR {cidr} is too small")
        self.gateway = self.network.network_address + 1
        self._hosts = self.network.num_addresses - 2  # without network and broadcast addresses
        self._next = 2
        self._pods: dict[str, PodInterface] = {}
        self._lock_fd: int | None = None
        self._mutex = asyncio.Lock()

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        _require_root()
        self._take_lock()
        await self.cleanup_stale()
        await self._check_cidr_free()
        plen = self.network.prefixlen
        await _ip(
            "-batch",
            "-",
            stdin=(
                f"link add {self.bridge} type bridge\n"
                f"addr add {self.gateway}/{plen} dev {self.bridge}\n"
                f"link set {self.bridge} up\n"
            ),
        )
        if self.service_cidr is not None:
            # Loopback clusterIPs arrive on the bridge from pods: not martian here.
            sysctl = Path(f"/proc/sys/net/ipv4/conf/{self.bridge}/route_localnet")
            await asyncio.to_thread(sysctl.write_text, "1\n")
        log.info("pod network up: bridge %s gateway %s cidr %s", self.bridge, self.gateway, self.network)

    async def close(self) -> None:
        """Remove every pod netns, veth and the bridge."""
        if self._lock_fd is None:
            return
        await self.cleanup_stale()
        self._pods.clear()
        os.close(self._lock_fd)
        self._lock_fd = None

    async def __aenter__(self) -> PodNetwork:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _take_lock(self) -> None:
        _LOCK_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(_LOCK_DIR / f"kubedl-{self.bridge}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PodNetworkUnavailable(
                f"bridge {self.bridge} is in use by another running cluster; choose another bridge name"
            ) from None
        self._lock_fd = fd  # released by the kernel if we die, which is what marks leftovers as stale

    async def cleanup_stale(self) -> None:
        """Delete netns ``<bridge>-*``, links ``<bridge>v*`` and the bridge (ours, or a crashed run's)."""
        _require_root()
        if NETNS_DIR.is_dir():
            for ns in sorted(NETNS_DIR.iterdir()):
                if ns.name.startswith(f"{self.bridge}-"):
                    await _ip("netns", "del", ns.name, check=False)
        links = json.loads(await _ip("-j", "link", "show") or "[]")
        for link in links:
            name = link.get("ifname", "")
            if name == self.bridge or (name.startswith(f"{self.bridge}v") and name[len(self.bridge) + 1 :].isdigit()):
                await _ip("link", "del", name, check=False)

    async def _check_cidr_free(self) -> None:
        routes = json.loads(await _ip("-j", "-4", "route", "show", "table", "all") or "[]")
        for r in routes:
            dst = r.get("dst", "")
            if dst in ("default", "") or r.get("type") in ("broadcast",) or r.get("dev") == self.bridge:
                continue
            with contextlib.suppress(ValueError):
                net = ipaddress.IPv4Network(dst, strict=False)
                if net.overlaps(self.network):
                    raise PodNetworkUnavailable(
                        f"pod CIDR {self.network} overlaps the host route {dst} dev {r.get('dev')}; "
                        "configure another pod CIDR"
                    )

    # -- pods --------------------------------------------------------------------------------------------

    def _allocate(self) -> int:
        # Round-robin over the range so a just-freed IP is not handed out again at once (stale peers).
        used = {int(ipaddress.IPv4Address(p.ip)) - int(self.network.network_address) for p in self._pods.values()}
        for _ in range(self._hosts):
            n = self._next
            self._next = 2 if self._next >= self._hosts else self._next + 1
            if n not in used:
                return n
        raise PodNetworkUnavailable(f"pod CIDR {self.network} is exhausted")

    async def create_pod(self, key: str) -> PodInterface:
        """Create the netns, veth and IP of pod ``key`` (e.g. its uid); idempotent per key."""
        if self._lock_fd is None:
            raise RuntimeError("PodNetwork.start() was not called")
        async with self._mutex:
            if key in self._pods:
                return self._pods[key]
            n = self._allocate()
            ip = self.network.network_address + n
            pod = PodInterface(
                key=key,
                netns=f"{self.bridge}-{n}",
                ip=str(ip),
                gateway=str(self.gateway),
                host_veth=f"{self.bridge}v{n}",
            )
            self._pods[key] = pod
        try:
            await _ip(
                "-batch",
                "-",
                stdin=(
                    f"netns add {pod.netns}\n"
                    f"link add {pod.host_veth} type veth peer name eth0 netns {pod.netns}\n"
                    f"link set {pod.host_veth} master {self.bridge} up\n"
                ),
            )
            await _ip(
                "-n",
                pod.netns,
                "-batch",
                "-",
                stdin=(
                    "link set lo up\n"
                    f"addr add {pod.ip}/{self.network.prefixlen} dev eth0\n"
                    "link set eth0 up\n"
                    f"route add default via {pod.gateway}\n"
                    + (
                        f"route add {self.service_cidr} via {pod.gateway} dev eth0 table local\n"
                        if self.service_cidr is not None
                        else ""
                    )
                ),
            )
            if self.service_cidr is not None:
                await asyncio.to_thread(run_in_netns, pod.netns, _route_localnet_eth0)
        except BaseException:
            await self._remove(pod)
            raise
        log.info("pod network for %s: netns %s ip %s", key, pod.netns, pod.ip)
        return pod

    async def delete_pod(self, key: str) -> None:
        pod = self._pods.get(key)
        if pod is not None:
            await self._remove(pod)

    async def _remove(self, pod: PodInterface) -> None:
        # Deleting the netns destroys eth0 and with it the host-side veth peer.
        await _ip("netns", "del", pod.netns, check=False)
        await _ip("link", "del", pod.host_veth, check=False)
        self._pods.pop(pod.key, None)

    def pods(self) -> list[PodInterface]:
        return list(self._pods.values())


def _route_localnet_eth0() -> None:
    """In a pod netns (a thread switched into it): let ``eth0`` carry loopback clusterIPs to the host."""
    # /proc/sys/net shows the netns of the thread that opens it: this one, switched into the pod's.
    with open("/proc/sys/net/ipv4/conf/eth0/route_localnet", "w") as f:
        f.write("1\n")


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def bind_listener(host: str, port: int, *, netns: str | None = None, backlog: int = 512) -> socket.socket:
    """A non-blocking listening TCP socket on ``host:port``, created in ``netns`` if given."""

    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(backlog)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    if netns is None:
        return make()
    try:
        return run_in_netns(netns, make)
    except OSError as e:
        if e.errno == errno.EPERM:
            _require_root()
        raise
