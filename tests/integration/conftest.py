"""Fixtures: an embedded cluster with the CRDs installed, a client, and the real controller running.

The controller and the cluster meet only over HTTP, exactly as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubedl_local import LocalCluster, node_name
from kubedl_local.faults import Faults, RequestLog
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_py.api import constants as c
from kubedl_py.api.crd import all_crds
from kubedl_py.controllers.setup import ControllerOptions, build_manager
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.informer import InformerSettings
from kubedl_py.kube.manager import Manager
from kubedl_py.kube.resources import NAMESPACES as NAMESPACE_RESOURCE
from kubedl_py.kube.resources import PODS, SERVICES, Resource
from tests.conftest import RealCluster
from tests.tiers import EMBEDDED, KUBERNETES, TIERS, require_tier, selected_tiers

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
PYTORCHJOBS = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
TFJOBS = Resource(c.GROUP, c.VERSION, c.TF_PLURAL, c.TF_KIND)
EVENTS = Resource("", "v1", "events", "Event")


async def eventually(
    probe: Callable[[], Awaitable[Any]], *, within: float = 20.0, interval: float = 0.05, what: str = "condition"
) -> Any:
    """Poll ``probe`` until it returns something truthy, with a deadline (never a bare sleep)."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {within}s waiting for {what}; last value: {last!r}")


async def install_crds(kube: KubeClient) -> None:
    for crd in all_crds(kubeflow=True):
        await kube.create(CRDS, crd)
    for plural in (c.PYTORCH_PLURAL, c.TF_PLURAL):
        resource = Resource(c.GROUP, c.VERSION, plural, "")

        async def served(resource: Resource = resource) -> bool:
            try:
                await kube.list(resource, namespace="default")
            except NotFound:
                return False
            return True

        await eventually(served, what=f"{plural} to be served")


class Kube(KubeClient):
    """The test's client: an administrator of the cluster, and the namespace the test runs in (``ns``)."""

    ns: str = "default"


@dataclass(frozen=True)
class Nodes:
    """The nodes a test needs (``@pytest.mark.nodes(count, labels=[...], resources=[...])``); default: 3."""

    count: int = 3
    labels: Sequence[Mapping[str, str]] = ()
    resources: Sequence[Mapping[str, str]] = ()


@dataclass
class Env:
    """One test's cluster, whichever tier: where to reach it, its nodes, and the hooks tests use.

    ``faults`` and ``request_log`` see the controller's requests (inside the embedded server; in the fault
    proxy between the controller and a real API server)."""

    tier: str
    namespace: str
    node_names: list[str]
    faults: Faults
    request_log: RequestLog
    controller_client: Callable[[], KubeClient]
    #: a user's kubeconfig (administrator; context namespace = the test's) for the SDK and the CLI; on the
    #: real tier it goes through the fault proxy so the tests' faults reach those clients too
    kubeconfig_path: Path
    #: what a controller process runs with: on the real tier the rendered ServiceAccount's token
    controller_kubeconfig_path: Path
    local: LocalCluster | None = None
    real: RealCluster | None = None

    def client(self) -> Kube:
        """An administrator's client straight to the API server, knowing the test's namespace."""
        if self.local is not None:
            kube = Kube(configuration=self.local.configuration)
        else:
            assert self.real is not None
            kube = Kube(kubeconfig=self.real.admin_kubeconfig)
        kube.ns = self.namespace
        return kube


def _nodes_of(request: pytest.FixtureRequest) -> Nodes:
    marker = request.node.get_closest_marker("nodes")
    return Nodes(*marker.args, **marker.kwargs) if marker is not None else Nodes()


@pytest.fixture(params=TIERS)
def tier(request: pytest.FixtureRequest) -> str:
    chosen: str = request.param
    require_tier(chosen)
    if chosen == EMBEDDED and KUBERNETES in selected_tiers() and _in_this_suite(request) and not _EVERYWHERE:
        # A controller behaviour is proven on the real control plane; its run on the embedded one too would only
        # re-prove the embedded cluster, which tests/fidelity, tests/differential, tests/sdk and e2e do
        # (docs/testing.md). Alone, the embedded tier runs this suite: the quick loop needs no Go build.
        pytest.skip(
            "tests/integration runs on the real control plane when that tier is selected (docs/testing.md); "
            "KUBEDL_TEST_TIERS=embedded, or KUBEDL_TEST_INTEGRATION_EVERYWHERE=1, runs it on the embedded one"
        )
    return chosen


