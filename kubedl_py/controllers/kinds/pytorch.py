"""PyTorchJob's controller half: torchrun's and DDP's environment, and success by the Master.

Rules that are not obvious:

- Rank: Master is rank 0 and Worker i is rank i+1; a workers-only job (no Master) makes Worker 0 the
  rendezvous host: ``MASTER_ADDR=<job>-worker-0`` and Worker i is rank i.
- The rendezvous host reaches itself without a Service hop: in host mode it gets ``MASTER_ADDR=localhost``
  and its own host port, because the Service port only exists on the ClusterIP, not on the host.
- ``WORLD_SIZE`` = pods x ``nprocPerNode`` when that is an integer, else pods x 1 (torchrun recomputes it).
- Elastic jobs get ``PET_RDZV_*``; ``PET_NNODES`` becomes ``min:max`` and no fixed node rank is set.
- Every container of the pod gets the variables (sidecars may take part in the rendezvous).
- Dialed by name: only the rendezvous host (``MASTER_ADDR``; DDP's process groups then exchange addresses,
  not names, through its store). An elastic job: every replica, since torchrun's elastic agents hand their
  workers the address the agent of group rank 0 announces, its own host name, and any node may be that one
  (a pod's host name resolves in its peers only through the Service of its name); a ``rdzvHost`` of the
  user's names what it names.
- Success: the Master succeeded (with ``successPolicy: AllWorkers``, and every Worker too); a workers-only
  job, when every worker did.
"""

from __future__ import annotations

from typing import Any

from kubedl_py.api.kinds.pytorch import DEFAULT_RDZV_BACKEND, PyTorchJob
from kubedl_py.controllers.addressing import Addressing, replica_name
from kubedl_py.controllers.kinds.base import (
    Env,
    Kind,
    Pods,
    Slot,
    all_succeeded,
    every_replica,
    pod_succeeded,
    replicas,
)


def rendezvous_host(job: PyTorchJob) -> tuple[str, int]:
    """(replica type, index) of the replica that hosts the rendezvous: Master 0, else Worker 0."""
    return ("Master", 0) if replicas(job, "Master") > 0 else ("Worker", 0)


def rank(job: PyTorchJob, replica_type: str, index: int) -> int:
    if replica_type == "Master":
        return 0
    return index + (1 if replicas(job, "Master") > 0 else 0)


def pytorch_env(job: PyTorchJob, replica_type: str, index: int, addressing: Addressing) -> dict[str, str]:
    """The rendezvous environment of one replica (job already defaulted)."""
    nodes = sum(replicas(job, t) for t in job.spec.pytorch_replica_specs)
    nproc = job.spec.nproc_per_node if job.spec.nproc_per_node is not None else 1
    nproc_int = int(nproc) if str(nproc).isdigit() else None
    host_type, host_index = rendezvous_host(job)
    is_host = (replica_type, index) == (host_type, host_index)
    if is_host and addressing.host_network:
        master_addr, master_port = "localhost", addressing.listen_port(host_type, host_index)
    else:
        master_addr = replica_name(job.name, host_type, host_index)
        master_port = addressing.service_port(host_type)
    own_rank = rank(job, replica_type, index)
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(nodes * (nproc_int or 1)),
        "RANK": str(own_rank),
        "PYTHONUNBUFFERED": "1",
        "PET_MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": str(master_port),
        "PET_NPROC_PER_NODE": str(nproc),
    }
    elastic = job.spec.elastic_policy
    if elastic is None:
        env["PET_NNODES"] = str(nodes)
        env["PET_NODE_RANK"] = str(own_rank)
        return env
    workers = replicas(job, "Worker")
    minimum = elastic.min_replicas if elastic.min_replicas is not None else workers
    maximum = elastic.max_replicas if elastic.max_replicas is not None else workers
    rdzv_port = elastic.rdzv_port if elastic.rdzv_port is not None else master_port
    rdzv_host = elastic.rdzv_host or master_addr
    env.update(
        {
            "PET_NNODES": f"{minimum}:{maximum}",
            "PET_RDZV_ENDPOINT": f"{rdzv_host}:{rdzv_port}",
            "PET_RDZV_BACKEND": elastic.rdzv_backend or DEFAULT_RDZV_BACKEND,
            "PET_RDZV_ID": elastic.rdzv_id or job.metadata.uid or job.name,
        }
    )
    if elastic.max_restarts is not None:
        env["PET_MAX_RESTARTS"] = str(elastic.max_restarts)
    if elastic.rdzv_conf:
        env["PET_RDZV_CONF"] = ",".join(f"{item.key}={item.value}" for item in elastic.rdzv_conf)
    return env


class PyTorchController(Kind[PyTorchJob]):
    def rendezvous_env(self, job: PyTorchJob, replica_type: str, index: int, addressing: Addressing) -> Env:
        return pytorch_env(job, replica_type, index, addressing)

    def env_targets(self, job: PyTorchJob, containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return containers

    def dialed(self, job: PyTorchJob) -> set[Slot]:
        return every_replica(job) if job.spec.elastic_policy is not None else {rendezvous_host(job)}

    def succeeded(self, job: PyTorchJob, pods: Pods) -> bool:
        workers = all_succeeded(list(pods.get("Worker", [])))
        if pods.get("Master"):
            master = pod_succeeded(pods["Master"][0])
            return master and (workers or job.spec.success_policy != "AllWorkers")
        return workers


CONTROLLER = PyTorchController()
