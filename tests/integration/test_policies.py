"""Failure and completion policies (docs/policies.md), end to end: the real controller against both control
planes over HTTP, simulated node agents. Each test would fail without its policy: the default behaviour is
what the Training Operator and KubeDL do, and the test checks for something else."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubedl_local.node.simulated import EXIT_CODE, IMAGE_PULL, TERMINATION_SECONDS
from kubedl_py.api import constants as c
from kubedl_py.kube.resources import PODS
from tests.integration.conftest import (
    PYTORCHJOBS,
    TFJOBS,
    Env,
    Kube,
    RunningController,
    condition,
    eventually,
    job_state,
    pods_of,
    pytorchjob,
    replica,
    services_of,
    tfjob,
    wait_condition,
)
from tests.integration.test_hostnetwork import host_port, target_port
from tests.integration.test_kubeflow import KF_PYTORCHJOBS, kf_pytorchjob

pytestmark = pytest.mark.nodes(2)


def annotated(spec: dict[str, Any], **annotations: str) -> dict[str, Any]:
    """``spec`` (a replica) with pod template annotations added."""
    metadata = spec["template"].setdefault("metadata", {})
    metadata.setdefault("annotations", {}).update(annotations)
    return spec


@contextlib.asynccontextmanager
async def pod_events(kube: Kube, job: str) -> AsyncIterator[list[tuple[str, str, str]]]:
    """(type, pod name, pod uid) of every change to the job's pods, in the order the API server sent them."""
    events: list[tuple[str, str, str]] = []
    listed = await kube.list(PODS, namespace=kube.ns, label_selector=f"{c.LABEL_JOB_NAME}={job}")
    started = asyncio.Event()

    async def follow() -> None:
        async with contextlib.aclosing(
            kube.watch(
                PODS,
                namespace=kube.ns,
                label_selector=f"{c.LABEL_JOB_NAME}={job}",
                resource_version=listed.resource_version,
                timeout_seconds=300,
                allow_bookmarks=False,
            )
        ) as stream:
            started.set()
            async for event in stream:
                meta = event.object.get("metadata") or {}
                events.append((event.type, str(meta.get("name")), str(meta.get("uid"))))

    task = asyncio.create_task(follow())
    await started.wait()
    try:
        yield events
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def set_exit(kube: Kube, pod: str, code: int) -> None:
    """Make a running simulated pod's containers exit with ``code`` now."""
    await kube.patch(PODS, pod, {"metadata": {"annotations": {EXIT_CODE: str(code)}}}, namespace=kube.ns)


async def replica_count(kube: Kube, name: str, replica_type: str, key: str, want: int) -> dict[str, Any] | None:
    """The job once its status counts ``want`` ``key`` (succeeded, failed) replicas of ``replica_type``."""
    job = await job_state(kube, PYTORCHJOBS, name)
    counts = ((job or {}).get("status") or {}).get("replicaStatuses", {}).get(replica_type, {})
    return job if int(counts.get(key) or 0) >= want else None


# ------------------------------------------------------------------------------------------ restartScope: Job


async def test_restart_scope_job_replaces_every_pod_together_and_counts_each_restart_once(
    kube: Kube, controller: RunningController
) -> None:
    """Both workers fail at once, three times over: each time every pod (the healthy Master too) is replaced,
    no new pod is made before the last old one is gone, and one job restart counts once against
    backoffLimit, however many pods failed with it."""
    master = annotated(replica(1, restart_policy="OnFailure"), **{TERMINATION_SECONDS: "1"})
    workers = replica(2, restart_policy="OnFailure", exit_code=1, run_seconds=1)
    job = pytorchjob(
        "whole",
        replicas={"Master": master, "Worker": workers},
        backoffLimit=3,
        failurePolicy={"restartScope": "Job", "restartMode": "Recreate"},
    )
    async with pod_events(kube, "whole") as events:
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        failed = await wait_condition(kube, PYTORCHJOBS, "whole", "Failed", within=90)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "BackoffLimitExceeded", cond
    restarts = sum(int(s.get("restarts") or 0) for s in failed["status"]["replicaStatuses"].values())
    assert restarts == 2, failed["status"]["replicaStatuses"]  # 2 job restarts, though 2 pods failed each time

    generations: dict[str, list[str]] = {}
    for kind, name, uid in events:
        if kind == "ADDED" and uid not in generations.setdefault(name, []):
            generations[name].append(uid)
    assert sorted(generations) == ["whole-master-0", "whole-worker-0", "whole-worker-1"]
    # three generations of every pod: the Master was replaced with the workers each time
    assert {name: len(uids) for name, uids in generations.items()} == dict.fromkeys(generations, 3)
    position = {(kind, uid): i for i, (kind, _, uid) in enumerate(events)}
    for generation in range(2):
        last_gone = max(position[("DELETED", uids[generation])] for uids in generations.values())
        first_new = min(position[("ADDED", uids[generation + 1])] for uids in generations.values())
        assert last_gone < first_new, f"generation {generation + 1} started before generation {generation} was gone"


