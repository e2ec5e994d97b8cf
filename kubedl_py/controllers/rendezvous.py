"""How each process finds its peers: PyTorch/torchrun environment variables and TensorFlow's TF_CONFIG.

Pure functions of the job and of an ``Addressing`` that says, per replica, which address and port a peer
uses and which port the replica itself listens on. Normal mode: every replica listens on the framework's
port and peers use ``<svc>.<ns>.svc:<port>`` (a headless Service). Host-network mode: a replica listens on
its own host port P while peers keep using the Service name and the framework's port (a ClusterIP
Service forwards port -> P); so only the *own* entries differ between the modes.

Rules that are not obvious:

- PyTorch rank: Master is rank 0 and Worker i is rank i+1; a workers-only job (no Master) makes Worker 0
  the rendezvous host: ``MASTER_ADDR=<job>-worker-0`` and Worker i is rank i.
- The rendezvous host reaches itself without a Service hop: in host mode it gets ``MASTER_ADDR=localhost``
  and its own host port, because the Service port only exists on the ClusterIP, not on the host.
- ``WORLD_SIZE`` = pods x ``nprocPerNode`` when that is an integer, else pods x 1 (torchrun recomputes it).
- Elastic jobs get ``PET_RDZV_*``; ``PET_NNODES`` becomes ``min:max`` and no fixed node rank is set.
- TF: Evaluator is not part of the cluster (TensorFlow's own convention: it only reads checkpoints), so it
  appears only as its own ``task``; TF_CONFIG is set only for jobs with more than one replica.
- A variable the user already set in a container is never overwritten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kubedl_py.api import PyTorchJob, TFJob
from kubedl_py.api.defaults import DEFAULT_RDZV_BACKEND, default_container_index


def replica_name(job_name: str, replica_type: str, index: int) -> str:
    """The contract name of replica ``index`` of ``replica_type``: ``<job>-<type>-<index>``."""
    return f"{job_name}-{replica_type.lower()}-{index}"


@dataclass(frozen=True)
class Addressing:
    """Where replicas listen and how peers reach them.

    ``port`` is the framework's port (2222 / 23456, or what the template names ``tfjob-port`` /
    ``pytorchjob-port``); ``type_ports`` overrides it per replica type when templates differ.
    ``host_ports`` maps (replica type, index) to the host port in host-network mode; empty in normal mode.
    """

    namespace: str
    port: int
    cluster_domain: str | None = None
    type_ports: dict[str, int] = field(default_factory=dict)
    host_ports: dict[tuple[str, int], int] = field(default_factory=dict)

    def service_port(self, replica_type: str) -> int:
        """The port peers use, on the replica's Service."""
        return self.type_ports.get(replica_type, self.port)

    def service_host(self, job_name: str, replica_type: str, index: int) -> str:
        host = f"{replica_name(job_name, replica_type, index)}.{self.namespace}.svc"
        return f"{host}.{self.cluster_domain}" if self.cluster_domain else host

    def listen_port(self, replica_type: str, index: int) -> int:
        """The port this replica's process binds: its host port in host mode, else the framework port."""
        return self.host_ports.get((replica_type, index), self.service_port(replica_type))

    @property
    def host_network(self) -> bool:
        return bool(self.host_ports)


def _replicas(job: PyTorchJob | TFJob, replica_type: str) -> int:
    spec = job.replica_specs.get(replica_type)
    return 0 if spec is None or spec.replicas is None else spec.replicas


# --- PyTorch -------------------------------------------------------------------------------------------


def pytorch_rendezvous_host(job: PyTorchJob) -> tuple[str, int]:
    """(replica type, index) of the replica that hosts the rendezvous: Master 0, else Worker 0."""
    return ("Master", 0) if _replicas(job, "Master") > 0 else ("Worker", 0)


def pytorch_rank(job: PyTorchJob, replica_type: str, index: int) -> int:
    if replica_type == "Master":
        return 0
    return index + (1 if _replicas(job, "Master") > 0 else 0)


