"""What a job kind is, as far as the controller is concerned: the plug-in interface of the controller half.

The reconcile (``controllers/job.py``) is the same for every kind: it makes a pod and a Service per replica,
replaces failed pods by restart policy, keeps host-network ports and Services straight, and reports status.
What differs per kind is asked of the kind's :class:`Kind` (``controllers/kinds/<name>.py``):

- ``rendezvous_env``: the variables that let a replica find its peers (MASTER_ADDR..., TF_CONFIG...);
- ``env_targets``: which containers of the pod get them (default: the framework's container);
- ``succeeded``: when the job has succeeded, from its pods by replica type (default: every pod succeeded);
- ``owned_objects``: extra objects the job owns besides pods and Services (MPI: a hostfile ConfigMap and
  an SSH key Secret), created before any pod;
- ``may_start``: whether a replica type's pods may be created yet (MPI: the launcher waits for its workers);
- ``amend_pod``: anything else the kind adds to a replica's pod (MPI: its key and hostfile volumes);
- ``dialed``: the replicas whose names peers dial (PyTorch: the rendezvous host; TF: the cluster spec's
  members; ...): those get a Service, the rest only with ``kubedl.io/replica-services: all`` or in
  ``kubeflow.org`` (``rendezvous.service_slots``). A name in any replica's settings or owned object must be in it.

The API half (``kubedl_py/api/kinds/<name>.py``) names this module; ``controller_for`` loads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubedl_py.api.defaults import default_container_index
from kubedl_py.api.kinds.base import TrainingJob
from kubedl_py.api.plain import Object
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.kube.resources import Resource

#: replica type -> its pods by index (None where a pod does not exist)
Pods = Mapping[str, list[Object | None]]
#: rendezvous settings: variable -> value, or -> a ``valueFrom`` source (e.g. ``{"fieldRef": {...}}``)
Env = Mapping[str, "str | Mapping[str, Any]"]
#: (replica type, index)
Slot = tuple[str, int]


@dataclass(frozen=True)
class OwnedObject:
    """An object a job owns besides pods and Services (owner reference added by the reconcile)."""

    resource: Resource
    body: Object


def pod_succeeded(pod: Object | None) -> bool:
    return pod is not None and (pod.get("status") or {}).get("phase") == "Succeeded"


def pod_running(pod: Object | None) -> bool:
    return pod is not None and (pod.get("status") or {}).get("phase") == "Running"


def all_succeeded(pods: list[Object | None]) -> bool:
    return bool(pods) and all(pod_succeeded(pod) for pod in pods)


def replicas(job: TrainingJob, replica_type: str) -> int:
    spec = job.replica_specs.get(replica_type)
    return 0 if spec is None or spec.replicas is None else spec.replicas


def every_replica(job: TrainingJob, *types: str) -> set[Slot]:
    """Every replica of ``types`` (default: of every type the job has)."""
    return {(t, i) for t in (types or tuple(job.replica_specs)) for i in range(replicas(job, t))}


#: the job class of a kind (``PyTorchJob``...): what its plug-in's methods are given
J = TypeVar("J", bound=TrainingJob)


class Kind(Generic[J]):
    """The controller half of a kind whose jobs are ``J``: ``class PyTorchController(Kind[PyTorchJob])``, its methods
    typed with its own job class (the registry gives each plug-in only its own kind's jobs). Defaults fit a kind
    whose every replica is a peer and whose job succeeds when every pod has."""

    def rendezvous_env(self, job: J, replica_type: str, index: int, addressing: Addressing) -> Env:
        """The settings of one replica, in order (the job has its defaults applied)."""
        return {}

    def env_targets(self, job: J, containers: list[Object]) -> list[Object]:
        """The containers that get the rendezvous settings: the framework's container (else the first)."""
        return [containers[default_container_index(containers, job.framework)]] if containers else []

    def succeeded(self, job: J, pods: Pods) -> bool:
        return all_succeeded([pod for group in pods.values() for pod in group])

    def owned_objects(self, job: J, addressing: Addressing) -> list[OwnedObject]:
        return []

    def may_start(self, job: J, replica_type: str, pods: Pods) -> bool:
        return True

    def dialed(self, job: J) -> set[Slot]:
        """The replicas peers reach by name (their Service's); the default, for a kind that does not say: all."""
        return every_replica(job)

    def amend_pod(self, job: J, replica_type: str, index: int, pod_spec: Object, targets: list[Object]) -> None:
        """Add what else the kind needs to a replica's pod spec; ``targets`` are the ``env_targets``."""
