"""TFJob: TensorFlow's parameter-server and multi-worker jobs (PS, Worker, Chief/Master, Evaluator).

The API half of the kind (see ``base.py``): ``successPolicy`` beside the replica specs; a Chief or a Master
(the same role), at most one of it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import StrictBool

from kubedl_py.api.common import ReplicaSpec, RunPolicy
from kubedl_py.api.errors import FieldError
from kubedl_py.api.kinds.base import Framework, KindAPI, ServedIn, TrainingJob

TENSORFLOW = Framework(
    kind="TFJob",
    plural="tfjobs",
    replica_specs_field="tfReplicaSpecs",
    replica_types=("PS", "Worker", "Chief", "Master", "Evaluator"),
    container_name="tensorflow",
    port_name="tfjob-port",
    default_port=2222,
    default_restart_policy="ExitCode",
    default_clean_pod_policy="Running",
    worker_type="Worker",
    short_names=("tfj",),
    master_types=("Chief", "Master"),
    aliases=("tf", "tensorflow"),
    kubeflow_restart_policy="Never",
    kubeflow_clean_pod_policy="None",
)


class TFJobSpec(RunPolicy):
    """What to run (the replica specs) and how (run policies, success policy)."""

    tf_replica_specs: dict[str, ReplicaSpec]
    """The replica types, PS, Worker, Chief, Master and Evaluator, each with its replicas, restartPolicy and
    pod template; every process gets TF_CONFIG naming all of them."""
    success_policy: Literal["", "AllWorkers"] | None = None
    """"" (default): the job succeeds when the Chief/Master (else worker 0) has succeeded; AllWorkers: when
    every Worker has."""
    enable_dynamic_worker: StrictBool | None = None
    """The Training Operator's "tolerate failed Workers": accepted so its job files apply, not acted on."""


class TFJob(TrainingJob):
    FRAMEWORK = TENSORFLOW

    api_version: ServedIn = "training.kubedl.io/v1alpha1"
    kind: Literal["TFJob"] = "TFJob"
    spec: TFJobSpec


def validate(job: TFJob) -> list[FieldError]:
    path = f"spec.{TENSORFLOW.replica_specs_field}"
    specs = job.spec.tf_replica_specs
    errors = []
    chiefs = [t for t in ("Chief", "Master") if t in specs]
    if len(chiefs) > 1:
        errors.append(
            FieldError(
                f"{path}.Master",
                "a TFJob may have a Chief or a Master, not both: they are the same role; keep one",
            )
        )
    for replica_type in chiefs:
        declared = specs[replica_type].replicas
        replicas = 1 if declared is None else declared
        if replicas > 1:
            errors.append(
                FieldError(
                    f"{path}.{replica_type}.replicas",
                    f"is {replicas}; there is only one {replica_type}: set it to 0 or 1",
                )
            )
    return errors


def defaults(job: TFJob) -> None:
    # Chief/Master, else worker 0, decides success (TensorFlow's convention).
    if job.spec.success_policy is None:
        job.spec.success_policy = ""


KIND = KindAPI(
    name="tensorflow",
    kubeflow=True,
    model=TFJob,
    validate=validate,
    defaults=defaults,
    cel_rules=(
        {"rule": "!(has(self.Chief) && has(self.Master))", "message": "a TFJob may have a Chief or a Master, not both"},
    ),
)
