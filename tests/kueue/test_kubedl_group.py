"""training.kubedl.io jobs under Kueue: what Kueue does with them, and how far the pod-group way goes.

Kueue has no integration for the training.kubedl.io group: kubedl-py makes such a job's Workload itself
(kueue.py; ``tests/kueue_workloads`` proves it with Kueue's kubeflow.org integrations off), and here it shares
a ClusterQueue with kubeflow.org jobs queued the old way. The other way, with no job label, is Kueue's
plain-pod integration with pod groups: the labels and the annotation go in each replica's pod template
(kubedl-py copies template metadata to the pods), Kueue gates the pods at creation (``schedulingGates``)
and lifts the gate of a whole group once its Workload is admitted. Preemption is where it stops (see the
last test and docs/kueue.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.kueue import QUEUE_LABEL, WORKLOADS, Kueue
from kubedl_py.api import constants as c
from kubedl_py.kube.resources import PODS, Resource
from tests.integration.conftest import Kube, RunningController, condition, eventually, job_state
from tests.kueue.queues import delete_queues, make_queues
from tests.kueue.test_kubeflow_queueing import (
    EXIT_CODE,
    JOB_CPU,
    KF_PYTORCHJOBS,
    QUOTA,
    WITHIN,
    queued_job,
    wait_admitted_and_running,
    workload_condition,
)

PYTORCHJOBS = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def kubedl_job(name: str, *, pod_group: bool, job_label: bool = False) -> dict[str, Any]:
    """A training.kubedl.io PyTorchJob of 1 Master + 1 Worker at 500m CPU each; with ``pod_group`` its pod
    templates carry Kueue's pod-group metadata, with ``job_label`` the job itself carries the queue label."""
    template_metadata: dict[str, Any] = {}
    if pod_group:
        template_metadata = {
            "labels": {QUEUE_LABEL: "queue", GROUP_NAME: name},
            "annotations": {GROUP_TOTAL: "2"},
        }

    def replica() -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "busybox",
            "command": ["train"],
            "resources": {"requests": {"cpu": JOB_CPU, "memory": "64Mi"}},
        }
        template: dict[str, Any] = {"spec": {"containers": [container]}}
        if template_metadata:
            template["metadata"] = template_metadata
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": template}

    metadata: dict[str, Any] = {"name": name}
    if job_label:
        metadata["labels"] = {QUEUE_LABEL: "queue"}
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": metadata,
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


async def kubedl_pods(kube: Kube, job: str) -> list[dict[str, Any]]:
    listed = await kube.list(PODS, namespace=kube.ns, label_selector=f"{c.LABEL_JOB_NAME}={job}")
    return sorted(
        (p for p in listed.items if not p["metadata"].get("deletionTimestamp")), key=lambda p: p["metadata"]["name"]
    )


def gated(pod: dict[str, Any]) -> bool:
    return any(gate.get("name") == ADMISSION_GATE for gate in pod["spec"].get("schedulingGates") or [])


async def group_workload(kube: Kube, group: str) -> dict[str, Any] | None:
    """The Workload of a pod group (Kueue names it after the group)."""
    listed = await kube.list(WORKLOADS, namespace=kube.ns)
    for workload in listed.items:
        if workload["metadata"]["name"] == group:
            found: dict[str, Any] = workload
            return found
    return None


