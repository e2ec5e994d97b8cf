"""The job's status tells the truth: replica counts are what ``kubectl get pods`` shows, before, at and after
the end of the job, and the conditions say what happened last."""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_py.controllers import reporting
from kubedl_py.kube.resources import PODS
from kubedl_py.kube.retry import RetrySettings
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
    tfjob,
    wait_condition,
)


def counts(job: dict[str, Any] | None, replica_type: str) -> tuple[int, int, int]:
    entry = (((job or {}).get("status") or {}).get("replicaStatuses") or {}).get(replica_type) or {}
    return int(entry.get("active") or 0), int(entry.get("succeeded") or 0), int(entry.get("failed") or 0)


async def phases(kube: Kube, job: str) -> dict[str, str]:
    return {p["metadata"]["name"]: (p.get("status") or {}).get("phase", "") for p in await pods_of(kube, job)}


async def test_a_failed_job_counts_its_failed_replica(kube: Kube, controller: RunningController) -> None:
    job = pytorchjob(
        "broken",
        replicas={"Master": replica(1, restart_policy="Never", exit_code=3, run_seconds=0.3), "Worker": replica(1)},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "broken", "Failed")
    # Failed and the failed replica's count go out in one write: whoever reads Failed reads the count with it.
    assert counts(failed, "Master")[2] == 1, failed["status"]

    async def settled() -> dict[str, Any] | None:
        state = await job_state(kube, PYTORCHJOBS, "broken")
        stopped = await phases(kube, "broken") == {"broken-master-0": "Failed"}
        return (
            state if stopped and counts(state, "Master") == (0, 0, 1) and counts(state, "Worker") == (0, 0, 0) else None
        )

    # A failed job holds no node: the worker is stopped (PyTorch's default cleanPodPolicy None keeps only a
    # succeeded job's workers; a job that writes cleanPodPolicy: None keeps them), the failed Master stays.
    await eventually(settled, what="Master 0/0/1, the worker stopped and counted so")


async def test_a_tf_job_whose_pods_all_failed_counts_them_all(kube: Kube, controller: RunningController) -> None:
    never = {"restart_policy": "Never", "exit_code": 1, "run_seconds": 0.2, "name": "tensorflow"}
    # cleanPodPolicy None: no pod is cleaned up before it has failed by itself.
    job = tfjob("allfail", cleanPodPolicy="None", replicas={"PS": replica(2, **never), "Worker": replica(3, **never)})
    await kube.create(TFJOBS, job, namespace=kube.ns)
    await wait_condition(kube, TFJOBS, "allfail", "Failed")

    async def all_counted() -> bool:
        state = await job_state(kube, TFJOBS, "allfail")
        return counts(state, "PS") == (0, 0, 2) and counts(state, "Worker") == (0, 0, 3)

    await eventually(all_counted, what="PS 0/0/2 and Worker 0/0/3")


