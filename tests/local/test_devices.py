"""GPUs and other devices on a local node, without a GPU: discovery from fake sources (a fake ``nvidia-smi`` on
PATH, a fake NVML binding), the feature-discovery labels, ``--node-resources``, and the device manager's
exclusive allocation, release and refusals. The same pieces on a running node, over HTTP on both control
planes, are in ``test_gpu_node.py``; a real GPU in ``e2e/test_gpu.py``."""

from __future__ import annotations

import stat
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from kubedl_local.image import Engine
from kubedl_local.node import devices as d
from kubedl_local.node.containers import ImageConfig, create_args
from kubedl_local.node.process import PodRef, PodSandbox

SMI_OUTPUT = (
    "0, GPU-1a2b3c4d-0000-1111-2222-333344445555, NVIDIA H100 80GB HBM3, 81559, 00000000:17:00.0\n"
    "1, GPU-9f8e7d6c-0000-1111-2222-333344445555, NVIDIA H100 80GB HBM3, 81559, 00000000:2A:00.0\n"
)
H100 = [
    d.Gpu(index=0, uuid="GPU-aaaa-0", name="NVIDIA H100 80GB HBM3", memory_mib=81559, minor=0),
    d.Gpu(index=1, uuid="GPU-bbbb-1", name="NVIDIA H100 80GB HBM3", memory_mib=81559, minor=1),
    d.Gpu(index=2, uuid="GPU-cccc-2", name="NVIDIA H100 80GB HBM3", memory_mib=81559, minor=3),
]


