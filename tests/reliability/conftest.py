"""Shared by the reliability tests: the integration fixtures plus a mixed batch of jobs."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import pytorchjob, replica, tfjob


def mixed_jobs(n: int, *, prefix: str = "job", run_seconds: float = 1.0) -> list[dict[str, Any]]:
    """``n`` jobs: PyTorch and TF alternating, every other pair in host-network mode, all ending with 0."""
    jobs = []
    for i in range(n):
        host = (i // 2) % 2 == 0
        name = f"{prefix}-{i}"
        if i % 2 == 0:
            jobs.append(
                pytorchjob(
                    name,
                    host=host,
                    cleanPodPolicy="All",
                    replicas={
                        "Master": replica(1, exit_code=0, run_seconds=run_seconds),
                        "Worker": replica(1, exit_code=0, run_seconds=run_seconds),
                    },
                )
            )
        else:
            jobs.append(
                tfjob(
                    name,
                    host=host,
                    cleanPodPolicy="All",
                    replicas={
                        "PS": replica(1, name="tensorflow"),
                        "Worker": replica(2, name="tensorflow", exit_code=0, run_seconds=run_seconds),
                    },
                )
            )
    return jobs


def replicas_of(job: dict[str, Any]) -> int:
    specs = job["spec"].get("pytorchReplicaSpecs") or job["spec"].get("tfReplicaSpecs")
    return sum(int(spec.get("replicas", 1)) for spec in specs.values())


from tests.integration.conftest import cluster, controller, kube, tier  # noqa: E402,F401 - shared fixtures
