"""The local nodes' devices as a DRA driver has them: published, prepared, reported.

``local up --control-plane kubernetes --node-devices gpu=8,nic=8,pcie-roots=4`` gives every node 8 GPUs and 8
RDMA NICs spread evenly over 4 PCIe root complexes (GPU ``i`` and NIC ``i`` on root ``i * roots // count``, as a
GPU server has a GPU and its NIC behind each PCIe switch). The node agent is their driver, in the three parts a
DRA kubelet plug-in has (``k8s.io/dynamic-resource-allocation/kubeletplugin``):

- **Publishing**: per node two ResourceSlices, one per driver (:data:`GPU_DRIVER`, :data:`NIC_DRIVER`), owned
  by the Node (gone with it), each device with the standard attribute ``resource.kubernetes.io/pcieRoot``
  (``pci0000:<nn>``), its ``index``, and a GPU's ``uuid`` or a NIC's ``rdmaDevice`` (``mlx5_<i>``) and
  ``gidIndex``. The cluster's administrator (``KubernetesCluster``) makes the DeviceClasses: ``gpu.nvidia.com``
  and ``dranet``, the names NVIDIA's GPU driver and kubernetes-sigs/dranet give theirs (so a job written for
  them runs unchanged), selecting the local drivers and naming ``extendedResourceName`` ``nvidia.com/gpu`` and
  ``rdma/hca`` (DRAExtendedResource: a pod asking ``nvidia.com/gpu: 8`` gets 8 DRA GPUs on a node that does
  not advertise the resource itself).
- **Preparing**: before a pod's containers start, the agent reads each claim the pod has (its
  ``resourceClaimStatuses`` and the scheduler's ``extendedResourceClaimStatus``) and gives every container the
  devices of the claims it names, as a driver's CDI spec would: ``CUDA_VISIBLE_DEVICES`` and
  ``NVIDIA_VISIBLE_DEVICES`` (the GPUs' UUIDs: pretend ones, ``GPU-pretend-…``, which CUDA never finds),
  ``NCCL_IB_HCA`` (``=mlx5_0:1,…``: exact names, so ``mlx5_1`` does not also select ``mlx5_10``),
  ``NCCL_IB_GID_INDEX``, and ``KUBEDL_DRA_DEVICES`` (every device, ``<request>=<device>``).
- **Reporting** (DRAResourceClaimDeviceStatus): the claim's ``status.devices`` gets, per prepared device, a
  ``Ready`` condition, the NIC's ``networkData.interfaceName`` and the variables in ``data``, which is what
  ``kubedl-py describe`` shows. With DRAResourceClaimGranularStatusAuthorization a driver needs
  ``resourceclaims/driver`` rights for its driver names; the local cluster grants the agent exactly those.

The simulated runtime publishes and reports but starts nothing, so nothing reads the variables there. These are
pretend devices: there is no GPU or NIC behind them, and the embedded API server serves no ``resource.k8s.io``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubedl_py.kube.claims import RESOURCE_CLAIMS, allocation_results, claim_names
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import AlreadyExists, KubeError, NotFound
from kubedl_py.kube.resources import Resource

log = logging.getLogger(__name__)

Obj = dict[str, Any]

GPU_DRIVER: Final = "gpu.local.kubedl.io"
NIC_DRIVER: Final = "nic.local.kubedl.io"
DRIVERS: Final = (GPU_DRIVER, NIC_DRIVER)
PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
#: the DeviceClasses the local cluster makes, named as NVIDIA's GPU driver and dranet name theirs
GPU_CLASS: Final = "gpu.nvidia.com"
NIC_CLASS: Final = "dranet"
#: the extended resources those classes serve (a vendor's YAML, unchanged)
GPU_EXTENDED: Final = "nvidia.com/gpu"
NIC_EXTENDED: Final = "rdma/hca"
#: RoCEv2's usual GID index, which the pretend NICs report
GID_INDEX: Final = 3
DRA_DEVICES_ENV: Final = "KUBEDL_DRA_DEVICES"
RESOURCE_SLICES: Final = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False)
DEVICE_CLASSES: Final = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
DEVICE_TAINT_RULES: Final = Resource("resource.k8s.io", "v1", "devicetaintrules", "DeviceTaintRule", namespaced=False)

#: the ClusterRole of the node agents' driver part (bound to their user by the local real control plane)
DRIVER_ROLE: Final = "kubedl-py:local-dra-driver"


def driver_rules() -> list[Obj]:
    """What the driver writes beyond a kubelet's rights (``system:node`` reads claims): its nodes' slices
    (the Node authorizer is not in front of the agents' one user for many nodes), and the claims' device
    status, for its own drivers only (``resourceclaims/driver`` with the ``arbitrary-node:`` verbs, as
    DRAResourceClaimGranularStatusAuthorization asks of a driver not running in a pod on the node)."""
    group = ["resource.k8s.io"]
    return [
        {
            "apiGroups": group,
            "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        },
        {"apiGroups": group, "resources": ["resourceclaims"], "verbs": ["get"]},
        {"apiGroups": group, "resources": ["resourceclaims/status"], "verbs": ["patch", "update"]},
        {
            "apiGroups": group,
            "resources": ["resourceclaims/driver"],
            "resourceNames": list(DRIVERS),
            "verbs": ["arbitrary-node:patch", "arbitrary-node:update"],
        },
    ]


_EXAMPLE = "e.g. --node-devices gpu=8,nic=8,pcie-roots=4"
_KEYS = {"gpu": "gpus", "nic": "nics", "pcie-roots": "pcie_roots"}


class NodeDevicesError(ValueError):
    """``--node-devices`` that cannot be read; the message names the part and the fix."""


@dataclass(frozen=True)
class DraDevices:
    """What every node publishes: ``gpus`` GPUs and ``nics`` NICs over ``pcie_roots`` PCIe roots."""

    gpus: int = 0
    nics: int = 0
    pcie_roots: int = 1

    def __str__(self) -> str:
        return f"gpu={self.gpus},nic={self.nics},pcie-roots={self.pcie_roots}"


def parse_node_devices(text: str) -> DraDevices:
    """``gpu=8,nic=8,pcie-roots=4`` (any part may be left out; pcie-roots defaults to 1)."""
    values: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        if not sep or key not in _KEYS:
            known = ", ".join(_KEYS)
            raise NodeDevicesError(
                f"--node-devices: {part!r} is not <kind>=<count> with kind one of {known} ({_EXAMPLE})"
            )
        if not re.fullmatch(r"\d+", raw):
            raise NodeDevicesError(f"--node-devices: {key}={raw!r} is not a whole number ({_EXAMPLE})")
        values[_KEYS[key]] = int(raw)
    devices = DraDevices(**values)
    if not devices.gpus and not devices.nics:
        raise NodeDevicesError(f"--node-devices: no GPU and no NIC given ({_EXAMPLE})")
    if devices.pcie_roots < 1 or devices.pcie_roots > max(devices.gpus, devices.nics):
        raise NodeDevicesError(
            f"--node-devices: pcie-roots={devices.pcie_roots} must be between 1 and the number of GPUs or NICs "
            f"({_EXAMPLE})"
        )
    return devices


def device_classes() -> list[Obj]:
    """The DeviceClasses of the local drivers, under the vendors' names, serving their extended resources."""
    return [
        {
            "apiVersion": DEVICE_CLASSES.api_version,
            "kind": DEVICE_CLASSES.kind,
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "kubedl-py-local"}},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}],
                "extendedResourceName": extended,
            },
        }
        for name, driver, extended in ((GPU_CLASS, GPU_DRIVER, GPU_EXTENDED), (NIC_CLASS, NIC_DRIVER, NIC_EXTENDED))
    ]


