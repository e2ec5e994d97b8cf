"""GPUs and RDMA NICs through Dynamic Resource Allocation (``spec.rdma.dra``): what a job's pods claim.

GPUDirect RDMA pays off only when a GPU and the NIC it sends through hang off the same PCIe root; a device
plugin hands out ``nvidia.com/gpu`` and ``rdma/hca`` independently and cannot say so. DRA can: a driver
publishes each node's devices in ResourceSlices with the standard attribute ``resource.kubernetes.io/pcieRoot``,
and a claim's ``constraints.matchAttribute`` makes kube-scheduler allocate only devices that share it.

Each replica type the block covers gets one ResourceClaimTemplate, owned by the job (made before its pods,
removed with it by the garbage collector), named ``<job>-<type>-devices``:

- per GPU ``i``, a request ``gpu-<i>`` of one device of the GPU class and, with NICs, ``nic-<i>`` of
  ``nicsPerGpu`` devices of the NIC class, and (``align: pcieRoot``) a constraint that the two share
  ``resource.kubernetes.io/pcieRoot``; the GPUs themselves may sit on different roots;
- every pod of the type names it in ``spec.resourceClaims`` (``devices``) and its framework container in
  ``resources.claims``, so kube-controller-manager makes each pod its own ResourceClaim from the template: a
  replacement pod (a failover, a whole-job restart, a lost node) gets a fresh claim, a pod restarted in place
  keeps its own.

What the pod was given is known only once the scheduler allocated it, after the pod was written: the names of
the NICs reach the program from the driver (the CDI environment it prepares, e.g. ``NCCL_IB_HCA``), not from
the controller.
"""

from __future__ import annotations

from typing import Any, Final

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.api.common import DraSpec
from kubedl_py.api.plain import Object
from kubedl_py.controllers.kinds.base import OwnedObject
from kubedl_py.kube.resources import Resource

RESOURCE_CLAIM_TEMPLATES: Final = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate")
#: the standard device attribute naming a device's PCIe root complex (k8s.io/dynamic-resource-allocation)
PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
#: NVIDIA's DRA driver's GPU class, and kubernetes-sigs/dranet's NIC class
DEFAULT_GPU_CLASS: Final = "gpu.nvidia.com"
DEFAULT_NIC_CLASS: Final = "dranet"
#: the claim's name in the pod (``spec.resourceClaims`` and the container's ``resources.claims``)
POD_CLAIM: Final = "devices"


def covers(dra: DraSpec, replica_type: str) -> bool:
    return dra.replica_types is None or replica_type in dra.replica_types


def template_name(job: TrainingJob, replica_type: str) -> str:
    return f"{job.name}-{replica_type.lower()}-devices"


def claim_spec(dra: DraSpec) -> Object:
    """The claim each pod gets: one request per GPU and per GPU's NICs, each pair on one PCIe root."""
    nics = 1 if dra.nics_per_gpu is None else dra.nics_per_gpu
    gpu_class = dra.gpu_device_class or DEFAULT_GPU_CLASS
    nic_class = dra.nic_device_class or DEFAULT_NIC_CLASS
    requests: list[Object] = []
    constraints: list[Object] = []
    for i in range(dra.gpus):
        requests.append(
            {"name": f"gpu-{i}", "exactly": {"deviceClassName": gpu_class, "allocationMode": "ExactCount", "count": 1}}
        )
        if nics:
            requests.append(
                {
                    "name": f"nic-{i}",
                    "exactly": {"deviceClassName": nic_class, "allocationMode": "ExactCount", "count": nics},
                }
            )
            if (dra.align or "pcieRoot") == "pcieRoot":
                constraints.append({"requests": [f"gpu-{i}", f"nic-{i}"], "matchAttribute": PCIE_ROOT})
    devices: Object = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def claim_template(job: TrainingJob, replica_type: str, dra: DraSpec) -> OwnedObject:
    labels = {c.LABEL_CONTROLLER: c.CONTROLLER_NAME, c.LABEL_JOB_NAME: job.name, c.LABEL_REPLICA_TYPE: replica_type}
    body: Object = {
        "apiVersion": RESOURCE_CLAIM_TEMPLATES.api_version,
        "kind": RESOURCE_CLAIM_TEMPLATES.kind,
        "metadata": {"name": template_name(job, replica_type), "labels": dict(labels)},
        "spec": {"metadata": {"labels": dict(labels)}, "spec": claim_spec(dra)},
    }
    return OwnedObject(RESOURCE_CLAIM_TEMPLATES, body)


def apply_dra(pod_spec: Object, job: TrainingJob, replica_type: str, main_index: int) -> None:
    """Name the replica type's claim template in the pod and the framework container (in place)."""
    claims: list[Any] = pod_spec.setdefault("resourceClaims", [])
    claims.append({"name": POD_CLAIM, "resourceClaimTemplateName": template_name(job, replica_type)})
    resources = pod_spec["containers"][main_index].setdefault("resources", {})
    resources.setdefault("claims", []).append({"name": POD_CLAIM})
