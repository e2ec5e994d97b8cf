"""RDMA-ready pods and topology placement: what ``spec.rdma`` and ``spec.placement`` add to a pod.

A feature of the reconcile (``features.py``) that shapes pods (``ShapesPods``): pure functions over the
pod dict that ``pods.build_pod`` assembled. They only ever add: anything the user's template already sets (a
resource, the networks annotation, a /dev/shm mount, an env variable, a capability, an affinity term) is kept
as written, and a job without ``spec.rdma`` / ``spec.placement`` gets a pod identical to one built without
this module.

Precedence of RDMA settings, highest first: the user's container (env, resources, mounts) > the job's
``spec.rdma`` > the controller-wide ``--rdma-defaults`` file (same shape as ``spec.rdma``) > built-ins.
``resolve_rdma`` merges the job's block with the file field by field (``nccl`` key by key); the file only
applies to jobs that opt in with a ``spec.rdma`` block, even an empty one.

Why each piece:

- devices (``rdma/hca``) and per-GPU SR-IOV resources: the device plugin hands the pod its RDMA NICs only
  when the container asks for them; extended resources must have requests == limits, so both are set.
- ``IPC_LOCK``: RDMA registers (pins) memory, which an unprivileged container may not do without it.
- a memory-backed ``/dev/shm``: NCCL's intra-node transport uses shared memory, and the container runtime's
  default of 64 MiB makes NCCL fail or fall back to slow paths.
- ``NCCL_SOCKET_IFNAME``: NCCL bootstraps over TCP. In the pod network the pod's interface is ``eth0``;
  with ``hostNetwork`` the pod sees the node's interfaces, so the default excludes the virtual ones a
  Kubernetes node carries (NCCL reads a leading ``^`` as "exclude", then a comma list of name prefixes;
  it parses at most 16 entries).
"""

from __future__ import annotations

from typing import Final, Protocol

from kubedl_py.api import constants as c
from kubedl_py.api.common import Placement, RdmaSpec
from kubedl_py.api.defaults import default_container_index
from kubedl_py.api.plain import Object
from kubedl_py.controllers import dra
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.features import Wiring
from kubedl_py.controllers.kinds.base import OwnedObject
from kubedl_py.controllers.observation import Replica
from kubedl_py.controllers.plan import Plan

ANNOTATION_NETWORKS: Final = "k8s.v1.cni.cncf.io/networks"
SHM_VOLUME: Final = "dshm"
SHM_PATH: Final = "/dev/shm"
IPC_LOCK: Final = "IPC_LOCK"
PREFERRED_WEIGHT: Final = 100

#: the built-in NCCL settings of the common RoCE/InfiniBand recipe (NCCL_IB_GID_INDEX only when given:
#: the right index depends on the fabric, and a wrong one breaks RoCE)
BUILTIN_NCCL: Final[dict[str, str]] = {
    "NCCL_IB_DISABLE": "0",
    "NCCL_IB_TIMEOUT": "22",
    "NCCL_IB_QPS_PER_CONNECTION": "8",
}
POD_NETWORK_IFNAME: Final = "eth0"
#: the virtual interfaces of a Kubernetes node: loopback, container bridges and veths, CNI overlays and
#: tunnels (flannel, calico, cilium, weave, OVN geneve, kube-router), IPVS and node-local DNS dummies
HOST_NETWORK_EXCLUDED: Final = (
    "lo",
    "docker",
    "veth",
    "cni",
    "flannel",
    "cali",
    "tunl",
    "vxlan",
    "genev",
    "cilium",
    "lxc",
    "kube-ipvs",
    "kube-bridge",
    "nodelocaldns",
    "virbr",
    "weave",
)
HOST_NETWORK_IFNAME: Final = "^" + ",".join(HOST_NETWORK_EXCLUDED)


def resolve_rdma(job_rdma: RdmaSpec | None, defaults: RdmaSpec | None) -> RdmaSpec | None:
    """The job's RDMA settings over the controller's defaults; None when the job does not opt in."""
    if job_rdma is None:
        return None
    if defaults is None:
        return job_rdma
    merged = defaults.model_copy(deep=True)
    for name in RdmaSpec.model_fields:
        value = getattr(job_rdma, name)
        if value is None:
            continue
        if name == "nccl":
            merged.nccl = {**(defaults.nccl or {}), **value}
        else:
            setattr(merged, name, value)
    return merged


def nccl_env(rdma: RdmaSpec, *, host_network: bool) -> dict[str, str]:
    """The NCCL variables of a replica: built-ins, the interface default for the mode, then ``rdma.nccl``."""
    env = dict(BUILTIN_NCCL)
    env["NCCL_SOCKET_IFNAME"] = HOST_NETWORK_IFNAME if host_network else POD_NETWORK_IFNAME
    env.update({name: str(value) for name, value in (rdma.nccl or {}).items()})
    return env


def device_resources(rdma: RdmaSpec) -> dict[str, str]:
    """Extended resources to request: ``devices`` plus one per-GPU resource for each index 1..count."""
    resources = {name: str(count) for name, count in (rdma.devices or {}).items()}
    per_gpu = rdma.per_gpu
    if per_gpu is not None and per_gpu.resource:
        for index in range(1, per_gpu.count + 1):
            resources.setdefault(per_gpu.resource.replace("{index}", str(index)), "1")
    return resources