async def test_restart_scope_job_pods_are_left_for_the_controller_to_restart(
    kube: Kube, controller: RunningController
) -> None:
    """The kubelet must not restart a container in place (the rest of the job would not know): every pod of
    a whole-job-restart job runs with restartPolicy Never, whatever its replica's policy says."""
    job = pytorchjob(
        "never",
        replicas={"Master": replica(1, restart_policy="Always"), "Worker": replica(1, restart_policy="OnFailure")},
        failurePolicy={"restartScope": "Job", "restartMode": "Recreate"},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)

    async def both() -> list[dict[str, Any]] | None:
        pods = await pods_of(kube, "never")
        return pods if len(pods) == 2 else None

    pods = await eventually(both, what="the job's pods")
    assert {pod["spec"]["restartPolicy"] for pod in pods} == {"Never"}


# --------------------------------------------------------------------------------- backoffLimit per replica type


async def test_a_replica_types_own_backoff_limit_fails_the_job_when_reached(
    kube: Kube, controller: RunningController
) -> None:
    """No job-wide backoffLimit: the Workers' own limit of 2 ends the job; the PS is never restarted."""
    workers = replica(2, name="tensorflow", restart_policy="ExitCode", exit_code=137, run_seconds=0.3)
    workers["backoffLimit"] = 2
    job = tfjob("capped", replicas={"PS": replica(1, name="tensorflow"), "Worker": workers})
    await kube.create(TFJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, TFJOBS, "capped", "Failed", within=60)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "BackoffLimitExceeded", cond
    assert "Worker replicas" in cond["message"] and "backoffLimit 2" in cond["message"], cond["message"]
    statuses = failed["status"]["replicaStatuses"]
    # In place (restartMode Auto) the kubelet has made the restart that reaches the limit when the job fails
    # (both workers may restart between two looks); recreated, the job fails before the second replacement.
    assert int(statuses["Worker"]["restarts"]) >= 2
    assert int(statuses["PS"].get("restarts") or 0) == 0


# --------------------------------------------------------------------------------------- pendingTimeoutSeconds


@pytest.mark.parametrize(
    ("stuck", "cause"),
    [
        ({"spec": {"nodeSelector": {"kubedl.io/no-such-node": "x"}}}, "Unschedulable"),
        ({"metadata": {"annotations": {IMAGE_PULL: "fail"}}}, "ImagePullBackOff"),
    ],
    ids=["unschedulable", "image-pull"],
)
async def test_a_pod_pending_past_the_timeout_fails_the_job_naming_pod_and_cause(
    kube: Kube, controller: RunningController, stuck: dict[str, Any], cause: str
) -> None:
    workers = replica(2)
    template = workers["template"]
    template["spec"].update(stuck.get("spec", {}))
    template.setdefault("metadata", {}).update(stuck.get("metadata", {}))
    job = pytorchjob(
        "stuck", replicas={"Master": replica(1), "Worker": workers}, failurePolicy={"pendingTimeoutSeconds": 3}
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "stuck", "Failed", within=30)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "PendingTimeout", cond
    assert "stuck-worker-" in cond["message"] and cause in cond["message"], cond["message"]

    async def master_stopped() -> bool:
        pods = {pod["metadata"]["name"]: pod for pod in await pods_of(kube, "stuck")}
        master = pods.get("stuck-master-0")
        return master is None or bool(master["metadata"].get("deletionTimestamp"))

    await eventually(master_stopped, what="the failed job's running Master stopped")


async def test_the_kubeflow_layout_takes_the_policy_under_run_policy(
    kube: Kube, kubeflow_controller: RunningController
) -> None:
    workers = annotated(replica(1), **{IMAGE_PULL: "fail"})
    job = kf_pytorchjob("kfstuck", run_policy={"failurePolicy": {"pendingTimeoutSeconds": 2}}, Worker=workers)
    await kube.create(KF_PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, KF_PYTORCHJOBS, "kfstuck", "Failed", within=30)
    cond = condition(failed, "Failed")
    assert cond is not None and "ImagePullBackOff" in cond["message"], cond


# ------------------------------------------------------------------------------------------- completionPolicy


async def test_the_job_succeeds_once_its_share_of_workers_succeeded(kube: Kube, controller: RunningController) -> None:
    """minSucceeded 75% of 4 workers: two successes are not enough, the third is, with the fourth running."""
    job = pytorchjob("most", replicas={"Worker": replica(4)}, completionPolicy={"minSucceeded": "75%"})
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "most", "Running")
    for index in (0, 1):
        await set_exit(kube, f"most-worker-{index}", 0)
    two = await eventually(lambda: replica_count(kube, "most", "Worker", "succeeded", 2), what="2 workers done")
    assert condition(two, "Succeeded") is None
    await set_exit(kube, "most-worker-2", 0)
    await wait_condition(kube, PYTORCHJOBS, "most", "Succeeded")


