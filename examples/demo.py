"""`make demo`: a real distributed PyTorch job in host-network mode on the embedded cluster, end to end.

What it does, with nothing but this repository and its venv:

1. starts ``kubedl-py local up`` (process runtime, 1 node, the controller inside) in a subprocess;
2. submits ``examples/pytorch-ddp-hostnet.yaml`` through the SDK: Master + 1 Worker training a small model
   with DistributedDataParallel over gloo on CPU (``examples/train_ddp.py``);
3. streams the training logs (the loss falling), and shows the pods with their host ports and the Services
   whose targetPort is that host port, as the controller set them up;
4. waits for the job to succeed, prints a summary, and stops the cluster (no process is left behind).

Exit 0 on success; 1 when the job fails or times out (the cluster's log is printed then).

``--control-plane kubernetes`` (``make demo CONTROL_PLANE=kubernetes``) runs the same job on the real
Kubernetes components instead (built from their Go modules on first use; the controller then runs under the
RBAC rendered in deploy/).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kubedl_py.sdk import AsyncTrainingClient, JobDescription, LogLine, TrainingError, job_state

REPO = Path(__file__).resolve().parent.parent
JOB_FILE = REPO / "examples" / "pytorch-ddp-hostnet.yaml"
JOB = "pytorch-ddp-demo"
LOSS = re.compile(r"\[rank 0\] step (\d+)/\d+ loss ([0-9.]+)")
TIMEOUT = 150.0


def start_cluster(workdir: Path, control_plane: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    kubeconfig = workdir / "kubeconfig"
    log_path = workdir / "cluster.log"
    argv = [sys.executable, "-m", "kubedl_py.cli", "local", "up", "--kubeconfig", str(kubeconfig)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*argv, "--control-plane", control_plane],
            cwd=REPO,  # the job's command is relative to the repository root
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + (60 if control_plane == "embedded" else 900)  # a first build takes minutes
    while not kubeconfig.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the local cluster did not start:\n{log_path.read_text()}")
        time.sleep(0.05)
    return proc, kubeconfig, log_path


def stop_cluster(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def table(described: JobDescription) -> str:
    rows = [("POD", "PHASE", "HOST PORT", "SERVICE", "PORT -> TARGETPORT")]
    for p in described.pods:
        svc_port = "23456 -> " + str(p.target_port) if p.target_port is not None else "-"
        rows.append((p.name, p.phase, str(p.host_port or "-"), p.service or "-", svc_port))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)


async def run(kubeconfig: Path) -> int:
    losses: list[tuple[int, float]] = []
    shown: list[JobDescription] = []
    async with AsyncTrainingClient(kubeconfig=kubeconfig) as client:
        # `local up` writes the kubeconfig only once the CRDs are served and the controller runs.
        await client.submit(str(JOB_FILE))
        print(f"submitted PyTorchJob default/{JOB} (Master + 1 Worker, kubedl.io/network-mode: host)\n", flush=True)

        async def follow() -> None:
            async for line in client.stream_logs(JOB, follow=True):
                print(f"  {line}", flush=True)
                _record_loss(line, losses)

        async def show_ports() -> None:
            while True:
                described = await client.describe(JOB)
                if len(described.pods) == 2 and all(p.phase == "Running" and p.target_port for p in described.pods):
                    shown.append(described)
                    print("\npods on host ports, reached through ClusterIP Services:", flush=True)
                    print(table(described) + "\n", flush=True)
                    return
                await asyncio.sleep(0.2)

        streamer = asyncio.create_task(follow())
        shower = asyncio.create_task(show_ports())
        try:
            job = await client.wait(JOB, timeout=TIMEOUT)
        finally:
            shower.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(streamer, 10)
        final = await client.describe(JOB)
    state = job_state(job)
    print(f"job {JOB}: {state}")
    if losses:
        print(f"loss: {losses[0][1]:.4f} at step {losses[0][0]} -> {losses[-1][1]:.4f} at step {losses[-1][0]}")
    for p in (shown[0] if shown else final).pods:
        if p.service is None:  # only the replicas their peers dial get a Service (the Master's, for DDP)
            print(f"port: {p.name} listened on host port {p.host_port}; no Service (no peer dials it)")
        else:
            print(f"port: {p.name} listened on host port {p.host_port}; Service {p.service}:23456 -> {p.target_port}")
    return 0 if state == "Succeeded" else 1


def _record_loss(line: LogLine, losses: list[tuple[int, float]]) -> None:
    m = LOSS.search(line.text)
    if m:
        losses.append((int(m.group(1)), float(m.group(2))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--control-plane", choices=["embedded", "kubernetes"], default="embedded")
    control_plane = parser.parse_args().control_plane
    started = time.monotonic()
    where = "the embedded cluster" if control_plane == "embedded" else "a real Kubernetes control plane"
    print(f"kubedl-py demo: a distributed PyTorch job in host-network mode on {where}\n")
    with tempfile.TemporaryDirectory(prefix="kubedl-demo-") as tmp:
        proc, kubeconfig, log_path = start_cluster(Path(tmp), control_plane)
        print(
            f"{control_plane} cluster up (process runtime, controller beside it) in {time.monotonic() - started:.1f}s"
        )
        code = 1
        try:
            code = asyncio.run(run(kubeconfig))
        except (TrainingError, RuntimeError) as exc:
            print(f"demo failed: {exc}", file=sys.stderr)
        finally:
            stop_cluster(proc)
        if code != 0:
            print(f"--- cluster log ---\n{log_path.read_text()}", file=sys.stderr)
    print(f"wall time: {time.monotonic() - started:.1f}s (cluster started, job run, cluster stopped)")
    return code


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