def pytorch_env(job: PyTorchJob, replica_type: str, index: int, addressing: Addressing) -> dict[str, str]:
    """The rendezvous environment of one replica (job already defaulted)."""
    nodes = sum(_replicas(job, t) for t in job.spec.pytorch_replica_specs)
    nproc = job.spec.nproc_per_node if job.spec.nproc_per_node is not None else 1
    nproc_int = int(nproc) if str(nproc).isdigit() else None
    host_type, host_index = pytorch_rendezvous_host(job)
    is_host = (replica_type, index) == (host_type, host_index)
    if is_host and addressing.host_network:
        master_addr, master_port = "localhost", addressing.listen_port(host_type, host_index)
    else:
        master_addr = replica_name(job.name, host_type, host_index)
        master_port = addressing.service_port(host_type)
    rank = pytorch_rank(job, replica_type, index)
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(nodes * (nproc_int or 1)),
        "RANK": str(rank),
        "PYTHONUNBUFFERED": "1",
        "PET_MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": str(master_port),
        "PET_NPROC_PER_NODE": str(nproc),
    }
    elastic = job.spec.elastic_policy
    if elastic is None:
        env["PET_NNODES"] = str(nodes)
        env["PET_NODE_RANK"] = str(rank)
        return env
    workers = _replicas(job, "Worker")
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


# --- TensorFlow ----------------------------------------------------------------------------------------

# TensorFlow's task types are the lower-cased replica types; Evaluator never joins the cluster spec.
_TF_NOT_IN_CLUSTER = frozenset({"Evaluator"})


def tf_config(job: TFJob, replica_type: str, index: int, addressing: Addressing) -> dict[str, Any] | None:
    """TF_CONFIG of one replica, or None for a single-replica job (TensorFlow then runs locally)."""
    total = sum(_replicas(job, t) for t in job.spec.tf_replica_specs)
    if total <= 1:
        return None
    cluster: dict[str, list[str]] = {}
    for rtype in job.spec.tf_replica_specs:
        if rtype in _TF_NOT_IN_CLUSTER or _replicas(job, rtype) == 0:
            continue
        entries = []
        for i in range(_replicas(job, rtype)):
            own = (rtype, i) == (replica_type, index)
            port = addressing.listen_port(rtype, i) if own else addressing.service_port(rtype)
            entries.append(f"{addressing.service_host(job.name, rtype, i)}:{port}")
        cluster[rtype.lower()] = entries
    return {
        "cluster": cluster,
        "task": {"type": replica_type.lower(), "index": index},
        "environment": "cloud",
    }


def tf_env(job: TFJob, replica_type: str, index: int, addressing: Addressing) -> dict[str, str]:
    config = tf_config(job, replica_type, index, addressing)
    return {} if config is None else {"TF_CONFIG": json.dumps(config, separators=(",", ":"))}


# --- applying env to a pod spec ------------------------------------------------------------------------


def merge_env(container: dict[str, Any], env: dict[str, str]) -> None:
    """Append ``env`` to the container's env, keeping every variable the user already set."""
    existing = container.setdefault("env", [])
    present = {item.get("name") for item in existing}
    existing.extend({"name": name, "value": value} for name, value in env.items() if name not in present)


def rendezvous_env(job: PyTorchJob | TFJob, replica_type: str, index: int, addressing: Addressing) -> dict[str, str]:
    if isinstance(job, PyTorchJob):
        return pytorch_env(job, replica_type, index, addressing)
    return tf_env(job, replica_type, index, addressing)


def apply_rendezvous(
    pod_spec: dict[str, Any], job: PyTorchJob | TFJob, replica_type: str, index: int, addressing: Addressing
) -> None:
    """Set the rendezvous variables: every container for PyTorch, the framework's container for TF."""
    env = rendezvous_env(job, replica_type, index, addressing)
    if not env:
        return
    containers = pod_spec.get("containers") or []
    if isinstance(job, PyTorchJob):
        targets = containers
    else:
        targets = [containers[default_container_index(containers, job.framework)]] if containers else []
    for container in targets:
        merge_env(container, env)
