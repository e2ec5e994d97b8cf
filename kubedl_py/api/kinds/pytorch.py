"""PyTorchJob: a Master (rank 0, the rendezvous host) and Workers, run with DDP or torchrun.

The API half of the kind (see ``base.py``): ``nprocPerNode`` and ``elasticPolicy`` beside the replica specs;
one Master at most; a workers-only job is allowed (Worker 0 then hosts the rendezvous).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool

from kubedl_py.api.common import KubeModel, ReplicaSpec, RunPolicy
from kubedl_py.api.errors import FieldError
from kubedl_py.api.kinds.base import Framework, KindAPI, ServedIn, TrainingJob

#: ``elasticPolicy.rdzvBackend`` when unset: torchrun's built-in backend, no etcd needed
DEFAULT_RDZV_BACKEND = "c10d"
#: ``nprocPerNode`` when unset: torchrun's ``auto`` (one process per GPU, else per CPU), as the Training
#: Operator sets it; a fixed 1 would silently start one process on an 8-GPU pod
DEFAULT_NPROC_PER_NODE = "auto"
# torchrun accepts an integer or one of these words for --nproc-per-node.
NPROC_WORDS = ("auto", "cpu", "gpu")
NprocPerNode = Annotated[int, Field(ge=1)] | Annotated[str, Field(pattern=r"^(auto|cpu|gpu|[1-9][0-9]*)$")]

PYTORCH = Framework(
    kind="PyTorchJob",
    plural="pytorchjobs",
    replica_specs_field="pytorchReplicaSpecs",
    replica_types=("Master", "Worker"),
    container_name="pytorch",
    port_name="pytorchjob-port",
    default_port=23456,
    default_restart_policy="OnFailure",
    default_clean_pod_policy="None",
    worker_type="Worker",
    short_names=("ptj",),
    master_types=("Master",),
)


class RdzvConf(KubeModel):
    """One extra torchrun rendezvous setting (--rdzv-conf key=value)."""

    key: str = Field(min_length=1)
    """The setting's name."""
    value: str
    """Its value."""


class ElasticPolicy(KubeModel):
    """Elastic training with torchrun: the Workers may come and go between minReplicas and maxReplicas."""

    min_replicas: Annotated[int, Field(ge=1)] | None = None
    """The fewest Workers training goes on with (torchrun --nnodes MIN:MAX)."""
    max_replicas: Annotated[int, Field(ge=1)] | None = None
    """The most Workers."""
    rdzv_backend: str | None = None
    """torchrun's rendezvous backend (default c10d, no etcd needed)."""
    rdzv_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    """The rendezvous port (default: the job's port)."""
    rdzv_host: str | None = None
    """The rendezvous host (default: the first Worker's Service)."""
    rdzv_id: str | None = None
    """The rendezvous id (default: the job's uid)."""
    rdzv_conf: list[RdzvConf] | None = None
    """Extra rendezvous settings."""
    max_restarts: Annotated[int, Field(ge=0)] | None = None
    """torchrun --max-restarts: how often the workers' group is restarted in place."""
    n_proc_per_node: Annotated[int, Field(ge=1)] | None = None
    """The Training Operator's deprecated per-policy process count: use spec.nprocPerNode."""
    standalone: StrictBool | None = None
    """torchrun --standalone: accepted so Training Operator files apply (the rendezvous is set either way)."""
    metrics: list[dict[str, Any]] | None = None
    """The Training Operator's HPA metrics: accepted so its job files apply; kubedl-py makes no HPA."""


