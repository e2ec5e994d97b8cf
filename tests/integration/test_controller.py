"""The controller against both control planes: pods, Services, settings, status and run policies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import pytest

from kubedl_py.api import constants as c
from kubedl_py.kube.errors import AlreadyExists
from kubedl_py.kube.resources import NAMESPACES, PODS, SERVICES
from tests.integration.conftest import (
    PYTORCHJOBS,
    TFJOBS,
    Env,
    Kube,
    RunningController,
    condition,
    env_of,
    events_for,
    eventually,
    fast_options,
    job_state,
    pods_of,
    pytorchjob,
    replica,
    services_of,
    tfjob,
    wait_condition,
)


async def test_pytorch_job_runs_to_success(kube: Kube, controller: RunningController) -> None:
    job = pytorchjob(
        "ddp",
        replicas={
            "Master": replica(1, exit_code=0, run_seconds=0.5),
            "Worker": replica(2, exit_code=0, run_seconds=0.5),
        },
    )
    created = await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    pods = await eventually(lambda: _count(pods_of(kube, "ddp"), 3), what="3 pods")
    assert [p["metadata"]["name"] for p in pods] == ["ddp-master-0", "ddp-worker-0", "ddp-worker-1"]
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == (
            created["metadata"]["uid"],
            True,
            True,
        )
        assert pod["metadata"]["labels"][c.LABEL_JOB_NAME] == "ddp"
    master, worker0, worker1 = (env_of(p) for p in pods)
    assert (master["RANK"], worker0["RANK"], worker1["RANK"]) == ("0", "1", "2")
    assert {e["MASTER_ADDR"] for e in (master, worker0, worker1)} == {"ddp-master-0"}
    assert master["WORLD_SIZE"] == "3" and master["MASTER_PORT"] == "23456"
    services = await services_of(kube, "ddp")
    # only the rendezvous host is dialed by name: the Master alone gets a Service
    assert [s["metadata"]["name"] for s in services] == ["ddp-master-0"]
    assert all(s["spec"]["clusterIP"] == "None" for s in services)

    done = await wait_condition(kube, PYTORCHJOBS, "ddp", "Succeeded")
    status = done["status"]
    types = [cond["type"] for cond in status["conditions"] if cond["status"] == "True"]
    assert types == ["Created", "Succeeded"]
    assert status["conditions"][-1]["type"] == "Succeeded"
    running = next(cond for cond in status["conditions"] if cond["type"] == "Running")
    assert running["status"] == "False"
    assert status["startTime"] and status["completionTime"]
    assert status["replicaStatuses"]["Master"]["succeeded"] == 1
    # The documented metric, under its documented name.
    assert controller.manager is not None
    metrics = controller.manager.metrics
    assert metrics.value("kubedl_jobs_total", {"kind": "PyTorchJob", "condition": "Succeeded"}) == 1.0
    assert metrics.value("kubedl_jobs_total", {"kind": "PyTorchJob", "condition": "Created"}) == 1.0


async def test_tf_job_success_by_worker_zero_and_running_cleanup(kube: Kube, controller: RunningController) -> None:
    job = tfjob(
        "mnist",
        replicas={
            "PS": replica(1, name="tensorflow"),
            "Worker": replica(2, name="tensorflow", exit_code=0, run_seconds=0.3),
        },
    )
    await kube.create(TFJOBS, job, namespace=kube.ns)
    pods = await eventually(lambda: _count(pods_of(kube, "mnist"), 3), what="3 pods")
    worker1 = next(p for p in pods if p["metadata"]["name"] == "mnist-worker-1")
    config = json.loads(env_of(worker1)["TF_CONFIG"])
    assert config == {
        "cluster": {
            "ps": [f"mnist-ps-0.{kube.ns}.svc:2222"],
            "worker": [f"mnist-worker-0.{kube.ns}.svc:2222", f"mnist-worker-1.{kube.ns}.svc:2222"],
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    await wait_condition(kube, TFJOBS, "mnist", "Succeeded")

    # cleanPodPolicy defaults to Running: the PS (which never exits) is deleted, finished workers stay.
    async def ps_gone() -> bool:
        names = [p["metadata"]["name"] for p in await pods_of(kube, "mnist")]
        return "mnist-ps-0" not in names and "mnist-worker-0" in names

    await eventually(ps_gone, what="PS pod cleaned up")


async def test_never_policy_fails_the_job_with_the_exit_code(kube: Kube, controller: RunningController) -> None:
    job = pytorchjob(
        "crash",
        replicas={"Master": replica(1), "Worker": replica(1, restart_policy="Never", exit_code=3, run_seconds=0.2)},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "crash", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "ReplicaFailed"
    assert "Worker 0 exited with code 3" in cond["message"]


@pytest.mark.parametrize("mode", ["Auto", "Recreate"])
async def test_exit_code_policy_retries_signals_until_backoff_limit(
    kube: Kube, controller: RunningController, mode: str
) -> None:
    job = tfjob(
        "retry",
        backoffLimit=2,
        failurePolicy={"restartMode": mode},
        replicas={
            "PS": replica(1, name="tensorflow"),
            "Worker": replica(1, name="tensorflow", restart_policy="ExitCode", exit_code=137, run_seconds=0.2),
        },
    )
    await kube.create(TFJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, TFJOBS, "retry", "Failed", within=30)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "BackoffLimitExceeded", cond
    creates = controller.cluster.request_log.find(verb="create", resource="pods", status=201)
    # The job fails when its restarts reach the limit (the Training Operator's and KubeDL's count).
    if mode == "Recreate":
        # With backoffLimit 2, one replacement is made and the second failure, which would be restart 2, ends
        # the job. PS once, the worker once plus one replacement.
        assert failed["status"]["replicaStatuses"]["Worker"]["restarts"] == 1
        assert "2 restarts would reach backoffLimit 2" in cond["message"]
        assert len(creates) == 3
        events = await events_for(kube, "retry")
        assert sum(1 for e in events if e["reason"] == "JobRestarting") >= 1
    else:
        # In place: the kubelet restarts the worker in its pod; its second restart reaches the limit. No pod
        # is made but the first two.
        assert failed["status"]["replicaStatuses"]["Worker"]["restarts"] == 2
        assert "has restarted 2 times, reaching backoffLimit 2" in cond["message"], cond["message"]
        assert len(creates) == 2
        events = await events_for(kube, "retry")
        assert sum(1 for e in events if e["reason"] == "RestartedInPlace") == 2


async def test_exit_code_policy_fails_fast_on_a_program_error(kube: Kube, controller: RunningController) -> None:
    job = tfjob(
        "bug",
        backoffLimit=5,
        replicas={
            "PS": replica(1, name="tensorflow"),
            "Worker": replica(1, name="tensorflow", restart_policy="ExitCode", exit_code=1, run_seconds=0.2),
        },
    )
    await kube.create(TFJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, TFJOBS, "bug", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and "not retryable under restartPolicy ExitCode" in cond["message"]
    assert (failed["status"]["replicaStatuses"]["Worker"].get("restarts") or 0) == 0


async def test_on_failure_restarts_in_place_and_counts_toward_backoff(
    kube: Kube, controller: RunningController
) -> None:
    job = pytorchjob(
        "flaky",
        backoffLimit=1,
        replicas={"Master": replica(1, restart_policy="OnFailure", exit_code=1, run_seconds=0.1)},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "flaky", "Failed", within=30)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "BackoffLimitExceeded"
    # The pod was restarted in place by the kubelet (same uid), never recreated, and is now stopped: its
    # in-place restart stays counted in the status the job was judged by.
    assert failed["status"]["replicaStatuses"]["Master"].get("restarts") == 1
    assert "Master 0 exited with code 1" in cond["message"], cond["message"]


async def test_active_deadline_fails_by_timer_and_stops_pods(kube: Kube, controller: RunningController) -> None:
    await kube.create(PYTORCHJOBS, pytorchjob("slow", activeDeadlineSeconds=1), namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "slow", "Failed", within=15)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "DeadlineExceeded"

    async def pods_stopped() -> bool:
        return not await pods_of(kube, "slow")

    await eventually(pods_stopped, what="pods of the expired job deleted")


async def test_ttl_deletes_the_finished_job(kube: Kube, controller: RunningController) -> None:
    job = pytorchjob("short", ttlSecondsAfterFinished=1, replicas={"Master": replica(1, exit_code=0, run_seconds=0.1)})
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "short", "Succeeded")

    async def gone() -> bool:
        return await job_state(kube, PYTORCHJOBS, "short") is None

    await eventually(gone, within=15, what="job deleted by TTL")


async def test_clean_pod_policy_all_removes_pods_and_services(kube: Kube, controller: RunningController) -> None:
    job = pytorchjob(
        "tidy",
        cleanPodPolicy="All",
        replicas={"Master": replica(1, exit_code=0, run_seconds=0.2), "Worker": replica(1)},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "tidy", "Succeeded")

    async def clean() -> bool:
        return not await pods_of(kube, "tidy") and not await services_of(kube, "tidy")

    await eventually(clean, what="pods and services removed")


async def test_cleanup_takes_only_the_jobs_own_objects_not_another_kinds_of_the_same_name(
    kube: Kube, controller: RunningController
) -> None:
    """A PyTorchJob and a TFJob may both be named "twin" in one namespace: their pods and Services have different
    names (twin-master-0, twin-chief-0) but the same job-name label. The TFJob succeeds with cleanPodPolicy All:
    its pods and Services go, and the PyTorchJob's running Master and its Service stay, the same objects."""
    await kube.create(PYTORCHJOBS, pytorchjob("twin", replicas={"Master": replica(1)}), namespace=kube.ns)

    async def master_up() -> tuple[dict[str, Any], dict[str, Any]] | None:
        pods = {p["metadata"]["name"]: p for p in await pods_of(kube, "twin")}
        services = {s["metadata"]["name"]: s for s in await services_of(kube, "twin")}
        pod, service = pods.get("twin-master-0"), services.get("twin-master-0")
        running = pod is not None and (pod.get("status") or {}).get("phase") == "Running"
        return (pod, service) if running and pod is not None and service is not None else None

    pod, service = await eventually(master_up, what="the PyTorchJob's Master running, with its Service")
    chief = replica(1, exit_code=0, run_seconds=0.5, name="tensorflow")
    await kube.create(TFJOBS, tfjob("twin", cleanPodPolicy="All", replicas={"Chief": chief}), namespace=kube.ns)
    await wait_condition(kube, TFJOBS, "twin", "Succeeded")

    async def tf_cleaned() -> bool:
        pods = {p["metadata"]["name"] for p in await pods_of(kube, "twin")}
        services = {s["metadata"]["name"] for s in await services_of(kube, "twin")}
        return "twin-chief-0" not in pods and "twin-chief-0" not in services

    await eventually(tf_cleaned, what="the TFJob's pod and Service cleaned up")
    after = await kube.get(PODS, "twin-master-0", namespace=kube.ns)
    assert after["metadata"]["uid"] == pod["metadata"]["uid"], "the PyTorchJob's Master was deleted and made again"
    assert not after["metadata"].get("deletionTimestamp"), "the PyTorchJob's Master is being deleted"
    kept = await kube.get(SERVICES, "twin-master-0", namespace=kube.ns)
    assert kept["metadata"]["uid"] == service["metadata"]["uid"], "the PyTorchJob's Service was deleted"


