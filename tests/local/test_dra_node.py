"""The node agent as a DRA driver (``local up --control-plane kubernetes --node-devices gpu=4,nic=4,pcie-roots=2``),
on the real control plane with the process node, the controller running in this process.

What is asserted is what a user sees: the agent published the node's ResourceSlices (owned by the Node), the
real kube-scheduler allocated each rank of a ``spec.rdma.dra`` job two GPUs with a NIC each on one PCIe root,
and each rank's real process started with ``NCCL_IB_HCA``, ``NCCL_IB_GID_INDEX`` and ``CUDA_VISIBLE_DEVICES``
naming exactly the devices its claim holds (read from the ResourceClaims, not from the driver); every device
is reported ``Ready`` in the claim's status; ``kubedl-py describe`` lists them. It fails on the code before it:
no agent published a slice and no process was told its devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubedl_local.kubernetes.cluster import KubernetesCluster, KubernetesClusterOptions
from kubedl_local.node.dra import (
    GPU_DRIVER,
    NIC_DRIVER,
    PCIE_ROOT,
    RESOURCE_SLICES,
    DraDevices,
)
from kubedl_py.cli.output import format_description
from kubedl_py.controllers.setup import build_manager
from kubedl_py.kube.claims import RESOURCE_CLAIMS, allocation_results
from kubedl_py.kube.resources import PODS
from kubedl_py.sdk import AsyncTrainingClient
from tests.integration.conftest import (
    PYTORCHJOBS,
    Kube,
    eventually,
    fast_options,
    install_crds,
    pods_of,
    wait_condition,
)
from tests.local.test_process_whole_in_place import _ready
from tests.tiers import KUBERNETES, require_tier

NS = "default"
NODE = "local-node-0"
SLOW = 90.0
#: prints the variables the driver gave the process, then runs until the file named by its argument exists
PROGRAM = """
import os, sys, time
names = ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "CUDA_VISIBLE_DEVICES", "KUBEDL_DRA_DEVICES")
print("devices: " + " ".join(f"{n}={os.environ.get(n, '<unset>')}" for n in names), flush=True)
deadline = time.monotonic() + 300
while not os.path.exists(sys.argv[1]):
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.05)
"""


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    """An administrator's client of the cluster (its kubeconfig in ``kube.kubeconfig_path``), the CRDs and the
    controller running."""
    require_tier(KUBERNETES)
    options = KubernetesClusterOptions(
        runtime="process",
        install=False,
        bridge=f"kdd{uuid.uuid4().hex[:6]}",
        node_devices=DraDevices(gpus=4, nics=4, pcie_roots=2),
    )
    async with (
        KubernetesCluster(options) as real,
        Kube(kubeconfig=real.admin_kubeconfig) as client,
        Kube(kubeconfig=real.admin_kubeconfig) as controller_client,
    ):
        await install_crds(client)
        client.kubeconfig_path = real.admin_kubeconfig  # type: ignore[attr-defined]
        manager = build_manager(controller_client, fast_options(namespace=NS))
        task = asyncio.create_task(manager.run())
        try:
            await eventually(lambda: _ready(manager), within=60, what="controller ready")
            yield client
        finally:
            manager.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def dra_job(name: str, release: Path) -> dict[str, Any]:
    import sys

    def rank() -> dict[str, Any]:
        container = {"name": "pytorch", "image": "python", "command": [sys.executable, "-c", PROGRAM, str(release)]}
        return {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": PYTORCHJOBS.api_version,
        "kind": PYTORCHJOBS.kind,
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {"Master": rank(), "Worker": rank()},
            "rdma": {"dra": {"gpus": 2, "nicsPerGpu": 1, "align": "pcieRoot"}},
        },
    }


def printed(log: str) -> dict[str, str]:
    line = next((x for x in log.splitlines() if x.startswith("devices: ")), "")
    return dict(part.split("=", 1) for part in line.removeprefix("devices: ").split())


async def test_the_node_agent_publishes_prepares_and_tells_each_rank_its_devices(kube: Kube, tmp_path: Path) -> None:
    slices = {s["metadata"]["name"]: s for s in (await kube.list(RESOURCE_SLICES)).items}
    assert set(slices) == {f"{NODE}-gpu", f"{NODE}-nic"}, sorted(slices)
    for s in slices.values():
        assert s["spec"]["nodeName"] == NODE and s["spec"]["pool"]["name"] == NODE
        assert [o["kind"] for o in s["metadata"].get("ownerReferences") or []] == ["Node"], s["metadata"]
    roots = {
        (s["spec"]["driver"], d["name"]): d["attributes"][PCIE_ROOT]["string"]
        for s in slices.values()
        for d in s["spec"]["devices"]
    }
    assert len({r for (driver, _), r in roots.items() if driver == GPU_DRIVER}) == 2

    release = tmp_path / "release"
    await kube.create(PYTORCHJOBS, dra_job("dra", release), namespace=NS)
    await wait_condition(kube, PYTORCHJOBS, "dra", "Running", within=SLOW)

    async def logged() -> dict[str, str] | None:
        out = {}
        for pod in await pods_of(kube, "dra"):
            text = await kube.read_log(pod["metadata"]["name"], namespace=NS)
            if "devices: " not in text:
                return None
            out[pod["metadata"]["name"]] = text
        return out if len(out) == 2 else None

    logs = await eventually(logged, within=SLOW, what="both ranks to print their devices")
    held: set[tuple[str, str]] = set()
    claimed: set[tuple[str, str, str]] = set()
    for pod in await pods_of(kube, "dra"):
        name = pod["metadata"]["name"]
        statuses = pod["status"].get("resourceClaimStatuses") or []
        assert [s["name"] for s in statuses] == ["devices"], statuses
        claim = await kube.get(RESOURCE_CLAIMS, statuses[0]["resourceClaimName"], namespace=NS)
        results = {r["request"]: r for r in allocation_results(claim)}
        assert set(results) == {"gpu-0", "nic-0", "gpu-1", "nic-1"}, results
        for i in (0, 1):
            gpu, nic = results[f"gpu-{i}"], results[f"nic-{i}"]
            assert (gpu["driver"], nic["driver"]) == (GPU_DRIVER, NIC_DRIVER)
            assert roots[(GPU_DRIVER, gpu["device"])] == roots[(NIC_DRIVER, nic["device"])], (name, results)
        mine = {(r["driver"], r["device"]) for r in results.values()}
        assert not mine & held, f"{name} shares a device with the other rank: {mine & held}"
        held |= mine
        claimed |= {(name, driver, device) for driver, device in mine}
        # what the process was told is exactly what the scheduler gave it
        nics = sorted(int(r["device"].split("-")[1]) for r in results.values() if r["driver"] == NIC_DRIVER)
        gpus = sorted(int(r["device"].split("-")[1]) for r in results.values() if r["driver"] == GPU_DRIVER)
        env = printed(logs[name])
        assert env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in nics), (name, env, results)
        assert env["NCCL_IB_GID_INDEX"] == "3", env
        assert env["CUDA_VISIBLE_DEVICES"].split(",") == [f"GPU-pretend-{NODE}-{i}" for i in gpus], env
        assert re.fullmatch(r"(\w+-\d=\w+-\d,?)+", env["KUBEDL_DRA_DEVICES"]), env
        # and the driver reported each device ready, the NICs with their interface
        reported = {(d["driver"], d["device"]): d for d in claim["status"].get("devices") or []}
        assert set(reported) == mine, (reported, mine)
        for (driver, _device), entry in reported.items():
            assert [(c["type"], c["status"]) for c in entry["conditions"]] == [("Ready", "True")], entry
            if driver == NIC_DRIVER:
                assert re.fullmatch(r"mlx5_\d+", entry["networkData"]["interfaceName"]), entry

    # describe lists every rank's devices as the claims hold them, reported ready
    async with AsyncTrainingClient(kubeconfig=kube.kubeconfig_path, namespace=NS) as sdk:  # type: ignore[attr-defined]
        described = await sdk.describe("dra")
    shown = {(d.pod, d.driver, d.device, d.ready) for d in described.devices}
    assert {(pod, driver, device) for pod, driver, device, _ in shown} == claimed, (shown, claimed)
    assert {ready for *_, ready in shown} == {True}, shown
    text = format_description(described)
    assert "Devices:" in text and "mlx5_" in text, text

    release.touch()
    await wait_condition(kube, PYTORCHJOBS, "dra", "Succeeded", within=SLOW)
    assert {p["status"]["phase"] for p in (await kube.list(PODS, namespace=NS)).items} <= {"Succeeded"}


async def test_simulated_nodes_publish_their_devices_and_report_them_prepared() -> None:
    """``local up --control-plane kubernetes --runtime simulated --nodes 2 --node-devices ...``: every node's
    agent publishes its slices, and the devices of a running rank are reported ready (nothing runs)."""
    require_tier(KUBERNETES)
    options = KubernetesClusterOptions(
        runtime="simulated", nodes=2, install=False, node_devices=DraDevices(gpus=8, nics=8, pcie_roots=4)
    )
    async with (
        KubernetesCluster(options) as real,
        Kube(kubeconfig=real.admin_kubeconfig) as kube,
        Kube(kubeconfig=real.admin_kubeconfig) as controller_client,
    ):
        slices = (await kube.list(RESOURCE_SLICES)).items
        assert sorted(s["metadata"]["name"] for s in slices) == [
            "local-node-0-gpu",
            "local-node-0-nic",
            "local-node-1-gpu",
            "local-node-1-nic",
        ]
        await install_crds(kube)
        manager = build_manager(controller_client, fast_options(namespace=NS))
        task = asyncio.create_task(manager.run())
        try:
            job = {
                "apiVersion": PYTORCHJOBS.api_version,
                "kind": PYTORCHJOBS.kind,
                "metadata": {"name": "sim"},
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "pytorch"}]}}}
                    },
                    "rdma": {"dra": {"gpus": 8, "nicsPerGpu": 1}},  # a whole node's devices each
                },
            }
            job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "python"
            await kube.create(PYTORCHJOBS, job, namespace=NS)
            await wait_condition(kube, PYTORCHJOBS, "sim", "Running", within=SLOW)

            async def all_ready() -> list[Any] | None:
                async with AsyncTrainingClient(kubeconfig=real.admin_kubeconfig, namespace=NS) as sdk:
                    devices = (await sdk.describe("sim")).devices
                return devices if len(devices) == 32 and all(d.ready for d in devices) else None

            devices = await eventually(all_ready, within=SLOW, what="every device of both ranks reported ready")
            nodes = {d.pod: d.pool for d in devices}
            assert sorted(nodes.values()) == ["local-node-0", "local-node-1"], nodes  # one node each
        finally:
            manager.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task
