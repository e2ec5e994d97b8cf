"""The local nodes' devices as a DRA driver publishes them: ResourceSlices and the DeviceClasses that select them.

A node of ``gpus`` GPUs and ``nics`` RDMA NICs spread evenly over ``pcie_roots`` PCIe root complexes (GPU ``i``
and NIC ``i`` on root ``i * roots // count``, as a dual-socket GPU server has a GPU and its NIC behind each
PCIe switch) is published as two ResourceSlices, one per driver (:data:`GPU_DRIVER`, :data:`NIC_DRIVER`), each
device with the standard attribute ``resource.kubernetes.io/pcieRoot`` (``pci0000:<nn>``) and its ``index``.
The DeviceClasses are named after the drivers and select their devices. kube-scheduler allocates from them; the
simulated runtime runs a pod whose claims are allocated without preparing anything (there is no device).

Not built yet: ``local up --node-devices``, the node agents publishing these themselves, preparing an allocated
claim (``NCCL_IB_HCA``, ``CUDA_VISIBLE_DEVICES`` on the process runtime) and reporting device status.
"""

from __future__ import annotations

from typing import Any, Final

from kubedl_py.kube.resources import Resource

Obj = dict[str, Any]

GPU_DRIVER: Final = "gpu.local.kubedl.io"
NIC_DRIVER: Final = "nic.local.kubedl.io"
PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
RESOURCE_SLICES: Final = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice")
DEVICE_CLASSES: Final = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass")
RESOURCE_CLAIMS: Final = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")


def device_classes() -> list[Obj]:
    """One DeviceClass per driver, named after it."""
    return [
        {
            "apiVersion": DEVICE_CLASSES.api_version,
            "kind": DEVICE_CLASSES.kind,
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        }
        for driver in (GPU_DRIVER, NIC_DRIVER)
    ]


def pcie_root(index: int, count: int, roots: int) -> str:
    return f"pci0000:{index * roots // max(count, 1):02x}"


def resource_slices(
    node: str, *, gpus: int, nics: int, pcie_roots: int, nic_roots: list[str] | None = None
) -> list[Obj]:
    """The node's two ResourceSlices; ``nic_roots`` overrides the NICs' roots (a node whose NICs sit apart)."""
    slices = []
    for driver, kind, count in ((GPU_DRIVER, "gpu", gpus), (NIC_DRIVER, "nic", nics)):
        if not count:
            continue
        devices = []
        for i in range(count):
            root = pcie_root(i, count, pcie_roots)
            if kind == "nic" and nic_roots is not None:
                root = nic_roots[i % len(nic_roots)]
            devices.append({"name": f"{kind}-{i}", "attributes": {PCIE_ROOT: {"string": root}, "index": {"int": i}}})
        slices.append(
            {
                "apiVersion": RESOURCE_SLICES.api_version,
                "kind": RESOURCE_SLICES.kind,
                "metadata": {"name": f"{node}-{kind}"},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return slices


def allocated_roots(claim: Obj, slices: list[Obj]) -> dict[str, tuple[str, str]]:
    """What a claim was given, by request: the device and its PCIe root (read from the slices)."""
    roots = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d["attributes"][PCIE_ROOT]["string"]
        for s in slices
        for d in s["spec"]["devices"]
    }
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return {str(r["request"]): (str(r["device"]), roots[(r["driver"], r["pool"], r["device"])]) for r in results}
