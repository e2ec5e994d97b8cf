"""GPUs and pretend devices through ``kubedl-py local up``, as a user starts it, on both control planes.

- Pretend devices, on any machine: ``local up --node-resources nvidia.com/gpu=16,rdma/hca=2`` (process
  runtime) runs a job shaped like the seed job (a Master and a Worker, each asking ``nvidia.com/gpu: 8`` and
  ``rdma/hca: 1``): its pods run on the CPU, each with eight pretend GPUs of its own and told so (an event,
  ``KUBEDL_PRETEND_DEVICES``); with torch, ``examples/pytorch-gpu.yaml`` then trains on the CPU over gloo
  (on the embedded control plane: the program does the same on both, and CI's time is precious).
  ``local up --runtime simulated --nodes 2 --node-resources nvidia.com/gpu=8,rdma/hca=1`` schedules the seed
  job's pods Running on two nodes (embedded; ``tests/integration/test_gpus.py`` does it on both).
- A real GPU, where there is one: ``CUDA_VISIBLE_DEVICES=<one GPU> local up`` (so the node has exactly one),
  ``examples/pytorch-gpu.yaml`` trains on ``cuda`` over NCCL with torchrun, and a second job asking for a GPU
  stays Pending (``Insufficient nvidia.com/gpu``) until the first ends, then trains on the same GPU. Skipped,
  saying why, when no GPU is found (NVML and ``nvidia-smi``) or torch cannot use CUDA.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import REPO
from kubedl_local.node.devices import discover_gpus
from tests.tiers import EMBEDDED, TIERS, require_tier

KUBECTL = str(Path(sys.executable).parent / "kubectl")
HAS_TORCH = importlib.util.find_spec("torch") is not None
#: prints what the device plugins gave the process, and exits 0
SHOW_DEVICES = (
    "import os; print(' '.join(f'{n}={os.environ.get(n, \"<unset>\")}' for n in "
    "('CUDA_VISIBLE_DEVICES', 'NVIDIA_VISIBLE_DEVICES', 'KUBEDL_PRETEND_DEVICES')), flush=True)"
)
SEED_LIMITS = {"nvidia.com/gpu": 8, "rdma/hca": 1}


@pytest.fixture(params=TIERS)
def control_plane(request: pytest.FixtureRequest) -> str:
    chosen: str = request.param
    require_tier(chosen)
    return chosen


@contextmanager
def local_up(control_plane: str, *args: str, env: dict[str, str] | None = None) -> Iterator[Path]:
    """``kubedl-py local up`` in a subprocess, from this checkout; yields its kubeconfig once it is ready."""
    with tempfile.TemporaryDirectory(prefix="kubedl-e2e-gpu-") as tmp:
        kubeconfig, log_path = Path(tmp) / "kubeconfig", Path(tmp) / "cluster.log"
        command = [sys.executable, "-m", "kubedl_py.cli", "local", "up", "--control-plane", control_plane]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*command, "--kubeconfig", str(kubeconfig), *args],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        try:
            deadline = time.monotonic() + (60 if control_plane == EMBEDDED else 300)
            while not kubeconfig.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"local up did not start:\n{log_path.read_text()}")
                time.sleep(0.05)
            yield kubeconfig
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode != 0:
                print(log_path.read_text(), file=sys.stderr)
            assert proc.returncode == 0, f"local up exited {proc.returncode}"


def cli(kubeconfig: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubedl_py.cli", *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def kubectl_json(kubeconfig: Path, *args: str) -> Any:
    run = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(run.stdout)


def job_pods(kubeconfig: Path, job: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = kubectl_json(kubeconfig, "get", "pods", "-l", f"training.kubedl.io/job-name={job}")[
        "items"
    ]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def pod_log(kubeconfig: Path, pod: str) -> str:
    run = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), "logs", pod], capture_output=True, text=True, timeout=60, check=True
    )
    return run.stdout


def eventually(probe: Any, *, within: float = 120, what: str = "condition") -> Any:
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {within}s waiting for {what}; last: {last!r}")


def submit(kubeconfig: Path, job: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / f"{job['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(job))
    run = cli(kubeconfig, "submit", str(path))
    assert run.returncode == 0, (run.stdout, run.stderr)


def seed_job(name: str, command: list[str], *, workers: int = 1) -> dict[str, Any]:
    """A PyTorchJob shaped like the seed job: every pod asks for 8 GPUs and an RDMA device."""

    def replicas(n: int) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
            "command": command,
            "resources": {"limits": dict(SEED_LIMITS)},
        }
        return {"replicas": n, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": {"kubedl.io/network-mode": "host"}},
        "spec": {"pytorchReplicaSpecs": {"Master": replicas(1), "Worker": replicas(workers)}},
    }


def job_condition(kubeconfig: Path, job: str, *types: str) -> bool:
    """Whether the job's status has one of the conditions ``types`` True."""
    status = kubectl_json(kubeconfig, "get", "pytorchjob", job).get("status") or {}
    return any(c["type"] in types and c["status"] == "True" for c in status.get("conditions") or [])


