"""GPUs and other devices on a node: what a device plugin and NVIDIA's feature discovery would give a kubelet.

Why: every real training job asks for ``nvidia.com/gpu`` (and often ``rdma/hca``). A node that advertises
only cpu and memory leaves such a pod Pending forever, so the local cluster could not run the jobs this
project exists for, even on a machine full of GPUs. On a real node three pieces do this work: the NVIDIA
device plugin advertises ``nvidia.com/gpu: N`` and, when the kubelet admits a pod, hands each container its
own GPUs (their UUIDs in ``NVIDIA_VISIBLE_DEVICES``, and with NVIDIA's container toolkit the device nodes);
GPU feature discovery labels the node with the product; and the kubelet's device manager keeps the
bookkeeping, so a GPU belongs to one container at a time. This module is those pieces for the node agents.

- **Discovery** (:func:`discover_gpus`): NVML through the ``nvidia-ml-py`` binding (the ``gpu`` extra,
  imported only here and only when called), else ``nvidia-smi --query-gpu``. No binding, no driver and no
  ``nvidia-smi`` is the normal case: a failed import and a ``PATH`` lookup, then nothing. ``local up``'s own
  ``CUDA_VISIBLE_DEVICES``, when set, limits what the node advertises, as it limits what CUDA sees.
- **Pretend devices** (:func:`parse_node_resources`, ``local up --node-resources nvidia.com/gpu=8,rdma/hca=1``):
  any extended resource, advertised on every node, so jobs written for GPU and RDMA nodes schedule and run
  (on the CPU) on a laptop. A pretend device is handed out exactly like a real one, and the container is
  told: an event, and ``KUBEDL_PRETEND_DEVICES`` in its environment.
- **Allocation** (:class:`DeviceManager`): when the node admits a pod, every container gets the devices its
  limits ask for, exclusively, for its life (restarts keep them); they are freed when the container ends
  for good, or with the pod. Init containers run one at a time before the others and may reuse their
  devices, as in the kubelet: a pod needs ``max(largest init container, sum of the others)``. A pod asking
  for more than the node has free is refused as the kubelet refuses it (phase Failed, reason
  ``OutOf<resource>``); with the scheduler in front that only happens to a pod bound by hand.
- **What a container sees** (:meth:`DeviceManager.env`, :attr:`Allocation.device_paths`): on a node with
  GPUs, a container given some has their UUIDs in ``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES``
  (UUIDs name a GPU the same way inside and outside a container, whatever the enumeration order), and in a
  container the device nodes ``/dev/nvidia<minor>`` plus the driver's control nodes; any other container
  gets ``NVIDIA_VISIBLE_DEVICES=void`` and an empty ``CUDA_VISIBLE_DEVICES``, the defaults a GPU node's
  runtime gives containers without GPUs. Pretend GPUs get UUIDs of the form ``GPU-pretend-<i>``, which no
  device has, so CUDA sees none and the program runs on the CPU even on a machine that has GPUs.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import heapq
import importlib
import io
import logging
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubedl_py.api.quantities import Quantity, QuantityError, parse

log = logging.getLogger(__name__)

Obj = dict[str, Any]

GPU_RESOURCE = "nvidia.com/gpu"
#: set in a container given pretend devices: ``<resource>=<count>,...`` (the syntax of ``--node-resources``)
PRETEND_ENV = "KUBEDL_PRETEND_DEVICES"
#: the event a pod given pretend devices gets (type Normal)
PRETEND_EVENT = "PretendDevices"
#: what NVIDIA's container runtime reads, and what CUDA reads
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
#: the prefix of a pretend GPU's UUID (a real one is ``GPU-`` and 36 hexadecimal digits and dashes)
PRETEND_GPU_PREFIX = "GPU-pretend-"
#: the driver's device nodes every GPU container needs besides its own ``/dev/nvidia<minor>``
CONTROL_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
#: node labels of NVIDIA's GPU feature discovery that the agent sets
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_PRESENT = "nvidia.com/gpu.present"
#: resources the kubelet itself accounts (no device plugin behind them)
STANDARD_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")
NVIDIA_SMI_QUERY = "index,uuid,name,memory.total,pci.bus_id"

_EXAMPLE = "e.g. --node-resources nvidia.com/gpu=8,rdma/hca=1"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_PREFIX = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


# ------------------------------------------------------------------------------------------------ discovery


@dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU of this machine, as NVML or ``nvidia-smi`` describes it."""

    index: int
    uuid: str
    name: str
    memory_mib: int = 0
    #: the ``N`` of ``/dev/nvidiaN`` (None when unknown: the container runtime then cannot pass it through)
    minor: int | None = None