async def test_invalid_spec_fails_without_pods_and_others_proceed(kube: Kube, controller: RunningController) -> None:
    # An elastic policy whose minimum exceeds its maximum: neither the CRD schema nor its CEL rules state
    # that, so both API servers let it through and only the controller can refuse it.
    bad = pytorchjob(
        "badelastic",
        replicas={"Master": replica(1), "Worker": replica(1)},
        elasticPolicy={"minReplicas": 4, "maxReplicas": 2},
    )
    await kube.create(PYTORCHJOBS, bad, namespace=kube.ns)
    # A template the API server refuses as a pod: a container name that is not a DNS label.
    refused = pytorchjob("badpod", replicas={"Master": replica(1, name="Not_A_Label")})
    await kube.create(PYTORCHJOBS, refused, namespace=kube.ns)
    good = pytorchjob("fine", replicas={"Master": replica(1, exit_code=0, run_seconds=0.1)})
    await kube.create(PYTORCHJOBS, good, namespace=kube.ns)

    failed = await wait_condition(kube, PYTORCHJOBS, "badelastic", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "InvalidSpec"
    assert "spec.elasticPolicy.minReplicas" in cond["message"]
    failed = await wait_condition(kube, PYTORCHJOBS, "badpod", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "InvalidSpec"
    await wait_condition(kube, PYTORCHJOBS, "fine", "Succeeded")
    assert await pods_of(kube, "badelastic") == []
    assert await pods_of(kube, "badpod") == []
    events = await events_for(kube, "badelastic")
    assert any(e["reason"] == "InvalidSpec" and e["type"] == "Warning" for e in events)


async def test_a_service_the_server_refuses_fails_the_job_before_any_pod(
    kube: Kube, controller: RunningController
) -> None:
    job = pytorchjob("badport", replicas={"Master": replica(1)})
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["ports"] = [{"name": "Not_A_Port_Name", "containerPort": 8080}]
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "badport", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "InvalidSpec"
    assert await pods_of(kube, "badport") == []
    assert await services_of(kube, "badport") == []


async def test_lowering_replicas_removes_surplus(kube: Kube, controller: RunningController) -> None:
    await kube.create(
        PYTORCHJOBS,
        pytorchjob("shrink", services=c.REPLICA_SERVICES_ALL, replicas={"Master": replica(1), "Worker": replica(3)}),
        namespace=kube.ns,
    )
    await eventually(lambda: _count(pods_of(kube, "shrink"), 4), what="4 pods")
    await kube.patch(
        PYTORCHJOBS, "shrink", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}}, namespace=kube.ns
    )

    async def shrunk() -> list[str] | None:
        names = [p["metadata"]["name"] for p in await pods_of(kube, "shrink")]
        services = [s["metadata"]["name"] for s in await services_of(kube, "shrink")]
        return names if names == services == ["shrink-master-0", "shrink-worker-0"] else None

    await eventually(shrunk, what="surplus pods and services removed")


