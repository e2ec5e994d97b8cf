"""Recovery from what breaks at scale (docs/policies.md, "Lost nodes" to "Hangs"), end to end on both control
planes: the real controller over HTTP, simulated node agents. On the real tier the node lifecycle is the real
kube-controller-manager's and the controller runs as the ServiceAccount rendered in deploy/ (RBAC enforced).

Each test fails on the code before this work: lost nodes left jobs ``Running`` with nothing running, every
eviction spent ``backoffLimit``, a replaced rank's last lines were lost, a job failing ``InvalidSpec`` kept its
other pods, empty jobs were accepted, and a job re-created under a deleted one's name waited in silence.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubedl_local.node.simulated import EXIT_CODE, RUN_SECONDS, TERMINATION_SECONDS
from kubedl_py.api import constants as c
from kubedl_py.api.groups import KUBEFLOW
from kubedl_py.kube import errors
from kubedl_py.kube.resources import NODES, PODS, Resource
from tests.integration.conftest import (
    PYTORCHJOBS,
    TFJOBS,
    Env,
    Kube,
    RunningController,
    condition,
    events_for,
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
from tests.integration.test_kubeflow import KF_KINDS, kf_pytorchjob

pytestmark = pytest.mark.nodes(3)


# --------------------------------------------------------------------------------------------- helpers


async def lose_node(cluster: Env, node: str) -> None:
    """The node stops reporting, as a crashed machine. On the embedded tier the hook also marks it lost at once
    (its node lifecycle controller would after the grace period); the real tier waits for kube-controller-manager."""
    if cluster.local is not None:
        await cluster.local.lose_node(node)
        return
    assert cluster.real is not None and cluster.real.cluster.agent is not None
    await cluster.real.loop.call(cluster.real.cluster.agent.freeze(node))


async def kubelet_evict(cluster: Env, namespace: str, name: str) -> None:
    """Node-pressure eviction by the pod's kubelet: phase Failed, reason Evicted (the pod object stays)."""
    message = "The node was low on resource: memory. "
    if cluster.local is not None:
        await cluster.local.evict_pod(namespace, name, message)
        return
    assert cluster.real is not None and cluster.real.cluster.agent is not None
    await cluster.real.loop.call(cluster.real.cluster.agent.evict(namespace, name, message))


async def api_evict(kube: Kube, name: str) -> None:
    """The Eviction API (what ``kubectl drain`` and preemption-like disruptions do): DisruptionTarget, then a
    graceful delete."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": kube.ns}}
    await kube.request("POST", f"/api/v1/namespaces/{kube.ns}/pods/{name}/eviction", body=body)


def statuses(job: dict[str, Any] | None) -> dict[str, Any]:
    return ((job or {}).get("status") or {}).get("replicaStatuses") or {}


def state_of(job: dict[str, Any] | None) -> str:
    for cond in reversed(((job or {}).get("status") or {}).get("conditions") or []):
        if cond.get("status") == "True":
            return str(cond["type"])
    return ""


async def cordon(kube: Kube, *nodes: str, off: bool = True) -> None:
    """Mark nodes unschedulable (``off=False``: schedulable again), so a test decides where new pods go."""
    for node in nodes:
        await kube.patch(NODES, node, {"spec": {"unschedulable": off}})


async def running_pod(kube: Kube, name: str, *, not_uid: str | None = None) -> dict[str, Any] | None:
    try:
        pod = await kube.get(PODS, name, namespace=kube.ns)
    except errors.NotFound:
        return None
    return pod if live(pod) and pod["metadata"].get("uid") != not_uid else None


async def next_pod(kube: Kube, name: str, after: str | None, *, within: float = 60) -> dict[str, Any]:
    """The pod ``name`` running, once it is not the one with uid ``after`` any more."""
    found: dict[str, Any] = await eventually(
        lambda: running_pod(kube, name, not_uid=after), within=within, what=f"{name} running (not {after})"
    )
    return found


def live(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") == "Running"


def rank_of(pod: dict[str, Any]) -> tuple[str, ...]:
    labels = pod["metadata"].get("labels") or {}
    return tuple(str(labels.get(key, "")) for key in (c.LABEL_JOB_NAME, c.LABEL_REPLICA_TYPE, c.LABEL_REPLICA_INDEX))


@contextlib.asynccontextmanager
async def rank_watch(kube: Kube) -> AsyncIterator[list[str]]:
    """Watches the namespace's pods and collects every moment two pods of one rank (job, type, index) existed
    at once, or a rank's pod was re-added before its old one was deleted."""
    problems: list[str] = []
    listed = await kube.list(PODS, namespace=kube.ns)
    alive = {rank_of(pod): str(pod["metadata"]["uid"]) for pod in listed.items}

    async def follow() -> None:
        async with contextlib.aclosing(
            kube.watch(PODS, namespace=kube.ns, resource_version=listed.resource_version, timeout_seconds=600)
        ) as events:
            async for event in events:
                if event.type not in ("ADDED", "MODIFIED", "DELETED"):
                    continue  # bookmarks
                rank, uid = rank_of(event.object), str(event.object["metadata"]["uid"])
                if event.type == "DELETED":
                    if alive.get(rank) == uid:
                        del alive[rank]
                elif alive.get(rank, uid) != uid:
                    problems.append(f"{rank}: pod {uid} while {alive[rank]} still exists")
                else:
                    alive[rank] = uid

    task = asyncio.create_task(follow())
    try:
        yield problems
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# ------------------------------------------------------------------------------------------ lost nodes