def _fake_nvidia_smi(tmp_path: Path, *, stdout: str = SMI_OUTPUT, code: int = 0) -> Path:
    """An ``nvidia-smi`` that records its arguments and answers as the real one does."""
    path = tmp_path / "bin" / "nvidia-smi"
    path.parent.mkdir(exist_ok=True)
    (tmp_path / "out.txt").write_text(stdout)
    path.write_text(
        f'#!/bin/sh\nPATH=/usr/bin:/bin\necho "$@" > {tmp_path}/args.txt\ncat {tmp_path}/out.txt\n'
        + (
            "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2\n"
            if code
            else ""
        )
        + f"exit {code}\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _pod(uid: str, *containers: dict[str, Any], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {"metadata": {"name": uid, "namespace": "default", "uid": uid}, "spec": spec}


def _ctr(name: str, **limits: str) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": dict(limits)}}


GPU = {"nvidia.com/gpu": "1"}


# ------------------------------------------------------------------------------------------------- discovery


def test_nvidia_smi_is_queried_and_its_rows_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = _fake_nvidia_smi(tmp_path)
    monkeypatch.setenv("PATH", str(smi.parent))
    proc = tmp_path / "proc"
    (proc / "0000:2a:00.0").mkdir(parents=True)
    (proc / "0000:2a:00.0" / "information").write_text("Model: NVIDIA H100\nDevice Minor: \t 5\nBus Type: PCIe\n")
    gpus = d.nvidia_smi_gpus()
    assert gpus is not None
    assert (tmp_path / "args.txt").read_text().split() == [
        f"--query-gpu={d.NVIDIA_SMI_QUERY}",
        "--format=csv,noheader,nounits",
    ]
    assert [(g.index, g.uuid, g.name, g.memory_mib) for g in gpus] == [
        (0, "GPU-1a2b3c4d-0000-1111-2222-333344445555", "NVIDIA H100 80GB HBM3", 81559),
        (1, "GPU-9f8e7d6c-0000-1111-2222-333344445555", "NVIDIA H100 80GB HBM3", 81559),
    ]
    # the minor number comes from the driver's /proc file of the GPU's bus (absent: unknown)
    assert [g.minor for g in d.parse_nvidia_smi(SMI_OUTPUT, proc)] == [None, 5]


def test_nvidia_smi_without_a_driver_or_not_installed_means_no_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = _fake_nvidia_smi(tmp_path, stdout="", code=9)
    monkeypatch.setenv("PATH", str(smi.parent))
    assert d.nvidia_smi_gpus() is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert d.nvidia_smi_gpus() is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the binding not installed: import fails
    started = time.monotonic()
    assert d.discover_gpus() == []
    assert time.monotonic() - started < 1.0  # no GPU, no driver: nothing is waited for


def _fake_nvml(*, init_error: Exception | None = None) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    calls: list[str] = []

    class Memory:
        total = 24 * 2**30

    def init() -> None:
        calls.append("init")
        if init_error is not None:
            raise init_error

    nvml.nvmlInit = init  # type: ignore[attr-defined]
    nvml.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetUUID = lambda h: f"GPU-uuid-{h}".encode()  # type: ignore[attr-defined]  # old bindings: bytes
    nvml.nvmlDeviceGetName = lambda h: "NVIDIA RTX A5000"  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMinorNumber = lambda h: int(h[1:]) + 2  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMemoryInfo = lambda h: Memory()  # type: ignore[attr-defined]
    nvml.calls = calls  # type: ignore[attr-defined]
    return nvml


def test_nvml_is_preferred_and_shut_down(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    nvml = _fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("PATH", str(_fake_nvidia_smi(tmp_path).parent))  # there, but NVML answered first
    gpus = d.discover_gpus()
    assert gpus == [
        d.Gpu(index=0, uuid="GPU-uuid-h0", name="NVIDIA RTX A5000", memory_mib=24576, minor=2),
        d.Gpu(index=1, uuid="GPU-uuid-h1", name="NVIDIA RTX A5000", memory_mib=24576, minor=3),
    ]
    assert nvml.calls == ["init", "shutdown"]  # type: ignore[attr-defined]
    assert not (tmp_path / "args.txt").exists()


def test_nvml_without_a_driver_falls_back_to_nvidia_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(init_error=OSError("libnvidia-ml.so.1 not found")))
    monkeypatch.setenv("PATH", str(_fake_nvidia_smi(tmp_path).parent))
    assert [g.index for g in d.discover_gpus()] == [0, 1]


def test_the_real_nvml_binding_on_a_machine_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pynvml", reason="nvidia-ml-py (the gpu extra) is not installed")
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver: the no-driver path cannot be shown here")
    assert d.nvml_gpus() is None


def test_cuda_visible_devices_of_local_up_limits_what_is_advertised(monkeypatch: pytest.MonkeyPatch) -> None:
    assert d.visible_gpus(H100, None) == H100
    assert d.visible_gpus(H100, "2,0") == [H100[2], H100[0]]
    assert d.visible_gpus(H100, "GPU-bbbb") == [H100[1]]  # a UUID or a unique prefix of one
    assert d.visible_gpus(H100, "") == []
    assert d.visible_gpus(H100, "1,7,2") == [H100[1]]  # CUDA stops at the first entry that names no GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    node = d.host_node_devices({}, lambda: list(H100))
    assert node.capacity() == {"nvidia.com/gpu": "1"}
    assert node.gpus == (H100[1],)


def test_gpu_feature_discovery_labels() -> None:
    assert d.gpu_labels(H100) == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "3",
        "nvidia.com/gpu.memory": "81559",
    }
    assert d.label_value("  Tesla V100-SXM2-16GB (rev a) ") == "Tesla-V100-SXM2-16GB-rev-a"
    assert d.gpu_labels([]) == {}


# -------------------------------------------------------------------------------------------- node resources


def test_node_resources_are_parsed() -> None:
    assert d.parse_node_resources("nvidia.com/gpu=8, rdma/hca=1") == {"nvidia.com/gpu": "8", "rdma/hca": "1"}
    assert d.parse_node_resources("cpu=4,memory=16Gi,example.com/fpga=2k") == {
        "cpu": "4",
        "memory": "16Gi",
        "example.com/fpga": "2k",
    }
    assert d.parse_node_resources("") == {}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nvidia.com/gpu", "write <resource>=<amount>"),
        ("nvidia.com/gpu=0.5", "counted in whole devices; give a whole number such as nvidia.com/gpu=1"),
        ("nvidia.com/gpu=lots", "'lots' is not a quantity"),
        ("gpu=1", "'gpu' is neither cpu, memory, pods, ephemeral-storage nor an extended resource"),
        ("Nvidia.com/gpu=1", "'Nvidia.com' is not a DNS domain"),
        ("kubernetes.io/gpu=1", "which Kubernetes reserves"),
        ("rdma/hca=1,rdma/hca=2", "rdma/hca is given twice"),
        ("rdma/hca=-1", "may not be negative"),
    ],
)
def test_bad_node_resources_are_refused_naming_the_fix(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="--node-resources") as e:
        d.parse_node_resources(text)
    assert says in str(e.value)