def printed(kubeconfig: Path, pod: str) -> dict[str, str]:
    line = pod_log(kubeconfig, pod).splitlines()[0]
    return dict(item.split("=", 1) for item in line.split(" "))


def test_the_readmes_rdma_rehearsal_runs_on_pretend_gpus_and_rdma(control_plane: str, tmp_path: Path) -> None:
    with local_up(control_plane, "--node-resources", "nvidia.com/gpu=16,rdma/hca=2") as kubeconfig:
        node = kubectl_json(kubeconfig, "get", "node", "local-node-0")
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "16"
        assert node["status"]["allocatable"]["rdma/hca"] == "2"
        # the README's rehearsal example, as it is (its program prints what SHOW_DEVICES prints)
        example = yaml.safe_load((REPO / "examples" / "pytorch-rdma-rehearsal.yaml").read_text())
        for spec in example["spec"]["pytorchReplicaSpecs"].values():
            container = spec["template"]["spec"]["containers"][0]
            assert container["command"] == ["python", "-c", SHOW_DEVICES]
            assert container["resources"]["limits"] == SEED_LIMITS
        run = cli(
            kubeconfig, "submit", str(REPO / "examples" / "pytorch-rdma-rehearsal.yaml"), "--wait", "--timeout", "120"
        )
        assert run.returncode == 0, (run.stdout, run.stderr, cli(kubeconfig, "describe", "rdma-rehearsal").stdout)
        name = example["metadata"]["name"]
        master, worker = (printed(kubeconfig, p["metadata"]["name"]) for p in job_pods(kubeconfig, name))
        for seen in (master, worker):
            gpus = seen["CUDA_VISIBLE_DEVICES"].split(",")
            assert len(gpus) == 8 and all(g.startswith("GPU-pretend-") for g in gpus), seen
            assert seen["NVIDIA_VISIBLE_DEVICES"] == seen["CUDA_VISIBLE_DEVICES"]
            assert seen["KUBEDL_PRETEND_DEVICES"] == "nvidia.com/gpu=8,rdma/hca=1"
        assert set(master["CUDA_VISIBLE_DEVICES"].split(",")).isdisjoint(worker["CUDA_VISIBLE_DEVICES"].split(","))
        events = kubectl_json(kubeconfig, "get", "events", "--field-selector", "reason=PretendDevices")["items"]
        told = {e["involvedObject"]["name"] for e in events}
        assert told == {f"{name}-master-0", f"{name}-worker-0"}, events

        if not HAS_TORCH or control_plane != EMBEDDED:
            return  # the rest trains with torch (`make demo` installs it), once: the program is the same on both
        run = cli(kubeconfig, "submit", str(REPO / "examples" / "pytorch-gpu.yaml"), "--follow", "--timeout", "180")
        assert run.returncode == 0, (run.stdout, run.stderr)
        assert "device cpu (pretend devices: nvidia.com/gpu=1) backend gloo" in run.stdout, run.stdout
        assert "trained 100 steps on cpu over gloo" in run.stdout, run.stdout


