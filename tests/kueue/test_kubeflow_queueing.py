"""kubeflow.org jobs served by kubedl-py, queued by a real Kueue: quota admits one job at a time, the next waits
suspended with no pods, a higher priority evicts a running job and it comes back afterwards.

Kueue decides (Workload conditions, ``spec.runPolicy.suspend``); kubedl-py acts (pods, Services, the
``Suspended``/``Running`` conditions and the replica counts Kueue reads back to know a job has stopped).
Jobs end when the test says so: the simulated node agents end a pod's containers once it carries the
``local.kubedl.io/exit-code`` annotation.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from harness.kueue import PRIORITY_CLASS_LABEL, QUEUE_LABEL, WORKLOADS, Kueue
from kubedl_py.api.groups import KUBEFLOW
from kubedl_py.kube.resources import PODS, Resource
from tests.integration.conftest import Kube, RunningController, condition, eventually, job_state
from tests.kueue.queues import delete_queues, make_queues

KF_PYTORCHJOBS = Resource(KUBEFLOW.group, KUBEFLOW.version, "pytorchjobs", "PyTorchJob")
KF_TFJOBS = Resource(KUBEFLOW.group, KUBEFLOW.version, "tfjobs", "TFJob")
TO = "training.kubeflow.org"
EXIT_CODE = "local.kubedl.io/exit-code"
#: Kueue, the API server, the scheduler and the node agents all take part in each step
WITHIN = 60.0

#: each job asks for 2 x 500m CPU; the ClusterQueue has 1 CPU: exactly one job at a time
JOB_CPU = "500m"
QUOTA = "1"


def _replica(container: str) -> dict[str, Any]:
    return {
        "replicas": 1,
        "restartPolicy": "OnFailure",
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": container,
                        "image": "busybox",
                        "command": ["train"],
                        "resources": {"requests": {"cpu": JOB_CPU, "memory": "64Mi"}},
                    }
                ]
            }
        },
    }


def queued_job(kind: str, name: str, *, queue: str = "queue", priority_class: str | None = None) -> dict[str, Any]:
    """A kubeflow.org/v1 job in ``queue``, written as a user would: no ``suspend`` (Kueue's webhook sets it)."""
    labels = {QUEUE_LABEL: queue}
    if priority_class is not None:
        labels[PRIORITY_CLASS_LABEL] = priority_class
    if kind == "PyTorchJob":
        spec = {"pytorchReplicaSpecs": {"Master": _replica("pytorch"), "Worker": _replica("pytorch")}}
    else:
        spec = {"tfReplicaSpecs": {"PS": _replica("tensorflow"), "Worker": _replica("tensorflow")}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": labels},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"}, **spec},
    }


async def live_pods(kube: Kube, job: str) -> list[dict[str, Any]]:
    listed = await kube.list(PODS, namespace=kube.ns, label_selector=f"{TO}/job-name={job}")
    return sorted(
        (p for p in listed.items if not p["metadata"].get("deletionTimestamp")), key=lambda p: p["metadata"]["name"]
    )