def test_pretend_resources_win_over_discovery() -> None:
    node = d.host_node_devices({"nvidia.com/gpu": "8", "rdma/hca": "1", "cpu": "4"}, lambda: list(H100))
    assert node.gpus == ()  # the real ones stay out of reach
    assert node.capacity() == {"nvidia.com/gpu": "8", "rdma/hca": "1"}
    assert node.labels() == {}  # a pretend GPU has no product
    found = d.host_node_devices({"rdma/hca": "2"}, lambda: list(H100))
    assert found.capacity() == {"nvidia.com/gpu": "3", "rdma/hca": "2"}
    assert found.labels()["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert not d.host_node_devices({"cpu": "4"}, lambda: [])  # nothing to hand out: no device manager


# ----------------------------------------------------------------------------------------------- allocation


def test_gpus_are_exclusive_and_freed_when_their_container_ends() -> None:
    manager = d.DeviceManager(d.node_devices(H100, {}))
    manager.admit(_pod("a", _ctr("main", **{"nvidia.com/gpu": "2"}), _ctr("side")))
    manager.admit(_pod("b", _ctr("main", **GPU)))
    a, b = manager.allocation("a", "main"), manager.allocation("b", "main")
    assert [x.id for x in a.devices] == ["GPU-aaaa-0", "GPU-bbbb-1"]
    assert [x.id for x in b.devices] == ["GPU-cccc-2"]
    assert manager.env(a) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-aaaa-0,GPU-bbbb-1",
        "CUDA_VISIBLE_DEVICES": "GPU-aaaa-0,GPU-bbbb-1",
    }
    # a container without GPUs on a GPU node sees none, as the runtime's defaults give it
    assert manager.env(manager.allocation("a", "side")) == {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CUDA_VISIBLE_DEVICES": "",
    }
    # its device nodes: the driver's control nodes present here, then its own
    assert manager.device_paths(b)[-1] == "/dev/nvidia3"
    assert manager.device_paths(manager.allocation("a", "side")) == []

    with pytest.raises(d.AdmissionError) as refused:
        manager.admit(_pod("c", _ctr("main", **GPU)))
    assert refused.value.reason == "OutOfnvidia.com/gpu"
    assert refused.value.message == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 3, capacity: 3"
    )
    manager.release("a", "main")  # its container ended for good
    assert manager.free("nvidia.com/gpu") == 2
    manager.admit(_pod("c", _ctr("main", **GPU)))
    assert [x.id for x in manager.allocation("c", "main").devices] == ["GPU-aaaa-0"]  # the lowest free one
    manager.release("b")
    manager.release("c")
    manager.release("a")  # whatever was left of it
    assert manager.free("nvidia.com/gpu") == 3


def test_a_pod_is_admitted_whole_or_not_at_all() -> None:
    manager = d.DeviceManager(d.node_devices(H100, {"rdma/hca": "1"}))
    manager.admit(_pod("a", _ctr("main", **{"rdma/hca": "1"})))
    with pytest.raises(d.AdmissionError, match="rdma/hca, requested: 1, used: 1, capacity: 1"):
        manager.admit(_pod("b", _ctr("main", **{"nvidia.com/gpu": "2", "rdma/hca": "1"})))
    assert manager.free("nvidia.com/gpu") == 3  # nothing of the refused pod was kept
    with pytest.raises(d.AdmissionError, match="requested: 4, used: 0, capacity: 3"):
        manager.admit(_pod("c", _ctr("main", **{"nvidia.com/gpu": "4"})))  # more than the node has


