"""Small builders shared by the SDK and CLI tests: jobs whose simulated containers end as told."""

from __future__ import annotations

from kubedl_local import EXIT_CODE, RUN_SECONDS
from kubedl_py.sdk import PyTorchJob, pytorch_job


def ending(exit_code: int, run_seconds: float) -> dict[str, str]:
    """Pod annotations that make the simulated kubelet end every container with ``exit_code``."""
    return {EXIT_CODE: str(exit_code), RUN_SECONDS: str(run_seconds)}


def succeeding(name: str, *, workers: int = 1, host_network: bool = False) -> PyTorchJob:
    """Workers end first, then the master: by the time the job succeeds every pod has (no cleanup race)."""
    job = pytorch_job(
        name,
        "busybox",
        ["python", "train.py"],
        workers=workers,
        host_network=host_network,
        pod_annotations=ending(0, 0.5),
    )
    if workers:
        job.spec.pytorch_replica_specs["Worker"].template.metadata = {"annotations": ending(0, 0.1)}
    return job


def failing(name: str) -> PyTorchJob:
    return pytorch_job(name, "busybox", ["python", "train.py"], restart_policy="Never", pod_annotations=ending(3, 0.2))


def running_forever(name: str) -> PyTorchJob:
    return pytorch_job(name, "busybox", ["python", "train.py"], workers=1)
