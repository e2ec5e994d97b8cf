"""XGBoostJob: distributed XGBoost (and LightGBM) with a Master (the Rabit tracker's host) and Workers.

The API half of the kind (see ``base.py``), with the Training Operator v1's names and defaults: container
``xgboost``, port ``xgboostjob-port`` 9999, restart policy ``Never``, cleanPodPolicy ``None``; exactly one
Master.
"""

from __future__ import annotations

from typing import Literal

from kubedl_py.api.common import ReplicaSpec, RunPolicy
from kubedl_py.api.errors import FieldError
from kubedl_py.api.kinds.base import Framework, KindAPI, ServedIn, TrainingJob

XGBOOST = Framework(
    kind="XGBoostJob",
    plural="xgboostjobs",
    replica_specs_field="xgbReplicaSpecs",
    replica_types=("Master", "Worker"),
    container_name="xgboost",
    port_name="xgboostjob-port",
    default_port=9999,
    default_restart_policy="Never",
    default_clean_pod_policy="None",
    worker_type="Worker",
    short_names=("xgbj",),
    master_types=("Master",),
)


class XGBoostJobSpec(RunPolicy):
    """What to run (the replica specs) and how (run policies)."""

    xgb_replica_specs: dict[str, ReplicaSpec]
    """The replica types, Master (the tracker, rank 0) and Worker, each with its replicas, restartPolicy and
    pod template."""


class XGBoostJob(TrainingJob):
    FRAMEWORK = XGBOOST

    api_version: ServedIn = "training.kubedl.io/v1alpha1"
    kind: Literal["XGBoostJob"] = "XGBoostJob"
    spec: XGBoostJobSpec


def validate(job: XGBoostJob) -> list[FieldError]:
    master = job.spec.xgb_replica_specs.get("Master")
    path = f"spec.{XGBOOST.replica_specs_field}.Master"
    if master is None:
        return [FieldError(path, "an XGBoostJob needs a Master (it runs the tracker): add one with replicas 1")]
    if (1 if master.replicas is None else master.replicas) != 1:
        return [
            FieldError(f"{path}.replicas", f"is {master.replicas}; an XGBoostJob has exactly one Master: set it to 1")
        ]
    return []


KIND = KindAPI(
    name="xgboost",
    kubeflow=True,
    model=XGBoostJob,
    validate=validate,
    cel_rules=(
        {"rule": "has(self.Master)", "message": "an XGBoostJob needs a Master"},
        {
            "rule": "!has(self.Master.replicas) || self.Master.replicas == 1",
            "message": "an XGBoostJob has exactly one Master: set Master.replicas to 1",
        },
    ),
)
