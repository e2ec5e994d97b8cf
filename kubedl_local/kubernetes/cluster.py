"""A real Kubernetes cluster for kubedl-py on one machine: the control plane, the CRDs, the controller's
identity from deploy/, and node agents.

Why one class: ``kubedl-py local up --control-plane kubernetes``, the real test tier and the benchmarks all
need the same assembly, and it must be the one an operator gets from ``kubectl apply -f deploy/``: the CRDs
generated from the models, the ServiceAccount, ClusterRole and bindings rendered from templates/ (so RBAC is
enforced on the controller by the real server), and a controller that authenticates as that ServiceAccount
with a token from the TokenRequest API.

Optionally a :class:`~kubedl_local.faultproxy.FaultProxy` sits between the controller and the API server:
tests inject faults there and count the controller's requests, as they do inside the embedded server.

With ``install=False`` the cluster starts bare (no CRDs, no controller identity), and with the ``container``
runtime its node runs pods whose images are in the local podman store in containers: together, the place
where ``kubectl apply -f deploy/kubedl-py.yaml`` installs the controller as a Deployment, from its image,
exactly as on any cluster (``tests/test_install.py``, the e2e ``in-cluster`` target).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kubedl_local.faultproxy import FaultProxy
from kubedl_local.kubernetes.controlplane import NODE_AGENT_USER, ControlPlaneOptions, KubernetesControlPlane
from kubedl_local.kubernetes.install import (
    ADMISSION_KINDS,
    CONTROLLER_IDENTITY_KINDS,
    apply,
    manifest_documents,
    service_account_token,
)
from kubedl_local.kubernetes.real_node import RealNode, RealNodeOptions
from kubedl_local.node import (
    AgentSettings,
    KubeletTLS,
    NodeAgent,
    NodeSpec,
    Runtime,
    SimulatedRuntime,
    agent_client_settings,
    ensure_local_range,
    primary_ipv4,
    simulated_node_ip,
)
from kubedl_local.node.devices import GpuDiscovery, NodeDevices, host_node_devices
from kubedl_local.node.dra import DEVICE_CLASSES, DRIVER_ROLE, DraDevices, device_classes, driver_rules
from kubedl_local.node.spec import DEFAULT_CAPACITY
from kubedl_py.api.crd import all_crds
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import AlreadyExists, NotFound
from kubedl_py.kube.resources import Resource
from kubedl_py.templates import ManifestOptions
from kubedl_py.templates.render import DEFAULT_NAMESPACE

log = logging.getLogger(__name__)

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
#: the ServiceAccount the rendered Deployment runs as
CONTROLLER_SERVICE_ACCOUNT = "kubedl-py-controller"


RUNTIMES = ("simulated", "process", "container", "kubelet")
#: runtimes whose one node is this host ("container": processes, and podman for pods whose images are here)
HOST_RUNTIMES = ("process", "container")
#: the real node's Service range: off loopback, so that kube-proxy forwards it (the agents' is 127.x)
REAL_NODE_SERVICE_CIDR = "10.96.0.0/16"


@dataclass
class KubernetesClusterOptions:
    control_plane: ControlPlaneOptions = field(default_factory=ControlPlaneOptions)
    #: the install manifests' options (namespace, gang scheduler...) for the controller's identity
    manifests: ManifestOptions = field(default_factory=ManifestOptions)
    #: put a fault-injecting, request-counting proxy between the controller and the API server
    fault_proxy: bool = False
    #: how many nodes the node agent registers (0: none; tests add their own with :meth:`add_node`)
    nodes: int = 1
    #: how their pods run: "simulated" (annotations decide), "process" (one node, real processes),
    #: "container" (one node: pods whose images are all in the local podman store run in containers, the
    #: others as processes; see kubedl_local/node/containers.py) or "kubelet" (a real node: containerd,
    #: kubelet, kube-proxy, CNI and CoreDNS, see kubedl_local/kubernetes/real_node/; the other nodes, if any,
    #: are simulated)
    runtime: str = "simulated"
    #: install the CRDs and the controller's identity (Namespace, ServiceAccount, RBAC) from deploy/ at start;
    #: False leaves a bare cluster, for ``kubectl apply -f deploy/kubedl-py.yaml`` to install everything
    install: bool = True
    #: the process node's pod network (non-hostNetwork pods, root only): Linux bridge name and pod CIDR
    bridge: str = "kubedl0"
    pod_cidr: str = "10.244.0.0/16"
    #: capacity and labels of every node (merged over the agent's defaults); on the process node the extended
    #: resources among them are pretend devices, handed to containers as a device plugin would
    node_resources: dict[str, str] = field(default_factory=dict)
    node_labels: dict[str, str] = field(default_factory=dict)
    #: where the process runtime keeps container logs, hosts files and volumes (None: a temporary dir)
    state_dir: Path | None = None
    agent: AgentSettings = field(default_factory=lambda: AgentSettings(watch_all_bound_pods=True))
    #: how the process node finds this machine's GPUs (None: NVML, then nvidia-smi; kubedl_local/node/devices.py)
    gpu_discovery: GpuDiscovery | None = None
    #: the real node's options (runtime "kubelet")
    real_node: RealNodeOptions | None = None
    #: devices every node publishes as a DRA driver (``--node-devices``; kubedl_local/node/dra.py)
    node_devices: DraDevices | None = None


def node_name(i: int) -> str:
    return f"local-node-{i}"


class KubernetesCluster:
    """Start with ``async with KubernetesCluster(...) as cluster``; see the module docstring."""

    def __init__(self, options: KubernetesClusterOptions | None = None) -> None:
        self.options = options or KubernetesClusterOptions()
        if self.options.runtime not in RUNTIMES:
            raise ValueError(f"runtime {self.options.runtime!r} is not available (supported: {', '.join(RUNTIMES)})")
        if self.options.runtime in HOST_RUNTIMES and self.options.nodes != 1:
            raise ValueError("the process runtime runs exactly 1 node (host ports are the host's); use --nodes 1")
        if self.options.runtime == "kubelet":
            _prepare_real_node(self.options)
        self.control_plane = KubernetesControlPlane(self.options.control_plane)
        self.proxy: FaultProxy | None = None
        self.agent: NodeAgent | None = None
        #: what the process node hands out (GPUs found here, pretend devices); None for simulated nodes
        self.devices: NodeDevices | None = None
        #: the real node (runtime "kubelet")
        self.real_node: RealNode | None = None
        self._agent_client: KubeClient | None = None
        self._next_node = 0
        self._state_tmp: tempfile.TemporaryDirectory[str] | None = None
        self._started = False

    async def __aenter__(self) -> KubernetesCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def admin_kubeconfig(self) -> Path:
        return self.control_plane.admin_kubeconfig

    @property
    def controller_namespace(self) -> str:
        return self.options.manifests.namespace or DEFAULT_NAMESPACE

    async def start(self) -> None:
        self._started = True
        try:
            if self.options.runtime == "kubelet":
                # the machine's one-node lock first: a second real node is refused before anything starts
                self.real_node = RealNode(self.control_plane, self.options.real_node)
                await self.real_node.reserve()
            await self.control_plane.start()
            if self.options.install:
                async with KubeClient(kubeconfig=self.admin_kubeconfig) as kube:
                    await install_crds(kube, all_crds(kubeflow=self.options.manifests.kubeflow_api))
                    await apply(kube, manifest_documents(self.options.manifests, kinds=ADMISSION_KINDS))
                    await apply(kube, manifest_documents(self.options.manifests, kinds=CONTROLLER_IDENTITY_KINDS))
            if self.options.node_devices is not None:
                async with KubeClient(kubeconfig=self.admin_kubeconfig) as kube:
                    await install_local_dra(kube, NODE_AGENT_USER)
            if self.options.fault_proxy:
                self.proxy = FaultProxy(
                    self.control_plane.url, self.control_plane.ssl_context(), self.control_plane.trust_context()
                )
                await self.proxy.start()
            await self._start_agent()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self.agent is not None:
            await self.agent.stop()  # the process runtime stops its processes while the API still answers
            self.agent = None
        if self.real_node is not None:
            await self.real_node.stop()  # and puts the machine back
            self.real_node = None
        if self._agent_client is not None:
            await self._agent_client.close()
            self._agent_client = None
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None
        await self.control_plane.stop()
        if self._state_tmp is not None:
            self._state_tmp.cleanup()
            self._state_tmp = None

    # ------------------------------------------------------------------------------------------ nodes

    async def _start_agent(self) -> None:
        """One node agent for every node, authenticated as ``kubedl-py:node-agent`` (a kubelet's rights)."""
        options = self.options
        runtime: Runtime
        if options.runtime == "kubelet":
            assert self.real_node is not None  # reserved in start()
            await self.real_node.start()
            if options.nodes > 1:
                await self._start_simulated_agent([self.next_node_spec(node_name(i)) for i in range(1, options.nodes)])
            return
        if options.runtime in HOST_RUNTIMES:
            from kubedl_local.node.process_kubelet import LocalProcessRuntime

            if options.state_dir is None:
                self._state_tmp = tempfile.TemporaryDirectory(prefix="kubedl-process-")
            state_dir = options.state_dir or Path(self._state_tmp.name)  # type: ignore[union-attr]
            api = urlparse(self.control_plane.url)
            self.devices = host_node_devices(options.node_resources, options.gpu_discovery)
            runtime = LocalProcessRuntime(
                state_dir=state_dir,
                api_server=(api.hostname or "127.0.0.1", api.port or 443),
                bridge=options.bridge,
                pod_cidr=options.pod_cidr,
                containers=options.runtime == "container",
                service_cidr=self.control_plane.service_cidr,
                devices=self.devices,
            )
            specs = [self._spec("local-node-0", primary_ipv4(), runtime_version=runtime.runtime_version)]
        else:
            runtime = SimulatedRuntime()
            # With no node yet, a cordoned one keeps the agent (which needs one) running for nodes added later.
            count = options.nodes or 1
            specs = [self.next_node_spec(node_name(i)) for i in range(count)]
        self._agent_client = KubeClient(
            kubeconfig=self.control_plane.node_agent_kubeconfig(), settings=agent_client_settings()
        )
        await self._agent_client.open()
        ca = self.control_plane.kubelet_client_ca().read_bytes()
        self.agent = NodeAgent(
            self._agent_client, specs, runtime, tls=KubeletTLS(client_ca_pem=ca), settings=options.agent
        )
        await self.agent.start()
        if options.runtime == "simulated" and options.nodes == 0:
            async with KubeClient(kubeconfig=self.admin_kubeconfig) as kube:
                await kube.patch(NODES, specs[0].name, {"spec": {"unschedulable": True}})

    def _spec(self, name: str, ip: str, **extra: Any) -> NodeSpec:
        found = self.devices.capacity() if self.devices is not None else {}  # the device plugin's part
        capacity = {**DEFAULT_CAPACITY, **found, **self.options.node_resources}
        labels = {**(self.devices.labels() if self.devices is not None else {}), **self.options.node_labels}
        return NodeSpec(name, ip, capacity=capacity, labels=labels, dra=self.options.node_devices, **extra)

    def next_node_spec(
        self, name: str, *, resources: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None
    ) -> NodeSpec:
        """A simulated node's definition with the next free address."""
        ip = simulated_node_ip(self._next_node, ensure_local_range())
        self._next_node += 1
        spec = self._spec(name, ip)
        return NodeSpec(
            name,
            ip,
            capacity={**spec.capacity, **(resources or {})},
            labels={**spec.labels, **(labels or {})},
            dra=spec.dra,
        )

    async def add_node(
        self, name: str, *, resources: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None
    ) -> str:
        """Register one more simulated node (tests bring their own node layouts)."""
        spec = self.next_node_spec(name, resources=resources, labels=labels)
        if self.agent is None and self.real_node is not None:
            await self._start_simulated_agent([spec])  # beside the real node, the first simulated one
            return name
        assert self.agent is not None, "no node agent runs"
        await self.agent.add_node(spec)
        return name

    async def _start_simulated_agent(self, specs: list[NodeSpec]) -> None:
        """The node agent of simulated nodes beside the real one."""
        self._agent_client = KubeClient(
            kubeconfig=self.control_plane.node_agent_kubeconfig(), settings=agent_client_settings()
        )
        await self._agent_client.open()
        ca = self.control_plane.kubelet_client_ca().read_bytes()
        self.agent = NodeAgent(
            self._agent_client, specs, SimulatedRuntime(), tls=KubeletTLS(client_ca_pem=ca), settings=self.options.agent
        )
        await self.agent.start()

    async def remove_node(self, name: str) -> None:
        """The node's machine is gone: its agent stops and the Node object is deleted (pods are then
        garbage-collected by kube-controller-manager, as on a real cluster)."""
        assert self.agent is not None, "no node agent runs"
        await self.agent.remove_node(name)
        async with KubeClient(kubeconfig=self.admin_kubeconfig) as kube:
            with contextlib.suppress(NotFound):
                await kube.delete(NODES, name)

    async def controller_client(self) -> KubeClient:
        """A client authenticated as the rendered controller ServiceAccount (``local up`` runs the
        controller beside the cluster, under the RBAC an operator installs)."""
        path = await self.controller_kubeconfig(self.control_plane.dir / "kubeconfigs" / "controller")
        return KubeClient(kubeconfig=path)

    def write_user_kubeconfig(self, path: Path) -> Path:
        """The administrator's kubeconfig (context ``kubedl-local``, certificates inline) at ``path``."""
        from kubedl_local.kubernetes.kubeconfig import write_kubeconfig

        return write_kubeconfig(path, self.control_plane.admin_config())

    @property
    def url(self) -> str:
        return self.control_plane.url

    async def controller_kubeconfig(self, path: Path, *, seconds: int = 24 * 3600) -> Path:
        """A kubeconfig for the controller's ServiceAccount (through the fault proxy when there is one)."""
        async with KubeClient(kubeconfig=self.admin_kubeconfig) as kube:
            token, _ = await service_account_token(
                kube, self.controller_namespace, CONTROLLER_SERVICE_ACCOUNT, seconds=seconds
            )
        written = self.control_plane.token_kubeconfig(
            path, user=f"system:serviceaccount:{self.controller_namespace}:{CONTROLLER_SERVICE_ACCOUNT}", token=token
        )
        if self.proxy is not None:
            _point_at(written, self.proxy.url)
        return written


async def install_crds(kube: KubeClient, crds: list[dict[str, Any]] | None = None, *, within: float = 60.0) -> None:
    """Create (or server-side apply) the CRDs and wait until the API server serves each kind."""
    from kubedl_local.kubernetes.install import FIELD_MANAGER

    documents = crds if crds is not None else all_crds()
    for crd in documents:
        await kube.patch(
            CRDS, crd["metadata"]["name"], crd, patch_type="apply", field_manager=FIELD_MANAGER, force=True
        )
    deadline = time.monotonic() + within
    for crd in documents:
        names, version = crd["spec"]["names"], crd["spec"]["versions"][0]["name"]
        resource = Resource(crd["spec"]["group"], version, names["plural"], names["kind"])
        while True:
            try:
                await kube.list(resource, namespace="default")
                break
            except NotFound:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)