#: a discovery source: the machine's GPUs, ``[]`` when there are none; tests pass their own
GpuDiscovery = Callable[[], list[Gpu]]


def nvml_gpus() -> list[Gpu] | None:
    """The GPUs NVML reports; None when NVML cannot answer (no ``nvidia-ml-py``, no driver, an error)."""
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded: no driver, the usual case
        log.debug("NVML is not usable here: %s", e)
        return None
    try:
        gpus = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            minor: int | None = None
            with contextlib.suppress(Exception):
                minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
            memory = 0
            with contextlib.suppress(Exception):
                memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20
            gpus.append(
                Gpu(
                    index=i,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    memory_mib=memory,
                    minor=minor,
                )
            )
        return gpus
    except Exception as e:
        log.warning("NVML found a driver but could not list its GPUs (%s); trying nvidia-smi", e)
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def nvidia_smi_gpus(nvidia_smi: str | None = None) -> list[Gpu] | None:
    """The GPUs ``nvidia-smi --query-gpu`` reports; None when it is not installed or fails."""
    program = nvidia_smi or shutil.which("nvidia-smi")
    if program is None:
        return None
    try:
        result = subprocess.run(
            [program, f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("nvidia-smi could not run (%s): no GPUs advertised", e)
        return None
    if result.returncode != 0:
        # nvidia-smi without a working driver says so and exits non-zero: a machine without GPUs
        log.info("nvidia-smi exited %d (%s): no GPUs advertised", result.returncode, result.stderr.strip()[:200])
        return None
    try:
        return parse_nvidia_smi(result.stdout)
    except ValueError as e:
        log.warning("could not read nvidia-smi's answer (%s): no GPUs advertised", e)
        return None


def parse_nvidia_smi(text: str, proc: Path = Path("/proc/driver/nvidia/gpus")) -> list[Gpu]:
    """The rows of ``nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id --format=csv,noheader,nounits``."""
    gpus = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not row[0].strip():
            continue
        if len(row) < 3:
            raise ValueError(f"nvidia-smi printed {row!r}; expected {NVIDIA_SMI_QUERY}")
        index, uuid, name = int(row[0]), row[1].strip(), row[2].strip()
        memory = int(float(row[3])) if len(row) > 3 and _is_number(row[3]) else 0
        minor = _minor_of(row[4], proc) if len(row) > 4 else None
        gpus.append(Gpu(index=index, uuid=uuid, name=name, memory_mib=memory, minor=minor))
    return gpus


def discover_gpus() -> list[Gpu]:
    """This machine's NVIDIA GPUs: NVML first, then ``nvidia-smi``; ``[]`` when neither finds any."""
    for source in (nvml_gpus, nvidia_smi_gpus):
        gpus = source()
        if gpus is not None:
            return gpus
    return []


def visible_gpus(gpus: Sequence[Gpu], visible: str | None) -> list[Gpu]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` (``visible``) leaves to ``local up``: all when it is unset; else the
    ones it names by index or by UUID (or a unique prefix of one), up to the first entry that names none,
    as CUDA reads it. So ``CUDA_VISIBLE_DEVICES=1 kubedl-py local up`` keeps the other GPUs out of the cluster."""
    if visible is None:
        return list(gpus)
    chosen: list[Gpu] = []
    for entry in (e.strip() for e in visible.split(",")):
        match = [g for g in gpus if entry.isdigit() and g.index == int(entry)]
        if not match and entry:
            match = [g for g in gpus if g.uuid.startswith(entry) and not entry.isdigit()]
        if len(match) != 1:
            break
        if match[0] not in chosen:
            chosen.append(match[0])
    return chosen


def _minor_of(bus_id: str, proc: Path = Path("/proc/driver/nvidia/gpus")) -> int | None:
    """The minor device number (``/dev/nvidia<minor>``) of the GPU at PCI ``bus_id``, which ``nvidia-smi``'s
    query cannot print: the driver's ``/proc/driver/nvidia/gpus/<bus>/information`` says it. None when
    unknown (the container runtime then cannot hand that GPU to a container)."""
    bus = bus_id.strip().lower()[-12:]  # nvidia-smi: 00000000:17:00.0; /proc: 0000:17:00.0
    with contextlib.suppress(OSError, ValueError):
        for line in (proc / bus / "information").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Device Minor":
                return int(value.strip())
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def gpu_labels(gpus: Sequence[Gpu]) -> dict[str, str]:
    """The node labels NVIDIA's GPU feature discovery sets (product of the most common model)."""
    if not gpus:
        return {}
    product = Counter(g.name for g in gpus).most_common(1)[0][0]
    labels = {LABEL_PRESENT: "true", LABEL_PRODUCT: label_value(product), LABEL_COUNT: str(len(gpus))}
    memory = min(g.memory_mib for g in gpus)
    if memory:
        labels[LABEL_MEMORY] = str(memory)
    return labels


def label_value(text: str) -> str:
    """``text`` as a label value, as feature discovery writes product names: ``NVIDIA H100 80GB HBM3`` ->
    ``NVIDIA-H100-80GB-HBM3`` (spaces and other characters a label may not hold become dashes)."""
    value = _LABEL_VALUE_BAD.sub("-", text.strip())[:63]
    return value.strip("-_.")


# ------------------------------------------------------------------------------------------ node resources


def is_extended(resource: str) -> bool:
    """An extended resource (behind a device plugin), not one the kubelet accounts itself."""
    return resource not in STANDARD_RESOURCES and not resource.startswith("hugepages-") and "/" in resource


def parse_node_resources(text: str, *, flag: str = "--node-resources") -> dict[str, str]:
    """``nvidia.com/gpu=8,rdma/hca=1`` -> ``{"nvidia.com/gpu": "8", "rdma/hca": "1"}``.

    Extended resources (``<domain>/<name>``) must be whole numbers, as Kubernetes requires of them; cpu,
    memory, pods and ephemeral-storage take any quantity. ValueError names the entry and the fix."""
    out: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, value = (s.strip() for s in entry.partition("="))
        if not sep or not name or not value:
            raise ValueError(f"{flag} {entry!r}: write <resource>=<amount>, {_EXAMPLE}")
        problem = _resource_name_problem(name)
        if problem:
            raise ValueError(f"{flag} {entry!r}: {problem}; {_EXAMPLE}")
        if name in out:
            raise ValueError(f"{flag}: {name} is given twice; give each resource once")
        try:
            quantity = parse(value)
        except QuantityError:
            raise ValueError(f"{flag} {entry!r}: {value!r} is not a quantity; {_EXAMPLE}") from None
        if quantity.unscaled < 0:
            raise ValueError(f"{flag} {entry!r}: the amount may not be negative")
        if is_extended(name) and whole(quantity) is None:
            raise ValueError(
                f"{flag} {entry!r}: {name} is an extended resource, counted in whole devices; "
                f"give a whole number such as {name}=1"
            )
        out[name] = value
    return out


def _resource_name_problem(name: str) -> str | None:
    if name in STANDARD_RESOURCES or name.startswith("hugepages-"):
        return None
    prefix, slash, rest = name.partition("/")
    if not slash:
        return (
            f"{name!r} is neither cpu, memory, pods, ephemeral-storage nor an extended resource "
            "(<domain>/<name>, like nvidia.com/gpu)"
        )
    if not _PREFIX.fullmatch(prefix) or len(prefix) > 253:
        return f"{prefix!r} is not a DNS domain (lower case letters, digits, '-' and '.')"
    if not _NAME.fullmatch(rest) or len(rest) > 63:
        return f"{rest!r} is not a resource name (letters, digits, '-', '_', '.'; at most 63)"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return f"{name} is in the kubernetes.io domain, which Kubernetes reserves; use your own domain"
    return None


def whole(quantity: Quantity) -> int | None:
    """The value of a parsed quantity when it is a whole number, else None."""
    unscaled, scale = quantity.unscaled, quantity.scale
    if scale >= 0:
        factor: int = 10**scale
        return unscaled * factor
    div: int = 10**-scale
    return unscaled // div if unscaled % div == 0 else None


def amount(value: Any) -> int:
    """A container's request of an extended resource as a whole number (the API server insists on it)."""
    try:
        n = whole(parse(str(value).strip()))
    except QuantityError:
        n = None
    if n is None:
        raise ValueError(f"{value!r} is not a whole number of devices")
    return n


# ---------------------------------------------------------------------------------------------- the devices


@dataclass(frozen=True)
class Device:
    """One device a container can be given."""

    resource: str
    #: how the device plugin names it: a GPU's UUID; ``GPU-pretend-<i>`` or ``<name>-pretend-<i>`` when pretend
    id: str
    pretend: bool = False
    #: device nodes a container needs for it (its own ones; the control nodes are the node's)
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeDevices:
    """What one node hands out: real GPUs, and pretend devices by resource (a count each)."""

    gpus: tuple[Gpu, ...] = ()
    pretend: Mapping[str, int] = field(default_factory=dict)
    #: the driver's control device nodes present on this machine (given to every container with a GPU)
    control_paths: tuple[str, ...] = ()

    @property
    def resources(self) -> tuple[str, ...]:
        names = [GPU_RESOURCE] if self.gpus and GPU_RESOURCE not in self.pretend else []
        return (*names, *self.pretend)

    def capacity(self) -> dict[str, str]:
        """The extended resources to advertise (the pretend ones as given)."""
        out = {GPU_RESOURCE: str(len(self.gpus))} if self.gpus else {}
        out.update({name: str(count) for name, count in self.pretend.items()})
        return out

    def labels(self) -> dict[str, str]:
        """Feature discovery's labels for real GPUs (pretend GPUs have no product)."""
        return gpu_labels(self.gpus) if GPU_RESOURCE in self.resources and GPU_RESOURCE not in self.pretend else {}

    @property
    def has_gpus(self) -> bool:
        return GPU_RESOURCE in self.resources

    def __bool__(self) -> bool:
        return bool(self.resources)


def node_devices(gpus: Sequence[Gpu], node_resources: Mapping[str, str]) -> NodeDevices:
    """A host node's devices: the GPUs discovered, and a pretend device for every unit of every extended
    resource in ``node_resources`` (which wins over discovery: ``nvidia.com/gpu=8`` on a 1-GPU machine gives
    8 pretend GPUs, and the real one stays out of reach)."""
    pretend = {name: amount(value) for name, value in node_resources.items() if is_extended(name)}
    if gpus and GPU_RESOURCE in pretend:
        log.warning(
            "%d GPU(s) found, but --node-resources says %s=%s: the node advertises pretend GPUs, and pods see "
            "none of the real ones",
            len(gpus),
            GPU_RESOURCE,
            pretend[GPU_RESOURCE],
        )
        gpus = []
    control = tuple(p for p in CONTROL_DEVICE_NODES if os.path.exists(p)) if gpus else ()
    return NodeDevices(gpus=tuple(gpus), pretend=pretend, control_paths=control)


def host_node_devices(node_resources: Mapping[str, str], discovery: GpuDiscovery | None = None) -> NodeDevices:
    """The devices of the node that is this machine: discovery (unless ``node_resources`` pretends GPUs,
    when discovering would only be thrown away), then the pretend devices."""
    gpus: list[Gpu] = []
    if GPU_RESOURCE not in node_resources:
        found = (discovery or discover_gpus)()
        gpus = visible_gpus(found, os.environ.get(CUDA_VISIBLE_DEVICES))
        if len(gpus) < len(found):
            log.info(
                "%s=%s: %d of the %d GPUs found are advertised",
                CUDA_VISIBLE_DEVICES,
                os.environ.get(CUDA_VISIBLE_DEVICES),
                len(gpus),
                len(found),
            )
        if gpus:
            log.info(
                "found %d NVIDIA GPU(s) (%s): the node advertises %s=%d",
                len(gpus),
                ", ".join(sorted({g.name for g in gpus})),
                GPU_RESOURCE,
                len(gpus),
            )
        else:
            log.info("no NVIDIA GPU found here (NVML, nvidia-smi): the node advertises no %s", GPU_RESOURCE)
    pretend = {k: v for k, v in node_resources.items() if k not in STANDARD_RESOURCES}
    if pretend:
        log.info(
            "pretend devices %s: advertised, handed out as a device plugin would, and announced to their containers "
            "(%s, event %s); nothing real is behind them",
            ",".join(f"{k}={v}" for k, v in sorted(pretend.items())),
            PRETEND_ENV,
            PRETEND_EVENT,
        )
    return node_devices(gpus, node_resources)


# ----------------------------------------------------------------------------------------------- allocation


class AdmissionError(Exception):
    """The node cannot give the pod the devices it asks for: the pod fails with ``reason`` and ``message``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class _Pool:
    """The devices of one resource: the lowest free ones are handed out first."""

    def __init__(self, resource: str, count: int, make: Callable[[int], Device]) -> None:
        self.resource = resource
        self.count = count
        self.make = make
        self._next = 0  # devices from here on were never handed out
        self._returned: list[int] = []  # a heap
        self.in_use = 0

    @property
    def free(self) -> int:
        return self.count - self.in_use

    def take(self, n: int) -> list[tuple[int, Device]]:
        assert n <= self.free
        out = []
        for _ in range(n):
            if self._returned:
                i = heapq.heappop(self._returned)
            else:
                i, self._next = self._next, self._next + 1
            out.append((i, self.make(i)))
        self.in_use += n
        return out

    def give(self, indices: Iterable[int]) -> None:
        for i in indices:
            heapq.heappush(self._returned, i)
            self.in_use -= 1


@dataclass
class Allocation:
    """The devices one container holds."""

    devices: tuple[Device, ...] = ()

    def of(self, resource: str) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.resource == resource)

    @property
    def pretend(self) -> dict[str, int]:
        return dict(Counter(d.resource for d in self.devices if d.pretend))


@dataclass
class _PodHold:
    #: by container name: what each holds (init containers share the pod's first devices)
    containers: dict[str, list[tuple[str, int, Device]]]
    init: dict[str, list[tuple[str, int, Device]]]
    #: devices only the init containers use (freed once they are done)
    init_only: list[tuple[str, int, Device]]


class DeviceManager:
    """The kubelet's device manager for one node: admission, exclusive allocation, release."""

    def __init__(self, devices: NodeDevices) -> None:
        self.node = devices
        self._pools: dict[str, _Pool] = {}
        if devices.gpus and GPU_RESOURCE not in devices.pretend:
            gpus = devices.gpus
            self._pools[GPU_RESOURCE] = _Pool(GPU_RESOURCE, len(gpus), lambda i: _gpu_device(gpus[i]))
        for name, count in devices.pretend.items():
            self._pools[name] = _Pool(name, count, functools.partial(_pretend_device, name))
        self._pods: dict[str, _PodHold] = {}

    def free(self, resource: str) -> int:
        pool = self._pools.get(resource)
        return pool.free if pool is not None else 0

    def _wants(self, container: Obj) -> dict[str, int]:
        resources = container.get("resources") or {}
        asked = dict(resources.get("requests") or {})
        asked.update(resources.get("limits") or {})  # the API server makes them equal; limits are the promise
        out: dict[str, int] = {}
        for name, value in asked.items():
            if name in self._pools:
                try:
                    n = amount(value)
                except ValueError as e:
                    raise AdmissionError(
                        "UnexpectedAdmissionError", f"container {container.get('name')}: {e}"
                    ) from None
                if n:
                    out[name] = n
        return out

    def admit(self, pod: Obj) -> None:
        """Reserve the pod's devices (all or nothing); :class:`AdmissionError` when the node has too few."""
        uid = str(pod["metadata"]["uid"])
        if uid in self._pods:
            return
        spec = pod.get("spec") or {}
        app = {str(c["name"]): self._wants(c) for c in spec.get("containers") or []}
        init = {str(c["name"]): self._wants(c) for c in spec.get("initContainers") or []}
        need: Counter[str] = Counter()
        for wants in app.values():
            need.update(wants)
        for wants in init.values():
            for name, n in wants.items():
                need[name] = max(need[name], n)
        for name, n in sorted(need.items()):
            pool = self._pools[name]
            if n > pool.free:
                raise AdmissionError(
                    f"OutOf{name}",
                    f"Pod was rejected: Node didn't have enough resource: {name}, requested: {n}, "
                    f"used: {pool.in_use}, capacity: {pool.count}",
                )
        taken = {name: [(name, i, d) for i, d in self._pools[name].take(n)] for name, n in need.items()}
        hold = _PodHold(containers={}, init={}, init_only=[])
        cursor: Counter[str] = Counter()
        for cname, wants in app.items():
            held: list[tuple[str, int, Device]] = []
            for name, n in wants.items():
                held += taken[name][cursor[name] : cursor[name] + n]
                cursor[name] += n
            hold.containers[cname] = held
        for name, devices in taken.items():
            hold.init_only += devices[cursor[name] :]
        for cname, wants in init.items():
            hold.init[cname] = [d for name, n in wants.items() for d in taken[name][:n]]
        self._pods[uid] = hold

    def allocation(self, uid: str, container: str, *, init: bool = False) -> Allocation:
        hold = self._pods.get(uid)
        if hold is None:
            return Allocation()
        held = (hold.init if init else hold.containers).get(container) or []
        return Allocation(tuple(d for _, _, d in held))

    def init_done(self, uid: str) -> None:
        """The pod's init containers are done: the devices only they used are free again."""
        hold = self._pods.get(uid)
        if hold is not None:
            self._give(hold.init_only)
            hold.init_only = []
            hold.init = {}

    def release(self, uid: str, container: str | None = None) -> None:
        """Free what ``container`` holds (it ended for good), or everything the pod holds."""
        hold = self._pods.get(uid)
        if hold is None:
            return
        if container is not None:
            self._give(hold.containers.pop(container, []))
            return
        del self._pods[uid]
        self._give(hold.init_only)
        for held in hold.containers.values():
            self._give(held)

    def _give(self, held: Sequence[tuple[str, int, Device]]) -> None:
        by_pool: dict[str, list[int]] = {}
        for name, i, _ in held:
            by_pool.setdefault(name, []).append(i)
        for name, indices in by_pool.items():
            self._pools[name].give(indices)

    def env(self, allocation: Allocation) -> dict[str, str]:
        """The environment the device plugins give a container with ``allocation`` on this node."""
        out: dict[str, str] = {}
        if self.node.has_gpus:
            gpus = ",".join(d.id for d in allocation.of(GPU_RESOURCE))
            out[NVIDIA_VISIBLE_DEVICES] = gpus or "void"
            out[CUDA_VISIBLE_DEVICES] = gpus
        pretend = allocation.pretend
        if pretend:
            out[PRETEND_ENV] = ",".join(f"{name}={n}" for name, n in pretend.items())
        return out

    def device_paths(self, allocation: Allocation) -> list[str]:
        """The device nodes a container with ``allocation`` gets (real GPUs only)."""
        own = [p for d in allocation.devices for p in d.paths]
        return [*self.node.control_paths, *own] if own else []


def _gpu_device(gpu: Gpu) -> Device:
    paths = (f"/dev/nvidia{gpu.minor}",) if gpu.minor is not None else ()
    return Device(GPU_RESOURCE, gpu.uuid, paths=paths)


def _pretend_device(resource: str, i: int) -> Device:
    if resource == GPU_RESOURCE:
        return Device(resource, f"{PRETEND_GPU_PREFIX}{i}", pretend=True)
    return Device(resource, f"{resource.rsplit('/', 1)[-1]}-pretend-{i}", pretend=True)


def pretend_message(container: str, allocation: Allocation) -> str:
    """The event message that tells a pod one of its containers was given pretend devices."""
    given = ", ".join(f"{n} {name}" for name, n in allocation.pretend.items())
    return (
        f"container {container} was given pretend devices ({given}): the node has none of them "
        f"(local up --node-resources), so it runs on the CPU; {PRETEND_ENV} says so in its environment"
    )
