"""The whole job restarted in place (``restartScope: Job``, ``restartMode`` Auto/InPlace, docs/policies.md), end
to end on both control planes with simulated nodes that restart a pod whole as kubelet 1.37 does
(RestartAllContainers) and run the in-place agent's decisions (``kubedl_py.agent``).

Each test fails on the code before it: a whole-job restart then deleted every pod, made new ones (new uids, in
host-network mode new host ports) and re-pointed every Service."""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_local.node.simulated import EXIT_CODE, EXIT_CODES, RUN_SECONDS
from kubedl_local.node.spec import RESTART_ALL_CONTAINERS, UNDECLARE_LABEL
from kubedl_py import agent
from kubedl_py.controllers.failures.whole_in_place import restarts_whole
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
    wait_condition,
)
from tests.integration.test_in_place import controller_writes, identity, recoveries, restart_count, running
from tests.integration.test_metrics import _async


async def released(kube: Kube, job: str, attempt: int, count: int) -> dict[str, dict[str, Any]] | None:
    """The job's ``count`` pods once ``attempt`` is released and each has restarted whole and runs its program
    again (or has run it to its end)."""
    state = await job_state(kube, PYTORCHJOBS, job)
    progress = ((state or {}).get("status") or {}).get("restartAttempt") or {}
    if int(progress.get("released") or 0) < attempt:
        return None
    pods = {pod["metadata"]["name"]: pod for pod in await pods_of(kube, job)}
    again = [
        pod
        for pod in pods.values()
        if restarts_whole(pod) >= attempt and (pod.get("status") or {}).get("phase") in ("Running", "Succeeded")
    ]
    return pods if len(pods) == count == len(again) else None