async def test_workers_finishing_after_the_master_are_counted_and_kept(
    kube: Kube, controller: RunningController
) -> None:
    job = pytorchjob(
        "late",
        replicas={
            "Master": replica(1, exit_code=0, run_seconds=0.2),
            "Worker": replica(2, exit_code=0, run_seconds=1.5),
        },
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    done = await wait_condition(kube, PYTORCHJOBS, "late", "Succeeded")
    assert counts(done, "Master") == (0, 1, 0)

    async def workers_done() -> bool:
        state = await job_state(kube, PYTORCHJOBS, "late")
        return counts(state, "Worker") == (0, 2, 0)

    await eventually(workers_done, what="both workers counted as succeeded after the job")
    # PyTorch's default cleanPodPolicy (None) kept the workers, and so their logs.
    assert set((await phases(kube, "late")).values()) == {"Succeeded"}


async def test_cleaned_up_pods_stay_counted_as_they_ended(kube: Kube, controller: RunningController) -> None:
    job = pytorchjob(
        "tidy",
        cleanPodPolicy="All",
        replicas={"Master": replica(1, exit_code=0, run_seconds=0.2), "Worker": replica(1)},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "tidy", "Succeeded")
    await eventually(lambda: _gone(kube, "tidy"), what="pods cleaned up")

    async def final() -> bool:
        # The master ended Succeeded and stays counted; the worker never ended: killed by the cleanup, it
        # is no longer active and was never a success.
        state = await job_state(kube, PYTORCHJOBS, "tidy")
        return counts(state, "Master") == (0, 1, 0) and counts(state, "Worker") == (0, 0, 0)

    await eventually(final, what="Master 0/1/0 and Worker 0/0/0 after cleanup")


async def _gone(kube: Kube, job: str) -> bool:
    return not await pods_of(kube, job)


@pytest.mark.nodes(1, labels=[{"pool": "here"}])
async def test_pending_pods_are_not_active(kube: Kube, controller: RunningController) -> None:
    job = pytorchjob("waiting")
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["nodeSelector"] = {"pool": "elsewhere"}
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await eventually(lambda: _count(kube, "waiting", 3), what="3 pods")

    async def reported() -> dict[str, Any] | None:
        state = await job_state(kube, PYTORCHJOBS, "waiting")
        return state if ((state or {}).get("status") or {}).get("replicaStatuses", {}).get("Worker") else None

    state = await eventually(reported, what="replica statuses")
    assert counts(state, "Master") == (0, 0, 0) and counts(state, "Worker") == (0, 0, 0)
    assert set((await phases(kube, "waiting")).values()) == {"Pending"}
    assert condition(state, "Running") is None


async def _count(kube: Kube, job: str, n: int) -> bool:
    return len(await pods_of(kube, job)) == n


async def test_after_a_failover_no_restarting_condition_is_left(kube: Kube, controller: RunningController) -> None:
    await kube.create(PYTORCHJOBS, pytorchjob("fo", host=True), namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "fo", "Running")
    await kube.delete(PODS, "fo-worker-0", namespace=kube.ns)

    async def running_again() -> dict[str, Any] | None:
        state = await job_state(kube, PYTORCHJOBS, "fo")
        conditions = ((state or {}).get("status") or {}).get("conditions") or []
        live = {p["metadata"]["name"]: p for p in await pods_of(kube, "fo")}
        replaced = len(live) == 3 and all((p.get("status") or {}).get("phase") == "Running" for p in live.values())
        # The status follows the pods a reconcile later (on the real API server that can be a moment after
        # the pods read Running): wait for the counts kubectl would show, too.
        counted = counts(state, "Worker") == (2, 0, 0)
        return state if replaced and counted and conditions and conditions[-1]["type"] == "Running" else None

    state = await eventually(running_again, what="the job Running again, 2 workers active, after the failover")
    restarting = condition(state, "Restarting")
    assert restarting is None, f"a stale Restarting condition: {restarting}"


async def test_a_failed_pod_replaced_leaves_restarting_false_once_running_again(
    kube: Kube, controller: RunningController
) -> None:
    """A real failover: worker 0 fails with a retryable exit code (137, SIGKILL) under restartPolicy
    ExitCode, the controller sets Restarting and replaces the pod; once every pod runs again the job is
    Running and Restarting is False, not left True beside it."""
    worker = replica(1, restart_policy="ExitCode", exit_code=137, run_seconds=1.0)
    await kube.create(
        PYTORCHJOBS,
        # Recreate: this is about a replacement (in place, the pod stays: tests/integration/test_in_place.py)
        pytorchjob(
            "crash",
            host=True,
            replicas={"Master": replica(1), "Worker": worker},
            failurePolicy={"restartMode": "Recreate"},
        ),
        namespace=kube.ns,
    )
    first = await eventually(lambda: _pod_named(kube, "crash", "crash-worker-0"), what="worker 0")
    # Its replacement must run: take the failing annotations out of the template before worker 0 fails
    # (the controller builds every new pod from the job's current spec).
    await kube.patch(
        PYTORCHJOBS,
        "crash",
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"metadata": {"annotations": None}}}}}},
        namespace=kube.ns,
    )
    # Restarting may be True only for a moment (the replacement starts at once): its event stays.
    restarted = await eventually(
        lambda: _events_with_reason(kube, "crash", "JobRestarting"), within=30, what="a JobRestarting event"
    )
    assert "Worker 0 " in restarted[0]["message"], restarted

    async def running_again() -> dict[str, Any] | None:
        state = await job_state(kube, PYTORCHJOBS, "crash")
        conditions = ((state or {}).get("status") or {}).get("conditions") or []
        replacement = await _pod_named(kube, "crash", "crash-worker-0")
        replaced = replacement is not None and replacement["metadata"]["uid"] != first["metadata"]["uid"]
        up = set((await phases(kube, "crash")).values()) == {"Running"}
        return state if replaced and up and conditions and conditions[-1]["type"] == "Running" else None

    state = await eventually(running_again, within=30, what="the job Running again after worker 0 was replaced")
    by_type = {c["type"]: c for c in state["status"]["conditions"]}
    assert by_type["Restarting"]["status"] == "False", by_type["Restarting"]
    assert by_type["Running"]["status"] == "True"
    assert [c["type"] for c in state["status"]["conditions"] if c["status"] == "True"] == ["Created", "Running"]
    assert state["status"]["replicaStatuses"]["Worker"]["restarts"] == 1


async def _events_with_reason(kube: Kube, job: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in await events_for(kube, job) if e.get("reason") == reason]


async def _pod_named(kube: Kube, job: str, name: str) -> dict[str, Any] | None:
    return next((p for p in await pods_of(kube, job) if p["metadata"]["name"] == name), None)


