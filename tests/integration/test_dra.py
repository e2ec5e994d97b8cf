"""``spec.rdma.dra`` on the real control plane: kube-scheduler allocates each pod's GPUs and NICs through DRA
from the ResourceSlices a driver publishes (here the test publishes them, as the local driver will:
``kubedl_local/node/dra.py``), each GPU with its NIC on one PCIe root; a pod whose devices cannot be aligned
stays Pending and the job says why. Real tier only: the embedded cluster serves no ``resource.k8s.io``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubedl_local.node.dra import (
    DEVICE_CLASSES,
    GPU_DRIVER,
    NIC_DRIVER,
    RESOURCE_SLICES,
    allocated_roots,
    device_classes,
    resource_slices,
)
from kubedl_py.kube.claims import RESOURCE_CLAIMS
from kubedl_py.kube.errors import AlreadyExists, NotFound
from kubedl_py.kube.resources import PODS
from tests.integration.conftest import (
    PYTORCHJOBS,
    Env,
    Kube,
    RunningController,
    eventually,
    pods_of,
    pytorchjob,
    replica,
    wait_condition,
)

DRA = {"gpus": 2, "nicsPerGpu": 1, "gpuDeviceClass": GPU_DRIVER, "nicDeviceClass": NIC_DRIVER}


@contextlib.asynccontextmanager
async def published(cluster: Env, **node_devices: Any) -> AsyncIterator[list[dict[str, Any]]]:
    """The DeviceClasses (kept) and the test's nodes' ResourceSlices (removed after)."""
    if cluster.real is None:
        pytest.skip(
            "the embedded cluster serves no resource.k8s.io and its scheduler allocates no devices: DRA is "
            "tested on the real control plane (--control-plane kubernetes)"
        )
    slices = [s for node in cluster.node_names for s in resource_slices(node, **node_devices)]
    async with cluster.client() as admin:
        for body in device_classes():
            with contextlib.suppress(AlreadyExists):
                await admin.create(DEVICE_CLASSES, body)
        for body in slices:
            await admin.create(RESOURCE_SLICES, body)
        try:
            yield slices
        finally:
            for body in slices:
                with contextlib.suppress(NotFound):
                    await admin.delete(RESOURCE_SLICES, body["metadata"]["name"])


def dra_job(name: str) -> dict[str, Any]:
    return pytorchjob(name, replicas={"Master": replica(1), "Worker": replica(1)}, rdma={"dra": dict(DRA)})


@pytest.mark.nodes(2)
async def test_each_gpu_gets_a_nic_on_its_pcie_root(cluster: Env, kube: Kube, controller: RunningController) -> None:
    async with published(cluster, gpus=8, nics=8, pcie_roots=4) as slices:
        await kube.create(PYTORCHJOBS, dra_job("dra"), namespace=kube.ns)
        await wait_condition(kube, PYTORCHJOBS, "dra", "Running", within=60)
        pods = await pods_of(kube, "dra")
        assert len(pods) == 2
        claims = {}
        for pod in pods:
            statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
            assert [s["name"] for s in statuses] == ["devices"], statuses
            claim = await kube.get(RESOURCE_CLAIMS, statuses[0]["resourceClaimName"], namespace=kube.ns)
            claims[pod["metadata"]["name"]] = allocated_roots(claim, slices)
        for pod, given in claims.items():
            assert set(given) == {"gpu-0", "nic-0", "gpu-1", "nic-1"}, (pod, given)
            for i in (0, 1):
                assert given[f"gpu-{i}"][1] == given[f"nic-{i}"][1], f"{pod}: GPU {i} and its NIC apart: {given}"

        # a replacement pod gets a claim of its own from the template, allocated afresh
        worker = next(p for p in pods if p["metadata"]["name"] == "dra-worker-0")
        old_claim = worker["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        await kube.delete(PODS, "dra-worker-0", namespace=kube.ns, grace_period_seconds=0)

        async def replaced() -> dict[str, Any] | None:
            for pod in await pods_of(kube, "dra"):
                if pod["metadata"]["name"] != "dra-worker-0" or pod["metadata"]["uid"] == worker["metadata"]["uid"]:
                    continue
                statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
                if statuses and pod["spec"].get("nodeName"):
                    return pod
            return None

        new = await eventually(replaced, within=60, what="the replacement bound with a claim of its own")
        new_claim = new["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        assert new_claim != old_claim
        claim = await kube.get(RESOURCE_CLAIMS, new_claim, namespace=kube.ns)
        given = allocated_roots(claim, slices)
        assert given["gpu-0"][1] == given["nic-0"][1] and given["gpu-1"][1] == given["nic-1"][1], given


@pytest.mark.nodes(1)
async def test_devices_that_cannot_be_aligned_leave_the_pod_pending_and_the_job_says_why(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    # every NIC behind a root no GPU is on
    async with published(cluster, gpus=8, nics=8, pcie_roots=4, nic_roots=["pci0000:ff"]):
        await kube.create(PYTORCHJOBS, dra_job("apart"), namespace=kube.ns)

        async def waits() -> dict[str, Any] | None:
            job = await kube.get(PYTORCHJOBS, "apart", namespace=kube.ns)
            found = [x for x in job.get("status", {}).get("conditions") or [] if x["type"] == "Running"]
            return found[0] if found and found[0]["status"] == "False" else None

        said = await eventually(waits, within=60, what="the job to say its pods cannot be scheduled")
        assert said["reason"] == "Unschedulable", said
        assert "cannot allocate all claims" in said["message"], said  # kube-scheduler's DRA plug-in
        assert not [pod for pod in await pods_of(kube, "apart") if pod["spec"].get("nodeName")]