def test_init_containers_reuse_the_pods_devices() -> None:
    manager = d.DeviceManager(d.node_devices(H100, {}))
    init = [_ctr("prepare", **{"nvidia.com/gpu": "3"})]
    manager.admit(_pod("a", _ctr("main", **GPU), init=init))  # needs max(3, 1) = 3, not 4
    assert len(manager.allocation("a", "prepare", init=True).devices) == 3
    assert manager.allocation("a", "main").devices == manager.allocation("a", "prepare", init=True).devices[:1]
    manager.init_done("a")
    assert manager.free("nvidia.com/gpu") == 2


def test_pretend_devices_are_handed_out_and_marked() -> None:
    node = d.host_node_devices({"nvidia.com/gpu": "16", "rdma/hca": "2"}, lambda: list(H100))
    manager = d.DeviceManager(node)
    seed = {"nvidia.com/gpu": "8", "rdma/hca": "1"}
    manager.admit(_pod("master", _ctr("pytorch", **seed)))
    manager.admit(_pod("worker", _ctr("pytorch", **seed)))
    master, worker = manager.allocation("master", "pytorch"), manager.allocation("worker", "pytorch")
    env = manager.env(master)
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(f"GPU-pretend-{i}" for i in range(8))
    assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"]
    assert env["KUBEDL_PRETEND_DEVICES"] == "nvidia.com/gpu=8,rdma/hca=1"
    assert manager.env(worker)["CUDA_VISIBLE_DEVICES"] == ",".join(f"GPU-pretend-{i}" for i in range(8, 16))
    assert [x.id for x in worker.of("rdma/hca")] == ["hca-pretend-1"]
    assert manager.device_paths(master) == []  # nothing to pass through
    assert "8 nvidia.com/gpu, 1 rdma/hca" in d.pretend_message("pytorch", master)
    assert "runs on the CPU" in d.pretend_message("pytorch", master)


def test_a_node_without_devices_changes_nothing() -> None:
    manager = d.DeviceManager(d.node_devices([], {"rdma/hca": "1"}))
    manager.admit(_pod("a", _ctr("main")))
    assert manager.env(manager.allocation("a", "main")) == {}  # no GPU node: no GPU variables at all


def test_gpu_device_nodes_become_podman_devices() -> None:
    ref = PodRef(namespace="default", name="p", uid="u")
    sandbox = PodSandbox(pod=ref, host_network=True, ip="192.0.2.2", hostname="vm", hosts_file=None, interface=None)
    image = ImageConfig(ref="cuda", id="ab" * 32, user="", entrypoint=("python",), cmd=())
    argv = create_args(
        Engine("podman"),
        name="k8s_main_p",
        pod=_pod("u", _ctr("main", **GPU)),
        container=_ctr("main", **GPU),
        image=image,
        env={},
        mounts=(),
        sandbox=sandbox,
        devices=["/dev/nvidiactl", "/dev/nvidia3"],
    )
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--device"] == ["/dev/nvidiactl", "/dev/nvidia3"]


def test_local_up_refuses_bad_node_resources_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from kubedl_py.cli.main import main

    argv = ["local", "up", "--kubeconfig", str(tmp_path / "kc"), "--node-resources", "nvidia.com/gpu=0.5"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "kubedl-py: --node-resources 'nvidia.com/gpu=0.5': nvidia.com/gpu is an extended resource, counted in "
        "whole devices; give a whole number such as nvidia.com/gpu=1"
    )
    assert not (tmp_path / "kc").exists()  # nothing was started


def test_the_log_says_what_was_found_and_what_is_pretended(caplog: pytest.LogCaptureFixture) -> None:
    from kubedl_local.node.devices import host_node_devices

    with caplog.at_level("INFO", logger="kubedl_local.node.devices"):
        host_node_devices({"rdma/hca": "1", "cpu": "8"}, lambda: [])
    said = " | ".join(r.getMessage() for r in caplog.records)
    assert "no NVIDIA GPU found here" in said, said
    assert "pretend devices rdma/hca=1: advertised" in said and "cpu" not in said.split("pretend devices")[1], said