def test_the_seed_job_schedules_on_simulated_nodes_with_pretend_gpus(tmp_path: Path) -> None:
    # The embedded control plane only: the same options reach the real one's simulated nodes, and
    # tests/integration/test_gpus.py schedules this job there with the real kube-scheduler.
    require_tier(EMBEDDED)
    control_plane = EMBEDDED
    args = ("--runtime", "simulated", "--nodes", "2", "--node-resources", "nvidia.com/gpu=8,rdma/hca=1")
    with local_up(control_plane, *args) as kubeconfig:
        submit(kubeconfig, seed_job("seed", ["torchrun", "/workspace/train.py"]), tmp_path)

        def both_running() -> list[dict[str, Any]] | None:
            pods = job_pods(kubeconfig, "seed")
            return pods if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) else None

        pods = eventually(both_running, what="both pods Running")
        assert {p["spec"]["nodeName"] for p in pods} == {"local-node-0", "local-node-1"}  # 8 GPUs fit once a node
        eventually(lambda: job_condition(kubeconfig, "seed", "Running"), what="the job Running")


def _gpu_or_skip() -> str:
    """The UUID of this machine's first GPU, or skip saying why there is none to use."""
    gpus = discover_gpus()
    if not gpus:
        pytest.skip(
            "no NVIDIA GPU found on this machine: NVML (nvidia-ml-py) and nvidia-smi report none (no GPU or no "
            "driver); this scenario needs a GPU machine"
        )
    if not HAS_TORCH:
        pytest.skip("torch is not installed (`make demo` installs it)")
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available(), torch.version.cuda)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if not probe.stdout.startswith("True"):
        pytest.skip(f"{len(gpus)} GPU(s) found, but this torch cannot use CUDA: {probe.stdout.strip() or probe.stderr}")
    return gpus[0].uuid


def gpu_job(name: str, *, hold: float) -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load((REPO / "examples" / "pytorch-gpu.yaml").read_text())
    job["metadata"]["name"] = name
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["command"] = ["torchrun", "examples/train_gpu.py", "--steps", "300", "--hold", str(hold)]
    return job


def test_a_gpu_job_trains_on_cuda_and_a_second_one_waits_for_the_gpu(control_plane: str, tmp_path: Path) -> None:
    gpu = _gpu_or_skip()
    with local_up(control_plane, env={"CUDA_VISIBLE_DEVICES": gpu}) as kubeconfig:
        node = kubectl_json(kubeconfig, "get", "node", "local-node-0")
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
        print("node labels:", {k: v for k, v in node["metadata"]["labels"].items() if k.startswith("nvidia.com/")})
        submit(kubeconfig, gpu_job("first", hold=15), tmp_path)
        assert cli(kubeconfig, "wait", "first", "--for", "Running", "--timeout", "120").returncode == 0
        submit(kubeconfig, gpu_job("second", hold=0), tmp_path)

        def pending_for_the_gpu() -> str | None:
            pods = job_pods(kubeconfig, "second")
            conditions = (pods[0].get("status") or {}).get("conditions") or [] if pods else []
            scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
            return scheduled.get("message") if scheduled.get("reason") == "Unschedulable" else None

        message = eventually(pending_for_the_gpu, what="the second job's pod Pending for the GPU")
        assert "Insufficient nvidia.com/gpu" in message
        assert [p["status"]["phase"] for p in job_pods(kubeconfig, "first")] == ["Running"]
        print("second job's pod while the first runs:", message)

        for name in ("first", "second"):
            run = cli(kubeconfig, "wait", name, "--timeout", "300")
            assert run.returncode == 0, (run.stdout, run.stderr, cli(kubeconfig, "describe", name).stdout)
            (pod,) = job_pods(kubeconfig, name)
            text = pod_log(kubeconfig, pod["metadata"]["name"])
            print(f"{name}:", text.strip())
            assert "device cuda:0" in text and "backend nccl" in text, text
            assert f"CUDA_VISIBLE_DEVICES={gpu}" in text, text
            assert "trained 300 steps on cuda over nccl" in text, text
        first_end = job_pods(kubeconfig, "first")[0]["status"]["containerStatuses"][0]["state"]["terminated"]
        second_start = job_pods(kubeconfig, "second")[0]["status"]["containerStatuses"][0]["state"]["terminated"]
        assert second_start["startedAt"] >= first_end["finishedAt"]  # it waited for the GPU
