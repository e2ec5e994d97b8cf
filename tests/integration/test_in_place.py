"""Recovery in place (``failurePolicy.restartMode``, docs/policies.md), end to end on both control planes with
simulated nodes that apply the kubelet's container restart rules (``kubedl_local.node.restarts``).

Each test fails on the code before restartMode: a retryable exit then deleted the pod and made a new one (a
new uid, in host-network mode a new port and a Service re-pointed), and in-place restarts reached
``replicaStatuses.<type>.restarts`` only when the job ended."""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_local.node.simulated import EXIT_CODE, EXIT_CODES, RUN_SECONDS
from kubedl_py.kube.resources import PODS
from tests.integration.conftest import (
    PYTORCHJOBS,
    Env,
    Kube,
    RunningController,
    events_for,
    eventually,
    job_state,
    pods_of,
    pytorchjob,
    replica,
    services_of,
    wait_condition,
)
from tests.integration.test_hostnetwork import host_port, target_port
from tests.integration.test_metrics import _async
from tests.sdk.test_cli import kubedl

pytestmark = pytest.mark.nodes(2)


def identity(pod: dict[str, Any]) -> tuple[str, str, int]:
    """What recovery in place keeps: the pod's uid, its node and its host port."""
    return pod["metadata"]["uid"], pod["spec"]["nodeName"], host_port(pod)


async def running(kube: Kube, job: str, count: int) -> dict[str, dict[str, Any]] | None:
    pods = {pod["metadata"]["name"]: pod for pod in await pods_of(kube, job)}
    up = all((pod.get("status") or {}).get("phase") == "Running" for pod in pods.values())
    return pods if len(pods) == count and up else None


def restart_count(pod: dict[str, Any]) -> int:
    return sum(int(s.get("restartCount") or 0) for s in (pod.get("status") or {}).get("containerStatuses") or [])


async def restarts_counted(kube: Kube, job: str, replica_type: str, want: int) -> dict[str, Any] | None:
    state = await job_state(kube, PYTORCHJOBS, job)
    counts = ((state or {}).get("status") or {}).get("replicaStatuses", {}).get(replica_type, {})
    return state if int(counts.get("restarts") or 0) >= want else None


def controller_writes(cluster: Env, resource: str) -> list[tuple[str, str]]:
    return [
        (r.verb, r.name)
        for r in cluster.request_log.records
        if r.resource == resource and r.verb in ("create", "update", "patch", "delete") and r.status < 300
    ]


def recoveries(controller: RunningController, mode: str) -> float:
    """How many recoveries ``kubedl_job_recovery_seconds`` observed in ``mode`` (the program's failures)."""
    assert controller.manager is not None
    labels = {"kind": "PyTorchJob", "mode": mode, "class": "user"}
    return controller.manager.metrics.value("kubedl_job_recovery_seconds_count", labels) or 0.0


