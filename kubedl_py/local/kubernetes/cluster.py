"""A real Kubernetes cluster for kubedl-py on one machine: the control plane, the CRDs, the controller's
identity from deploy/, and node agents.

Why one class: ``kubedl-py local up --control-plane kubernetes``, the real test tier and the benchmarks all
need the same assembly, and it must be the one an operator gets from ``kubectl apply -f deploy/``: the CRDs
generated from the models, the ServiceAccount, ClusterRole and bindings rendered from templates/ (so RBAC is
enforced on the controller by the real server), and a controller that authenticates as that ServiceAccount
with a token from the TokenRequest API.

Optionally a :class:`~kubedl_py.local.faultproxy.FaultProxy` sits between the controller and the API server:
tests inject faults there and count the controller's requests, as they do inside the embedded server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubedl_py.api.crd import all_crds
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import Resource
from kubedl_py.templates import ManifestOptions
from kubedl_py.templates.render import DEFAULT_NAMESPACE

from ..faultproxy import FaultProxy
from .controlplane import ControlPlaneOptions, KubernetesControlPlane
from .install import CONTROLLER_IDENTITY_KINDS, apply, manifest_documents, service_account_token

log = logging.getLogger(__name__)

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
#: the ServiceAccount the rendered Deployment runs as
CONTROLLER_SERVICE_ACCOUNT = "kubedl-py-controller"


@dataclass
class KubernetesClusterOptions:
    control_plane: ControlPlaneOptions = field(default_factory=ControlPlaneOptions)
    #: the install manifests' options (namespace, gang scheduler...) for the controller's identity
    manifests: ManifestOptions = field(default_factory=ManifestOptions)
    #: put a fault-injecting, request-counting proxy between the controller and the API server
    fault_proxy: bool = False


class KubernetesCluster:
    """Start with ``async with KubernetesCluster(...) as cluster``; see the module docstring."""

    def __init__(self, options: KubernetesClusterOptions | None = None) -> None:
        self.options = options or KubernetesClusterOptions()
        self.control_plane = KubernetesControlPlane(self.options.control_plane)
        self.proxy: FaultProxy | None = None
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
            await self.control_plane.start()
            async with KubeClient(kubeconfig=self.admin_kubeconfig) as kube:
                await install_crds(kube)
                await apply(kube, manifest_documents(self.options.manifests, kinds=CONTROLLER_IDENTITY_KINDS))
            if self.options.fault_proxy:
                self.proxy = FaultProxy(self.control_plane.url, self.control_plane.ssl_context())
                await self.proxy.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None
        await self.control_plane.stop()

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
    from .install import FIELD_MANAGER

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


def _point_at(kubeconfig: Path, server: str) -> None:
    """Send a kubeconfig's requests to ``server`` (the plain-HTTP fault proxy) instead of the API server."""
    import yaml

    from .kubeconfig import write_kubeconfig

    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"] = {"server": server}
    write_kubeconfig(kubeconfig, config)
