"""The contrast that proves the gang tests' layout is tight: the same two jobs on the same nodes, with no gang
scheduler (the pods go to the real kube-scheduler), end with the second job half-bound: one pod on the CPU
the first job left free, two pending, a job that holds a CPU and cannot start."""

from __future__ import annotations

from typing import Any

from tests.gang.conftest import GANG_SIZE, all_bound, bound, gang_job, start_controller, tight_nodes
from tests.integration.conftest import PYTORCHJOBS, Env, Kube, eventually, pods_of


@tight_nodes
async def test_without_a_gang_scheduler_the_second_job_is_half_bound(cluster: Env, kube: Kube) -> None:
    controller = await start_controller(cluster, None)
    try:
        await kube.create(PYTORCHJOBS, gang_job("first"), namespace=kube.ns)
        pods = await eventually(lambda: all_bound(kube, "first"), within=60, what="the first job bound")
        assert {pod["spec"]["schedulerName"] for pod in pods} == {"default-scheduler"}
        await kube.create(PYTORCHJOBS, gang_job("second"), namespace=kube.ns)

        async def half_bound() -> list[dict[str, Any]] | None:
            pods = await pods_of(kube, "second")
            return pods if len(pods) == GANG_SIZE and bound(pods) else None

        pods = await eventually(half_bound, within=60, what="a pod of the second job bound")
        assert len(bound(pods)) == 1, [pod["spec"].get("nodeName") for pod in pods]
    finally:
        await controller.stop()
