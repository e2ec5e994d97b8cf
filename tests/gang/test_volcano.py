"""Gang scheduling with Volcano's real scheduler (vc-scheduler, built from ``volcano.sh/volcano``) on the real
control plane: a second gang that does not fit waits whole, with no pod bound, and binds whole once the
first gang's job has finished. Also the controller's side of Volcano's admission: while a PodGroup is
Pending (not enqueued), its job has no pods at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubedl_py.controllers.gang import Gang
from kubedl_py.kube.errors import NotFound
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

PODGROUPS = Gang("volcano").resource
#: long enough for several scheduling cycles (the launcher runs Volcano with a 0.5 s period)
HOLD_SECONDS = 6.0


async def phase(kube: Kube, name: str) -> str | None:
    """The PodGroup's ``status.phase`` as Volcano wrote it ("" before it saw the group; None: no group)."""
    try:
        group = await kube.get(PODGROUPS, name, namespace=kube.ns)
    except NotFound:
        return None
    return str((group.get("status") or {}).get("phase") or "")


@tight_nodes
async def test_volcano_binds_a_gang_whole_or_not_at_all(cluster: Env, kube: Kube, tmp_path: Path) -> None:
    scheduler = await start_scheduler(cluster, "volcano", tmp_path / "volcano")
    controller = await start_controller(cluster, "volcano")
    try:
        await kube.create(PYTORCHJOBS, gang_job("first"), namespace=kube.ns)
        pods = await eventually(lambda: all_bound(kube, "first"), within=60, what="the first gang bound whole")
        assert {pod["spec"]["schedulerName"] for pod in pods} == {"volcano"}
        assert {pod["spec"]["nodeName"] for pod in pods} <= set(cluster.node_names)
        await eventually(lambda: _phase_is(kube, "first", "Running"), within=30, what="first PodGroup Running")

        await kube.create(PYTORCHJOBS, gang_job("second"), namespace=kube.ns)
        # Volcano has seen the second group once it wrote a phase; from then on, for several cycles, while
        # the first gang holds 3 of the 4 CPUs: none of the second gang's pods is bound, and (the
        # controller's part) the group is not admitted and has no pods while it is Pending.
        await eventually(lambda: _phase_written(kube, "second"), within=30, what="Volcano to see the second group")
        admission: list[str] = []

        async def second_waits_whole() -> str | None:
            pods = await pods_of(kube, "second")  # pods first: a group admitted in between is then seen so
            group_phase = await phase(kube, "second")
            if bound(pods):
                nodes = [pod["spec"]["nodeName"] for pod in bound(pods)]
                return (
                    f"{len(nodes)}/{GANG_SIZE} pods of the second gang bound while the first holds the nodes: {nodes}"
                )
            if group_phase != "Pending":
                admission.append(f"the second PodGroup is {group_phase!r}, not Pending, while it cannot fit")
            elif pods:
                admission.append(f"the second gang has {len(pods)} pods while its PodGroup is Pending")
            return None

        await holds(second_waits_whole, seconds=HOLD_SECONDS)
        assert await all_bound(kube, "first"), "the first gang lost its nodes"

        await finish(kube, "first")
        await wait_condition(kube, PYTORCHJOBS, "first", "Succeeded", within=60)
        pods = await eventually(lambda: all_bound(kube, "second"), within=90, what="the second gang bound whole")
        assert {pod["spec"]["nodeName"] for pod in pods} <= set(cluster.node_names)
        await eventually(lambda: _phase_is(kube, "second", "Running"), within=30, what="second PodGroup Running")
        # Asserted last so that a controller which creates pods before admission still shows the scheduler's
        # whole-gang behaviour above; the first observation names what went wrong.
        assert not admission, f"in {len(admission)} observations: {sorted(set(admission))}"
    finally:
        await controller.stop()
        await scheduler.stop()


async def _phase_is(kube: Kube, name: str, wanted: str) -> bool:
    return await phase(kube, name) == wanted


async def _phase_written(kube: Kube, name: str) -> str | None:
    return await phase(kube, name) or None


@tight_nodes
async def test_volcano_enqueues_a_podgroup_only_when_its_min_resources_fit(
    cluster: Env, kube: Kube, tmp_path: Path
) -> None:
    """What the controller's admission relies on, shown with a PodGroup made by hand (no pods at all): Volcano
    keeps a group whose ``minResources`` do not fit the idle capacity Pending, and enqueues it once they do."""
    scheduler = await start_scheduler(cluster, "volcano", tmp_path / "volcano")
    controller = await start_controller(cluster, "volcano")
    try:
        await kube.create(PYTORCHJOBS, gang_job("first"), namespace=kube.ns)
        await eventually(lambda: all_bound(kube, "first"), within=60, what="the first gang bound whole")
        group = {
            "apiVersion": PODGROUPS.api_version,
            "kind": PODGROUPS.kind,
            "metadata": {"name": "waiting"},
            "spec": {"minMember": GANG_SIZE, "minResources": {"cpu": str(GANG_SIZE)}},
        }
        await kube.create(PODGROUPS, group, namespace=kube.ns)
        await eventually(lambda: _phase_written(kube, "waiting"), within=30, what="Volcano to see the group")

        async def stays_pending() -> str | None:
            found = await phase(kube, "waiting")
            return None if found == "Pending" else f"the group is {found!r} while 3 of the 4 CPUs are taken"

        await holds(stays_pending, seconds=HOLD_SECONDS)
        await finish(kube, "first")
        await eventually(lambda: _phase_is(kube, "waiting", "Inqueue"), within=60, what="the group enqueued")
    finally:
        await controller.stop()
        await scheduler.stop()


@tight_nodes
async def test_a_kubeflow_gang_larger_than_the_job_waits_until_min_available_is_lowered(
    cluster: Env, kube: Kube, tmp_path: Path
) -> None:
    scheduler = await start_scheduler(cluster, "volcano", tmp_path / "volcano")
    controller = await start_controller(cluster, "volcano", kubeflow_api=True)
    try:
        await a_kubeflow_gang_larger_than_the_job_waits_then_runs(kube, Gang("volcano"))
    finally:
        await controller.stop()
        await scheduler.stop()