@pytest.mark.nodes(1)
async def test_a_queued_training_kubedl_io_job_shares_the_quota_with_kueues_own_kubeflow_jobs(
    kueue_running: Kueue, kube: Kube, kubeflow_controller: RunningController
) -> None:
    """Both ways at once, in one ClusterQueue: a kubeflow.org job queued by Kueue's own integration (the old
    path: ``runPolicy.suspend``) and a training.kubedl.io job whose Workload kubedl-py makes (the controller's
    default ``--kueue-workloads=kubedl``, kueue.py)."""
    queues = await make_queues(kube, cpu=QUOTA)
    try:
        # The quota is taken by a kubeflow.org job (Kueue's Workload)...
        await kube.create(KF_PYTORCHJOBS, queued_job("PyTorchJob", "holder"), namespace=kube.ns)
        await wait_admitted_and_running(kube, KF_PYTORCHJOBS, "holder")
        # ...so a training.kubedl.io job labelled for the same queue waits: kubedl-py's Workload, pending, no pods.
        created = await kube.create(
            PYTORCHJOBS, kubedl_job("native", pod_group=False, job_label=True), namespace=kube.ns
        )

        async def held() -> dict[str, Any] | None:
            workload = await _owned_workload(kube, "native")
            reserved = workload_condition(workload, "QuotaReserved")
            job = await job_state(kube, PYTORCHJOBS, "native")
            waiting = reserved and reserved["status"] == "False" and condition(job, "Suspended")
            return workload if waiting and not await kubedl_pods(kube, "native") else None

        workload = await eventually(held, within=WITHIN, what="native held behind the kubeflow.org job")
        assert workload["metadata"]["labels"][c.LABEL_CONTROLLER] == c.CONTROLLER_NAME
        assert [o["uid"] for o in workload["metadata"]["ownerReferences"]] == [created["metadata"]["uid"]]
        assert not created["spec"].get("suspend")  # the user's field: never written by kubedl-py

        for pod in await kubedl_pods_of_kubeflow(kube, "holder"):
            await kube.patch(
                PODS, pod["metadata"]["name"], {"metadata": {"annotations": {EXIT_CODE: "0"}}}, namespace=kube.ns
            )
        running = await eventually(
            lambda: _running(kube, "native"), within=WITHIN, what="native admitted once the holder finished"
        )
        assert len(await kubedl_pods(kube, "native")) == 2
        assert not condition(running, "Suspended")
    finally:
        await delete_queues(kube, queues)


async def _owned_workload(kube: Kube, job: str) -> dict[str, Any] | None:
    listed = await kube.list(WORKLOADS, namespace=kube.ns)
    for workload in listed.items:
        if any(o.get("name") == job for o in workload["metadata"].get("ownerReferences") or []):
            found: dict[str, Any] = workload
            return found
    return None


async def kubedl_pods_of_kubeflow(kube: Kube, job: str) -> list[dict[str, Any]]:
    listed = await kube.list(PODS, namespace=kube.ns, label_selector=f"training.kubeflow.org/job-name={job}")
    return [p for p in listed.items if not p["metadata"].get("deletionTimestamp")]


async def _running(kube: Kube, name: str) -> dict[str, Any] | None:
    job = await job_state(kube, PYTORCHJOBS, name)
    return job if condition(job, "Running") else None


@pytest.mark.nodes(1)
async def test_training_kubedl_io_pods_queue_as_a_kueue_pod_group(
    kueue_running: Kueue, kube: Kube, kubeflow_controller: RunningController
) -> None:
    queues = await make_queues(kube, cpu=QUOTA)
    try:
        await kube.create(PYTORCHJOBS, kubedl_job("group-a", pod_group=True), namespace=kube.ns)

        first = await eventually(
            lambda: _group_running(kube, "group-a"), within=WITHIN, what="group-a admitted, Running"
        )
        assert not any(gated(p) for p in first)
        assert all(p["metadata"]["labels"][QUEUE_LABEL] == "queue" for p in first)

        await kube.create(PYTORCHJOBS, kubedl_job("group-b", pod_group=True), namespace=kube.ns)

        async def held() -> list[dict[str, Any]] | None:
            workload = await group_workload(kube, "group-b")
            reserved = workload_condition(workload, "QuotaReserved")
            pods = await kubedl_pods(kube, "group-b")
            waiting = reserved and reserved["status"] == "False" and len(pods) == 2 and all(gated(p) for p in pods)
            return pods if waiting else None

        # The second job's pods exist (kubedl-py made them) but are gated: not scheduled, no node.
        second = await eventually(held, within=WITHIN, what="group-b's pods gated, its Workload pending")
        assert all(not p["spec"].get("nodeName") for p in second)
        job = await job_state(kube, PYTORCHJOBS, "group-b")
        assert not condition(job, "Running") and not condition(job, "Suspended")

        for pod in first:
            patch = {"metadata": {"annotations": {EXIT_CODE: "0"}}}
            await kube.patch(PODS, pod["metadata"]["name"], patch, namespace=kube.ns)
        await eventually(lambda: _succeeded(kube, "group-a"), within=WITHIN, what="group-a Succeeded")
        released = await eventually(
            lambda: _group_running(kube, "group-b"), within=WITHIN, what="group-b admitted once group-a finished"
        )
        assert not any(gated(p) for p in released)
        assert [p["metadata"]["uid"] for p in released] == [p["metadata"]["uid"] for p in second]  # the same pods
    finally:
        await delete_queues(kube, queues)


