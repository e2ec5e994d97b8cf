"""GPUs and pretend devices on the process node, on both control planes, with a fake discovery source.

The node is this machine, as ``local up`` runs it, but its GPU discovery is replaced by a fake that reports
two GPUs (no GPU is needed), and ``rdma/hca=1`` is pretended as ``--node-resources`` would. What a client
sees is asserted: the Node's capacity and feature-discovery labels; each container's GPUs, exclusive (the
variables its real process prints); a container without GPUs seeing none; a third pod Pending with the
scheduler's message while both GPUs are held, and started with the GPU freed when the first pod's container
ended; a pod bound by hand beyond the node's GPUs failed by the node; the pretend device announced by an
event and ``KUBEDL_PRETEND_DEVICES``. On the ``kubernetes`` tier the real kube-apiserver and kube-scheduler
judge (the node agent under a kubelet's RBAC). The pieces alone are in ``test_devices.py``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubedl_local import LocalCluster
from kubedl_local.kubernetes.cluster import KubernetesCluster, KubernetesClusterOptions
from kubedl_local.node.devices import Gpu
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import EVENTS, NODES, PODS
from tests.local.conftest import eventually
from tests.tiers import EMBEDDED, TIERS, require_tier

NS = "default"
NODE = "local-node-0"
SLOW = 60.0  # real processes on a loaded machine; the real control plane's scheduler retries with a back-off
FAKE_GPUS = [
    Gpu(index=0, uuid="GPU-0f0f0f0f-aaaa-bbbb-cccc-000000000000", name="NVIDIA Fake A100 80GB", memory_mib=81920),
    Gpu(index=1, uuid="GPU-1e1e1e1e-aaaa-bbbb-cccc-111111111111", name="NVIDIA Fake A100 80GB", memory_mib=81920),
]
UUIDS = {g.uuid for g in FAKE_GPUS}
#: prints what the device plugins gave the process, then runs until the file named by its argument exists
PROGRAM = """
import os, sys, time
names = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "KUBEDL_PRETEND_DEVICES")
print(" ".join(f"{n}={os.environ.get(n, '<unset>')}" for n in names), flush=True)
deadline = time.monotonic() + 300
while len(sys.argv) > 1 and not os.path.exists(sys.argv[1]):
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.05)
"""


@pytest.fixture(params=TIERS)
async def kube(request: pytest.FixtureRequest) -> AsyncIterator[KubeClient]:
    tier: str = request.param
    require_tier(tier)
    bridge = f"kdg{uuid.uuid4().hex[:6]}"
    if tier == EMBEDDED:
        async with (
            LocalCluster(
                runtime="process",
                process_bridge=bridge,
                gpu_discovery=lambda: list(FAKE_GPUS),
                node_resources={"rdma/hca": "1"},
            ) as local,
            KubeClient(configuration=local.configuration) as client,
        ):
            yield client
        return
    options = KubernetesClusterOptions(
        runtime="process",
        install=False,
        bridge=bridge,
        gpu_discovery=lambda: list(FAKE_GPUS),
        node_resources={"rdma/hca": "1"},
    )
    async with KubernetesCluster(options) as real, KubeClient(kubeconfig=real.admin_kubeconfig) as client:
        yield client


def _pod(name: str, flag: Path | None, *, node: str | None = None, **limits: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "nvcr.io/nvidia/pytorch:ignored",
        "command": ["python", "-c", PROGRAM, *([str(flag)] if flag else [])],
    }
    if limits:
        container["resources"] = {"limits": dict(limits)}
    spec: dict[str, Any] = {"containers": [container], "hostNetwork": True, "restartPolicy": "Never"}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def _phase(kube: KubeClient, name: str, *phases: str) -> dict[str, Any] | None:
    pod = await kube.get(PODS, name, namespace=NS)
    return pod if (pod.get("status") or {}).get("phase") in phases else None


async def _seen(kube: KubeClient, name: str) -> dict[str, str]:
    """The variables the pod's process printed (once it has)."""

    async def printed() -> dict[str, str] | None:
        try:
            text = await kube.read_log(name, namespace=NS)
        except Exception:
            return None
        if "CUDA_VISIBLE_DEVICES=" not in text:
            return None
        return dict(item.split("=", 1) for item in text.splitlines()[0].split(" "))

    seen: dict[str, str] = await eventually(printed, timeout=SLOW, interval=0.2)
    return seen