def pcie_root(index: int, count: int, roots: int) -> str:
    return f"pci0000:{index * roots // max(count, 1):02x}"


def pretend_gpu_uuid(node: str, index: int) -> str:
    return f"GPU-pretend-{node}-{index}"


def resource_slices(
    node: str,
    *,
    gpus: int,
    nics: int,
    pcie_roots: int,
    nic_roots: list[str] | None = None,
    node_uid: str | None = None,
) -> list[Obj]:
    """The node's two ResourceSlices; ``nic_roots`` overrides the NICs' roots (a node whose NICs sit apart);
    with ``node_uid`` they are owned by the Node, as a kubelet plug-in's are."""
    slices = []
    for driver, kind, count in ((GPU_DRIVER, "gpu", gpus), (NIC_DRIVER, "nic", nics)):
        if not count:
            continue
        devices = []
        for i in range(count):
            root = pcie_root(i, count, pcie_roots)
            attributes: Obj = {PCIE_ROOT: {"string": root}, "index": {"int": i}}
            if kind == "nic":
                if nic_roots is not None:
                    attributes[PCIE_ROOT] = {"string": nic_roots[i % len(nic_roots)]}
                attributes["rdmaDevice"] = {"string": f"mlx5_{i}"}
                attributes["gidIndex"] = {"int": GID_INDEX}
            else:
                attributes["uuid"] = {"string": pretend_gpu_uuid(node, i)}
            devices.append({"name": f"{kind}-{i}", "attributes": attributes})
        metadata: Obj = {"name": f"{node}-{kind}"}
        if node_uid is not None:
            metadata["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
            ]
        slices.append(
            {
                "apiVersion": RESOURCE_SLICES.api_version,
                "kind": RESOURCE_SLICES.kind,
                "metadata": metadata,
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
    return {
        str(r["request"]): (str(r["device"]), roots[(r["driver"], r["pool"], r["device"])])
        for r in allocation_results(claim)
    }


@dataclass(frozen=True)
class Given:
    """One device of ours a claim holds on this node, for one request of it."""

    request: str
    driver: str
    device: str
    index: int

    @property
    def rdma_device(self) -> str:
        return f"mlx5_{self.index}"


def _index(device: str) -> int:
    return int(device.rpartition("-")[2])


def _ours(claim: Obj, node: str) -> list[Given]:
    return [
        Given(str(r["request"]), str(r["driver"]), str(r["device"]), _index(str(r["device"])))
        for r in allocation_results(claim)
        if r.get("driver") in DRIVERS and r.get("pool") == node
    ]


def _requested(request: str, wanted: str | None) -> bool:
    """A container naming ``claim`` (all of it) or ``claim`` and one request (``gpu-0``; a request of a
    prioritized list is ``gpu-0/<subrequest>`` in the results)."""
    return wanted is None or request == wanted or request.startswith(wanted + "/")


def containers_devices(pod: Obj, claims: Mapping[str, Obj], node: str) -> dict[str, list[Given]]:
    """Per container name, the devices of ours it is given: those of the claims its ``resources.claims``
    name, and those the scheduler's extended-resource claim maps to it. ``claims`` by their object name."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    generated = {s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    by_pod_name: dict[str, str | None] = {}
    for entry in spec.get("resourceClaims") or []:
        by_pod_name[entry["name"]] = entry.get("resourceClaimName") or generated.get(entry["name"])
    out: dict[str, list[Given]] = {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        given: list[Given] = []
        for ref in (c.get("resources") or {}).get("claims") or []:
            claim = claims.get(by_pod_name.get(ref["name"]) or "")
            if claim is not None:
                given += [g for g in _ours(claim, node) if _requested(g.request, ref.get("request"))]
        out[c["name"]] = given
    extended = status.get("extendedResourceClaimStatus") or {}
    claim = claims.get(extended.get("resourceClaimName") or "")
    if claim is not None:
        ours = _ours(claim, node)
        for mapping in extended.get("requestMappings") or []:
            requests = [g for g in ours if _requested(g.request, mapping.get("requestName"))]
            out.setdefault(mapping["containerName"], []).extend(requests)
    return out


def container_env(given: Iterable[Given], node: str) -> dict[str, str]:
    """The variables a container given these devices starts with (nothing without any of ours): every device
    in ``KUBEDL_DRA_DEVICES``, the NICs in ``NCCL_IB_HCA`` (exact names) with the GID index, the GPUs' UUIDs in
    ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES``."""
    devices = sorted(set(given), key=lambda g: (g.driver, g.index, g.request))
    if not devices:
        return {}
    env = {DRA_DEVICES_ENV: ",".join(f"{g.request}={g.device}" for g in devices)}
    nics = sorted({g.index: g for g in devices if g.driver == NIC_DRIVER}.values(), key=lambda g: g.index)
    if nics:
        env["NCCL_IB_HCA"] = "=" + ",".join(f"{g.rdma_device}:1" for g in nics)
        env["NCCL_IB_GID_INDEX"] = str(GID_INDEX)
    gpus = sorted({g.index for g in devices if g.driver == GPU_DRIVER})
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = env["NVIDIA_VISIBLE_DEVICES"] = ",".join(pretend_gpu_uuid(node, i) for i in gpus)
    return env


def device_status(claim: Obj, node: str, env_of: Mapping[str, Mapping[str, str]]) -> list[Obj]:
    """The claim's ``status.devices``: every other driver's entries kept, ours (prepared) replaced."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kept = [d for d in (claim.get("status") or {}).get("devices") or [] if d.get("driver") not in DRIVERS]
    ours = []
    for g in _ours(claim, node):
        entry: Obj = {
            "driver": g.driver,
            "pool": node,
            "device": g.device,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Prepared",
                    "message": f"prepared by the local node agent on {node}",
                    "lastTransitionTime": now,
                }
            ],
            "data": {"env": dict(env_of.get(g.device, {}))},
        }
        if g.driver == NIC_DRIVER:
            entry["networkData"] = {"interfaceName": g.rdma_device}
        ours.append(entry)
    return [*kept, *ours]


