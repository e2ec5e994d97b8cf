"""The owner reference every object of a job carries, so the garbage collector removes them with the job.

Its own module because pods, Services, PodGroups and the kinds' extra objects (MPI's ConfigMap and Secret)
all need it, and those modules import one another otherwise.
"""

from __future__ import annotations

from typing import Any

from kubedl_py.api import TrainingJob


def owner_reference(job: TrainingJob) -> dict[str, Any]:
    """The job as the controlling owner (``blockOwnerDeletion``: foreground deletion waits for its objects)."""
    return {
        "apiVersion": job.api_version,
        "kind": job.kind,
        "name": job.name,
        "uid": job.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }
