"""``LocalCluster``: the embedded Kubernetes cluster assembled and served, and ``local up``.

It wires the control plane together (store, API server, CRD controller, garbage collector, namespace
controller, scheduler, node lifecycle), serves the API on 127.0.0.1 over plain HTTP, then starts the node
agents (:mod:`kubedl_local.node`) as HTTP clients of that server, exactly as they would run against a
real kube-apiserver: nodes register themselves, pods' status arrives through ``/status``, and
``pods/{name}/log`` is proxied to the agents' HTTPS kubelet endpoints with a client certificate of the
cluster's CA. It writes a kubeconfig once it is ready and offers the test hooks reliability tests need
(evict a pod, lose a node, expire watch history, fault rules, the request log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from kubedl_local import events, pki
from kubedl_local.apiserver import serviceaccounts
from kubedl_local.apiserver.crd import CRDController
from kubedl_local.apiserver.errors import ApiError
from kubedl_local.apiserver.registry import Registry
from kubedl_local.apiserver.resources import Catalogue
from kubedl_local.apiserver.server import ApiServer
from kubedl_local.controllers.endpoints import EndpointsController
from kubedl_local.controllers.garbagecollector import GarbageCollector, NamespaceController
from kubedl_local.controllers.nodelifecycle import NodeLifecycle
from kubedl_local.faults import Faults, RequestLog
from kubedl_local.node.agent import AgentSettings, NodeAgent, Runtime, agent_client_settings
from kubedl_local.node.devices import GpuDiscovery, NodeDevices, host_node_devices
from kubedl_local.node.server import KubeletTLS
from kubedl_local.node.simulated import SimulatedRuntime
from kubedl_local.node.spec import DEFAULT_CAPACITY, NodeSpec, ensure_local_range, primary_ipv4, simulated_node_ip
from kubedl_local.scheduler import Scheduler
from kubedl_local.storage.store import Event, Obj, Store
from kubedl_py.kube.client import KubeClient

log = logging.getLogger(__name__)
#: our own generator: background threads must not move the global one (tests seed it; hypothesis checks it)
_RNG = random.Random()

CONTEXT = "kubedl-local"
DEFAULT_NODE_RESOURCES: dict[str, str] = dict(DEFAULT_CAPACITY)
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

ResourceSpec = Mapping[str, str] | Sequence[Mapping[str, str]] | None
RUNTIMES = ("simulated", "process", "container")
#: the runtimes whose one node is this host: "container" is the process runtime with podman for the pods whose
#: images are in the local store (kubedl_local/node/containers.py)
HOST_RUNTIMES = ("process", "container")
_RUNTIME_VERSIONS = {"simulated": "simulated://1.0", "process": "process://1.0", "container": "podman+process://1.0"}


def node_name(i: int) -> str:
    return f"local-node-{i}"


class LocalCluster:
    """An embedded Kubernetes cluster; use as ``async with LocalCluster(...) as cluster``.

    ``node_resources`` / ``node_labels``: one mapping for every node, or a sequence with one per node.
    Node IPs: simulated nodes 198.18.0.<i+1> (127.0.10.<i+1> when that range cannot be made local, i.e.
    without root); the process runtime's node is the host's primary IPv4 address.
    """

    def __init__(
        self,
        nodes: int = 1,
        runtime: str = "simulated",
        port: int = 0,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        kubeconfig_path: str | os.PathLike[str] | None = None,
        node_resources: ResourceSpec = None,
        node_labels: ResourceSpec = None,
        watch_history: int = 10000,
        service_cidr: str | None = None,
        pod_cidr: str | None = None,
        toleration_seconds: int = 5,
        node_monitor_grace_period: float = 50.0,
        bookmark_interval: float = 5.0,
        restart_backoff: float = 0.1,
        max_restart_backoff: float = 2.0,
        termination_seconds: float = 0.1,
        scheduler: bool = True,
        kubelets: bool = True,
        fault_seed: int | None = None,
        process_bridge: str = "kubedl0",
        defer_kubeconfig: bool = False,
        agent_settings: AgentSettings | None = None,
        publish_root_ca: bool = True,
        gpu_discovery: GpuDiscovery | None = None,
    ) -> None:
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime {runtime!r} is not available (supported: {', '.join(RUNTIMES)})")
        if nodes < 0:
            raise ValueError("nodes must be >= 0")
        if runtime in HOST_RUNTIMES and nodes != 1:
            # Host-network pods of every node would share the host's port space while the scheduler
            # believed each node had its own: refuse instead of scheduling conflicts it cannot see.
            raise ValueError("the process runtime runs exactly 1 node (host ports are the host's); use --nodes 1")
        if not (process_bridge.isalnum() and len(process_bridge) <= 9):  # veths are named <bridge>v<n>
            raise ValueError(f"process_bridge {process_bridge!r}: use 1-9 letters/digits")
        if service_cidr is None:
            # Process runtime: the Service proxy really binds the clusterIPs, so two clusters on one machine
            # must not hand out the same ones; a random loopback /16 keeps them apart.
            service_cidr = f"127.{_RNG.randint(64, 191)}.0.0/16" if runtime in HOST_RUNTIMES else "127.1.0.0/16"
        if pod_cidr is None:
            pod_cidr = "10.244.0.0/16" if runtime in HOST_RUNTIMES else "198.19.0.0/16"
        self.nodes = nodes
        self.runtime = runtime
        self.port = port
        #: the same API over HTTPS (``_serve_tls``), where in-cluster clients in process pods reach it
        self.tls_port = 0
        self.host = host
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._kubeconfig = Path(kubeconfig_path) if kubeconfig_path is not None else None
        self.node_resources = node_resources
        self.node_labels = node_labels
        self.watch_history = watch_history
        self.service_cidr = service_cidr
        self.pod_cidr = pod_cidr
        self.toleration_seconds = toleration_seconds
        #: a node whose Lease is older is Unknown (kube-controller-manager's --node-monitor-grace-period)
        self.node_monitor_grace_period = node_monitor_grace_period
        self.bookmark_interval = bookmark_interval
        self.restart_backoff = restart_backoff
        self.max_restart_backoff = max_restart_backoff
        self.termination_seconds = termination_seconds
        self.run_scheduler = scheduler
        self.run_kubelets = kubelets
        self.process_bridge = process_bridge
        self.defer_kubeconfig = defer_kubeconfig  # the caller calls write_kubeconfig() when it is ready
        # The kube-root-ca.crt ConfigMap in every namespace (process pods' kube-api-access volume reads it);
        # tests that count a namespace's ConfigMaps switch it off.
        self.publish_root_ca = publish_root_ca
        self.agent_settings = agent_settings or AgentSettings(watch_all_bound_pods=runtime == "simulated")
        #: how the process/container runtimes' node finds this machine's GPUs (default: NVML, then nvidia-smi)
        self.gpu_discovery = gpu_discovery
        #: what that node hands out (GPUs found, pretend devices from node_resources); None before start
        self.devices: NodeDevices | None = None
        self.faults = Faults(fault_seed)
        self.request_log = RequestLog()
        self.node_ips: dict[str, str] = {}
        self.agent: NodeAgent | None = None
        self._agent_client: KubeClient | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._state_tmp: tempfile.TemporaryDirectory[str] | None = None
        self._runner: web.AppRunner | None = None
        self._started = False
        self.url = ""

    # ---- lifecycle ----------------------------------------------------------------------------------------

    async def __aenter__(self) -> LocalCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            self._started = True  # let stop() release whatever was set up
            await self.stop()
            raise

    async def _start(self) -> None:
        # The cluster's CA: it signs the API server's kubelet client certificate, the kubelets require
        # client certificates signed by it, and pods find it in the kube-root-ca.crt ConfigMaps.
        self.ca = pki.CertificateAuthority()
        self.kubelet_client = self.ca.issue("kube-apiserver-kubelet-client", organization="system:masters", client=True)
        self.store = Store(history=self.watch_history, data_dir=self.data_dir)
        self.catalogue = Catalogue()
        self.crds = CRDController(self.store, self.catalogue)
        self.registry = Registry(
            self.store, self.catalogue, service_cidr=self.service_cidr, toleration_seconds=self.toleration_seconds
        )
        self.apiserver = ApiServer(
            self.store,
            self.catalogue,
            self.registry,
            kubelet_ssl=pki.client_context(self.kubelet_client),
            faults=self.faults,
            request_log=self.request_log,
            bookmark_interval=self.bookmark_interval,
        )
        self.gc = GarbageCollector(self.registry)
        self.namespaces = NamespaceController(self.registry)
        self.endpoints = EndpointsController(self.registry)
        self.store.listeners.append(self._on_event)
        if self.store.rv == 0:
            # A fresh server's watch window opens before anything exists, as a real API server's watch caches
            # start before its bootstrap objects are made (a restart starts it where the old history ends).
            self.store.open_window()
        self._bootstrap()
        for ns in self.store.iter(("", "namespaces")):  # a restart: namespaces from before get no ADDED event
            asyncio.get_running_loop().call_soon(self._default_sa, ns["metadata"]["name"])
        self.scheduler = Scheduler(self.registry)
        self.node_lifecycle = NodeLifecycle(self.registry, grace_period=self.node_monitor_grace_period)
        self.gc.start()
        self.namespaces.start()
        self.endpoints.start()
        if self.run_scheduler:
            self.scheduler.start()
        self._runner = web.AppRunner(self.apiserver.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        assert server is not None
        sock: socket.socket = server.sockets[0]  # type: ignore[attr-defined]
        self.port = int(sock.getsockname()[1])
        self.url = f"http://{self.host}:{self.port}"
        self.apiserver.host = f"{self.host}:{self.port}"
        self.tls_port = await self._serve_tls()
        self._started = True
        if self.runtime in HOST_RUNTIMES and self.run_kubelets:
            self.devices = host_node_devices(self._pick(self.node_resources, 0), self.gpu_discovery)
        specs = [self._node_spec(i) for i in range(self.nodes)]
        for spec in specs:
            self.node_ips[spec.name] = spec.ip
        if self.run_kubelets and specs:
            await self._start_agent(specs)
        if not self.defer_kubeconfig:
            self.write_kubeconfig()
        log.info("embedded cluster serving at %s (kubeconfig %s)", self.url, self.kubeconfig_path)

    async def _serve_tls(self) -> int:
        """The same API on HTTPS too, with a certificate of the cluster's CA for the ``kubernetes`` Service's
        names and ClusterIP: where an in-cluster client in a process pod (its token, ``ca.crt`` and
        ``KUBERNETES_SERVICE_HOST``) reaches the server, as such clients insist on TLS. Returns its port."""
        assert self._runner is not None
        kubernetes = self.store.get(("", "services"), "default", "kubernetes") or {}
        cluster_ip = str((kubernetes.get("spec") or {}).get("clusterIP") or "")
        names = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost", self.host]
        serving = self.ca.issue("kube-apiserver", sans=[*names, *([cluster_ip] if cluster_ip else [])], server=True)
        site = web.TCPSite(self._runner, self.host, 0, ssl_context=pki.server_context(serving))
        await site.start()
        server = site._server
        assert server is not None
        sock: socket.socket = server.sockets[0]  # type: ignore[attr-defined]
        return int(sock.getsockname()[1])

    async def _start_agent(self, specs: list[NodeSpec]) -> None:
        """The node agents, as HTTP clients of this server (no in-process shortcut)."""
        self._agent_client = KubeClient(configuration=self.configuration, settings=agent_client_settings())
        await self._agent_client.open()
        runtime: Runtime
        if self.runtime in HOST_RUNTIMES:
            from kubedl_local.node.process_kubelet import LocalProcessRuntime

            runtime = LocalProcessRuntime(
                state_dir=self._process_state_dir(),
                restart_backoff=self.restart_backoff,
                max_backoff=self.max_restart_backoff,
                bridge=self.process_bridge,
                pod_cidr=self.pod_cidr,
                # in-pod clients (kubectl in an MPI launcher) insist on TLS: the kubernetes Service is the TLS port
                api_server=(self.host, self.tls_port),
                containers=self.runtime == "container",
                service_cidr=self.service_cidr,
                devices=self.devices,
            )
        else:
            runtime = SimulatedRuntime(
                pod_cidr=self.pod_cidr,
                restart_backoff=self.restart_backoff,
                max_backoff=self.max_restart_backoff,
                termination_seconds=self.termination_seconds,
            )
        self.agent = NodeAgent(
            self._agent_client,
            specs,
            runtime,
            tls=KubeletTLS(client_ca_pem=self.ca.cert_pem),
            settings=self.agent_settings,
        )
        await self.agent.start()

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self.agent is not None:
            await self.agent.stop()  # processes are stopped while the API server still answers
            self.agent = None
        if self._agent_client is not None:
            await self._agent_client.close()
            self._agent_client = None
        if hasattr(self, "apiserver"):
            await self.apiserver.close_streams()
        if hasattr(self, "store"):
            self.store.close_watchers()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if hasattr(self, "node_lifecycle"):
            self.node_lifecycle.stop()
        for component in ("scheduler", "endpoints", "namespaces", "gc"):
            if hasattr(self, component):
                await getattr(self, component).stop()
        if hasattr(self, "store"):
            self.store.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        if self._state_tmp is not None:
            self._state_tmp.cleanup()
            self._state_tmp = None

    def _process_state_dir(self) -> Path:
        """Container logs, hosts files, volumes: under ``data_dir/process`` when given, else a temp dir."""
        if self.data_dir is not None:
            return self.data_dir / "process"
        self._state_tmp = tempfile.TemporaryDirectory(prefix="kubedl-process-")
        return Path(self._state_tmp.name)

    # ---- bootstrap ----------------------------------------------------------------------------------------

    def _bootstrap(self) -> None:
        ns_rt = self.registry.resource("", "namespaces")
        for ns in SYSTEM_NAMESPACES:
            if self.store.get(ns_rt.key, "", ns) is None:
                self.registry.create(ns_rt, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        svc_rt = self.registry.resource("", "services")
        if self.store.get(svc_rt.key, "default", "kubernetes") is None:
            first = str(self.registry.ips.net.network_address + 1)
            self.registry.ips.used.discard(first)
            self.registry.create(
                svc_rt,
                "default",
                {
                    "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                    "spec": {"clusterIP": first, "ports": [{"name": "https", "port": 443, "targetPort": 6443}]},
                },
            )

    def _on_event(self, ev: Event) -> None:
        # The service account controller: every namespace gets a "default" ServiceAccount; the root-CA
        # publisher: every namespace gets (and keeps) the kube-root-ca.crt ConfigMap.
        if ev.rkey == ("", "namespaces") and ev.type == "ADDED":
            asyncio.get_running_loop().call_soon(self._default_sa, ev.obj["metadata"]["name"])
        elif (
            ev.rkey == ("", "configmaps")
            and ev.type == "DELETED"
            and ev.obj["metadata"]["name"] == serviceaccounts.ROOT_CA_CONFIGMAP
        ):
            asyncio.get_running_loop().call_soon(self._root_ca, ev.obj["metadata"]["namespace"])

    def _default_sa(self, ns: str) -> None:
        with contextlib.suppress(ApiError):
            self.registry.create(self.registry.resource("", "serviceaccounts"), ns, {"metadata": {"name": "default"}})
        self._root_ca(ns)

    def _root_ca(self, ns: str) -> None:
        if (
            not self.publish_root_ca
            or self.store.get(("", "configmaps"), ns, serviceaccounts.ROOT_CA_CONFIGMAP) is not None
        ):
            return
        with contextlib.suppress(ApiError):  # a namespace going away refuses new content
            self.registry.create(
                self.registry.resource("", "configmaps"), ns, serviceaccounts.root_ca_configmap(self.ca.cert_pem)
            )

    @staticmethod
    def _pick(spec: ResourceSpec, i: int) -> dict[str, str]:
        if spec is None:
            return {}
        if isinstance(spec, Mapping):
            return {str(k): str(v) for k, v in spec.items()}
        return {str(k): str(v) for k, v in spec[i].items()} if i < len(spec) else {}

    def _node_spec(
        self, i: int, resources: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None
    ) -> NodeSpec:
        name = node_name(i)
        ip = primary_ipv4() if self.runtime in HOST_RUNTIMES else simulated_node_ip(i, ensure_local_range())
        res = dict(DEFAULT_NODE_RESOURCES)
        lab: dict[str, str] = {}
        if self.runtime in HOST_RUNTIMES and self.devices is not None:
            res.update(self.devices.capacity())  # as the device plugin advertises them
            lab.update(self.devices.labels())  # as GPU feature discovery labels the node
        res.update(self._pick(self.node_resources, i))
        res.update(resources or {})
        lab.update(self._pick(self.node_labels, i))  # nothing else of ours: the real control plane's nodes have none
        lab.update(labels or {})
        return NodeSpec(
            name=name,
            ip=ip,
            capacity=res,
            labels=lab,
            os_image=f"kubedl-py {self.runtime} node",
            runtime_version=_RUNTIME_VERSIONS[self.runtime],
        )

    # ---- public accessors ---------------------------------------------------------------------------------

    @property
    def kubeconfig_path(self) -> Path:
        if self._kubeconfig is None:
            if self.data_dir is not None:
                self._kubeconfig = self.data_dir / "kubeconfig"
            else:
                self._tmp = tempfile.TemporaryDirectory(prefix="kubedl-local-")
                self._kubeconfig = Path(self._tmp.name) / "kubeconfig"
        return self._kubeconfig

    def kubeconfig(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": CONTEXT, "cluster": {"server": self.url}}],
            "users": [{"name": CONTEXT, "user": {}}],
            "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}],
            "current-context": CONTEXT,
        }

    def write_kubeconfig(self) -> None:
        path = self.kubeconfig_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        tmp.replace(path)  # appears complete or not at all: readiness can be polled on the file

    async def controller_client(self) -> KubeClient:
        """A client for a controller running beside the cluster (``local up``); this server has no auth."""
        return KubeClient(configuration=self.configuration)

    @property
    def configuration(self) -> Any:
        """A ``kubernetes_asyncio.client.Configuration`` pointed at this cluster."""
        from kubernetes_asyncio.client import Configuration

        cfg = Configuration()
        cfg.host = self.url
        return cfg

    # ---- test hooks ---------------------------------------------------------------------------------------

    def _require_agent(self) -> NodeAgent:
        if self.agent is None:
            raise ValueError("this cluster runs no node agents (kubelets=False)")
        return self.agent

    async def evict_pod(
        self, namespace: str, name: str, message: str = "The node was low on resource: memory. "
    ) -> Obj:
        """Evict like the kubelet under node pressure: phase Failed, reason Evicted (the pod object stays).
        Returns the pod as written."""
        return await self._require_agent().evict(namespace, name, message)

    async def lose_node(self, name: str, status: str = "Unknown") -> None:
        """The node's agent stops heartbeating and acting; the node lifecycle then marks it Ready=Unknown
        (or NotReady with ``status="False"``), taints it and evicts its pods; see nodelifecycle."""
        if status not in ("Unknown", "False"):
            raise ValueError("status must be 'Unknown' or 'False'")
        await self._require_agent().freeze(name)
        self.node_lifecycle.lose(name, status)

    async def restore_node(self, name: str) -> None:
        """The node's agent is back: Ready=True, taints removed, its pods resume (terminating ones finish)."""
        self.node_lifecycle.restore(name)
        await self._require_agent().thaw(name)

    async def remove_node(self, name: str) -> None:
        """The node's machine is gone: its agent stops, the Node object is deleted, the pod garbage
        collector force-deletes its pods."""
        agent = self._require_agent()
        if agent.manages(name):
            await agent.remove_node(name)
        self.node_lifecycle.remove(name)
        self.node_ips.pop(name, None)

    async def add_node(
        self, resources: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None
    ) -> str:
        """A new simulated node registers itself; returns its name once the Node exists."""
        if self.runtime in HOST_RUNTIMES:
            raise ValueError("the process runtime runs exactly 1 node")
        i = len(self.node_ips)
        while node_name(i) in self.node_ips:
            i += 1
        spec = self._node_spec(i, resources, labels)
        self.node_ips[spec.name] = spec.ip
        await self._require_agent().add_node(spec)
        return spec.name

    def container_pid(self, namespace: str, pod: str, container: str) -> int | None:
        """PID of a running container's process (process runtime; tests SIGKILL it to play a crash)."""
        agent = self._require_agent()
        pid = getattr(agent.runtime, "container_pid", None)
        if pid is None:
            raise ValueError("container_pid needs the process runtime")
        result: int | None = pid(namespace, pod, container)
        return result

    def expire_watch_history(self, resource: str | None = None, group: str = "") -> None:
        """Forget watch history: watches resuming from an older resourceVersion get 410 Expired."""
        self.store.expire_history((group, resource) if resource is not None else None)

    def record_event(self, obj: Obj, type_: str, reason: str, message: str, component: str = "test") -> None:
        events.record(self.registry, obj, type_, reason, message, component=component)

    def get(self, resource: str, name: str, namespace: str = "", group: str = "") -> Obj | None:
        """Read an object straight from the store (tests; no HTTP)."""
        return self.store.get((group, resource), namespace, name)