#: run tests/integration on the embedded tier also when the real one is selected
_EVERYWHERE = os.environ.get("KUBEDL_TEST_INTEGRATION_EVERYWHERE") == "1"


def _in_this_suite(request: pytest.FixtureRequest) -> bool:
    return Path(str(request.node.path)).resolve().is_relative_to(Path(__file__).resolve().parent)


@pytest.fixture
async def cluster(tier: str, request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    nodes = _nodes_of(request)
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    tmp_path: Path = request.getfixturevalue("tmp_path")
    if tier == EMBEDDED:
        async with LocalCluster(
            nodes=nodes.count,
            runtime="simulated",
            node_labels=list(nodes.labels) or None,
            node_resources=list(nodes.resources) or None,
        ) as local:
            async with KubeClient(configuration=local.configuration) as kube:
                await install_crds(kube)
                await create_namespace(kube, namespace)
            user = _kubeconfig(tmp_path / "kubeconfig", local.url, namespace)
            yield Env(
                tier=tier,
                namespace=namespace,
                node_names=[node_name(i) for i in range(nodes.count)],
                faults=local.faults,
                request_log=local.request_log,
                controller_client=lambda: KubeClient(configuration=local.configuration),
                kubeconfig_path=user,
                controller_kubeconfig_path=user,
                local=local,
            )
        return
    real: RealCluster = request.getfixturevalue("real_cluster")
    names = [f"{namespace}-n{i}" for i in range(nodes.count)]
    try:
        for i, name in enumerate(names):
            labels = nodes.labels[i] if i < len(nodes.labels) else None
            resources = nodes.resources[i] if i < len(nodes.resources) else None
            await real.loop.call(real.cluster.add_node(name, resources=resources, labels=labels))
        async with real.client() as kube:
            await create_namespace(kube, namespace)
        real.proxy.faults.clear()
        real.proxy.request_log.clear()
        yield Env(
            tier=tier,
            namespace=namespace,
            node_names=names,
            faults=real.proxy.faults,
            request_log=real.proxy.request_log,
            controller_client=lambda: KubeClient(kubeconfig=real.controller_kubeconfig),
            kubeconfig_path=_kubeconfig(tmp_path / "kubeconfig", real.proxy.url, namespace),
            controller_kubeconfig_path=real.controller_kubeconfig,
            real=real,
        )
    finally:
        real.proxy.faults.clear()
        # The test's nodes go (their pods with them, as kube-controller-manager collects orphans), and the
        # namespace is deleted without waiting: the next test has its own.
        for name in names:
            with contextlib.suppress(KeyError):
                await real.loop.call(real.cluster.remove_node(name))
        async with real.client() as kube:
            with contextlib.suppress(NotFound):
                await kube.delete(NAMESPACE_RESOURCE, namespace)


def _kubeconfig(path: Path, server: str, namespace: str) -> Path:
    """A kubeconfig for ``server`` (plain HTTP: the embedded server, or the fault proxy, which adds the
    administrator's credentials) whose context namespace is the test's."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "test", "user": {}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
async def kube(cluster: Env) -> AsyncIterator[Kube]:
    async with cluster.client() as client:
        yield client


class RunningController:
    """A controller in a background task, restartable (to test crash/restart behaviour)."""

    def __init__(self, cluster: Env, options: ControllerOptions) -> None:
        self.cluster = cluster
        self.options = options
        self.client: KubeClient | None = None
        self.manager: Manager | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Manager:
        self.client = self.cluster.controller_client()
        await self.client.open()
        self.manager = build_manager(self.client, self.options)
        self.task = asyncio.create_task(self.manager.run())
        manager = self.manager
        await eventually(lambda: _ready(manager), what="controller ready")
        return manager

    async def stop(self, *, crash: bool = False) -> None:
        """Graceful stop, or ``crash``: cancel at once, like a killed process (no lease release...)."""
        if self.task is not None and self.manager is not None:
            if crash:
                self.task.cancel()
            else:
                self.manager.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self.client is not None:
            await self.client.close()
        self.task = self.manager = self.client = None


async def _ready(manager: Manager) -> bool:
    return manager.ready()


def fast_options(**overrides: Any) -> ControllerOptions:
    settings: dict[str, Any] = {
        "workers": 4,
        "informer": InformerSettings(watch_timeout_seconds=30, inactivity_timeout=40.0),
    }
    settings.update(overrides)
    return ControllerOptions(**settings)


@pytest.fixture
async def controller(cluster: Env, kube: Kube) -> AsyncIterator[RunningController]:
    running = RunningController(cluster, fast_options(namespace=cluster.namespace))
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def kubeflow_controller(cluster: Env, kube: Kube) -> AsyncIterator[RunningController]:
    """The controller serving both API groups (``--kubeflow-api``)."""
    running = RunningController(cluster, fast_options(namespace=cluster.namespace, kubeflow_api=True))
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


# ------------------------------------------------------------------------------------------ job helpers


def container(name: str = "pytorch", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "command": ["train"], **extra}


def replica(
    replicas: int = 1,
    *,
    restart_policy: str | None = None,
    exit_code: int | None = None,
    run_seconds: float | None = None,
    name: str = "pytorch",
) -> dict[str, Any]:
    annotations = {}
    if exit_code is not None:
        annotations["local.kubedl.io/exit-code"] = str(exit_code)
    if run_seconds is not None:
        annotations["local.kubedl.io/run-seconds"] = str(run_seconds)
    template: dict[str, Any] = {"spec": {"containers": [container(name)]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    spec: dict[str, Any] = {"replicas": replicas, "template": template}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return spec


def pytorchjob(name: str, *, host: bool = False, services: str | None = None, **spec: Any) -> dict[str, Any]:
    """A PyTorchJob (Master 1, Worker 2 unless ``replicas`` says otherwise); ``services``: the value of
    ``kubedl.io/replica-services`` (``all``: a Service for every replica, not only the Master's)."""
    replicas = spec.pop("replicas", None) or {"Master": replica(1), "Worker": replica(2)}
    metadata: dict[str, Any] = {"name": name}
    annotations = {c.ANNOTATION_NETWORK_MODE: c.NETWORK_MODE_HOST} if host else {}
    if services is not None:
        annotations[c.ANNOTATION_REPLICA_SERVICES] = services
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": metadata,
        "spec": {"pytorchReplicaSpecs": replicas, **spec},
    }


def tfjob(name: str, *, host: bool = False, **spec: Any) -> dict[str, Any]:
    replicas = spec.pop("replicas")
    metadata: dict[str, Any] = {"name": name}
    if host:
        metadata["annotations"] = {c.ANNOTATION_NETWORK_MODE: c.NETWORK_MODE_HOST}
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.TF_KIND,
        "metadata": metadata,
        "spec": {"tfReplicaSpecs": replicas, **spec},
    }


