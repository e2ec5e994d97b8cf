"""MPIJob for real: Debian's Open MPI and mpi4py, ranks started over SSH on the Workers, host-network mode; and
the Training Operator v1's kubeflow.org MPIJob, whose command-less Workers sleep while the launcher's mpirun
starts the ranks with ``kubectl exec`` (its ``kubexec.sh``), under the launcher's own least RBAC.

``mpirun`` on the launcher reads the hostfile (the Workers' Service names) and starts one rank per Worker
over SSH, through each Worker's Service on port 22 to its sshd on a random host port; the ranks allreduce
and rank 0 checks the sum (``examples/mpi_allreduce.py``). Killing a Worker's sshd (SIGKILL, exit 137)
under ``restartPolicy: Never`` fails the job, naming that Worker, as the policy says.

Runs where the job's pods are local processes (the embedded and the real control plane, with the controller
beside them or installed in-cluster) and Open MPI, mpi4py and sshd are installed (`.ci/run` installs the
Debian packages ``openmpi-bin python3-mpi4py openssh-server``).
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
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


def kubectl(target: Target, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
    return subprocess.run(
        [binary, "--kubeconfig", str(target.kubeconfig), "-n", "default", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def kubeflow_mpijob(name: str, workers: int) -> dict[str, Any]:
    """The upstream v1 example's shape: Workers with an image and no command (``horovod/horovod:0.28.1``)."""
    launcher = {
        "name": "mpi",
        "image": "horovod/horovod:0.28.1",
        "command": [
            "mpirun",
            "--allow-run-as-root",
            "-np",
            str(workers),
            SYSTEM_PYTHON,
            str(REPO / "examples" / "mpi_allreduce.py"),
        ],
    }
    worker = {"name": "mpi", "image": "horovod/horovod:0.28.1"}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": workers, "template": {"spec": {"containers": [worker]}}},
            },
        },
    }


def test_a_kubeflow_org_mpijob_with_command_less_workers_runs_mpirun_over_kubectl_exec(mpi_target: Target) -> None:
    if kubectl(mpi_target, "get", "crd", "mpijobs.kubeflow.org").returncode != 0:
        pytest.skip(f"{mpi_target.name}: the controller does not serve kubeflow.org here")
    name = f"e2e-kf-mpi-{uuid.uuid4().hex[:6]}"
    applied = kubectl(mpi_target, "apply", "-f", "-", stdin=json.dumps(kubeflow_mpijob(name, 2)))
    assert applied.returncode == 0, applied.stderr
    try:

        def finished() -> dict[str, Any] | None:
            got = kubectl(mpi_target, "get", "mpijobs.kubeflow.org", name, "-o", "json")
            job: dict[str, Any] = json.loads(got.stdout) if got.returncode == 0 else {}
            conditions = (job.get("status") or {}).get("conditions") or []
            done = conditions and conditions[-1]["type"] in ("Succeeded", "Failed")
            return job if done else None

        job = eventually(finished, within=120, what=f"{name} finished")
        log = kubectl(mpi_target, "logs", f"{name}-launcher-0", "-c", "mpi").stdout
        assert job["status"]["conditions"][-1]["type"] == "Succeeded", log
        for round_, expected in enumerate((3, 5, 7)):
            assert f"round {round_}: allreduce over 2 ranks = {expected} (expected {expected})" in log, log
        # The ranks ran in the Workers, started by kubectl exec (no sshd anywhere), which only slept before.
        hosts = sorted(set(re.findall(r"rank \d+/2 pid=\d+ host=(\S+)", log)))
        assert hosts == [f"{name}-worker-0", f"{name}-worker-1"], log
        worker = json.loads(kubectl(mpi_target, "get", "pod", f"{name}-worker-0", "-o", "json").stdout or "{}")
        if worker:  # (cleanPodPolicy Running deletes the sleeping Workers once the launcher succeeded)
            assert worker["spec"]["containers"][0]["command"] == ["sleep"]
        # The launcher's least RBAC: its own ServiceAccount may exec into the job's Workers, and nowhere else.
        account = f"system:serviceaccount:default:{name}-launcher"
        can = kubectl(
            mpi_target, "auth", "can-i", "create", f"pods/{name}-worker-1", "--subresource=exec", f"--as={account}"
        )
        cannot = kubectl(
            mpi_target, "auth", "can-i", "create", f"pods/{name}-launcher-0", "--subresource=exec", f"--as={account}"
        )
        if "embedded" not in mpi_target.name:  # the embedded server authorizes everyone (docs/local-cluster.md)
            assert can.stdout.strip() == "yes" and cannot.stdout.strip() == "no", (can, cannot)
    finally:
        kubectl(mpi_target, "delete", "mpijobs.kubeflow.org", name, "--wait=false")


