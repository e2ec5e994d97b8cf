"""Every default of the API, in one place, with the reason for each.

Defaults are applied in memory by whoever needs them (the controller on each reconcile, the SDK before it
prints a job); they are never written back into the user's object, so ``kubectl get -o yaml`` shows what the
user wrote and a later change of a default reaches existing jobs on their next reconcile.

- ``replicas``: 1 for both kinds — the Kubernetes convention for an omitted count.
- ``restartPolicy``: PyTorchJob ``OnFailure`` — DDP replicas restart in place cheaply and re-rendezvous;
  TFJob ``ExitCode`` — PS/Worker must retry preemption (exit 137/143) but fail fast on a program error.
- ``cleanPodPolicy``: PyTorchJob ``None`` (as the Training Operator) — a PyTorch job succeeds when its Master
  does, and its workers, finishing a moment later, must not be killed before they end: their pods and logs
  stay; TFJob ``Running`` — PS replicas never exit by themselves, so the end of the job frees them, while
  finished pods stay for their logs. Set ``Running``/``All`` on a PyTorchJob to free running pods at the end.
- ``backoffLimit``: unset, meaning no limit, as in KubeDL and Kubeflow.
- Jobs in ``kubeflow.org/v1`` get the Training Operator's defaults where they differ from KubeDL's: TFJob
  ``restartPolicy: Never`` and ``cleanPodPolicy: None``, MPIJob ``cleanPodPolicy: None`` — a job file moved
  from the Training Operator behaves as it did there (docs/migration.md).
- The kinds' own defaults live with each kind (``kubedl_py/api/kinds/<kind>.py``), e.g. PyTorchJob's
  ``nprocPerNode`` ``auto`` and ``elasticPolicy.rdzvBackend`` ``c10d``, TFJob's ``successPolicy`` ``""``.
- ``placement.mode``: ``Preferred`` — a job that cannot fit in one block still runs, only with more hops.
- ``rdma``: nothing here. Its defaults have a precedence chain (the job, then the controller's
  ``--rdma-defaults`` file, then built-ins such as ``ipcLock: true`` and ``NCCL_IB_TIMEOUT=22``), so the
  controller resolves them when it builds pods (``controllers/rdma.py``); filling them in here would hide the
  operator's file.
- Default container and port: ``pytorch`` / ``pytorchjob-port`` 23456 and ``tensorflow`` / ``tfjob-port`` 2222
  (KubeDL's names); the first container when none has the name.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

from kubedl_py.api.kinds import kind_api
from kubedl_py.api.kinds.base import Framework, TrainingJob

DEFAULT_REPLICAS: Final = 1
DEFAULT_PLACEMENT_MODE: Final = "Preferred"

__all__ = [
    "DEFAULT_PLACEMENT_MODE",
    "DEFAULT_REPLICAS",
    "default_container_index",
    "training_port",
    "with_defaults",
]

J = TypeVar("J", bound=TrainingJob)


def with_defaults(job: J) -> J:
    """A copy of ``job`` with every default of the table above filled in: the generic ones, then the kind's."""
    copy = job.model_copy(deep=True)
    framework = copy.framework
    for spec in copy.replica_specs.values():
        if spec.replicas is None:
            spec.replicas = DEFAULT_REPLICAS
        if spec.restart_policy is None:
            spec.restart_policy = framework.restart_policy_for(copy.api_group)  # type: ignore[assignment]
    if copy.run_policy.clean_pod_policy is None:
        copy.run_policy.clean_pod_policy = framework.clean_pod_policy_for(copy.api_group)  # type: ignore[assignment]
    placement = copy.run_policy.placement
    if placement is not None and placement.mode is None:
        placement.mode = DEFAULT_PLACEMENT_MODE
    kind_api(copy.kind).defaults(copy)
    return copy


def default_container_index(containers: list[dict[str, Any]], framework: Framework) -> int:
    """Index of the container that runs the framework: the one with the framework's name, else the first."""
    for index, container in enumerate(containers):
        if container.get("name") == framework.container_name:
            return index
    return 0


def training_port(container: dict[str, Any], framework: Framework) -> int:
    """The port the framework listens on: the named port if the container declares it, else the default."""
    for port in container.get("ports") or []:
        if port.get("name") == framework.port_name and isinstance(port.get("containerPort"), int):
            return int(port["containerPort"])
    return framework.default_port