async def install_local_dra(kube: KubeClient, agent_user: str) -> None:
    """What the local DRA driver needs, as its installer would make it: the DeviceClasses, and the driver's
    rights for the node agents' user (kubedl_local/node/dra.py)."""
    for body in device_classes():
        with contextlib.suppress(AlreadyExists):
            await kube.create(DEVICE_CLASSES, body)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": DRIVER_ROLE}}
    with contextlib.suppress(AlreadyExists):
        await kube.create(CLUSTER_ROLES, {**role, "rules": driver_rules()})
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": DRIVER_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": DRIVER_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": agent_user}],
    }
    with contextlib.suppress(AlreadyExists):
        await kube.create(CLUSTER_ROLE_BINDINGS, binding)


async def create_namespace(kube: KubeClient, name: str, *, labels: dict[str, str] | None = None) -> None:
    """Create a namespace and wait for its default ServiceAccount: a real server refuses pods before that."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if labels:
        body["metadata"]["labels"] = labels
    await kube.create(NAMESPACES, body)
    deadline = time.monotonic() + 30
    while True:
        try:
            await kube.get(SERVICE_ACCOUNTS, "default", namespace=name)
            return
        except NotFound:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


def _prepare_real_node(options: KubernetesClusterOptions) -> None:
    """What the real node needs of the control plane: an API server its pods reach (the host's address, which
    it then publishes as the ``kubernetes`` Service's endpoint) and a Service range kube-proxy can forward."""
    from kubedl_local.kubernetes.real_node import node_address

    if options.nodes < 1:
        raise ValueError("the kubelet runtime runs one real node (and nodes - 1 simulated ones): use --nodes 1 or more")
    if options.control_plane.address == "127.0.0.1":
        options.control_plane.address = node_address()
    if options.control_plane.service_cidr is None:
        options.control_plane.service_cidr = REAL_NODE_SERVICE_CIDR
    if options.real_node is None:
        options.real_node = RealNodeOptions()


def _point_at(kubeconfig: Path, server: str) -> None:
    """Send a kubeconfig's requests to ``server`` (the plain-HTTP fault proxy) instead of the API server."""
    import yaml

    from kubedl_local.kubernetes.kubeconfig import write_kubeconfig

    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"] = {"server": server}
    write_kubeconfig(kubeconfig, config)
