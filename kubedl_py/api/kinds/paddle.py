"""PaddleJob: PaddlePaddle in collective mode (Workers only; worker 0 is the endpoint) or parameter-server
mode (a Master holds the endpoint and serves parameters).

The API half of the kind (see ``base.py``), with the Training Operator v1's names and defaults: container
``paddle``, port ``master`` 36543, restart policy ``OnFailure``, cleanPodPolicy ``None``; ``elasticPolicy``
(min/max replicas, max restarts) is kept for users of the Training Operator's autoscaling.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from kubedl_py.api.common import KubeModel, ReplicaSpec, RunPolicy
from kubedl_py.api.errors import FieldError
from kubedl_py.api.kinds.base import Framework, KindAPI, ServedIn, TrainingJob

PADDLE = Framework(
    kind="PaddleJob",
    plural="paddlejobs",
    replica_specs_field="paddleReplicaSpecs",
    replica_types=("Master", "Worker"),
    container_name="paddle",
    port_name="master",
    default_port=36543,
    default_restart_policy="OnFailure",
    default_clean_pod_policy="None",
    worker_type="Worker",
    short_names=("pdj",),
    master_types=("Master",),
)


class PaddleElasticPolicy(KubeModel):
    """Elastic training: the Workers may come and go between minReplicas and maxReplicas."""

    min_replicas: Annotated[int, Field(ge=1)] | None = None
    """The fewest Workers training goes on with."""
    max_replicas: Annotated[int, Field(ge=1)] | None = None
    """The most Workers."""
    max_restarts: Annotated[int, Field(ge=0)] | None = None
    """How often the workers' group is restarted."""
    metrics: list[dict[str, Any]] | None = None
    """The Training Operator's HPA metrics: accepted so its job files apply; kubedl-py makes no HPA."""


class PaddleJobSpec(RunPolicy):
    """What to run (the replica specs) and how (run policies, elastic policy)."""

    paddle_replica_specs: dict[str, ReplicaSpec]
    """The replica types, Master and Worker, each with its replicas, restartPolicy and pod template."""
    elastic_policy: PaddleElasticPolicy | None = None
    """Elastic training (docs/kinds.md)."""


class PaddleJob(TrainingJob):
    FRAMEWORK = PADDLE

    api_version: ServedIn = "training.kubedl.io/v1alpha1"
    kind: Literal["PaddleJob"] = "PaddleJob"
    spec: PaddleJobSpec


def validate(job: PaddleJob) -> list[FieldError]:
    elastic = job.spec.elastic_policy
    if elastic is None or elastic.min_replicas is None or elastic.max_replicas is None:
        return []
    if elastic.min_replicas > elastic.max_replicas:
        low, high = elastic.min_replicas, elastic.max_replicas
        return [FieldError("spec.elasticPolicy.minReplicas", f"is {low}, above maxReplicas {high}: lower it to {high}")]
    return []


def defaults(job: PaddleJob) -> None:
    # As the Training Operator: one bound given, the other follows it.
    elastic = job.spec.elastic_policy
    if elastic is not None:
        if elastic.min_replicas is None and elastic.max_replicas is not None:
            elastic.min_replicas = elastic.max_replicas
        elif elastic.max_replicas is None and elastic.min_replicas is not None:
            elastic.max_replicas = elastic.min_replicas


KIND = KindAPI(kubeflow=True, name="paddle", model=PaddleJob, validate=validate, defaults=defaults)