async def workload_of(kube: Kube, kind: str, job: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the job (it owns none other)."""
    listed = await kube.list(WORKLOADS, namespace=kube.ns)
    for workload in listed.items:
        for owner in workload["metadata"].get("ownerReferences") or []:
            if owner.get("kind") == kind and owner.get("name") == job:
                found: dict[str, Any] = workload
                return found
    return None


def workload_condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            found: dict[str, Any] = cond
            return found
    return None


def suspended(job: dict[str, Any] | None) -> bool:
    return bool(((job or {}).get("spec") or {}).get("runPolicy", {}).get("suspend"))


async def wait_admitted_and_running(kube: Kube, resource: Resource, name: str, pods: int = 2) -> list[dict[str, Any]]:
    """Admitted by Kueue, unsuspended, and kubedl-py's pods Running; returns the pods."""
    admitted = await eventually(
        lambda: _admitted(kube, resource.kind, name), within=WITHIN, what=f"{name}'s Workload Admitted"
    )
    assert workload_condition(admitted, "QuotaReserved")["status"] == "True"  # type: ignore[index]

    async def running() -> list[dict[str, Any]] | None:
        job = await job_state(kube, resource, name)
        found = await live_pods(kube, name)
        phases = {(p.get("status") or {}).get("phase") for p in found}
        ready = not suspended(job) and condition(job, "Running") and len(found) == pods and phases == {"Running"}
        return found if ready else None

    result: list[dict[str, Any]] = await eventually(running, within=WITHIN, what=f"{name} unsuspended and Running")
    return result


async def _admitted(kube: Kube, kind: str, name: str) -> dict[str, Any] | None:
    workload = await workload_of(kube, kind, name)
    admitted = workload_condition(workload, "Admitted")
    return workload if admitted and admitted["status"] == "True" else None


async def wait_held(kube: Kube, resource: Resource, name: str) -> dict[str, Any]:
    """Kueue looked at the job and has no quota for it: Workload pending (QuotaReserved False), the job
    suspended with kubedl-py's Suspended condition, and no pods. Returns the job."""

    async def pending() -> dict[str, Any] | None:
        workload = await workload_of(kube, resource.kind, name)
        reserved = workload_condition(workload, "QuotaReserved")
        return workload if reserved and reserved["status"] == "False" and reserved["reason"] == "Pending" else None

    workload = await eventually(pending, within=WITHIN, what=f"{name}'s Workload pending for quota")
    admitted = workload_condition(workload, "Admitted")
    assert admitted is None or admitted["status"] == "False"

    async def held() -> dict[str, Any] | None:
        job = await job_state(kube, resource, name)
        return job if suspended(job) and condition(job, "Suspended") else None

    job: dict[str, Any] = await eventually(held, within=WITHIN, what=f"{name} suspended with the Suspended condition")
    assert await live_pods(kube, name) == []
    assert not condition(job, "Running")
    return job


async def finish(kube: Kube, name: str) -> None:
    """Make the job's containers exit 0 (the simulated node agent reads the annotation of a running pod)."""
    for pod in await live_pods(kube, name):
        patch = {"metadata": {"annotations": {EXIT_CODE: "0"}}}
        await kube.patch(PODS, pod["metadata"]["name"], patch, namespace=kube.ns)


@pytest.mark.nodes(1)
@pytest.mark.parametrize(("kind", "resource"), [("PyTorchJob", KF_PYTORCHJOBS), ("TFJob", KF_TFJOBS)])
async def test_quota_for_one_job_runs_them_one_after_the_other(
    kueue_running: Kueue, kube: Kube, kubeflow_controller: RunningController, kind: str, resource: Resource
) -> None:
    queues = await make_queues(kube, cpu=QUOTA)
    try:
        first, second = f"{kind.lower()}-first", f"{kind.lower()}-second"
        created = await kube.create(resource, queued_job(kind, first), namespace=kube.ns)
        assert suspended(created)  # Kueue's webhook suspended it at creation, before any controller saw it
        first_pods = await wait_admitted_and_running(kube, resource, first)
        assert {p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in first_pods} == {JOB_CPU}

        await kube.create(resource, queued_job(kind, second), namespace=kube.ns)
        held = await wait_held(kube, resource, second)
        assert condition(held, "Suspended")["reason"] == f"{kind}Suspended"  # type: ignore[index]
        # The first job is untouched by the second one's arrival.
        assert [p["metadata"]["uid"] for p in await live_pods(kube, first)] == [
            p["metadata"]["uid"] for p in first_pods
        ]

        await finish(kube, first)

        async def first_done() -> dict[str, Any] | None:
            workload = await workload_of(kube, kind, first)
            finished = workload_condition(workload, "Finished")
            return workload if finished and finished["status"] == "True" else None

        await eventually(first_done, within=WITHIN, what=f"{first}'s Workload Finished")
        assert condition(await job_state(kube, resource, first), "Succeeded")

        second_pods = await wait_admitted_and_running(kube, resource, second)
        assert len(second_pods) == 2
        resumed = await job_state(kube, resource, second)
        states = {c["type"]: c for c in (resumed or {})["status"]["conditions"]}
        assert (states["Suspended"]["status"], states["Suspended"]["reason"]) == ("False", f"{kind}Resumed")
    finally:
        await delete_queues(kube, queues)


@pytest.mark.nodes(1)
async def test_a_higher_priority_job_evicts_the_running_one_which_comes_back_after(
    kueue_running: Kueue, kube: Kube, kubeflow_controller: RunningController
) -> None:
    queues = await make_queues(
        kube,
        cpu=QUOTA,
        preemption={"withinClusterQueue": "LowerPriority"},
        priorities={"low": 100, "high": 1000},
    )
    try:
        low = queued_job("PyTorchJob", "low", priority_class=queues.priorities["low"])
        await kube.create(KF_PYTORCHJOBS, copy.deepcopy(low), namespace=kube.ns)
        low_pods = await wait_admitted_and_running(kube, KF_PYTORCHJOBS, "low")
        low_uids = {p["metadata"]["uid"] for p in low_pods}
        assert (await workload_of(kube, "PyTorchJob", "low"))["spec"]["priority"] == 100  # type: ignore[index]

        high = queued_job("PyTorchJob", "high", priority_class=queues.priorities["high"])
        await kube.create(KF_PYTORCHJOBS, high, namespace=kube.ns)

        async def evicted() -> dict[str, Any] | None:
            workload = await workload_of(kube, "PyTorchJob", "low")
            cond = workload_condition(workload, "Evicted")
            return workload if cond and cond["status"] == "True" else None

        victim = await eventually(evicted, within=WITHIN, what="low's Workload Evicted")
        assert workload_condition(victim, "Evicted")["reason"] == "Preempted"  # type: ignore[index]
        assert workload_condition(victim, "Preempted")["status"] == "True"  # type: ignore[index]

        # The victim is suspended again by Kueue; kubedl-py removes its pods and reports it Suspended.
        async def stopped() -> dict[str, Any] | None:
            job = await job_state(kube, KF_PYTORCHJOBS, "low")
            gone = not await live_pods(kube, "low")
            return job if suspended(job) and condition(job, "Suspended") and gone else None

        back_in_queue = await eventually(stopped, within=WITHIN, what="low suspended with its pods deleted")
        assert not condition(back_in_queue, "Running")
        await wait_admitted_and_running(kube, KF_PYTORCHJOBS, "high")
        assert await live_pods(kube, "low") == []

        await finish(kube, "high")
        again = await wait_admitted_and_running(kube, KF_PYTORCHJOBS, "low")
        assert not {p["metadata"]["uid"] for p in again} & low_uids  # started afresh, new pods
        assert condition(await job_state(kube, KF_PYTORCHJOBS, "high"), "Succeeded")
    finally:
        await delete_queues(kube, queues)