@pytest.mark.nodes(2)
async def test_a_killed_rank_restarts_every_rank_in_its_own_pod_keeping_nodes_ports_and_services(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """Host network, Master + 2 Workers, restartScope Job, restartPolicy ExitCode: Worker 0 exits 137 once. All
    three pods keep their uid, node and host port; no pod is made or deleted and no Service written; every
    rank's container restarted exactly once; one restart is charged to the program; events say it was in place;
    the job then succeeds."""
    exit_code = replica(1, restart_policy="ExitCode")
    job = pytorchjob(
        "whole",
        host=True,
        replicas={"Master": exit_code, "Worker": replica(2, restart_policy="ExitCode")},
        failurePolicy={"restartScope": "Job"},
        backoffLimit=3,
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    before = await eventually(lambda: running(kube, "whole", 3), what="3 pods running")
    assert all(restarts_whole(pod) == 0 for pod in before.values())
    patch = {"metadata": {"annotations": {EXIT_CODES: "137,0", RUN_SECONDS: "1"}}}
    await kube.patch(PODS, "whole-worker-0", patch, namespace=kube.ns)
    cluster.request_log.clear()  # from here, the controller's writes (and the kubelets' status reports)

    after = await eventually(lambda: released(kube, "whole", 1, 3), within=30, what="attempt 1 released")
    assert {name: identity(pod) for name, pod in after.items()} == {name: identity(pod) for name, pod in before.items()}
    assert {name: restart_count(pod) for name, pod in after.items()} == {name: 1 for name in before}
    assert {name: restarts_whole(pod) for name, pod in after.items()} == {name: 1 for name in before}
    reasons = [e.get("reason") for e in await events_for(kube, "whole")]
    assert reasons.count("RestartingInPlace") == 1 and reasons.count("RestartedInPlace") == 1, reasons
    assert "JobRestarting" not in reasons, reasons
    await eventually(lambda: _async(recoveries(controller, "in_place_job") == 1), what="the recovery observed")
    assert recoveries(controller, "in_place") == 0 and recoveries(controller, "recreate") == 0
    # Each pod told twice, the new attempt then its release, and nothing else written to pods or Services.
    told = [
        (r.verb, r.name)
        for r in cluster.request_log.records
        if r.resource == "pods" and not r.subresource and r.verb in ("create", "update", "patch", "delete")
    ]
    assert sorted(told) == sorted(2 * [("patch", name) for name in before]), told

    for name in ("whole-master-0", "whole-worker-1"):
        await kube.patch(PODS, name, {"metadata": {"annotations": {EXIT_CODE: "0"}}}, namespace=kube.ns)
    done = await wait_condition(kube, PYTORCHJOBS, "whole", "Succeeded")
    statuses = done["status"]["replicaStatuses"]
    assert sum(int(s.get("restarts") or 0) for s in statuses.values()) == 1, statuses
    assert int(statuses["Worker"]["lastFailure"]["exitCode"]) == 137
    assert controller_writes(cluster, "services") == []
    pod_writes = controller_writes(cluster, "pods")
    assert [w for w in pod_writes if w[0] in ("create", "delete")] == [], pod_writes


async def freeze(cluster: Env, node: str, *, frozen: bool) -> None:
    """The node's kubelet stops acting (and reporting), or is back."""
    if cluster.local is not None:
        await (cluster.local.lose_node(node) if frozen else cluster.local.restore_node(node))
        return
    assert cluster.real is not None and cluster.real.cluster.agent is not None
    agent_ = cluster.real.cluster.agent
    await cluster.real.loop.call(agent_.freeze(node) if frozen else agent_.thaw(node))


@pytest.mark.nodes(2, labels=[{"rank": "a"}, {"rank": "b"}])
async def test_no_rank_runs_the_new_attempt_while_an_old_rank_still_runs(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """A rank whose kubelet has not acted on the signal holds the others: the failed rank waits in its barrier
    (Pending, its program not started) while the other rank's pod still runs the old attempt; once that
    kubelet acts, every rank restarts in its own pod and the attempt is released."""
    master, worker = replica(1, restart_policy="ExitCode"), replica(1, restart_policy="ExitCode")
    master["template"]["spec"]["nodeSelector"] = {"rank": "a"}
    worker["template"]["spec"]["nodeSelector"] = {"rank": "b"}
    job = pytorchjob(
        "held",
        replicas={"Master": master, "Worker": worker},
        failurePolicy={"restartScope": "Job", "nodeLostTimeoutSeconds": 600},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    before = await eventually(lambda: running(kube, "held", 2), what="2 pods running")
    master_node = before["held-master-0"]["spec"]["nodeName"]
    await freeze(cluster, master_node, frozen=True)  # its kubelet stops acting: the Master does not restart yet
    try:
        await kube.patch(PODS, "held-worker-0", {"metadata": {"annotations": {EXIT_CODES: "137,0"}}}, namespace=kube.ns)

        async def holding() -> dict[str, Any] | None:
            pod = await kube.get(PODS, "held-worker-0", namespace=kube.ns)
            return pod if restarts_whole(pod) == 1 and pod["status"].get("phase") == "Pending" else None

        worker_pod = await eventually(holding, within=30, what="the Worker held in its barrier")
        assert all("running" not in (s.get("state") or {}) for s in worker_pod["status"]["containerStatuses"])
        state = await job_state(kube, PYTORCHJOBS, "held")
        progress = state["status"]["restartAttempt"]
        assert (progress["attempt"], progress["released"]) == (1, 0), progress
        master_pod = await kube.get(PODS, "held-master-0", namespace=kube.ns)
        assert master_pod["metadata"]["annotations"][agent.ANNOTATION_ATTEMPT] == "1"  # told, not acted on
        assert restart_count(master_pod) == 0
    finally:
        await freeze(cluster, master_node, frozen=False)
    after = await eventually(lambda: released(kube, "held", 1, 2), within=30, what="attempt 1 released")
    assert {name: pod["metadata"]["uid"] for name, pod in after.items()} == {
        name: pod["metadata"]["uid"] for name, pod in before.items()
    }


@pytest.mark.nodes(2, labels=[{UNDECLARE_LABEL: RESTART_ALL_CONTAINERS}, {UNDECLARE_LABEL: RESTART_ALL_CONTAINERS}])
async def test_auto_recreates_where_no_node_declares_the_feature(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """restartMode Auto on nodes that do not declare RestartAllContainersOnContainerExits: the scheduler places
    no pod with the agent; the job says so in an event, its pods are made without it, it runs, and a failure
    recreates every pod as before."""
    job = pytorchjob(
        "undeclared",
        replicas={"Master": replica(1, restart_policy="ExitCode"), "Worker": replica(1, restart_policy="ExitCode")},
        failurePolicy={"restartScope": "Job"},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    before = await eventually(lambda: running(kube, "undeclared", 2), within=30, what="2 pods running")
    assert all(not pod["spec"].get("initContainers") for pod in before.values())
    events = [e for e in await events_for(kube, "undeclared") if e.get("reason") == "InPlaceRestartUnavailable"]
    assert len(events) == 1 and RESTART_ALL_CONTAINERS in events[0]["message"], events
    await kube.patch(PODS, "undeclared-worker-0", {"metadata": {"annotations": {EXIT_CODE: "137"}}}, namespace=kube.ns)

    async def recreated() -> list[dict[str, Any]] | None:
        uids = {pod["metadata"]["uid"] for pod in before.values()}
        pods = [pod for pod in await pods_of(kube, "undeclared") if pod["metadata"]["uid"] not in uids]
        return pods if len(pods) == 2 else None

    await eventually(recreated, within=30, what="2 new pods")