def test_the_real_kubeflow_sdk_runs_the_upstream_mpijob_to_success(mpi_target: Target) -> None:
    """The same job built and driven with the Training Operator's own SDK (``kubeflow-training`` 1.9), as its
    SDK end-to-end test does (image replaced by the local program)."""
    if kubectl(mpi_target, "get", "crd", "mpijobs.kubeflow.org").returncode != 0:
        pytest.skip(f"{mpi_target.name}: the controller does not serve kubeflow.org here")
    try:
        kf = importlib.import_module("kubeflow.training")
    except ImportError as exc:
        pytest.skip(f"the Kubeflow training SDK is not installed (pip install kubeflow-training): {exc!r}")
    except FileNotFoundError as exc:  # tests/sdk/kubeflow_script.py says why and how to clean the host
        pytest.skip(f"the Kubeflow training SDK cannot be imported on this host: {exc!r}")
    from kubernetes.client import V1Container, V1ObjectMeta, V1PodSpec, V1PodTemplateSpec

    name = f"e2e-sdk-mpi-{uuid.uuid4().hex[:6]}"
    program = [SYSTEM_PYTHON, str(REPO / "examples" / "mpi_allreduce.py")]
    launcher = V1Container(
        name="mpi", image="horovod/horovod:0.28.1", command=["mpirun", "--allow-run-as-root", "-np", "2", *program]
    )
    worker = V1Container(name="mpi", image="horovod/horovod:0.28.1")
    job = kf.KubeflowOrgV1MPIJob(
        api_version="kubeflow.org/v1",
        kind="MPIJob",
        metadata=V1ObjectMeta(name=name, namespace="default"),
        spec=kf.KubeflowOrgV1MPIJobSpec(
            slots_per_worker=1,
            run_policy=kf.KubeflowOrgV1RunPolicy(clean_pod_policy="Running"),
            mpi_replica_specs={
                "Launcher": kf.KubeflowOrgV1ReplicaSpec(
                    replicas=1, template=V1PodTemplateSpec(spec=V1PodSpec(containers=[launcher]))
                ),
                "Worker": kf.KubeflowOrgV1ReplicaSpec(
                    replicas=2, template=V1PodTemplateSpec(spec=V1PodSpec(containers=[worker]))
                ),
            },
        ),
    )
    client = kf.TrainingClient(config_file=str(mpi_target.kubeconfig), namespace="default")
    client.create_job(job)
    try:
        client.wait_for_job_conditions(name, job_kind="MPIJob", timeout=120, polling_interval=1)
        log = kubectl(mpi_target, "logs", f"{name}-launcher-0", "-c", "mpi").stdout
        assert client.is_job_succeeded(name, job_kind="MPIJob"), log
        assert "done: 3 rounds over 2 ranks" in log, log
        conditions = [c.type for c in client.get_job_conditions(name, job_kind="MPIJob")]
        assert conditions[0] == "Created" and conditions[-1] == "Succeeded", conditions
    finally:
        client.delete_job(name, job_kind="MPIJob")
