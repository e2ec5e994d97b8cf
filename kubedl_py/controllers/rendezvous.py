"""How each process finds its peers: the rendezvous settings of a replica, applied to its pod.

The settings themselves are the kind's (``controllers/kinds/<kind>.py``: torchrun's variables, TF_CONFIG...),
computed from the job and an :class:`~kubedl_py.controllers.addressing.Addressing`; this module puts them
into the containers the kind names, never overwriting a variable the user already set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubedl_py.api.kinds.base import TrainingJob
from kubedl_py.controllers.addressing import Addressing, replica_name
from kubedl_py.controllers.kinds import controller_for
from kubedl_py.controllers.kinds.base import Env, Kind, Slot, every_replica

__all__ = ["Addressing", "apply_rendezvous", "merge_env", "rendezvous_env", "replica_name", "service_slots"]


def service_slots(job: TrainingJob, kind: Kind[Any] | None = None) -> frozenset[Slot]:
    """The replicas that get a Service: those their peers dial (the kind says which), or every replica with
    ``kubedl.io/replica-services: all`` and, by default, in kubeflow.org (the Training Operator's contract)."""
    if job.service_per_replica:
        return frozenset(every_replica(job))
    return frozenset((kind or controller_for(job.kind)).dialed(job))


def merge_env(container: dict[str, Any], env: Env) -> None:
    """Append ``env`` to the container's env, in order, keeping every variable the user already set. A value
    that is a mapping is a ``valueFrom`` (e.g. Paddle's ``POD_IP_DUMMY`` from ``status.podIP``)."""
    existing = container.setdefault("env", [])
    present = {item.get("name") for item in existing}
    for name, value in env.items():
        if name in present:
            continue
        existing.append(
            {"name": name, "valueFrom": dict(value)} if isinstance(value, Mapping) else {"name": name, "value": value}
        )


def rendezvous_env(
    job: TrainingJob, replica_type: str, index: int, addressing: Addressing, kind: Kind[Any] | None = None
) -> Env:
    return (kind or controller_for(job.kind)).rendezvous_env(job, replica_type, index, addressing)


def apply_rendezvous(
    pod_spec: dict[str, Any],
    job: TrainingJob,
    replica_type: str,
    index: int,
    addressing: Addressing,
    *,
    kind: Kind[Any] | None = None,
) -> None:
    """Set the rendezvous variables in the containers the kind names (PyTorch: all; TF: the framework's), and
    let the kind add what else its pods need (MPI: volumes). ``kind``: the job's plug-in, when the caller has
    it resolved (a reconcile's plan), else looked up."""
    plugin = kind or controller_for(job.kind)
    env = plugin.rendezvous_env(job, replica_type, index, addressing)
    targets = plugin.env_targets(job, pod_spec.get("containers") or [])
    for container in targets:
        merge_env(container, env)
    plugin.amend_pod(job, replica_type, index, pod_spec, targets)