async def test_failed_workers_up_to_the_share_are_tolerated_one_more_fails_the_job(
    kube: Kube, controller: RunningController
) -> None:
    job = pytorchjob(
        "tolerant", replicas={"Worker": replica(4, restart_policy="Never")}, completionPolicy={"maxFailed": 1}
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "tolerant", "Running")
    before = {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in await pods_of(kube, "tolerant")}
    await set_exit(kube, "tolerant-worker-0", 1)
    one = await eventually(lambda: replica_count(kube, "tolerant", "Worker", "failed", 1), what="1 worker failed")
    assert condition(one, "Failed") is None
    after = {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in await pods_of(kube, "tolerant")}
    assert after == before  # the failed worker is left as it ended, not replaced
    await set_exit(kube, "tolerant-worker-1", 1)
    failed = await wait_condition(kube, PYTORCHJOBS, "tolerant", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and "more than completionPolicy.maxFailed (1)" in cond["message"], cond


async def test_with_tolerated_failures_the_job_succeeds_when_the_rest_succeeded(
    kube: Kube, controller: RunningController
) -> None:
    job = pytorchjob("rest", replicas={"Worker": replica(3, restart_policy="Never")}, completionPolicy={"maxFailed": 1})
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "rest", "Running")
    await set_exit(kube, "rest-worker-0", 1)
    await eventually(lambda: replica_count(kube, "rest", "Worker", "failed", 1), what="1 worker failed")
    for index in (1, 2):
        await set_exit(kube, f"rest-worker-{index}", 0)
    await wait_condition(kube, PYTORCHJOBS, "rest", "Succeeded")


async def test_pytorch_all_workers_success_policy_waits_for_the_workers(
    kube: Kube, controller: RunningController
) -> None:
    """By default a PyTorchJob succeeds with its Master (the Training Operator's and KubeDL's rule); with
    ``successPolicy: AllWorkers`` the Workers must finish too, so none is cut off while saving its output."""
    master = replica(1, exit_code=0, run_seconds=0.5)
    job = pytorchjob("all", replicas={"Master": master, "Worker": replica(2)}, successPolicy="AllWorkers")
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    done = await eventually(lambda: replica_count(kube, "all", "Master", "succeeded", 1), what="the Master done")
    assert condition(done, "Succeeded") is None
    for index in (0, 1):
        await set_exit(kube, f"all-worker-{index}", 0)
    await wait_condition(kube, PYTORCHJOBS, "all", "Succeeded")


async def test_restart_scope_job_in_host_network_mode_gets_new_ports_services_repointed_first(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """A whole-job restart of a host-network job: every new pod gets a new host port, and every Service is
    re-pointed to its new port before any new pod is made, so no process of the new rendezvous dials an old
    port."""
    workers = replica(2, restart_policy="ExitCode")
    job = pytorchjob(
        "hostwhole",
        host=True,
        services=c.REPLICA_SERVICES_ALL,  # every replica's Service, each re-pointed
        replicas={"Master": replica(1), "Worker": workers},
        failurePolicy={"restartScope": "Job", "restartMode": "Recreate"},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)

    async def three(uids: set[str]) -> list[dict[str, Any]] | None:
        pods = [pod for pod in await pods_of(kube, "hostwhole") if pod["metadata"]["uid"] not in uids]
        running = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Running"]
        return running if len(running) == 3 else None

    old = await eventually(lambda: three(set()), what="the first 3 pods running")
    old_ports = {pod["metadata"]["name"]: host_port(pod) for pod in old}
    cluster.request_log.clear()
    await set_exit(kube, "hostwhole-worker-0", 137)  # a signal: retryable under ExitCode
    new = await eventually(lambda: three({pod["metadata"]["uid"] for pod in old}), within=30, what="3 new pods")
    new_ports = {pod["metadata"]["name"]: host_port(pod) for pod in new}
    assert all(new_ports[name] != old_ports[name] for name in old_ports), (old_ports, new_ports)
    services = {svc["metadata"]["name"]: target_port(svc) for svc in await services_of(kube, "hostwhole")}
    assert services == new_ports
    writes = [
        (r.verb, r.resource)
        for r in cluster.request_log.records
        if r.status < 300
        and ((r.verb == "patch" and r.resource == "services") or (r.verb == "create" and r.resource == "pods"))
    ]
    assert writes.count(("patch", "services")) == 3 and writes.count(("create", "pods")) == 3, writes
    assert writes.index(("create", "pods")) > max(i for i, w in enumerate(writes) if w == ("patch", "services")), writes
