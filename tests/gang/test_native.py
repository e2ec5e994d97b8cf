"""Kubernetes' own gang (``scheduling.k8s.io/v1beta1`` Workload and PodGroup, kube-scheduler's GangScheduling
plug-in; GenericWorkload is on in the local real control plane) with the stock kube-scheduler v1.37.2 alone, and
the controller under the session's ClusterRole (the manifests' default rights): chosen with no flag because the
API server serves it, for the jobs that set ``schedulingPolicy.minAvailable``.

No second scheduler to build, so these run in ``make test`` (real tier; the embedded cluster does not serve
the API: skipped there, saying so)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubedl_local.node.simulated import EXIT_CODE
from kubedl_py.api import constants as c
from kubedl_py.controllers.gang_schedulers import NATIVE_PODGROUPS, NATIVE_WORKLOADS, Gang
from kubedl_py.controllers.setup import discovered
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import EVENTS, PODS
from tests.gang.conftest import (
    POOL,
    a_kubeflow_gang_larger_than_the_job_waits_then_runs,
    bound,
    holds,
    pool_template,
)
from tests.integration.conftest import (
    PYTORCHJOBS,
    Env,
    Kube,
    RunningController,
    eventually,
    fast_options,
    pods_of,
    wait_condition,
)


def _nodes(count: int) -> pytest.MarkDecorator:
    return pytest.mark.nodes(count, labels=[POOL] * count, resources=[{"cpu": "1"}] * count)


def native_job(name: str, ranks: int, **spec: Any) -> dict[str, Any]:
    """A PyTorchJob of ``ranks`` pods (Master + Workers), 1 CPU each, on the pool's nodes, asking for a gang of
    all of them; its pods run until told to end."""
    template = pool_template()
    specs = {
        "Master": {"replicas": 1, "restartPolicy": "Never", "template": template},
        "Worker": {"replicas": ranks - 1, "restartPolicy": "Never", "template": template},
    }
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": specs, "schedulingPolicy": {"minAvailable": ranks}, **spec},
    }


@pytest.fixture
async def native(cluster: Env) -> AsyncIterator[RunningController]:
    """The controller with no ``--gang-scheduler``, its options discovered as ``kubedl-py controller`` does."""
    if cluster.real is None:
        pytest.skip(
            "the embedded cluster does not serve scheduling.k8s.io/v1beta1 (Workload, PodGroup) and its scheduler "
            "has no gang: kube-scheduler's own gang is tested on the real control plane (--control-plane kubernetes)"
        )
    async with cluster.controller_client() as client:
        options = await discovered(client, fast_options(namespace=cluster.namespace))
    assert options.served is not None and ("scheduling.k8s.io", "podgroups") in options.served
    running = RunningController(cluster, options)
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


async def _group(kube: Kube, name: str) -> dict[str, Any] | None:
    try:
        group: dict[str, Any] = await kube.get(NATIVE_PODGROUPS, name, namespace=kube.ns)
        return group
    except NotFound:
        return None


async def _finish(kube: Kube, job: str) -> None:
    for pod in await pods_of(kube, job):
        patch = {"metadata": {"annotations": {EXIT_CODE: "0"}}}
        await kube.patch(PODS, pod["metadata"]["name"], patch, namespace=kube.ns)


async def _n_bound(kube: Kube, job: str, n: int) -> list[dict[str, Any]] | None:
    pods = await pods_of(kube, job)
    return pods if len(pods) == n and len(bound(pods)) == n else None


@contextlib.asynccontextmanager
async def _bindings(kube: Kube) -> AsyncIterator[list[str]]:
    """Follows every pod event of the namespace and records each moment both jobs held some nodes but neither
    a whole gang (the deadlock a gang prevents: 2+2 on four nodes)."""
    problems: list[str] = []
    listed = await kube.list(PODS, namespace=kube.ns)
    nodes: dict[str, dict[str, str]] = {}  # job -> pod -> node

    def record(pod: dict[str, Any], gone: bool) -> None:
        job = (pod["metadata"].get("labels") or {}).get(c.LABEL_JOB_NAME, "")
        name = pod["metadata"]["name"]
        held = nodes.setdefault(job, {})
        if gone or not pod["spec"].get("nodeName"):
            held.pop(name, None)
        else:
            held[name] = pod["spec"]["nodeName"]
        counts = {j: len(h) for j, h in nodes.items() if h}
        if len(counts) > 1 and all(0 < n < 3 for n in counts.values()):
            problems.append(f"{counts} after {pod['metadata']['name']} was {'deleted' if gone else 'changed'}")

    for pod in listed.items:
        record(pod, False)

    async def follow() -> None:
        async with contextlib.aclosing(
            kube.watch(PODS, namespace=kube.ns, resource_version=listed.resource_version, timeout_seconds=600)
        ) as events:
            async for event in events:
                if event.type in ("ADDED", "MODIFIED", "DELETED"):
                    record(event.object, event.type == "DELETED")

    task = asyncio.create_task(follow())
    try:
        yield problems
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@_nodes(3)
async def test_a_gang_larger_than_the_free_nodes_waits_unbound_then_binds_whole_when_a_node_comes(
    cluster: Env, kube: Kube, native: RunningController
) -> None:
    """3 nodes of one rank each and a 4-rank gang: no pod binds, the job says it waits and why; a 4th node:
    all 4 bind within 10 s and the job runs. Its Workload and PodGroup are the job's; once it succeeds the
    PodGroup is gone."""
    await kube.create(PYTORCHJOBS, native_job("big", 4), namespace=kube.ns)
    pods = await eventually(lambda: _n_pods(kube, "big", 4), within=30, what="the gang's 4 pods")
    assert {pod["spec"].get("schedulingGroup", {}).get("podGroupName") for pod in pods} == {"big"}
    group = await eventually(lambda: _group(kube, "big"), what="the job's PodGroup")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert [ref["name"] for ref in group["metadata"]["ownerReferences"]] == ["big"]
    workload = await kube.get(NATIVE_WORKLOADS, "big", namespace=kube.ns)
    assert workload["spec"]["controllerRef"] == {"apiGroup": "training.kubedl.io", "kind": "PyTorchJob", "name": "big"}
    assert group["spec"]["workloadRef"] == {"workloadName": "big", "templateName": "gang"}

    async def none_bound() -> str | None:
        held = bound(await pods_of(kube, "big"))
        return f"{len(held)} of the gang's pods bound on 3 nodes" if held else None

    async def waits_saying_why() -> dict[str, Any] | None:
        job = await kube.get(PYTORCHJOBS, "big", namespace=kube.ns)
        running = next((x for x in job.get("status", {}).get("conditions") or [] if x["type"] == "Running"), None)
        return running if running is not None and running["status"] == "False" else None

    said = await eventually(waits_saying_why, within=30, what="the job to say its gang waits")
    assert said["reason"] == "Unschedulable", said
    assert "minCount" in said["message"] or "gang" in said["message"], said
    await holds(none_bound, seconds=3.0)

    extra = f"{kube.ns}-n3"
    assert cluster.real is not None
    real = cluster.real
    await real.loop.call(real.cluster.add_node(extra, resources={"cpu": "1"}, labels=POOL))
    try:
        added = time.monotonic()
        pods = await eventually(lambda: _n_bound(kube, "big", 4), within=30, what="the gang bound whole")
        took = time.monotonic() - added
        assert took <= 10.0, f"the gang bound {took:.1f}s after the 4th node came"
        assert len({pod["spec"]["nodeName"] for pod in pods}) == 4
        await wait_condition(kube, PYTORCHJOBS, "big", "Running", within=30)
        await _finish(kube, "big")
        await wait_condition(kube, PYTORCHJOBS, "big", "Succeeded", within=30)

        async def group_gone() -> bool | None:
            return True if await _group(kube, "big") is None else None

        await eventually(group_gone, within=30, what="the finished job's PodGroup gone")
    finally:
        with contextlib.suppress(KeyError):
            await real.loop.call(real.cluster.remove_node(extra))


async def _n_pods(kube: Kube, job: str, n: int) -> list[dict[str, Any]] | None:
    pods = await pods_of(kube, job)
    return pods if len(pods) == n else None


@_nodes(4)
async def test_two_gangs_that_do_not_fit_together_never_deadlock_and_run_one_after_the_other(
    cluster: Env, kube: Kube, native: RunningController
) -> None:
    """Two 3-rank jobs on 4 one-rank nodes, submitted together: on every pod event, never both holding part of
    a gang (2+2); one runs whole, then the other once it has finished."""
    async with _bindings(kube) as problems:
        await asyncio.gather(
            kube.create(PYTORCHJOBS, native_job("one", 3), namespace=kube.ns),
            kube.create(PYTORCHJOBS, native_job("two", 3), namespace=kube.ns),
        )

        async def a_gang_bound() -> str | None:
            for name in ("one", "two"):
                if await _n_bound(kube, name, 3) is not None:
                    return name
            return None

        first = await eventually(a_gang_bound, within=60, what="one gang bound whole")
        second = "two" if first == "one" else "one"
        await wait_condition(kube, PYTORCHJOBS, first, "Running", within=30)

        async def second_unbound() -> str | None:
            held = bound(await pods_of(kube, second))
            return f"{len(held)} pods of {second} bound while {first} runs" if held else None

        await holds(second_unbound, seconds=3.0)
        await _finish(kube, first)
        await wait_condition(kube, PYTORCHJOBS, first, "Succeeded", within=30)
        await eventually(lambda: _n_bound(kube, second, 3), within=60, what=f"{second} bound whole")
        await wait_condition(kube, PYTORCHJOBS, second, "Running", within=30)
    assert problems == [], problems


@_nodes(3)
async def test_a_whole_job_restart_gets_a_fresh_group_and_binds_as_one(
    cluster: Env, kube: Kube, native: RunningController
) -> None:
    """restartScope Job: a rank's retryable exit replaces every pod; the old group (it placed the old pods) is
    renewed before the new pods come, and the new set binds whole from the fresh group."""
    body = native_job("again", 3)
    body["spec"]["failurePolicy"] = {"restartScope": "Job", "restartMode": "Recreate"}
    for spec in body["spec"]["pytorchReplicaSpecs"].values():
        spec["restartPolicy"] = "ExitCode"
    await kube.create(PYTORCHJOBS, body, namespace=kube.ns)
    old_pods = await eventually(lambda: _n_bound(kube, "again", 3), within=60, what="the first set bound")
    old_group = await eventually(lambda: _group(kube, "again"), what="the job's PodGroup")

    async def scheduled() -> dict[str, Any] | None:
        group = await _group(kube, "again")
        conditions = (group or {}).get("status", {}).get("conditions") or []
        done = any(x["type"] == "PodGroupInitiallyScheduled" and x["status"] == "True" for x in conditions)
        return group if done else None

    await eventually(scheduled, within=30, what="kube-scheduler to say the group is scheduled")
    worker = next(p for p in old_pods if p["metadata"]["name"] == "again-worker-0")
    await kube.patch(
        PODS, worker["metadata"]["name"], {"metadata": {"annotations": {EXIT_CODE: "137"}}}, namespace=kube.ns
    )
    old_uids = {p["metadata"]["uid"] for p in old_pods}

    async def new_set_bound() -> list[dict[str, Any]] | None:
        pods = await _n_bound(kube, "again", 3)
        if pods is None or {p["metadata"]["uid"] for p in pods} & old_uids:
            return None
        return pods

    await eventually(new_set_bound, within=60, what="the new set of pods bound whole")
    new_group = await _group(kube, "again")
    assert new_group is not None and new_group["metadata"]["uid"] != old_group["metadata"]["uid"]
    await wait_condition(kube, PYTORCHJOBS, "again", "Running", within=30)


@_nodes(4)
async def test_without_the_gang_the_same_two_jobs_leave_one_half_bound(cluster: Env, kube: Kube) -> None:
    """The contrast (so the test above can fail): ``--gang-scheduler none``, the same jobs and nodes; the stock
    scheduler binds pods one by one, and a job is left holding nodes it cannot run on."""
    async with cluster.controller_client() as client:
        options = await discovered(client, fast_options(namespace=cluster.namespace, gang_scheduler="none"))
    controller = RunningController(cluster, options)
    await controller.start()
    try:
        await asyncio.gather(
            kube.create(PYTORCHJOBS, native_job("one", 3), namespace=kube.ns),
            kube.create(PYTORCHJOBS, native_job("two", 3), namespace=kube.ns),
        )

        async def half_bound() -> dict[str, int] | None:
            counts = {name: len(bound(await pods_of(kube, name))) for name in ("one", "two")}
            return counts if sum(counts.values()) == 4 and any(0 < n < 3 for n in counts.values()) else None

        counts = await eventually(half_bound, within=60, what="a job holding part of its nodes")
        pods = [*await pods_of(kube, "one"), *await pods_of(kube, "two")]
        assert all("schedulingGroup" not in pod["spec"] for pod in pods)
        assert sorted(counts.values()) in ([1, 3], [2, 2]), counts
    finally:
        await controller.stop()


@_nodes(2)
async def test_a_kubeflow_gang_larger_than_the_job_waits_until_min_available_is_lowered(
    cluster: Env, kube: Kube
) -> None:
    async with cluster.controller_client() as client:
        options = await discovered(client, fast_options(namespace=cluster.namespace, kubeflow_api=True))
    controller = RunningController(cluster, options)
    await controller.start()
    try:
        await a_kubeflow_gang_larger_than_the_job_waits_then_runs(kube, Gang("kubernetes", every_job=False))
    finally:
        await controller.stop()


@_nodes(2)
async def test_a_required_placement_without_the_topology_gate_is_said_and_the_gang_still_runs(
    cluster: Env, kube: Kube, native: RunningController
) -> None:
    """``spec.placement`` Required becomes the PodGroup's topology constraint where TopologyAwareWorkloadScheduling
    is on; the local plane has that alpha gate off, so the API server drops the field: the controller sees it
    gone, a Warning says so, and the gang binds whole (the placement stays each pod's affinity)."""
    body = native_job("placed", 2, placement={"topologyKey": "gang.kubedl.io/pool", "mode": "Required"})
    await kube.create(PYTORCHJOBS, body, namespace=kube.ns)
    await eventually(lambda: _n_bound(kube, "placed", 2), within=60, what="the gang bound whole")
    group = await _group(kube, "placed")
    assert group is not None and "schedulingConstraints" not in group["spec"]

    async def said() -> list[dict[str, Any]] | None:
        listed = await kube.list(EVENTS, namespace=kube.ns)
        found = [e for e in listed.items if e.get("reason") == "PodGroupTopologyUnsupported"]
        return found or None

    events = await eventually(said, within=30, what="a PodGroupTopologyUnsupported event")
    assert "TopologyAwareWorkloadScheduling" in events[0]["message"]


RACK = "topology.kubernetes.io/rack"


async def test_a_required_placement_with_the_topology_gate_on_is_the_groups_constraint_and_is_kept(
    tier: str,
) -> None:
    """With TopologyAwareWorkloadScheduling on (its own real control plane: the shared one keeps the alpha gate
    off), ``spec.placement`` Required is the PodGroup's ``schedulingConstraints.topology``, kept by the API
    server, and kube-scheduler binds the gang in one rack: rack a has two one-rank nodes, rack b one."""
    from kubedl_local.kubernetes.cluster import KubernetesCluster, KubernetesClusterOptions
    from kubedl_local.kubernetes.controlplane import ControlPlaneOptions
    from kubedl_py.controllers.setup import build_manager

    del tier  # the real tier only (the fixture skips the embedded one)
    gates = {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}
    options = KubernetesClusterOptions(
        control_plane=ControlPlaneOptions(feature_gates=gates), nodes=0, install=False, runtime="simulated"
    )
    async with KubernetesCluster(options) as real:
        for name, rack in (("a1", "a"), ("a2", "a"), ("b1", "b")):
            await real.add_node(name, resources={"cpu": "1"}, labels={**POOL, RACK: rack})
        async with Kube(kubeconfig=real.admin_kubeconfig) as kube, Kube(kubeconfig=real.admin_kubeconfig) as client:
            from tests.integration.conftest import install_crds

            await install_crds(kube)
            manager = build_manager(client, await discovered(client, fast_options(namespace="default")))
            task = asyncio.create_task(manager.run())
            try:
                body = native_job("racked", 2, placement={"topologyKey": RACK, "mode": "Required"})
                await kube.create(PYTORCHJOBS, body, namespace=kube.ns)
                pods = await eventually(lambda: _n_bound(kube, "racked", 2), within=60, what="the gang bound whole")
                assert sorted(p["spec"]["nodeName"] for p in pods) == ["a1", "a2"], pods
                group = await _group(kube, "racked")
                assert group is not None
                assert group["spec"].get("schedulingConstraints") == {"topology": [{"key": RACK}]}, group["spec"]
                events = (await kube.list(EVENTS, namespace=kube.ns)).items
                assert not [e for e in events if e.get("reason") == "PodGroupTopologyUnsupported"], events
            finally:
                manager.stop()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