async def pods_of(kube: Kube, job: str) -> list[dict[str, Any]]:
    listed = await kube.list(PODS, namespace=kube.ns, label_selector=f"{c.LABEL_JOB_NAME}={job}")
    return sorted(listed.items, key=lambda pod: pod["metadata"]["name"])


async def services_of(kube: Kube, job: str) -> list[dict[str, Any]]:
    listed = await kube.list(SERVICES, namespace=kube.ns, label_selector=f"{c.LABEL_JOB_NAME}={job}")
    return sorted(listed.items, key=lambda svc: svc["metadata"]["name"])


async def job_state(kube: Kube, resource: Resource, name: str) -> dict[str, Any] | None:
    try:
        return await kube.get(resource, name, namespace=kube.ns)
    except NotFound:
        return None


def condition(job: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind and cond["status"] == "True":
            found: dict[str, Any] = cond
            return found
    return None


async def wait_condition(
    kube: Kube, resource: Resource, name: str, kind: str, *, within: float = 20.0
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        job = await job_state(kube, resource, name)
        return job if condition(job, kind) else None

    result: dict[str, Any] = await eventually(probe, within=within, what=f"{name} {kind}")
    return result


def env_of(pod: dict[str, Any], container_index: int = 0) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][container_index].get("env", [])}


async def events_for(kube: Kube, name: str) -> list[dict[str, Any]]:
    listed = await kube.list(EVENTS, namespace=kube.ns)
    return [event for event in listed.items if event.get("involvedObject", {}).get("name") == name]
