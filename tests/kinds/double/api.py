"""A fifth job kind, as a plug-in author writes it: the API half (tests/kinds/test_plugins.py uses it)."""

from __future__ import annotations

from typing import Literal

from kubedl_py.api.common import ReplicaSpec, RunPolicy
from kubedl_py.api.errors import FieldError
from kubedl_py.api.kinds.base import Framework, KindAPI, TrainingJob

RELAY = Framework(
    kind="RelayJob",
    plural="relayjobs",
    replica_specs_field="relayReplicaSpecs",
    replica_types=("Leader", "Follower"),
    container_name="relay",
    port_name="relay-port",
    default_port=7777,
    default_restart_policy="Never",
    default_clean_pod_policy="None",
    worker_type="Follower",
    short_names=("rlj",),
    master_types=("Leader",),
)


class RelayJobSpec(RunPolicy):
    relay_replica_specs: dict[str, ReplicaSpec]
    baton: str | None = None


class RelayJob(TrainingJob):
    FRAMEWORK = RELAY

    api_version: Literal["training.kubedl.io/v1alpha1"] = "training.kubedl.io/v1alpha1"
    kind: Literal["RelayJob"] = "RelayJob"
    spec: RelayJobSpec


def validate(job: RelayJob) -> list[FieldError]:
    if "Leader" not in job.spec.relay_replica_specs:
        return [FieldError("spec.relayReplicaSpecs.Leader", "a RelayJob needs a Leader: add one")]
    return []


def defaults(job: RelayJob) -> None:
    if job.spec.baton is None:
        job.spec.baton = "red"


KIND = KindAPI(
    name="relay", model=RelayJob, validate=validate, defaults=defaults, controller=f"{__package__}.controller"
)