async def _status_writes_of_a_job_life(cluster: Env, kube: Kube, name: str) -> int:
    """Status writes for one job of 16 replicas that start together and succeed together 2 s later."""
    cluster.request_log.clear()
    job = pytorchjob(
        name,
        replicas={"Master": replica(1, exit_code=0, run_seconds=2), "Worker": replica(15, exit_code=0, run_seconds=2)},
    )
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, name, "Succeeded")

    async def all_counted() -> bool:
        state = await job_state(kube, PYTORCHJOBS, name)
        return counts(state, "Master") == (0, 1, 0) and counts(state, "Worker") == (0, 15, 0)

    await eventually(all_counted, what="every replica counted as succeeded")
    return sum(
        1
        for r in cluster.request_log.records
        if r.verb == "patch" and r.subresource == "status" and r.resource == "pytorchjobs" and r.name == name
    )


async def test_replica_counts_changing_together_are_written_together(
    cluster: Env, kube: Kube, controller: RunningController, monkeypatch: pytest.MonkeyPatch
) -> None:
    batched = await _status_writes_of_a_job_life(cluster, kube, "batched")
    monkeypatch.setattr(reporting, "STATUS_BATCH_PERIOD", 0.0)
    unbatched = await _status_writes_of_a_job_life(cluster, kube, "unbatched")
    # Created, Running, Succeeded and a few counts (all replicas counted in the end, checked above); without
    # the batching, one write per count change the reconciles see (7-9 in this test on either tier).
    assert batched < unbatched and batched <= 6, (batched, unbatched)


@pytest.mark.parametrize("fault", ["status write refused", "service re-point fails", "pod delete fails"])
async def test_a_failures_record_survives_a_write_that_fails_around_its_pods_deletion(
    cluster: Env, kube: Kube, controller: RunningController, fault: str
) -> None:
    """Worker 0 fails (exit 137, retried under restartPolicy ExitCode) while the API server refuses a write of
    that reconcile: the job's status write (Conflict, twice), in host-network mode the re-pointing of the
    worker's Service (500 through every retry), which comes after the failed pod's deletion, or that deletion
    itself. Once the pod is gone nothing shows that it failed, so the failure must be in the status before it
    goes, and a retry that finds it there must not count it again: the restart is charged exactly once and its
    evidence (lastFailure) kept."""
    worker = replica(1, restart_policy="ExitCode", exit_code=137, run_seconds=4.0)
    await kube.create(
        PYTORCHJOBS,
        pytorchjob(
            "evidence",
            host=True,
            services="all",
            replicas={"Master": replica(1), "Worker": worker},
            failurePolicy={"restartMode": "Recreate"},  # the pod's deletion is what the faults surround
        ),
        namespace=kube.ns,
    )
    await wait_condition(kube, PYTORCHJOBS, "evidence", "Running")
    first = await _pod_named(kube, "evidence", "evidence-worker-0")
    assert first is not None and (first.get("status") or {}).get("phase") == "Running", first
    # The replacement must run: the failing annotations go from the template before worker 0 fails.
    await kube.patch(
        PYTORCHJOBS,
        "evidence",
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"metadata": {"annotations": None}}}}}},
        namespace=kube.ns,
    )
    if fault == "status write refused":
        rule = cluster.faults.fail(
            409, verb="patch", resource="pytorchjobs", subresource="status", name="evidence", times=2
        )
    elif fault == "service re-point fails":
        # 500 on every try of the client's retries: the reconcile fails after the pod was deleted.
        tries = RetrySettings().attempts
        rule = cluster.faults.fail(500, verb="patch", resource="services", name="evidence-worker-0", times=tries)
    else:
        # The failure is written, then the pod's delete fails through every retry: the next reconcile finds
        # the failure recorded and must not charge it again.
        tries = RetrySettings().attempts
        rule = cluster.faults.fail(500, verb="delete", resource="pods", name="evidence-worker-0", times=tries)

    async def replaced_and_running() -> dict[str, Any] | None:
        replacement = await _pod_named(kube, "evidence", "evidence-worker-0")
        if replacement is None or replacement["metadata"]["uid"] == first["metadata"]["uid"]:
            return None
        state = await job_state(kube, PYTORCHJOBS, "evidence")
        up = set((await phases(kube, "evidence")).values()) == {"Running"}
        return state if up and condition(state, "Running") is not None else None

    state = await eventually(replaced_and_running, within=60, what="worker 0 replaced and the job Running again")
    assert rule.hits == rule.times, f"the fault fired {rule.hits} of {rule.times} times: it proved nothing"
    worker_status = state["status"]["replicaStatuses"]["Worker"]
    assert worker_status.get("restarts") == 1, worker_status
    last = worker_status.get("lastFailure") or {}
    assert (last.get("exitCode"), last.get("pod")) == (137, "evidence-worker-0"), worker_status
