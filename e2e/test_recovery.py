"""Hangs, for real (docs/policies.md, "Hangs"): ranks that stop printing are found by their silence.

Each rank of the job runs ``examples/hang_once.py``: a few steps, then, the first time, silence (a sleep, as a
rank stuck in a collective). With ``progressDeadlineSeconds: 20`` the controller reads the Master's last log
line, finds it older than the deadline, marks the job ``Stalled`` and restarts it once (an infrastructure
failure, not a user one); the second run finishes and the job succeeds. The marker the first run leaves is a
file on the host, so this runs where pods are host processes (the local targets).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import Target
from kubedl_py import TrainingClient
from kubedl_py.sdk import job_state


def hanging_job(target: Target, name: str, state_dir: Path) -> dict[str, Any]:
    def replica() -> dict[str, Any]:
        container = target.container("pytorch", "hang_once.py", ["--state-dir", str(state_dir)])
        return {"replicas": 1, "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "progressDeadlineSeconds": 20,
            "backoffLimit": 1,
            "pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()},
        },
    }


def test_a_silent_job_is_restarted_once_as_stalled_then_succeeds(target: Target, tmp_path: Path) -> None:
    if not target.local:
        pytest.skip("the first run's marker is a host file: pods must be host processes")
    name = f"e2e-hang-{uuid.uuid4().hex[:6]}"
    with TrainingClient(kubeconfig=target.kubeconfig) as client:
        client.submit(hanging_job(target, name, tmp_path / "state"))
        try:
            job = client.wait(name, timeout=150)
            assert job_state(job) == "Succeeded"
            assert job.status is not None
            failures = job.status.failures or []
            assert [(f.failure_class, f.reason, f.replica_type) for f in failures] == [
                ("Infrastructure", "Stalled", "Master")
            ], failures
            assert "progressDeadlineSeconds (20s)" in (failures[0].message or "")
            assert "waiting for a peer that never answers" in (failures[0].message or "")
            counts = (job.status.replica_statuses or {})["Master"]
            assert (counts.infrastructure_restarts, counts.restarts or 0) == (1, 0)
            stalled = next(c for c in job.status.conditions or [] if c.type == "Stalled")
            assert stalled.status == "False"  # it was True until the job ran again
            described = client.describe(name)
            assert any(e.get("reason") == "Stalled" and e.get("type") == "Warning" for e in described.events)
            assert "done" in client.logs(name, "master", 0)
        finally:
            client.delete(name)