async def test_deleted_pod_is_recreated_without_counting_a_restart(kube: Kube, controller: RunningController) -> None:
    await kube.create(PYTORCHJOBS, pytorchjob("heal"), namespace=kube.ns)
    pods = await eventually(lambda: _count(pods_of(kube, "heal"), 3), what="3 pods")
    old_uid = pods[1]["metadata"]["uid"]
    await kube.delete(PODS, "heal-worker-0", namespace=kube.ns)

    async def replaced() -> bool:
        pods = await pods_of(kube, "heal")
        return any(p["metadata"]["name"] == "heal-worker-0" and p["metadata"]["uid"] != old_uid for p in pods)

    await eventually(replaced, what="worker-0 recreated")


async def test_controller_restart_mid_creation_makes_no_duplicates(cluster: Env, kube: Kube) -> None:
    first = RunningController(cluster, fast_options(namespace=kube.ns, workers=1))
    await first.start()
    await kube.create(
        PYTORCHJOBS,
        pytorchjob("big", services=c.REPLICA_SERVICES_ALL, replicas={"Master": replica(1), "Worker": replica(59)}),
        namespace=kube.ns,
    )
    await eventually(lambda: _at_least(pods_of(kube, "big"), 5), what="some pods")
    await first.stop(crash=True)
    second = RunningController(cluster, fast_options(namespace=kube.ns, workers=2))
    await second.start()
    try:
        pods = await eventually(lambda: _count(pods_of(kube, "big"), 60), what="60 pods")
        assert len({p["metadata"]["name"] for p in pods}) == 60
        created = cluster.request_log.find(verb="create", resource="pods", status=201)
        assert len(created) == 60, "a pod name was created twice"
        await eventually(lambda: _count(services_of(kube, "big"), 60), what="60 services")
    finally:
        await second.stop()


