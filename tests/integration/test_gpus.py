"""Jobs that ask for GPUs and RDMA devices, on nodes that advertise them (``local up --node-resources``, or what
a device plugin advertises), with the controller: where the pods go, and what a job whose pods no node can
take says. Simulated nodes on both control planes (the real kube-scheduler judges on the ``kubernetes``
tier); what a process node hands its containers is ``tests/local/test_gpu_node.py``."""

from __future__ import annotations

from typing import Any

import pytest

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

SEED = {"nvidia.com/gpu": "8", "rdma/hca": "1"}


def gpu_job(name: str, **limits: str) -> dict[str, Any]:
    """A Master and a Worker, each asking for ``limits`` (the seed job's 8 GPUs and an RDMA device)."""
    job = pytorchjob(name, replicas={"Master": replica(1), "Worker": replica(1)})
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {"limits": dict(limits)}
    return job


@pytest.mark.nodes(2, resources=[SEED, SEED])
async def test_the_seed_job_runs_on_nodes_with_pretend_gpus_and_one_that_fits_nowhere_says_so(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    await kube.create(PYTORCHJOBS, gpu_job("seed", **SEED), namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "seed", "Running", within=30)

    async def both_running() -> list[dict[str, Any]] | None:
        pods = await pods_of(kube, "seed")
        return pods if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) else None

    pods = await eventually(both_running, what="the seed job's pods Running")
    assert {p["spec"]["nodeName"] for p in pods} == set(cluster.node_names)  # 8 GPUs: one pod per node

    # the GPU case of a job whose pods no node can take: Running False, the scheduler's message, an event
    await kube.create(PYTORCHJOBS, gpu_job("greedy", **{"nvidia.com/gpu": "16"}), namespace=kube.ns)

    async def named() -> dict[str, Any] | None:
        found = await job_state(kube, PYTORCHJOBS, "greedy")
        for cond in ((found or {}).get("status") or {}).get("conditions") or []:
            # the scheduler marks the two pods one after the other: the message counts both once it has both
            if (
                cond["type"] == "Running"
                and cond["reason"] == "Unschedulable"
                and "(and 1 more pods)" in cond["message"]
            ):
                return dict(cond)
        return None

    cond = await eventually(named, within=30, what="the Unschedulable condition naming both pods")
    assert cond["status"] == "False"
    assert "cannot be scheduled (and 1 more pods)" in cond["message"]
    assert "Insufficient nvidia.com/gpu" in cond["message"], cond
    events = [e for e in await events_for(kube, "greedy") if e["reason"] == "Unschedulable"]
    assert events and "Insufficient nvidia.com/gpu" in events[0]["message"]
    assert [p["status"].get("phase") for p in await pods_of(kube, "greedy")] == ["Pending", "Pending"]
