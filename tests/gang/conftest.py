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
from kubedl_py.controllers.gang import Gang, GangSchedulerKind
from kubedl_py.kube.resources import PODS, Resource
from tests.conftest import SESSION_MANIFESTS
from tests.integration.conftest import (
    Env,
    Kube,
    RunningController,
    cluster,
    eventually,
    fast_options,
    kube,
    pods_of,
    wait_condition,
)
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


async def start_controller(
    cluster: Env, gang_scheduler: GangSchedulerKind | None, *, kubeflow_api: bool = False
) -> RunningController:
    """The controller; with a gang scheduler, under the ClusterRole ``manifests --gang-scheduler`` renders."""
    if gang_scheduler is not None:
        async with cluster.client() as admin:
            manifests = replace(SESSION_MANIFESTS, gang_scheduler=gang_scheduler)
            await apply(admin, manifest_documents(manifests, kinds=("ClusterRole",)))
    options = fast_options(namespace=cluster.namespace, gang_scheduler=gang_scheduler, kubeflow_api=kubeflow_api)
    running = RunningController(cluster, options)
    await running.start()
    return running


@pytest.fixture(autouse=True)
async def session_cluster_role(cluster: Env) -> AsyncIterator[None]:
    """The session's cluster is shared: its rendered ClusterRole is put back after each test."""
    yield
    async with cluster.client() as admin:
        await apply(admin, manifest_documents(SESSION_MANIFESTS, kinds=("ClusterRole",)))


def pool_template() -> dict[str, Any]:
    """A pod template of one container requesting 1 CPU, on the pool's nodes; it runs until told to end."""
    container = {
        "name": "pytorch",
        "image": "busybox",
        "command": ["train"],
        "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
    }
    return {"spec": {"containers": [container], "nodeSelector": dict(POOL)}}


def gang_job(name: str) -> dict[str, Any]:
    """A PyTorchJob of :data:`GANG_SIZE` pods, 1 CPU each, on the pool's nodes; its pods run until told to end."""
    specs = {}
    for replica_type, count in REPLICAS.items():
        specs[replica_type] = {"replicas": count, "restartPolicy": "Never", "template": pool_template()}
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


#: the Training Operator's API (kubeflow.org/v1) PyTorchJobs, and the label its pods carry
KF_PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
KF_JOB_LABEL = "training.kubeflow.org/job-name"


def kf_gang_job(name: str, *, min_available: int) -> dict[str, Any]:
    """A kubeflow.org PyTorchJob of 2 replicas (Master + Worker, 1 CPU each, on the pool's nodes) whose gang asks
    for ``min_available`` pods: what the Training Operator's users and its gang e2e tests submit."""
    template = pool_template()
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"schedulingPolicy": {"minAvailable": min_available}},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": template},
                "Worker": {"replicas": 1, "restartPolicy": "Never", "template": template},
            },
        },
    }


async def kf_pods(kube: Kube, job: str) -> list[dict[str, Any]]:
    listed = await kube.list(PODS, namespace=kube.ns, label_selector=f"{KF_JOB_LABEL}={job}")
    return list(listed.items)


async def a_kubeflow_gang_larger_than_the_job_waits_then_runs(kube: Kube, gang: Gang) -> None:
    """The Training Operator's gang semantics, kept by the drop-in: ``minAvailable: 10`` on a 2-replica
    kubeflow.org job is accepted and waits (``Created``, ``Running`` False saying why, no pod running); updating
    ``minAvailable`` to 2 makes the job's PodGroup follow, and the job runs to Succeeded."""
    await kube.create(KF_PYTORCHJOBS, kf_gang_job("kf", min_available=10), namespace=kube.ns)

    async def waits() -> dict[str, Any] | None:
        job = await kube.get(KF_PYTORCHJOBS, "kf", namespace=kube.ns)
        conditions = {x["type"]: x for x in (job.get("status") or {}).get("conditions") or []}
        running = conditions.get("Running")
        if running is None or running["status"] != "False" or running.get("reason") != "GangIncomplete":
            return None
        return conditions

    conditions = await eventually(waits, within=30, what="the job to say its gang is larger than the job")
    assert conditions["Created"]["status"] == "True" and "Failed" not in conditions, conditions
    assert "minAvailable is at most 2" in conditions["Running"]["message"], conditions["Running"]

    async def nothing_runs() -> str | None:
        running = [pod for pod in await kf_pods(kube, "kf") if pod["spec"].get("nodeName")]
        return f"{len(running)} pods bound while the gang cannot be complete" if running else None

    await holds(nothing_runs, seconds=3.0)
    group = await kube.get(gang.resource, "kf", namespace=kube.ns)
    assert gang.implementation.min_count(group) == 10
    patch = {"spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 2}}}}
    await kube.patch(KF_PYTORCHJOBS, "kf", patch, namespace=kube.ns)

    async def followed() -> dict[str, Any] | None:
        group = await kube.get(gang.resource, "kf", namespace=kube.ns)
        return group if gang.implementation.min_count(group) == 2 else None

    await eventually(followed, within=30, what="the PodGroup to follow minAvailable 2")

    async def both_bound() -> list[dict[str, Any]] | None:
        pods = await kf_pods(kube, "kf")
        return pods if len(pods) == 2 and all(pod["spec"].get("nodeName") for pod in pods) else None

    await eventually(both_bound, within=60, what="the gang of 2 bound once minAvailable is 2")
    await wait_condition(kube, KF_PYTORCHJOBS, "kf", "Running", within=30)
    for pod in await kf_pods(kube, "kf"):
        await kube.patch(
            PODS, pod["metadata"]["name"], {"metadata": {"annotations": {EXIT_CODE: "0"}}}, namespace=kube.ns
        )
    await wait_condition(kube, KF_PYTORCHJOBS, "kf", "Succeeded", within=30)