async def test_settled_jobs_cost_zero_writes_on_resync(cluster: Env, kube: Kube) -> None:
    from kubedl_py.kube.informer import InformerSettings

    running = RunningController(
        cluster, fast_options(namespace=kube.ns, informer=InformerSettings(watch_timeout_seconds=30, resync_period=0.2))
    )
    await running.start()
    try:
        for i in range(3):
            await kube.create(PYTORCHJOBS, pytorchjob(f"idle-{i}"), namespace=kube.ns)
        for i in range(3):
            await wait_condition(kube, PYTORCHJOBS, f"idle-{i}", "Running")
        log = cluster.request_log
        assert running.manager is not None
        metrics = running.manager.metrics
        labels = {"controller": "pytorchjobs", "result": "success"}

        def writes() -> list[str]:
            # The proxy's log is the whole session's: only this namespace's writes are these jobs' cost.
            return [
                f"{r.verb} {r.resource}{'/' + r.subresource if r.subresource else ''} {r.name} ({r.user_agent})"
                for r in log.records
                if r.verb in ("create", "update", "patch", "delete") and r.namespace == kube.ns
            ]

        writes_before = writes()
        reconciles_before = metrics.value("kubedl_reconcile_total", labels) or 0.0

        # Absence of writes can only be shown over time: wait until resyncs have reconciled every job
        # several more times, then count the writes again.
        async def resynced() -> bool:
            return (metrics.value("kubedl_reconcile_total", labels) or 0.0) >= reconciles_before + 9

        await eventually(resynced, what="resync reconciles")
        assert writes()[len(writes_before) :] == []
    finally:
        await running.stop()


