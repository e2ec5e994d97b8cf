"""XGBoostJob and JAXJob for real, in host-network mode: distributed work checked, then a worker killed.

- XGBoostJob (``examples/xgboost_dist.py``): the Master hosts the Rabit tracker on its own host port and
  trains too; the Workers reach the tracker through the Master's Service. Every rank must end with rank 0's
  model and a training error that fell.
- JAXJob (``examples/jax_dist.py``): worker 0 hosts the coordinator; ``jax.distributed.initialize`` on every
  worker, then a sum across the processes over gloo, checked on each.

- PaddleJob (``examples/paddle_dist.py`` under ``paddle.distributed.launch``): worker 0's launcher hosts the
  rendezvous at its pod IP and host port; a CPU all-reduce over gloo, checked on each trainer.

Then one worker of each (Paddle: its launcher) is SIGKILLed (exit 137) under ``restartPolicy: Never``: the
job fails, naming that replica, as the policy says. Needs the ``kinds`` extra (``make e2e`` installs it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import REPO, Target
from e2e.test_pytorch import PID, eventually, log_of
from kubedl_py import TrainingClient
from kubedl_py.sdk import job_state
from kubedl_py.sdk.errors import JobNotFoundError


@dataclass(frozen=True)
class Kind:
    kind: str
    module: str  # the framework, importable where the job's processes run
    program: str
    container: str
    specs_field: str
    replicas: dict[str, int]
    #: what every replica's log ends with on success, by replica type and index
    done: str
    #: the log line a replica prints once the distributed work is done (it then holds, to be killed)
    worked: str
    killed: tuple[str, int]
    #: a module run with ``python -m`` that starts the program (Paddle's launcher); its pid is the one killed
    launcher: tuple[str, ...] = ()

    def container_spec(self, target: Target, name: str, args: list[str]) -> dict[str, Any]:
        if not self.launcher:
            return target.container(self.container, self.program, args)
        program = str(REPO / "examples" / self.program)
        launch = [sys.executable, "-m", *self.launcher, "--log_dir", f"/tmp/kubedl-e2e-{name}/$(POD_NAME)"]
        # The launcher's pid is printed ($$$$: Kubernetes turns $$ into $), then it takes the shell's place.
        script = 'echo "pid=$$$$"; exec "$@"'
        return {
            "name": self.container,
            "image": "ignored:latest",
            "command": ["sh", "-c", script, "--", *launch, program, *args],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        }

    def job(self, target: Target, name: str, args: list[str]) -> dict[str, Any]:
        specs = {
            rtype: {
                "replicas": n,
                # Never: the kill scenario checks that a dead worker fails the job.
                "restartPolicy": "Never",
                "template": {"spec": {"containers": [self.container_spec(target, name, args)]}},
            }
            for rtype, n in self.replicas.items()
        }
        return {
            "apiVersion": "training.kubedl.io/v1alpha1",
            "kind": self.kind,
            "metadata": {"name": name, "namespace": "default", "annotations": {"kubedl.io/network-mode": "host"}},
            "spec": {self.specs_field: specs},
        }


KINDS = [
    Kind(
        kind="XGBoostJob",
        module="xgboost",
        program="xgboost_dist.py",
        container="xgboost",
        specs_field="xgbReplicaSpecs",
        replicas={"Master": 1, "Worker": 2},
        done="done: rank {rank}",
        worked="rank {rank}: rmse",
        killed=("Worker", 1),
    ),
    Kind(
        kind="JAXJob",
        module="jax",
        program="jax_dist.py",
        container="jax",
        specs_field="jaxReplicaSpecs",
        replicas={"Worker": 2},
        done="done: process {rank}",
        worked="process {rank}: sum over 2 processes = 3 (expected 3)",
        killed=("Worker", 1),
    ),
    Kind(
        kind="PaddleJob",
        module="paddle",
        program="paddle_dist.py",
        container="paddle",
        specs_field="paddleReplicaSpecs",
        replicas={"Worker": 2},
        done="done: trainer {rank}",
        worked="trainer {rank}: sum over 2 trainers = 3 (expected 3)",
        killed=("Worker", 1),
        launcher=("paddle.distributed.launch", "--nproc_per_node", "1"),
    ),
]


@pytest.fixture
def client(target: Target) -> Iterator[TrainingClient]:
    with TrainingClient(kubeconfig=target.kubeconfig) as c:
        yield c


def runnable(target: Target, kind: Kind) -> None:
    if not target.local:
        pytest.skip(f"{target.name}: the image has no {kind.module}; the {kind.kind} scenario runs local processes")
    if importlib.util.find_spec(kind.module) is None:
        pytest.skip(f"{kind.module} is not installed: pip install -e '.[kinds]' (make e2e does)")


def ranks(kind: Kind) -> list[tuple[str, int, int]]:
    """(replica type, index, global rank) of every replica, in rank order."""
    out, rank = [], 0
    for rtype, n in kind.replicas.items():
        for index in range(n):
            out.append((rtype, index, rank))
            rank += 1
    return out


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_distributed_work_is_done_and_checked(target: Target, client: TrainingClient, kind: Kind) -> None:
    runnable(target, kind)
    name = f"e2e-{kind.module}-{uuid.uuid4().hex[:6]}"
    client.submit(kind.job(target, name, []))
    try:
        job = client.wait(name, timeout=180)
        assert job_state(job) == "Succeeded"
        for rtype, index, rank in ranks(kind):
            log = client.logs(name, rtype.lower(), index)
            assert kind.worked.format(rank=rank) in log, log
            assert kind.done.format(rank=rank) in log, log
    finally:
        client.delete(name)
        shutil.rmtree(f"/tmp/kubedl-e2e-{name}", ignore_errors=True)  # Paddle's launcher logs


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_a_killed_worker_fails_the_job_under_restart_policy_never(
    target: Target, client: TrainingClient, kind: Kind
) -> None:
    runnable(target, kind)
    name = f"e2e-{kind.module}-{uuid.uuid4().hex[:6]}"
    client.submit(kind.job(target, name, ["--hold", "120"]))
    rtype, index = kind.killed
    rank = next(r for t, i, r in ranks(kind) if (t, i) == kind.killed)
    try:

        def progress() -> str:
            text = log_of(client, name, rtype.lower(), index)
            if kind.launcher:  # the launcher copies its trainer's output to its own only at the end
                trainer = Path(f"/tmp/kubedl-e2e-{name}/{name}-{rtype.lower()}-{index}/workerlog.0")
                text += trainer.read_text() if trainer.exists() else ""
            return text

        log = eventually(
            lambda: (text := progress()) and kind.worked.format(rank=rank) in text and text,
            within=120,
            what=f"{rtype} {index} to finish its part of the work",
        )
        target.kill("default", f"{name}-{rtype.lower()}-{index}", kind.container, int(PID.findall(log)[0]))
        job = client.wait(name, ("Failed",), timeout=60)
        assert job.status is not None and job.status.conditions
        failed = next(c for c in job.status.conditions if c.type == "Failed")
        assert failed.reason == "ReplicaFailed", failed
        assert f"{rtype} {index} exited with code 137" in (failed.message or ""), failed
        if kind.launcher and target.local:
            # The launcher's trainers are its children, started in sessions of their own: once the job and
            # its pods are gone, none of them may live on (the container's cgroup ends them with it).
            trainers = trainer_pids(name)
            assert trainers, "the trainers print their pids"
            client.delete(name)
            eventually(
                lambda: not any(runs(pid, kind.program) for pid in trainers),
                within=60,
                what=f"no trainer of {sorted(trainers)} outliving its pod",
            )
    finally:
        with contextlib.suppress(JobNotFoundError):
            client.delete(name)
        shutil.rmtree(f"/tmp/kubedl-e2e-{name}", ignore_errors=True)  # Paddle's launcher logs


TRAINER = re.compile(r"^trainer \d+/\d+ pid=(\d+)", re.MULTILINE)


def trainer_pids(name: str) -> set[int]:
    """The pids the Paddle trainers of job ``name`` printed in their launchers' logs."""
    logs = Path(f"/tmp/kubedl-e2e-{name}").glob("*/workerlog.*")
    return {int(pid) for log in logs for pid in TRAINER.findall(log.read_text(errors="replace"))}


def runs(pid: int, program: str) -> bool:
    """Process ``pid`` is alive and runs ``program`` (not a later process that reuses the pid)."""
    try:
        return program in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