class DraDriver:
    """The node agent's DRA driver: publishes its nodes' slices, prepares pods' claims, reports status."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def publish(self, node: str, node_uid: str, devices: DraDevices) -> None:
        """Create (or, after a restart, replace) the node's ResourceSlices."""
        for body in resource_slices(
            node, gpus=devices.gpus, nics=devices.nics, pcie_roots=devices.pcie_roots, node_uid=node_uid
        ):
            try:
                await self.client.create(RESOURCE_SLICES, body)
            except AlreadyExists:
                current = await self.client.get(RESOURCE_SLICES, body["metadata"]["name"])
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                pool = current["spec"]["pool"]
                body["spec"]["pool"]["generation"] = int(pool.get("generation") or 0) + 1
                await self.client.replace(RESOURCE_SLICES, body)

    async def unpublish(self, node: str) -> None:
        for kind in ("gpu", "nic"):
            with contextlib.suppress(NotFound):
                await self.client.delete(RESOURCE_SLICES, f"{node}-{kind}")

    async def prepare(self, pod: Obj, node: str) -> dict[str, dict[str, str]]:
        """Per container, the variables of its devices; the claims' device status written. A claim that
        cannot be read leaves its containers without (logged), as a failed NodePrepareResources would not:
        the kubelet retries, but a pod here must not hang on a pretend device."""
        ns = str(pod["metadata"].get("namespace") or "default")
        claims: dict[str, Obj] = {}
        for name in claim_names(pod):
            try:
                claims[name] = await self.client.get(RESOURCE_CLAIMS, name, namespace=ns)
            except KubeError as e:
                log.warning("pod %s/%s: claim %s not readable: %s", ns, pod["metadata"]["name"], name, e)
        given = containers_devices(pod, claims, node)
        env = {container: container_env(devices, node) for container, devices in given.items()}
        for claim in claims.values():
            mine = _ours(claim, node)
            if not mine:
                continue
            env_of = {g.device: container_env([g], node) for g in mine}
            body = {"status": {"devices": device_status(claim, node, env_of)}}
            try:
                await self.client.patch_status(RESOURCE_CLAIMS, claim["metadata"]["name"], body, namespace=ns)
            except KubeError as e:
                log.warning("claim %s/%s: device status not written: %s", ns, claim["metadata"]["name"], e)
        return {container: values for container, values in env.items() if values}