async def _succeeded(kube: Kube, name: str) -> dict[str, Any] | None:
    job = await job_state(kube, PYTORCHJOBS, name)
    return job if condition(job, "Succeeded") else None


@pytest.mark.nodes(1)
async def test_a_preempted_pod_group_waits_for_replacement_pods_kubedl_py_cannot_name(
    kueue_running: Kueue, kube: Kube, kubeflow_controller: RunningController
) -> None:
    """Where the pod-group way stops, written down as it is (docs/kueue.md): Kueue preempts a pod group by
    deleting its pods and keeps its finalizer on them until replacement pods join the group; kubedl-py names
    a replica's pod ``J-<t>-<i>`` and makes the replacement only once the old pod is gone. Neither moves:
    the victim is never re-queued. (A kubeflow.org job is suspended instead, and comes back.)"""
    queues = await make_queues(
        kube, cpu=QUOTA, preemption={"withinClusterQueue": "LowerPriority"}, priorities={"low": 100, "high": 1000}
    )
    try:
        for name in ("low", "high"):
            job = kubedl_job(name, pod_group=True)
            for spec in job["spec"]["pytorchReplicaSpecs"].values():
                spec["template"]["metadata"]["labels"][PRIORITY_LABEL] = queues.priorities[name]
            await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
            if name == "low":
                await eventually(lambda: _group_running(kube, "low"), within=WITHIN, what="low admitted, Running")

        await eventually(lambda: _group_running(kube, "high"), within=WITHIN, what="high admitted by preemption")

        async def stuck() -> dict[str, Any] | None:
            workload = await group_workload(kube, "low")
            waiting = workload_condition(workload, "WaitingForReplacementPods")
            return workload if waiting and waiting["status"] == "True" else None

        victim = await eventually(stuck, within=WITHIN, what="low's Workload waiting for replacement pods")
        assert workload_condition(victim, "Evicted")["reason"] == "Preempted"  # type: ignore[index]
        listed = await kube.list(PODS, namespace=kube.ns, label_selector=f"{c.LABEL_JOB_NAME}=low")
        # The victim's pods: deleted, held by Kueue's finalizer, and no replacement beside them.
        assert sorted(p["metadata"]["name"] for p in listed.items) == ["low-master-0", "low-worker-0"]
        for pod in listed.items:
            assert pod["metadata"].get("deletionTimestamp")
            assert "kueue.x-k8s.io/managed" in pod["metadata"]["finalizers"]
    finally:
        await delete_queues(kube, queues)


async def _group_running(kube: Kube, name: str) -> list[dict[str, Any]] | None:
    workload = await group_workload(kube, name)
    admitted = workload_condition(workload, "Admitted")
    pods = await kubedl_pods(kube, name)
    phases = {(p.get("status") or {}).get("phase") for p in pods}
    ok = admitted and admitted["status"] == "True" and len(pods) == 2 and phases == {"Running"}
    return pods if ok else None
