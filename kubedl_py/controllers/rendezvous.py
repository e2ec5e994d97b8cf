"""How each process finds its peers: the rendezvous settings of a replica, applied to its pod.

The settings themselves are the kind's (``controllers/kinds/<kind>.py``: torchrun's variables, TF_CONFIG...),
computed from the job and an :class:`~kubedl_py.controllers.addressing.Addressing`; this module puts them
into the containers the kind names, never overwriting a variable the user already set.
"""

from __future__ import annotations

from typing import Any

from kubedl_py.api.kinds.base import TrainingJob
from kubedl_py.controllers.addressing import Addressing, replica_name
from kubedl_py.controllers.kinds import controller_for

__all__ = ["Addressing", "apply_rendezvous", "merge_env", "rendezvous_env", "replica_name"]


def merge_env(container: dict[str, Any], env: dict[str, str]) -> None:
    """Append ``env`` to the container's env, keeping every variable the user already set."""
    existing = container.setdefault("env", [])
    present = {item.get("name") for item in existing}
    existing.extend({"name": name, "value": value} for name, value in env.items() if name not in present)


def rendezvous_env(job: TrainingJob, replica_type: str, index: int, addressing: Addressing) -> dict[str, str]:
    return controller_for(job.kind).rendezvous_env(job, replica_type, index, addressing)


def apply_rendezvous(
    pod_spec: dict[str, Any], job: TrainingJob, replica_type: str, index: int, addressing: Addressing
) -> None:
    """Set the rendezvous variables in the containers the kind names (PyTorch: all; TF: the framework's)."""
    env = rendezvous_env(job, replica_type, index, addressing)
    if not env:
        return
    containers = pod_spec.get("containers") or []
    for container in controller_for(job.kind).env_targets(job, containers):
        merge_env(container, env)