def networks(rdma: RdmaSpec) -> list[str]:
    """The Multus attachments: ``networks`` then one per GPU, without repeats."""
    names = list(rdma.networks or [])
    per_gpu = rdma.per_gpu
    if per_gpu is not None and per_gpu.network:
        names += [per_gpu.network.replace("{index}", str(index)) for index in range(1, per_gpu.count + 1)]
    return list(dict.fromkeys(names))


def apply_rdma(pod: Object, rdma: RdmaSpec, *, main_index: int, host_network: bool) -> None:
    """Add the RDMA settings to ``pod`` (in place), keeping whatever its template already set."""
    spec = pod["spec"]
    main = spec["containers"][main_index]
    _add_resources(main, device_resources(rdma))
    if rdma.ipc_lock is not False:
        _add_capability(main, IPC_LOCK)
    _add_env(main, nccl_env(rdma, host_network=host_network))
    _add_shm(spec, rdma.shm_size)
    attachments = networks(rdma)
    if attachments:
        annotations = pod["metadata"].setdefault("annotations", {})
        annotations.setdefault(ANNOTATION_NETWORKS, ",".join(attachments))


def _add_resources(container: Object, wanted: dict[str, str]) -> None:
    if not wanted:
        return
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    for name, count in wanted.items():
        if name in limits or name in requests:
            continue  # the user's count wins; the API server copies a lone limit into requests itself
        limits[name] = count
        requests[name] = count
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests


def _add_capability(container: Object, capability: str) -> None:
    capabilities = container.setdefault("securityContext", {}).setdefault("capabilities", {})
    added = capabilities.setdefault("add", [])
    if capability not in added:
        added.append(capability)


def _add_env(container: Object, env: dict[str, str]) -> None:
    existing = container.setdefault("env", [])
    present = {item.get("name") for item in existing}
    existing.extend({"name": name, "value": value} for name, value in env.items() if name not in present)


def _add_shm(spec: Object, size: str | None) -> None:
    containers = spec["containers"]
    if any(mount.get("mountPath") == SHM_PATH for ctr in containers for mount in ctr.get("volumeMounts") or []):
        return  # the user already provides /dev/shm
    volumes = spec.setdefault("volumes", [])
    taken = {volume.get("name") for volume in volumes}
    name = SHM_VOLUME if SHM_VOLUME not in taken else f"kubedl-{SHM_VOLUME}"
    empty_dir: Object = {"medium": "Memory"}
    if size:
        empty_dir["sizeLimit"] = size
    volumes.append({"name": name, "emptyDir": empty_dir})
    for container in containers:
        container.setdefault("volumeMounts", []).append({"name": name, "mountPath": SHM_PATH})


def apply_placement(pod_spec: Object, job_name: str, placement: Placement) -> None:
    """Pod affinity to the job's own pods on ``placement.topologyKey``, added to the template's affinity."""
    term = {
        "labelSelector": {"matchLabels": {c.LABEL_JOB_NAME: job_name}},
        "topologyKey": placement.topology_key,
    }
    affinity = pod_spec.setdefault("affinity", {}).setdefault("podAffinity", {})
    if placement.mode == "Required":
        affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(term)
    else:
        affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
            {"weight": PREFERRED_WEIGHT, "podAffinityTerm": term}
        )


class RdmaSettings(Protocol):
    """The controller options this feature reads (``setup.ControllerOptions``)."""

    @property
    def rdma_defaults(self) -> RdmaSpec | None: ...


def install(wiring: Wiring[RdmaSettings]) -> RdmaAndPlacement:
    """The feature's factory (``setup.FEATURES``): always there; a job that asks for neither is left as it is."""
    return RdmaAndPlacement(wiring.options.rdma_defaults)


class RdmaAndPlacement:
    """``spec.rdma`` (over the controller's ``--rdma-defaults``) and ``spec.placement`` added to every pod."""

    def __init__(self, rdma_defaults: RdmaSpec | None = None) -> None:
        self.rdma_defaults = rdma_defaults

    def owned_objects(self, plan: Plan, addressing: Addressing) -> list[OwnedObject]:
        """``spec.rdma.dra``: one ResourceClaimTemplate per replica type it covers (dra.py)."""
        rdma = resolve_rdma(plan.job.run_policy.rdma, self.rdma_defaults)
        if rdma is None or rdma.dra is None:
            return []
        dra_spec = rdma.dra
        return [
            dra.claim_template(plan.job, replica_type, dra_spec)
            for replica_type in plan.job.replica_specs
            if dra.covers(dra_spec, replica_type)
        ]

    def shape_pod(self, plan: Plan, replica: Replica, pod: Object) -> None:
        job = plan.job
        spec = pod["spec"]
        rdma = resolve_rdma(job.run_policy.rdma, self.rdma_defaults)
        if rdma is not None:
            # The pod's own network, also when the template asks for the host network itself.
            main = default_container_index(spec["containers"], job.framework)
            apply_rdma(pod, rdma, main_index=main, host_network=bool(spec.get("hostNetwork")))
            if rdma.dra is not None and dra.covers(rdma.dra, replica.replica_type):
                dra.apply_dra(spec, job, replica.replica_type, main)
        if job.run_policy.placement is not None:
            apply_placement(spec, job.name, job.run_policy.placement)
