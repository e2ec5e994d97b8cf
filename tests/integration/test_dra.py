"""DRA on the real control plane, kube-scheduler allocating from the ResourceSlices the local driver publishes
(``kubedl_local/node/dra.py``; here the test publishes them for its simulated nodes, and installs what
``--node-devices`` does: the DeviceClasses and the agents' driver rights).

- ``spec.rdma.dra``: each GPU with its NIC on one PCIe root; a replacement pod gets a claim of its own; a pod
  whose devices cannot be aligned stays Pending and the job says why.
- The vendors' YAML, unchanged (``nvidia.com/gpu: 8`` and ``rdma/hca: 1`` limits on a ``kubeflow.org/v1``
  PyTorchJob), served by DRA devices through the classes' ``extendedResourceName`` (DRAExtendedResource).
- Bad hardware: a DeviceTaintRule ``NoExecute`` on the GPU a rank holds; kube-controller-manager evicts the
  pod, the controller replaces it, and the replacement never gets that GPU.

Real tier only: the embedded cluster serves no ``resource.k8s.io``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubedl_local.kubernetes.cluster import install_local_dra
from kubedl_local.kubernetes.controlplane import NODE_AGENT_USER
from kubedl_local.node.dra import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    GPU_DRIVER,
    GPU_EXTENDED,
    NIC_DRIVER,
    NIC_EXTENDED,
    RESOURCE_SLICES,
    allocated_roots,
    device_classes,
    resource_slices,
)
from kubedl_py.kube.claims import RESOURCE_CLAIMS, allocation_results
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import NODES, PODS
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
from tests.integration.test_kubeflow import KF_PYTORCHJOBS

DRA = {"gpus": 2, "nicsPerGpu": 1}  # the default classes, gpu.nvidia.com and dranet, as the local driver names them


@contextlib.asynccontextmanager
async def published(cluster: Env, **node_devices: Any) -> AsyncIterator[list[dict[str, Any]]]:
    """What ``--node-devices`` installs (the DeviceClasses, the agents' driver rights) and the test's nodes'
    ResourceSlices, as the node agents publish them; the classes and slices are removed after (a class naming
    ``extendedResourceName: nvidia.com/gpu`` would change how other tests' GPU pods schedule)."""
    if cluster.real is None:
        pytest.skip(
            "the embedded cluster serves no resource.k8s.io and its scheduler allocates no devices: DRA is "
            "tested on the real control plane (--control-plane kubernetes)"
        )
    slices = [s for node in cluster.node_names for s in resource_slices(node, **node_devices)]
    async with cluster.client() as admin:
        await install_local_dra(admin, NODE_AGENT_USER)
        for body in slices:
            await admin.create(RESOURCE_SLICES, body)
        try:
            yield slices
        finally:
            for body in [*slices, *device_classes()]:
                resource = RESOURCE_SLICES if body["kind"] == RESOURCE_SLICES.kind else DEVICE_CLASSES
                with contextlib.suppress(NotFound):
                    await admin.delete(resource, body["metadata"]["name"])


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


def vendor_rank() -> dict[str, Any]:
    """A rank as NVIDIA's and the RDMA vendors' guides write it: 8 GPUs and an RDMA HCA, as limits."""
    spec = replica(1)
    spec["template"]["spec"]["containers"][0]["resources"] = {"limits": {GPU_EXTENDED: "8", NIC_EXTENDED: "1"}}
    return spec


@pytest.mark.nodes(2)
async def test_the_vendor_yaml_asking_nvidia_gpu_and_rdma_hca_runs_unchanged_on_dra_devices(
    cluster: Env, kube: Kube, kubeflow_controller: RunningController
) -> None:
    # the nodes advertise no nvidia.com/gpu and no rdma/hca: only DRA (extendedResourceName) can serve them
    for node in cluster.node_names:
        capacity = (await kube.get(NODES, node))["status"]["capacity"]
        assert GPU_EXTENDED not in capacity and NIC_EXTENDED not in capacity, capacity
    async with published(cluster, gpus=8, nics=8, pcie_roots=4):
        job = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "vendor"},
            "spec": {"pytorchReplicaSpecs": {"Master": vendor_rank(), "Worker": vendor_rank()}},
        }
        await kube.create(KF_PYTORCHJOBS, job, namespace=kube.ns)
        await wait_condition(kube, KF_PYTORCHJOBS, "vendor", "Running", within=60)
        listed = await kube.list(PODS, namespace=kube.ns, label_selector="training.kubeflow.org/job-name=vendor")
        assert len(listed.items) == 2
        assert len({pod["spec"]["nodeName"] for pod in listed.items}) == 2  # 8 GPUs each: one node each
        for pod in listed.items:
            extended = pod["status"].get("extendedResourceClaimStatus") or {}
            assert {m["resourceName"] for m in extended.get("requestMappings") or []} == {GPU_EXTENDED, NIC_EXTENDED}
            claim = await kube.get(RESOURCE_CLAIMS, extended["resourceClaimName"], namespace=kube.ns)
            results = allocation_results(claim)
            assert {r["pool"] for r in results} == {pod["spec"]["nodeName"]}, results
            by_driver = {d: [r["device"] for r in results if r["driver"] == d] for d in (GPU_DRIVER, NIC_DRIVER)}
            assert len(by_driver[GPU_DRIVER]) == 8 and len(by_driver[NIC_DRIVER]) == 1, by_driver


@pytest.mark.nodes(1)
async def test_a_tainted_gpu_evicts_its_pod_and_is_never_given_to_the_replacement(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    node = cluster.node_names[0]
    async with published(cluster, gpus=4, nics=4, pcie_roots=4) as slices:
        job = pytorchjob(
            "taint",
            replicas={"Worker": replica(1, restart_policy="OnFailure")},
            rdma={"dra": {"gpus": 1, "nicsPerGpu": 1}},
        )
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        await wait_condition(kube, PYTORCHJOBS, "taint", "Running", within=60)
        (pod,) = await pods_of(kube, "taint")
        claim = await kube.get(
            RESOURCE_CLAIMS, pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"], namespace=kube.ns
        )
        bad = allocated_roots(claim, slices)["gpu-0"][0]
        rule = {
            "apiVersion": DEVICE_TAINT_RULES.api_version,
            "kind": DEVICE_TAINT_RULES.kind,
            "metadata": {"name": f"{node}-{bad}-xid79"},
            "spec": {
                "deviceSelector": {"driver": GPU_DRIVER, "pool": node, "device": bad},
                "taint": {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"},
            },
        }
        await kube.create(DEVICE_TAINT_RULES, rule)
        try:

            async def replaced() -> dict[str, Any] | None:
                for p in await pods_of(kube, "taint"):
                    fresh = p["metadata"]["uid"] != pod["metadata"]["uid"]
                    if fresh and p["spec"].get("nodeName") and p.get("status", {}).get("resourceClaimStatuses"):
                        return p
                return None

            # kube-controller-manager's device taint eviction deletes the pod; the controller replaces it
            new = await eventually(replaced, within=90, what="the evicted pod replaced and the replacement bound")
            name = new["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
            given = allocated_roots(await kube.get(RESOURCE_CLAIMS, name, namespace=kube.ns), slices)
            assert given["gpu-0"][0] != bad, f"the replacement got the tainted {bad}: {given}"
            await wait_condition(kube, PYTORCHJOBS, "taint", "Running", within=60)
        finally:
            with contextlib.suppress(NotFound):
                await kube.delete(DEVICE_TAINT_RULES, rule["metadata"]["name"])
