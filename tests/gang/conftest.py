"""Fixtures of the gang tests: the real control plane's cluster (integration fixtures), a real gang scheduler
beside it (``harness.schedulers``), and the controller under the ClusterRole an operator
renders for that scheduler.

The layout every test uses is tight on purpose: two simulated nodes with 2 CPUs each (4 in all) and jobs of
3 replicas requesting 1 CPU each. One gang fits; a second cannot fit while the first runs, but one of its
pods could, which is exactly what a scheduler without gangs does (the contrast test shows it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.schedulers import SCHEDULERS, GangSchedulerProcess
from kubedl_local.kubernetes.install import apply, manifest_documents
from kubedl_local.node.simulated import EXIT_CODE
from kubedl_py.api import constants as c
from kubedl_py.controllers.gang import GangSchedulerKind
from kubedl_py.kube.resources import PODS
from tests.conftest import SESSION_MANIFESTS
from tests.integration.conftest import Env, Kube, RunningController, cluster, fast_options, kube, pods_of
from tests.tiers import EMBEDDED, KUBERNETES, TIERS, require_tier

__all__ = ["cluster", "kube", "tier"]

#: the label of the tests' nodes; the jobs' pods select it, Volcano is confined to it
POOL = {"gang.kubedl.io/pool": "gang"}
NODE_CPUS = "2"
#: Master + 2 Workers, 1 CPU each: one gang fits on the 4 CPUs of the two nodes, two gangs do not
REPLICAS = {"Master": 1, "Worker": 2}
GANG_SIZE = sum(REPLICAS.values())

tight_nodes = pytest.mark.nodes(2, labels=[POOL, POOL], resources=[{"cpu": NODE_CPUS}, {"cpu": NODE_CPUS}])


@pytest.fixture(params=TIERS)
def tier(request: pytest.FixtureRequest) -> str:
    chosen: str = request.param
    if chosen == EMBEDDED:
        pytest.skip(
            "gang schedulers run beside the real control plane only: the embedded cluster's own scheduler knows "
            "no PodGroups and a second scheduler cannot be plugged into it"
        )
    require_tier(KUBERNETES)
    return chosen


async def start_scheduler(cluster: Env, kind: GangSchedulerKind, work_dir: Path) -> GangSchedulerProcess:
    """The real ``kind`` scheduler against the real cluster, as its administrator, confined to the test's nodes."""
    assert cluster.real is not None
    scheduler = SCHEDULERS[kind](cluster.real.admin_kubeconfig, work_dir, node_selector=POOL)
    await scheduler.start()
    return scheduler


async def start_controller(cluster: Env, gang_scheduler: GangSchedulerKind | None) -> RunningController:
    """The controller; with a gang scheduler, under the ClusterRole ``manifests --gang-scheduler`` renders."""
    if gang_scheduler is not None:
        async with cluster.client() as admin:
            options = replace(SESSION_MANIFESTS, gang_scheduler=gang_scheduler)
            await apply(admin, manifest_documents(options, kinds=("ClusterRole",)))
    running = RunningController(cluster, fast_options(namespace=cluster.namespace, gang_scheduler=gang_scheduler))
    await running.start()
    return running


@pytest.fixture(autouse=True)
async def session_cluster_role(cluster: Env) -> AsyncIterator[None]:
    """The session's cluster is shared: its rendered ClusterRole is put back after each test."""
    yield
    async with cluster.client() as admin:
        await apply(admin, manifest_documents(SESSION_MANIFESTS, kinds=("ClusterRole",)))


def gang_job(name: str) -> dict[str, Any]:
    """A PyTorchJob of :data:`GANG_SIZE` pods, 1 CPU each, on the pool's nodes; its pods run until told to end."""
    specs = {}
    for replica_type, count in REPLICAS.items():
        container = {
            "name": "pytorch",
            "image": "busybox",
            "command": ["train"],
            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
        }
        specs[replica_type] = {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container], "nodeSelector": dict(POOL)}},
        }
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": specs},
    }


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [pod for pod in pods if pod["spec"].get("nodeName")]


async def all_bound(kube: Kube, job: str) -> list[dict[str, Any]] | None:
    pods = await pods_of(kube, job)
    return pods if len(pods) == GANG_SIZE and len(bound(pods)) == GANG_SIZE else None


async def finish(kube: Kube, job: str) -> None:
    """End a job's pods with exit code 0 (the simulated node agents re-plan a pod when its annotations change)."""
    for pod in await pods_of(kube, job):
        patch = {"metadata": {"annotations": {EXIT_CODE: "0"}}}
        await kube.patch(PODS, pod["metadata"]["name"], patch, namespace=kube.ns)


async def holds(probe: Callable[[], Awaitable[str | None]], *, seconds: float, interval: float = 0.1) -> None:
    """Check an invariant for ``seconds``: ``probe`` returns None while it holds, else what broke it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        broken = await probe()
        if broken is not None:
            raise AssertionError(broken)
        await asyncio.sleep(interval)
