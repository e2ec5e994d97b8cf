"""MPIJob for real: Debian's Open MPI and mpi4py, ranks started over SSH on the Workers, host-network mode.

``mpirun`` on the launcher reads the hostfile (the Workers' Service names) and starts one rank per Worker
over SSH, through each Worker's Service on port 22 to its sshd on a random host port; the ranks allreduce
and rank 0 checks the sum (``examples/mpi_allreduce.py``). Killing a Worker's sshd (SIGKILL, exit 137)
under ``restartPolicy: Never`` fails the job, naming that Worker, as the policy says.

Runs where the job's pods are local processes (the embedded and the real control plane, with the controller
beside them or installed in-cluster) and Open MPI, mpi4py and sshd are installed (`.ci/run` installs the
Debian packages ``openmpi-bin python3-mpi4py openssh-server``).
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import REPO, Target
from e2e.test_pytorch import PID, eventually, log_of
from kubedl_py import TrainingClient
from kubedl_py.sdk import job_state

# Debian's interpreter, which has Debian's mpi4py (the venv's Python does not).
SYSTEM_PYTHON = "/usr/bin/python3"
RANK = re.compile(r"rank (\d+)/(\d+) pid=\d+ host=\S+ started over ssh to port (\d+)")


@pytest.fixture
def mpi_target(target: Target) -> Target:
    if not target.local:
        pytest.skip(f"{target.name}: the MPI scenario runs Debian's Open MPI as local processes")
    missing = [tool for tool in ("mpirun", "/usr/sbin/sshd", SYSTEM_PYTHON) if shutil.which(tool) is None]
    if missing or not Path("/usr/lib/python3/dist-packages/mpi4py").is_dir():
        pytest.skip(f"needs openmpi-bin, python3-mpi4py and openssh-server (missing: {missing or ['mpi4py']})")
    return target


@pytest.fixture
def client(target: Target) -> Iterator[TrainingClient]:
    with TrainingClient(kubeconfig=target.kubeconfig) as c:
        yield c


def mpi_job(name: str, workers: int, program_args: list[str]) -> dict[str, Any]:
    launcher = {
        "name": "mpi",
        "image": "ignored:latest",
        "command": [
            "mpirun",
            "--allow-run-as-root",
            "-np",
            str(workers),
            SYSTEM_PYTHON,
            str(REPO / "examples" / "mpi_allreduce.py"),
            *program_args,
        ],
    }
    # $$$$ is the shell's $$ once Kubernetes has expanded $(VAR) references ($$ escapes a $).
    sshd = 'mkdir -p /run/sshd && echo "pid=$$$$" && exec /usr/sbin/sshd -De -p "$SSHD_PORT" -o PidFile=none'
    worker = {"name": "mpi", "image": "ignored:latest", "command": ["sh", "-c", sshd]}
    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "default", "annotations": {"kubedl.io/network-mode": "host"}},
        "spec": {
            "slotsPerWorker": 1,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": workers, "template": {"spec": {"containers": [worker]}}},
            },
        },
    }


def test_mpi_allreduce_over_ssh_through_the_workers_services(mpi_target: Target, client: TrainingClient) -> None:
    name = f"e2e-mpi-{uuid.uuid4().hex[:6]}"
    client.submit(mpi_job(name, 2, ["--rounds", "3"]))
    try:

        def worker_ports() -> list[int] | None:
            ports = sorted(p.host_port for p in client.describe(name).pods if "worker" in p.name and p.host_port)
            return ports if len(ports) == 2 else None

        host_ports = eventually(worker_ports, within=60, what="both workers' host ports")
        job = client.wait(name, timeout=120)
        log = client.logs(name, "launcher")
        assert job_state(job) == "Succeeded", log
        ranks = {int(rank): int(port) for rank, _, port in RANK.findall(log)}
        # Every rank was started by a Worker's sshd, reached at port 22 of its Service (the hostfile's name),
        # which forwarded to that Worker's own host port.
        assert sorted(ranks) == [0, 1] and sorted(ranks.values()) == sorted(host_ports), (log, host_ports)
        for round_, expected in enumerate((3, 5, 7)):
            assert f"round {round_}: allreduce over 2 ranks = {expected} (expected {expected})" in log, log
        assert "done: 3 rounds over 2 ranks" in log
    finally:
        client.delete(name)


def test_mpi_worker_killed_fails_the_job_under_restart_policy_never(mpi_target: Target, client: TrainingClient) -> None:
    name = f"e2e-mpi-{uuid.uuid4().hex[:6]}"
    client.submit(mpi_job(name, 2, ["--rounds", "600", "--interval", "0.1"]))
    try:
        eventually(lambda: "round 1:" in log_of(client, name, "launcher"), within=60, what="the allreduce to run")
        pid = int(PID.findall(log_of(client, name, "worker", 1))[0])
        mpi_target.kill("default", f"{name}-worker-1", "mpi", pid)
        job = client.wait(name, ("Failed",), timeout=60)
        assert job.status is not None and job.status.conditions and job.status.replica_statuses
        failed = next(c for c in job.status.conditions if c.type == "Failed")
        assert failed.reason == "ReplicaFailed" and "Worker 1 exited with code 137" in (failed.message or ""), failed
        assert (job.status.replica_statuses["Worker"].failed or 0) >= 1
    finally:
        client.delete(name)