async def test_gpus_are_advertised_handed_out_exclusively_and_freed(kube: KubeClient, tmp_path: Path) -> None:
    node = await kube.get(NODES, NODE)
    for field in ("capacity", "allocatable"):
        assert node["status"][field]["nvidia.com/gpu"] == "2"
        assert node["status"][field]["rdma/hca"] == "1"
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-Fake-A100-80GB"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("2", "81920")

    first_done, second_done, third_done = (tmp_path / f"{n}.done" for n in ("first", "second", "third"))
    created = ["first", "second", "third", "plain", "by-hand"]
    try:
        await kube.create(PODS, _pod("first", first_done, **{"nvidia.com/gpu": "1", "rdma/hca": "1"}), namespace=NS)
        await kube.create(PODS, _pod("second", second_done, **{"nvidia.com/gpu": "1"}), namespace=NS)
        await eventually(lambda: _phase(kube, "first", "Running"), timeout=SLOW)
        await eventually(lambda: _phase(kube, "second", "Running"), timeout=SLOW)
        first, second = await _seen(kube, "first"), await _seen(kube, "second")
        # one GPU each, not the same one, named by UUID to CUDA and to NVIDIA's runtime alike
        assert first["CUDA_VISIBLE_DEVICES"] in UUIDS and second["CUDA_VISIBLE_DEVICES"] in UUIDS
        assert first["CUDA_VISIBLE_DEVICES"] != second["CUDA_VISIBLE_DEVICES"]
        assert first["NVIDIA_VISIBLE_DEVICES"] == first["CUDA_VISIBLE_DEVICES"]
        # the pretend RDMA device: told in the environment and by an event
        assert first["KUBEDL_PRETEND_DEVICES"] == "rdma/hca=1"
        assert second["KUBEDL_PRETEND_DEVICES"] == "<unset>"

        async def pretend_event() -> list[dict[str, Any]]:
            events = (await kube.list(EVENTS, namespace=NS)).items
            return [e for e in events if e["involvedObject"]["name"] == "first" and e.get("reason") == "PretendDevices"]

        (event,) = await eventually(pretend_event, timeout=SLOW, interval=0.2)
        assert event["type"] == "Normal" and "1 rdma/hca" in event["message"] and "CPU" in event["message"]

        # a container without GPUs on this node sees none
        await kube.create(PODS, _pod("plain", None), namespace=NS)
        await eventually(lambda: _phase(kube, "plain", "Succeeded"), timeout=SLOW)
        plain = await _seen(kube, "plain")
        assert (plain["CUDA_VISIBLE_DEVICES"], plain["NVIDIA_VISIBLE_DEVICES"]) == ("", "void")

        # both GPUs are held: the scheduler keeps a third pod Pending and says why
        await kube.create(PODS, _pod("third", third_done, **{"nvidia.com/gpu": "1"}), namespace=NS)

        async def unschedulable() -> str | None:
            pod = await kube.get(PODS, "third", namespace=NS)
            conditions = (pod.get("status") or {}).get("conditions") or []
            scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
            return scheduled.get("message") if scheduled.get("reason") == "Unschedulable" else None

        message = await eventually(unschedulable, timeout=SLOW)
        assert "Insufficient nvidia.com/gpu" in message
        # a pod bound by hand past the scheduler, asking more than the node has free: the node refuses it
        await kube.create(PODS, _pod("by-hand", None, node=NODE, **{"nvidia.com/gpu": "2"}), namespace=NS)
        refused = await eventually(lambda: _phase(kube, "by-hand", "Failed"), timeout=SLOW)
        assert refused["status"]["reason"] == "OutOfnvidia.com/gpu"
        assert refused["status"]["message"] == (
            "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 2, used: 2, capacity: 2"
        )
        assert not (refused["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("running")

        # the first pod's container ends: its GPU is freed, and the third pod gets exactly that one
        first_done.touch()
        await eventually(lambda: _phase(kube, "first", "Succeeded"), timeout=SLOW)
        await eventually(lambda: _phase(kube, "third", "Running"), timeout=SLOW)
        third = await _seen(kube, "third")
        assert third["CUDA_VISIBLE_DEVICES"] == first["CUDA_VISIBLE_DEVICES"]
        assert (await kube.get(PODS, "second", namespace=NS))["status"]["phase"] == "Running"
    finally:
        for flag in (first_done, second_done, third_done):
            flag.touch()
        for name in created:
            with contextlib.suppress(NotFound):
                await kube.delete(PODS, name, namespace=NS)