async def test_two_controllers_with_leader_election_act_once(cluster: Env, kube: Kube) -> None:
    from kubedl_py.kube.leader import LeaderElectionSettings
    from kubedl_py.kube.resources import LEASES

    with contextlib.suppress(AlreadyExists):  # the real tier's install made it
        await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubedl-system"}})
    lease_name = f"kubedl-py-{kube.ns}"  # a lease of its own: tests share the real tier's kubedl-system
    settings = LeaderElectionSettings(
        name=lease_name, namespace="kubedl-system", lease_duration=3.0, renew_deadline=2.0, retry_period=0.5
    )
    options = fast_options(namespace=kube.ns, leader_elect=True, leader_election=settings)
    a = RunningController(cluster, options)
    b = RunningController(cluster, options)
    task_a = asyncio.create_task(a.start())
    task_b = asyncio.create_task(b.start())
    done, _pending = await asyncio.wait([task_a, task_b], return_when=asyncio.FIRST_COMPLETED)
    leader, standby, standby_task = (a, b, task_b) if task_a in done else (b, a, task_a)
    try:
        await kube.create(PYTORCHJOBS, pytorchjob("elected"), namespace=kube.ns)
        await eventually(lambda: _count(pods_of(kube, "elected"), 3), what="3 pods")
        assert not standby_task.done(), "the standby started acting while the leader held the lease"
        lease = await kube.get(LEASES, lease_name, namespace="kubedl-system")
        assert lease["spec"]["holderIdentity"]
        killed = time.monotonic()
        await leader.stop(crash=True)  # no graceful release: the standby must wait for the lease to expire
        await asyncio.wait_for(standby_task, timeout=10)
        handover = time.monotonic() - killed
        assert handover <= settings.lease_duration + settings.retry_period + 1.0, f"handover took {handover:.1f}s"
        await kube.create(PYTORCHJOBS, pytorchjob("after"), namespace=kube.ns)
        await eventually(lambda: _count(pods_of(kube, "after"), 3), what="the new leader acts")
        created = cluster.request_log.find(verb="create", resource="pods", status=201)
        assert len(created) == 6
    finally:
        standby_task.cancel()
        await standby.stop()
        await leader.stop()


async def _count(listing: Any, n: int) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = await listing
    return items if len(items) == n else None


async def _at_least(listing: Any, n: int) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = await listing
    return items if len(items) >= n else None