JOBS = 20
#: failurePolicy.nodeLostTimeoutSeconds of the test's jobs
LOST_AFTER = 5


async def test_a_frozen_node_under_20_jobs_is_recovered_within_the_timeout(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """20 running jobs (host-network and pod-network, restartScope Replica and Job) with every pod on one node;
    the node freezes. Each job is Running again on the other nodes within nodeLostTimeoutSeconds + 30 s of the
    node going NotReady, with no rank twice, each Service on its live pod, one infrastructure restart charged
    and no user restart, and a NodeLost event naming the node. A 21st job with a long timeout shows the wait:
    not Running, but Restarting, naming the replica, the node and when its pod will be replaced."""
    doomed, *others = cluster.node_names
    await cordon(kube, *others)  # every pod on the node to be lost
    names = []
    for i in range(JOBS):
        host, scope = bool(i % 2), ("Replica", "Job")[(i // 2) % 2]
        name = f"lost-{i}"
        names.append(name)
        job = pytorchjob(
            name,
            host=host,
            replicas={"Master": replica(1), "Worker": replica(2)},
            failurePolicy={"restartScope": scope, "nodeLostTimeoutSeconds": LOST_AFTER},
        )
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    waiting = pytorchjob(
        "waiting", replicas={"Master": replica(1), "Worker": replica(2)}, failurePolicy={"nodeLostTimeoutSeconds": 600}
    )
    await kube.create(PYTORCHJOBS, waiting, namespace=kube.ns)

    async def all_running_on_doomed() -> bool:
        for name in [*names, "waiting"]:
            if state_of(await job_state(kube, PYTORCHJOBS, name)) != "Running":
                return False
        pods = (await kube.list(PODS, namespace=kube.ns)).items
        return len(pods) == 3 * (JOBS + 1) and all(p["spec"].get("nodeName") == doomed for p in pods)

    await eventually(all_running_on_doomed, within=120, interval=0.5, what=f"20 jobs Running on {doomed}")
    await cordon(kube, *others, off=False)
    # A third of the jobs' status writes are refused (Conflict) while they recover: each lost pod's charge must
    # still be there, exactly once (checked below, job by job). The code before the status was written ahead of
    # the deletion passed this too, as a retry could still see the pod; test_status.py's
    # test_a_failures_record_survives_a_write_that_fails_around_its_pods_deletion is the one that failed on it.
    refused = cluster.faults.fail(
        409, verb="patch", resource="pytorchjobs", subresource="status", probability=0.34, times=12
    )
    async with rank_watch(kube) as problems:
        await lose_node(cluster, doomed)

        async def not_ready() -> bool:
            node = await kube.get(NODES, doomed)
            ready = next(cond for cond in node["status"]["conditions"] if cond["type"] == "Ready")
            return ready["status"] != "True"

        await eventually(not_ready, within=120, interval=0.5, what=f"{doomed} NotReady")
        lost_at = time.monotonic()
        recovered: dict[str, float] = {}

        async def recovered_all() -> bool:
            for name in names:
                if name in recovered:
                    continue
                job = await job_state(kube, PYTORCHJOBS, name)
                pods = await pods_of(kube, name)
                live = [
                    p
                    for p in pods
                    if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
                ]
                if (
                    state_of(job) == "Running"
                    and len(pods) == 3
                    and len(live) == 3
                    and all(p["spec"]["nodeName"] != doomed for p in live)
                ):
                    recovered[name] = time.monotonic() - lost_at
            return len(recovered) == JOBS

        await eventually(recovered_all, within=LOST_AFTER + 30 + 30, interval=0.5, what="every job Running again")
    assert not problems, problems
    assert refused.hits > 0, "no status write was refused: the test proved nothing about refused writes"
    cluster.faults.remove(refused)
    times = sorted(recovered.values())
    print(
        f"\n[{cluster.tier}] recovery after {doomed} went NotReady (nodeLostTimeoutSeconds {LOST_AFTER}): "
        f"median {statistics.median(times):.1f}s, max {times[-1]:.1f}s over {JOBS} jobs",
        file=sys.stderr,
    )
    assert times[-1] <= LOST_AFTER + 30, times
    for i, name in enumerate(names):
        job = await job_state(kube, PYTORCHJOBS, name)
        counts = statuses(job)
        assert sum(int(s.get("restarts") or 0) for s in counts.values()) == 0, (name, counts)
        infra = sum(int(s.get("infrastructureRestarts") or 0) for s in counts.values())
        # restartScope Job: one restart of the whole job; Replica: one per lost pod.
        assert infra == (1 if (i // 2) % 2 else 3), (name, counts)
        failure = job["status"]["failures"][-1]
        assert (failure["class"], failure["reason"], failure["node"]) == ("Infrastructure", "NodeLost", doomed)
        pods = {p["metadata"]["name"]: p for p in await pods_of(kube, name)}
        for service in await services_of(kube, name):
            pod = pods[service["metadata"]["name"]]
            if i % 2:  # host network: the Service forwards to the live pod's host port
                assert target_port(service) == host_port(pod), (name, service["metadata"]["name"])
        lost_events = [e for e in await events_for(kube, name) if e["reason"] == "NodeLost"]
        assert lost_events and all(doomed in e["message"] for e in lost_events), lost_events
    # Within its timeout the 21st job's pods are not replaced, and it says why instead of "Running".
    still = await job_state(kube, PYTORCHJOBS, "waiting")
    assert state_of(still) == "Restarting", still
    cond = condition(still, "Restarting")
    assert cond is not None and cond["reason"] == "NodeNotReady", cond
    for who in ("Master 0", "Worker 0", "Worker 1"):
        assert who in cond["message"], cond["message"]
    assert doomed in cond["message"] and "nodeLostTimeoutSeconds 600" in cond["message"], cond["message"]


# ----------------------------------------------------------------------------------- failure budgets


async def test_evictions_spend_the_infrastructure_budget_and_crashes_the_users(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """backoffLimit 2: ten evictions in a row (the kubelet's and the Eviction API's, alternately) do not fail
    the job; the rank's own crashes then do."""
    job = pytorchjob(
        "busy",
        backoffLimit=2,
        replicas={"Master": replica(1), "Worker": replica(1, restart_policy="OnFailure")},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "busy", "Running", within=60)
    uid = None
    for n in range(10):
        pod = await next_pod(kube, "busy-worker-0", uid)
        uid = pod["metadata"]["uid"]
        if n % 2:
            await api_evict(kube, "busy-worker-0")
        else:
            await kubelet_evict(cluster, kube.ns, "busy-worker-0")
    await next_pod(kube, "busy-worker-0", uid)

    async def charged() -> dict[str, Any] | None:
        state = await job_state(kube, PYTORCHJOBS, "busy")
        return state if int(statuses(state).get("Worker", {}).get("infrastructureRestarts") or 0) == 10 else None

    busy = await eventually(charged, within=30, what="10 infrastructure restarts")
    assert condition(busy, "Failed") is None
    assert int(statuses(busy)["Worker"].get("restarts") or 0) == 0
    reasons = {f["reason"] for f in busy["status"]["failures"]}
    assert reasons == {"Evicted", "EvictionByEvictionAPI"}, reasons
    assert {f["class"] for f in busy["status"]["failures"]} == {"Infrastructure"}

    # Now the rank crashes on its own (exit 1, restarted in place by the kubelet): user failures.
    await kube.patch(
        PODS, "busy-worker-0", {"metadata": {"annotations": {EXIT_CODE: "1", RUN_SECONDS: "0.2"}}}, namespace=kube.ns
    )
    failed = await wait_condition(kube, PYTORCHJOBS, "busy", "Failed", within=60)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "BackoffLimitExceeded", cond
    assert "Worker 0 exited with code 1" in cond["message"], cond["message"]
    assert int(statuses(failed)["Worker"]["restarts"]) == 2  # folded in from the pod when the job failed
    assert int(statuses(failed)["Worker"]["infrastructureRestarts"]) == 10
    assert statuses(failed)["Worker"]["lastFailure"]["class"] == "User"
    warnings = [e for e in await events_for(kube, "busy") if e["reason"] == "BackoffLimitExceeded"]
    assert warnings and warnings[0]["type"] == "Warning"


async def test_the_infrastructure_budget_fails_the_job_when_spent(
    kube: Kube, cluster: Env, controller: RunningController
) -> None:
    job = pytorchjob("spent", replicas={"Master": replica(1)}, failurePolicy={"infrastructureBackoffLimit": 2})
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "spent", "Running", within=60)
    uid = None
    for _n in range(2):
        pod = await next_pod(kube, "spent-master-0", uid)
        uid = pod["metadata"]["uid"]
        await kubelet_evict(cluster, kube.ns, "spent-master-0")
    failed = await wait_condition(kube, PYTORCHJOBS, "spent", "Failed", within=60)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "InfrastructureBackoffLimitExceeded", cond
    assert "failurePolicy.infrastructureBackoffLimit 2" in cond["message"]


async def test_avoided_nodes_keep_replacements_off_and_clear_when_the_job_ends(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """avoidNodeAfterFailures 2: the only schedulable node saw two evictions; the third pod waits rather than go
    there, and runs as soon as another node is schedulable."""
    bad, other, *_ = cluster.node_names
    await cordon(kube, *cluster.node_names[1:])
    job = pytorchjob(
        "picky",
        replicas={"Master": replica(1), "Worker": replica(1)},
        failurePolicy={"avoidNodeAfterFailures": 2},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    uid = None
    for _n in range(2):
        pod = await next_pod(kube, "picky-worker-0", uid)
        assert pod["spec"]["nodeName"] == bad
        uid = pod["metadata"]["uid"]
        await kubelet_evict(cluster, kube.ns, "picky-worker-0")

    async def waiting() -> dict[str, Any] | None:
        try:
            pod = await kube.get(PODS, "picky-worker-0", namespace=kube.ns)
        except errors.NotFound:
            return None
        return pod if pod["metadata"]["uid"] != uid and pod["status"].get("phase") == "Pending" else None

    pod = await eventually(waiting, within=60, what="the third worker Pending, kept off the node")
    required = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [bad]}]}
    ]
    state = await job_state(kube, PYTORCHJOBS, "picky")
    assert state is not None and [entry["node"] for entry in state["status"]["avoidedNodes"]] == [bad]
    await cordon(kube, other, off=False)
    pod = await next_pod(kube, "picky-worker-0", uid)
    assert pod["spec"]["nodeName"] == other
    await kube.patch(PODS, "picky-master-0", {"metadata": {"annotations": {EXIT_CODE: "0"}}}, namespace=kube.ns)
    done = await wait_condition(kube, PYTORCHJOBS, "picky", "Succeeded", within=60)
    assert "avoidedNodes" not in done["status"]


# ---------------------------------------------------------------------------------------------- evidence


async def test_a_replaced_ranks_failure_is_kept_in_status(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    job = pytorchjob(
        "evidence",
        backoffLimit=5,
        replicas={
            "Master": replica(1),
            "Worker": replica(1, restart_policy="ExitCode", exit_code=137, run_seconds=0.3),
        },
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)

    async def recorded() -> dict[str, Any] | None:
        state = await job_state(kube, PYTORCHJOBS, "evidence")
        return state if statuses(state).get("Worker", {}).get("lastFailure") else None

    state = await eventually(recorded, within=60, what="the worker's failure in status")
    last = statuses(state)["Worker"]["lastFailure"]
    assert (last["class"], last["reason"], last["exitCode"], last["signal"]) == ("User", "Error", 137, 9), last
    # The kubelet's FallbackToLogsOnError message: the rank's last lines, kept before the pod was replaced.
    assert "exiting with code 137" in last["message"], last
    assert last["node"] and last["pod"] == "evidence-worker-0"
    pod = await kube.get(PODS, "evidence-master-0", namespace=kube.ns)
    assert pod["spec"]["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # kubectl get shows the latest failure's reason (the CRD's printer column, a server-side table).
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "kubectl"), "--kubeconfig", str(cluster.kubeconfig_path),
        "get", "pytorchjobs.training.kubedl.io", "evidence",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    header, row = out.decode().splitlines() or [err.decode(), ""]
    assert header.split() == ["NAME", "STATE", "LAST-FAILURE", "AGE"], (header, err)
    assert row.split()[2] == "Error", row


# ----------------------------------------------------------------------------- no half jobs, no silent waits


async def test_a_job_failing_invalid_spec_stops_the_pods_it_made(kube: Kube, controller: RunningController) -> None:
    """A template the API server refuses in the Master only: the Worker's pod, made in the same batch, goes."""
    job = pytorchjob("half", replicas={"Master": replica(1, name="Not_A_Label"), "Worker": replica(1)})
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "half", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "InvalidSpec", cond

    async def none_running() -> bool:
        pods = await pods_of(kube, "half")
        return all(
            p["metadata"].get("deletionTimestamp") or p["status"].get("phase") in ("Succeeded", "Failed") for p in pods
        )

    await eventually(none_running, within=30, what="no pod of the failed job running")


@pytest.mark.parametrize("kind", ["pytorch", "tf"])
async def test_a_job_with_no_replica_to_run_is_refused_at_create(kube: Kube, kind: str) -> None:
    if kind == "pytorch":
        job, resource = pytorchjob("empty", replicas={"Master": replica(0), "Worker": replica(0)}), PYTORCHJOBS
        field = "spec.pytorchReplicaSpecs"
    else:
        job = tfjob("empty", replicas={"PS": replica(0, name="tensorflow"), "Worker": replica(0, name="tensorflow")})
        resource, field = TFJOBS, "spec.tfReplicaSpecs"
    with pytest.raises(errors.Invalid) as refused:
        await kube.create(resource, job, namespace=kube.ns)
    text = str(refused.value)
    assert field in text and "has no replica to run" in text, text


async def test_a_job_recreated_under_a_deleted_ones_name_says_what_it_waits_for(
    kube: Kube, controller: RunningController
) -> None:
    slow = {TERMINATION_SECONDS: "6"}
    old = pytorchjob("again", replicas={"Master": replica(1)})
    old["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"] = {"annotations": slow}
    await kube.create(PYTORCHJOBS, old, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "again", "Running", within=60)
    await kube.delete(PYTORCHJOBS, "again", namespace=kube.ns, propagation_policy="Background")

    async def gone() -> bool:
        return await job_state(kube, PYTORCHJOBS, "again") is None

    await eventually(gone, what="the old job gone")
    await kube.create(PYTORCHJOBS, pytorchjob("again", replicas={"Master": replica(1)}), namespace=kube.ns)

    async def says_it_waits() -> dict[str, Any] | None:
        job = await job_state(kube, PYTORCHJOBS, "again")
        for cond in ((job or {}).get("status") or {}).get("conditions") or []:
            if cond["type"] == "Running" and cond.get("reason") == "PreviousJobTerminating":
                return cond
        return None

    cond = await eventually(says_it_waits, within=30, what="the job saying it waits for the old pods")
    assert "again-master-0" in cond["message"], cond
    started = time.monotonic()
    await wait_condition(kube, PYTORCHJOBS, "again", "Running", within=60)
    assert time.monotonic() - started < 40


async def test_a_failed_job_that_asks_to_keep_its_pods_keeps_them(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """cleanPodPolicy: None written in the job (not the default): its running pods stay, to debug in place."""
    job = pytorchjob(
        "kept",
        cleanPodPolicy="None",
        replicas={"Master": replica(1, restart_policy="Never", exit_code=3, run_seconds=0.3), "Worker": replica(1)},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "kept", "Failed")
    # A job that keeps its pods has none deleted, neither when it fails nor by its cleanup after.
    assert cluster.request_log.find(verb="delete", resource="pods") == []
    assert cluster.request_log.find(verb="deletecollection", resource="pods") == []
    assert (await kube.get(PODS, "kept-worker-0", namespace=kube.ns))["status"]["phase"] == "Running"


async def test_a_failed_kubeflow_job_keeps_its_running_pods_as_the_training_operator_does(
    cluster: Env, kube: Kube, kubeflow_controller: RunningController
) -> None:
    """A kubeflow.org job that says nothing of cleanPodPolicy gets the Training Operator's default None: its
    running pods stay after it failed (scripts read them); one that writes Running has them stopped."""
    resource = Resource(KUBEFLOW.group, KUBEFLOW.version, "pytorchjobs", "PyTorchJob")
    failing = {"Master": replica(1, restart_policy="Never", exit_code=3, run_seconds=0.3), "Worker": replica(1)}
    await kube.create(resource, kf_pytorchjob("kf-kept", **copy.deepcopy(failing)), namespace=kube.ns)
    stopped = kf_pytorchjob("kf-stopped", run_policy={"cleanPodPolicy": "Running"}, **copy.deepcopy(failing))
    await kube.create(resource, stopped, namespace=kube.ns)
    await wait_condition(kube, resource, "kf-kept", "Failed")
    await wait_condition(kube, resource, "kf-stopped", "Failed")
    assert (await kube.get(PODS, "kf-kept-worker-0", namespace=kube.ns))["status"]["phase"] == "Running"

    async def worker_stopped() -> bool:
        try:
            pod = await kube.get(PODS, "kf-stopped-worker-0", namespace=kube.ns)
        except errors.NotFound:
            return True
        return bool(pod["metadata"].get("deletionTimestamp")) or pod["status"]["phase"] != "Running"

    await eventually(worker_stopped, what="the Running policy's worker stopped")


KINDS = [("pytorchjobs", kf_pytorchjob("pytorch-kf")), *KF_KINDS]


@pytest.mark.parametrize(("plural", "document"), KINDS, ids=[plural for plural, _ in KINDS])
async def test_every_kind_in_kubeflow_org_charges_evictions_to_the_infrastructure_budget(
    cluster: Env, kube: Kube, kubeflow_controller: RunningController, plural: str, document: dict[str, Any]
) -> None:
    """runPolicy.backoffLimit 1 (the first user failure would end the job): two evictions of a worker do not."""
    job = copy.deepcopy(document)
    job["spec"]["runPolicy"]["backoffLimit"] = 1
    resource = Resource(KUBEFLOW.group, KUBEFLOW.version, plural, job["kind"])
    name = job["metadata"]["name"]
    await kube.create(resource, job, namespace=kube.ns)
    worker = f"{name}-worker-0"
    uid = None
    for _n in range(2):
        pod = await next_pod(kube, worker, uid)
        uid = pod["metadata"]["uid"]
        await kubelet_evict(cluster, kube.ns, worker)
    await next_pod(kube, worker, uid)

    async def charged() -> dict[str, Any] | None:
        state = await job_state(kube, resource, name)
        return state if int(statuses(state).get("Worker", {}).get("infrastructureRestarts") or 0) == 2 else None

    state = await eventually(charged, within=30, what=f"{job['kind']}: 2 infrastructure restarts")
    assert condition(state, "Failed") is None
    assert int(statuses(state)["Worker"].get("restarts") or 0) == 0
    assert statuses(state)["Worker"]["lastFailure"]["reason"] == "Evicted"
