"""``ProcessNode``: the runtime side of the process kubelet, in the shape of the CRI.

Why a facade: the kubelet should think in pods and containers, not in netns, bind mounts and listeners.
The calls mirror the CRI a real kubelet uses — ``RunPodSandbox`` (``create_pod_sandbox``),
``CreateContainer``+``StartContainer`` (``start_container``), ``StopContainer`` (``ContainerProcess.stop``),
``RemovePodSandbox`` (``remove_pod_sandbox``) — plus the node-wide Service plumbing that kube-proxy and
cluster DNS provide (``set_services``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .hosts import DEFAULT_CLUSTER_DOMAIN, HostsFiles, PodIdentity, ServiceRecord
from .logs import ContainerLog
from .netns import PodInterface, PodNetwork
from .proxy import Resolver, ServicePort, ServiceProxy
from .runner import ContainerProcess, ContainerSpec, PodRef, ProcessRuntime
from .sandbox import Sandbox, SandboxUnavailable, check_mount_sandbox, is_root

log = logging.getLogger(__name__)

#: The default node IP (host-network pods' ``status.podIP``/``hostIP``); the agent passes the host's own.
NODE_IP = "127.0.0.1"


@dataclass(frozen=True, kw_only=True)
class ServiceInfo:
    """What the node needs of a Service (and, if headless, its ready endpoints' IPs).

    ``cluster_ip`` ``None`` (or ``"None"``) means headless: no proxy listener, and the hosts files map the
    names to ``endpoint_ips`` instead.
    """

    namespace: str
    name: str
    cluster_ip: str | None
    ports: Sequence[int] = ()
    endpoint_ips: Sequence[str] = ()

    @property
    def headless(self) -> bool:
        return self.cluster_ip in (None, "", "None")


@dataclass(kw_only=True)
class PodSandbox:
    """A pod's isolation: its IP, hosts file, and (pod network) netns. Shared by its containers."""

    pod: PodRef
    host_network: bool
    ip: str
    hostname: str
    hosts_file: Path | None
    interface: PodInterface | None = None
    sandbox: Sandbox = field(default_factory=Sandbox)


class ProcessNode:
    """Runs pods' containers as processes, with per-pod DNS and (as root) per-pod network namespaces.

    ``resolver(ServicePort) -> [Backend(ip, port), ...]`` is called by the Service proxy for each new
    connection; the kubelet implements it from its view of Services (targetPort) and EndpointSlices.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        resolver: Resolver,
        cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
        base_env: Mapping[str, str] | None = None,
        pod_cidr: str = "10.244.0.0/16",
        bridge: str = "kubedl0",
        hosts_sandbox: bool = True,
        node_ip: str = NODE_IP,
        service_cidr: str | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        #: known: pod netns route it to the host's proxy; None: the proxy also listens inside each pod netns
        self.service_cidr = service_cidr
        self.node_ip = node_ip
        self.runtime = ProcessRuntime(self.state_dir, base_env=base_env)
        self.hosts = HostsFiles(self.state_dir / "hosts", cluster_domain=cluster_domain)
        self.proxy = ServiceProxy(resolver)
        self._pod_cidr = pod_cidr
        self._bridge = bridge
        self._network: PodNetwork | None = None
        self._network_lock = asyncio.Lock()  # two pods' first sandboxes must not both set up the bridge
        self._hosts_sandbox = hosts_sandbox
        self._sandboxes: dict[str, PodSandbox] = {}

    async def start(self) -> None:
        """Start the runtime; check that the hosts-file sandbox works here (fails loudly if not)."""
        if self._hosts_sandbox:
            reason = check_mount_sandbox(rootless=not is_root())
            if reason is not None:
                raise SandboxUnavailable(
                    f"cannot give pod processes their own /etc/hosts: {reason}. Without root this needs "
                    "unprivileged user namespaces; pass hosts_sandbox=False to run without cluster DNS"
                )
        await self.runtime.start()

    async def close(self, grace_seconds: float = 5.0) -> None:
        """Stop all containers, proxies and pod networks. Safe to call after a partial start."""
        try:
            await self.runtime.close(grace_seconds)
        finally:
            await self.proxy.close()
            if self._network is not None:
                await self._network.close()
                self._network = None

    async def __aenter__(self) -> ProcessNode:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _pod_network(self) -> PodNetwork:
        async with self._network_lock:
            if self._network is None:
                network = PodNetwork(bridge=self._bridge, cidr=self._pod_cidr, service_cidr=self.service_cidr)
                await network.start()  # raises PodNetworkUnavailable (clear message) without root
                self._network = network
            return self._network

    async def create_pod_sandbox(
        self, pod: PodRef, *, host_network: bool, hostname: str | None = None, subdomain: str | None = None
    ) -> PodSandbox:
        """Set up the pod's network and hosts file. Host network: the node IP, the node's hostname.
        Pod network (root only): own netns and IP, hostname = ``hostname`` or the pod name."""
        existing = self._sandboxes.get(pod.uid)
        if existing is not None:
            return existing
        iface: PodInterface | None = None
        if host_network:
            ip, name = self.node_ip, socket.gethostname()
        else:
            iface = await (await self._pod_network()).create_pod(pod.uid)
            ip, name = iface.ip, hostname or pod.name
        fqdn = None
        if subdomain and not host_network:
            fqdn = f"{name}.{subdomain}.{pod.namespace}.svc.{self.hosts.cluster_domain}"
        hosts_file = None
        if self._hosts_sandbox:
            hosts_file = self.hosts.pod_file(pod.uid, PodIdentity(hostname=name, ip=ip, fqdn=fqdn))
        sandbox = Sandbox(
            hosts_file=hosts_file,
            netns=iface.netns if iface else None,
            hostname=None if host_network else name,
        )
        if iface is not None and self.service_cidr is None:
            await self.proxy.attach_netns(iface.netns)
        ps = PodSandbox(
            pod=pod,
            host_network=host_network,
            ip=ip,
            hostname=name,
            hosts_file=hosts_file,
            interface=iface,
            sandbox=sandbox,
        )
        self._sandboxes[pod.uid] = ps
        return ps

    async def start_container(
        self, sandbox: PodSandbox, spec: ContainerSpec, *, restart_count: int = 0
    ) -> ContainerProcess:
        """Start a container of the pod in its sandbox; see ``ProcessRuntime.start_container`` for errors."""
        return await self.runtime.start_container(
            sandbox.pod, spec, restart_count=restart_count, sandbox=sandbox.sandbox
        )

    async def remove_pod_sandbox(self, sandbox: PodSandbox, *, grace_seconds: float = 30.0) -> None:
        """Stop the pod's running containers (grace, then SIGKILL) and tear down its netns and hosts file.
        Logs stay until ``runtime.remove_pod_logs``."""
        for c in self.runtime.running():
            if c.pod.uid == sandbox.pod.uid:
                await c.stop(grace_seconds)
        if sandbox.interface is not None:
            if self.service_cidr is None:
                await self.proxy.detach_netns(sandbox.interface.netns)
            if self._network is not None:
                await self._network.delete_pod(sandbox.pod.uid)
        self.hosts.remove_pod(sandbox.pod.uid)
        self._sandboxes.pop(sandbox.pod.uid, None)

    def container_log(self, pod: PodRef, container: str, *, previous: bool = False) -> ContainerLog:
        return self.runtime.container_log(pod, container, previous=previous)

    async def set_services(self, services: Iterable[ServiceInfo]) -> None:
        """The complete current set of Services: updates proxy listeners and every pod's hosts file."""
        services = list(services)
        desired: dict[ServicePort, tuple[str, int]] = {}
        records = []
        for s in services:
            if s.headless:
                records.append(ServiceRecord(namespace=s.namespace, name=s.name, ips=list(s.endpoint_ips)))
                continue
            assert s.cluster_ip is not None
            records.append(ServiceRecord(namespace=s.namespace, name=s.name, ips=[s.cluster_ip]))
            for port in s.ports:
                desired[ServicePort(s.namespace, s.name, port)] = (s.cluster_ip, port)
        await self.proxy.set_listeners(desired)
        self.hosts.set_services(records)
