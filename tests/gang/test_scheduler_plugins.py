"""Gang scheduling with scheduler-plugins' Coscheduling (its kube-scheduler built from
``sigs.k8s.io/scheduler-plugins``, running as the second scheduler ``scheduler-plugins-scheduler``) on the real
control plane: a second gang that does not fit is tried and refused whole, never half-bound, and binds
whole once the first gang's job has finished."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.schedulers import SchedulerPlugins
from kubedl_py.controllers.gang import Gang
from tests.gang.conftest import (
    GANG_SIZE,
    a_kubeflow_gang_larger_than_the_job_waits_then_runs,
    all_bound,
    bound,
    finish,
    gang_job,
    holds,
    start_controller,
    start_scheduler,
    tight_nodes,
)
from tests.integration.conftest import PYTORCHJOBS, Env, Kube, eventually, pods_of, wait_condition

# The real gang schedulers, built from their Go modules: make test-gang, not make test (docs/testing.md).
pytestmark = pytest.mark.gang_schedulers

#: a whole Permit wait and then some: a pod that Coscheduling lets wait for its siblings must be sent back,
#: not bound, when they never come
HOLD_SECONDS = SchedulerPlugins.permit_waiting_seconds + 3.0


def unschedulable(pod: dict[str, Any]) -> bool:
    """The scheduler tried the pod and refused it (``PodScheduled=False``, reason Unschedulable)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
        for cond in conditions
    )


@tight_nodes
async def test_coscheduling_binds_a_gang_whole_or_not_at_all(cluster: Env, kube: Kube, tmp_path: Path) -> None:
    scheduler = await start_scheduler(cluster, "scheduler-plugins", tmp_path / "scheduler-plugins")
    controller = await start_controller(cluster, "scheduler-plugins")
    try:
        await kube.create(PYTORCHJOBS, gang_job("first"), namespace=kube.ns)
        pods = await eventually(lambda: all_bound(kube, "first"), within=60, what="the first gang bound whole")
        assert {pod["spec"]["schedulerName"] for pod in pods} == {"scheduler-plugins-scheduler"}
        assert {pod["spec"]["nodeName"] for pod in pods} <= set(cluster.node_names)

        await kube.create(PYTORCHJOBS, gang_job("second"), namespace=kube.ns)

        async def tried_and_refused() -> list[dict[str, Any]] | None:
            pods = await pods_of(kube, "second")
            return pods if len(pods) == GANG_SIZE and any(unschedulable(pod) for pod in pods) else None

        await eventually(tried_and_refused, within=60, what="the scheduler to try the second gang and refuse it")

        async def second_waits_whole() -> str | None:
            nodes = [pod["spec"]["nodeName"] for pod in bound(await pods_of(kube, "second"))]
            if nodes:
                return (
                    f"{len(nodes)}/{GANG_SIZE} pods of the second gang bound while the first holds the nodes: {nodes}"
                )
            return None

        await holds(second_waits_whole, seconds=HOLD_SECONDS)
        assert await all_bound(kube, "first"), "the first gang lost its nodes"

        await finish(kube, "first")
        await wait_condition(kube, PYTORCHJOBS, "first", "Succeeded", within=60)
        pods = await eventually(lambda: all_bound(kube, "second"), within=90, what="the second gang bound whole")
        assert {pod["spec"]["nodeName"] for pod in pods} <= set(cluster.node_names)
    finally:
        await controller.stop()
        await scheduler.stop()


@tight_nodes
async def test_a_kubeflow_gang_larger_than_the_job_waits_until_min_available_is_lowered(
    cluster: Env, kube: Kube, tmp_path: Path
) -> None:
    scheduler = await start_scheduler(cluster, "scheduler-plugins", tmp_path / "scheduler-plugins")
    controller = await start_controller(cluster, "scheduler-plugins", kubeflow_api=True)
    try:
        await a_kubeflow_gang_larger_than_the_job_waits_then_runs(kube, Gang("scheduler-plugins"))
    finally:
        await controller.stop()
        await scheduler.stop()