async def test_a_killed_rank_restarts_in_its_own_pod_keeping_its_node_port_and_service(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """Host network, Master + 2 Workers under restartPolicy ExitCode: Worker 0 is killed (137) once. Its
    container restarts in the same pod (same uid, node and host port), no pod is made or deleted, no Service
    is written, the restart is counted while the job runs (not when it ends) and an event says it was in
    place; the job then succeeds with one restart charged to the program."""
    job = pytorchjob(
        "inplace",
        host=True,
        replicas={"Master": replica(1, restart_policy="ExitCode"), "Worker": replica(2, restart_policy="ExitCode")},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    before = await eventually(lambda: running(kube, "inplace", 3), what="3 pods running")
    assert [s["targetPort"] for svc in await services_of(kube, "inplace") for s in svc["spec"]["ports"]]
    cluster.request_log.clear()
    # This run is killed (137); the one after it, in the same pod, runs a second (seen running) and succeeds.
    patch = {"metadata": {"annotations": {EXIT_CODES: "137,0", RUN_SECONDS: "1"}}}
    await kube.patch(PODS, "inplace-worker-0", patch, namespace=kube.ns)

    counted = await eventually(lambda: restarts_counted(kube, "inplace", "Worker", 1), what="the restart counted")
    assert "Failed" not in [cond["type"] for cond in counted["status"]["conditions"] if cond["status"] == "True"]
    worker = await kube.get(PODS, "inplace-worker-0", namespace=kube.ns)
    assert identity(worker) == identity(before["inplace-worker-0"])
    assert restart_count(worker) == 1
    last = worker["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 137
    events = [e for e in await events_for(kube, "inplace") if e.get("reason") == "RestartedInPlace"]
    assert len(events) == 1 and "Worker 0" in events[0]["message"] and "in place" in events[0]["message"], events

    for name in ("inplace-master-0", "inplace-worker-1"):
        await kube.patch(PODS, name, {"metadata": {"annotations": {EXIT_CODE: "0"}}}, namespace=kube.ns)
    done = await wait_condition(kube, PYTORCHJOBS, "inplace", "Succeeded")
    statuses = done["status"]["replicaStatuses"]
    assert int(statuses["Worker"].get("restarts") or 0) == 1
    assert not statuses.get("Master", {}).get("restarts")
    assert int(statuses["Worker"]["lastFailure"]["exitCode"]) == 137
    assert controller_writes(cluster, "services") == []
    assert [w for w in controller_writes(cluster, "pods") if w[0] in ("create", "delete")] == []
    assert recoveries(controller, "in_place") == 1 and recoveries(controller, "recreate") == 0
    services = {svc["metadata"]["name"]: target_port(svc) for svc in await services_of(kube, "inplace")}
    assert services == {name: host_port(pod) for name, pod in before.items() if name in services}


async def test_restart_mode_recreate_replaces_the_pod_as_before(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """``restartMode: Recreate``: the killed Worker's pod is deleted and made again (a new uid), charged once."""
    job = pytorchjob(
        "recreated",
        replicas={"Master": replica(1), "Worker": replica(1, restart_policy="ExitCode")},
        failurePolicy={"restartMode": "Recreate"},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    before = await eventually(lambda: running(kube, "recreated", 2), what="2 pods running")
    old_uid = before["recreated-worker-0"]["metadata"]["uid"]
    await kube.patch(PODS, "recreated-worker-0", {"metadata": {"annotations": {EXIT_CODE: "137"}}}, namespace=kube.ns)

    async def replaced() -> dict[str, Any] | None:
        pods = await running(kube, "recreated", 2)
        worker = (pods or {}).get("recreated-worker-0")
        return worker if worker is not None and worker["metadata"]["uid"] != old_uid else None

    worker = await eventually(replaced, what="a new pod for Worker 0")
    assert restart_count(worker) == 0
    await eventually(lambda: _async(recoveries(controller, "recreate") == 1), what="the recovery observed")
    assert recoveries(controller, "in_place") == 0
    assert await restarts_counted(kube, "recreated", "Worker", 1) is not None
    assert "restartPolicyRules" not in worker["spec"]["containers"][0]


async def test_describe_shows_on_failure_restarts_as_they_happen(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """restartPolicy OnFailure: the kubelet restarts a crashing Worker in place; the job's status counts each
    restart while the job runs, and ``kubedl-py describe`` shows them (it showed 0 until the job failed)."""
    crashing = replica(1, restart_policy="OnFailure", exit_code=3, run_seconds=0.2)
    job = pytorchjob("crashing", replicas={"Master": replica(1), "Worker": crashing}, backoffLimit=50)
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)

    async def twice() -> tuple[dict[str, Any], dict[str, Any]] | None:
        state = await restarts_counted(kube, "crashing", "Worker", 2)
        if state is None:
            return None
        pod = await kube.get(PODS, "crashing-worker-0", namespace=kube.ns)
        return state, pod

    state, pod = await eventually(twice, within=60, what="two in-place restarts counted")
    counted = int(state["status"]["replicaStatuses"]["Worker"]["restarts"])
    assert counted <= restart_count(pod)  # never ahead of the kubelet, each restart once
    assert state["metadata"]["uid"] == (await job_state(kube, PYTORCHJOBS, "crashing") or {})["metadata"]["uid"]
    shown = await kubedl(cluster, "describe", "crashing")
    assert shown.code == 0, shown.err
    rows = [line.split() for line in shown.out.splitlines()]
    worker_row = next(row for row in rows if row and row[0] == "Worker")
    assert int(worker_row[4]) >= counted >= 2, shown.out