class PyTorchJobSpec(RunPolicy):
    """What to run (the replica specs) and how (run policies, torchrun settings)."""

    pytorch_replica_specs: dict[str, ReplicaSpec]
    """The replica types, Master (one pod, rank 0, the rendezvous host) and Worker, each with its replicas,
    restartPolicy and pod template."""
    success_policy: Literal["", "AllWorkers"] | None = None
    """"" (default): the job succeeds when the Master (or, without one, every Worker) has succeeded;
    AllWorkers: only when every Worker has succeeded too, so no Worker is cut off while saving."""
    nproc_per_node: NprocPerNode | None = None
    """Processes per pod for torchrun (PET_NPROC_PER_NODE): a number, or auto (default: one per GPU, else
    per CPU), cpu or gpu."""
    elastic_policy: ElasticPolicy | None = None
    """Elastic training with torchrun (docs/kinds.md)."""


class PyTorchJob(TrainingJob):
    FRAMEWORK = PYTORCH

    api_version: ServedIn = "training.kubedl.io/v1alpha1"
    kind: Literal["PyTorchJob"] = "PyTorchJob"
    spec: PyTorchJobSpec


def validate(job: PyTorchJob) -> list[FieldError]:
    path = f"spec.{PYTORCH.replica_specs_field}"
    specs = job.spec.pytorch_replica_specs
    errors = []
    master = specs.get("Master")
    if master is not None and (master.replicas if master.replicas is not None else 1) != 1:
        errors.append(
            FieldError(
                f"{path}.Master.replicas",
                f"is {master.replicas}; a PyTorchJob has exactly one Master: set it to 1 "
                "(or remove Master for a workers-only job)",
            )
        )
    elastic = job.spec.elastic_policy
    if elastic is not None and elastic.n_proc_per_node is not None and job.spec.nproc_per_node is not None:
        errors.append(
            FieldError(
                "spec.elasticPolicy.nProcPerNode",
                "is the deprecated form of spec.nprocPerNode, which is set too: remove elasticPolicy.nProcPerNode",
            )
        )
    if elastic is not None:
        worker = specs.get("Worker")
        if worker is None or (worker.replicas if worker.replicas is not None else 1) < 1:
            errors.append(
                FieldError(
                    f"{path}.Worker.replicas",
                    "an elasticPolicy needs at least 1 Worker: add a Worker replica spec with replicas >= 1",
                )
            )
        if (
            elastic.min_replicas is not None
            and elastic.max_replicas is not None
            and elastic.min_replicas > elastic.max_replicas
        ):
            errors.append(
                FieldError(
                    "spec.elasticPolicy.minReplicas",
                    f"is {elastic.min_replicas}, above maxReplicas {elastic.max_replicas}: "
                    "make minReplicas <= maxReplicas",
                )
            )
        workers = (worker.replicas if worker.replicas is not None else 1) if worker is not None else 0
        if elastic.max_replicas is not None and workers > elastic.max_replicas:
            errors.append(
                FieldError(
                    f"{path}.Worker.replicas",
                    f"is {workers}, above elasticPolicy.maxReplicas {elastic.max_replicas}: an elastic job never "
                    "runs more Workers than maxReplicas; lower replicas or raise maxReplicas",
                )
            )
    return errors


def defaults(job: PyTorchJob) -> None:
    elastic = job.spec.elastic_policy
    if job.spec.nproc_per_node is None and elastic is not None and elastic.n_proc_per_node is not None:
        job.spec.nproc_per_node = elastic.n_proc_per_node
    if job.spec.nproc_per_node is None:
        job.spec.nproc_per_node = DEFAULT_NPROC_PER_NODE
    if job.spec.elastic_policy is not None and job.spec.elastic_policy.rdzv_backend is None:
        job.spec.elastic_policy.rdzv_backend = DEFAULT_RDZV_BACKEND


KIND = KindAPI(
    name="pytorch",
    kubeflow=True,
    model=PyTorchJob,
    validate=validate,
    defaults=defaults,
    cel_rules=(
        {
            "rule": "!has(self.Master) || !has(self.Master.replicas) || self.Master.replicas == 1",
            "message": "a PyTorchJob has exactly one Master: set Master.replicas to 1",
        },
    ),
)
