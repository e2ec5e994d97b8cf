"""The two job kinds, PyTorchJob and TFJob, and what distinguishes their frameworks.

``Framework`` carries the per-kind facts the rest of the code needs (replica types, default container and
port, the name of the replica-spec field) so that reconcilers and validation stay framework-agnostic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from kubedl_py.api import constants as c
from kubedl_py.api.common import (
    JobStatus,
    KubeModel,
    ObjectMeta,
    ReplicaSpec,
    RunPolicy,
)


@dataclass(frozen=True)
class Framework:
    kind: str
    plural: str
    replica_specs_field: str
    replica_types: tuple[str, ...]
    container_name: str
    port_name: str
    default_port: int
    default_restart_policy: str
    default_clean_pod_policy: str


PYTORCH = Framework(
    kind=c.PYTORCH_KIND,
    plural=c.PYTORCH_PLURAL,
    replica_specs_field="pytorchReplicaSpecs",
    replica_types=c.PYTORCH_REPLICA_TYPES,
    container_name=c.PYTORCH_CONTAINER,
    port_name=c.PYTORCH_PORT_NAME,
    default_port=c.PYTORCH_PORT,
    default_restart_policy="OnFailure",
    default_clean_pod_policy="None",
)
TENSORFLOW = Framework(
    kind=c.TF_KIND,
    plural=c.TF_PLURAL,
    replica_specs_field="tfReplicaSpecs",
    replica_types=c.TF_REPLICA_TYPES,
    container_name=c.TF_CONTAINER,
    port_name=c.TF_PORT_NAME,
    default_port=c.TF_PORT,
    default_restart_policy="ExitCode",
    default_clean_pod_policy="Running",
)
FRAMEWORKS: dict[str, Framework] = {PYTORCH.kind: PYTORCH, TENSORFLOW.kind: TENSORFLOW}


class RdzvConf(KubeModel):
    key: str = Field(min_length=1)
    value: str


class ElasticPolicy(KubeModel):
    min_replicas: Annotated[int, Field(ge=1)] | None = None
    max_replicas: Annotated[int, Field(ge=1)] | None = None
    rdzv_backend: str | None = None
    rdzv_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: list[RdzvConf] | None = None
    max_restarts: Annotated[int, Field(ge=0)] | None = None


# torchrun accepts an integer or one of these words for --nproc-per-node.
NPROC_WORDS = ("auto", "cpu", "gpu")
NprocPerNode = Annotated[int, Field(ge=1)] | Annotated[str, Field(pattern=r"^(auto|cpu|gpu|[1-9][0-9]*)$")]


class PyTorchJobSpec(RunPolicy):
    pytorch_replica_specs: dict[str, ReplicaSpec]
    nproc_per_node: NprocPerNode | None = None
    elastic_policy: ElasticPolicy | None = None


class TFJobSpec(RunPolicy):
    tf_replica_specs: dict[str, ReplicaSpec]
    success_policy: Literal["", "AllWorkers"] | None = None


class _Job(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    status: JobStatus | None = None

    @property
    def framework(self) -> Framework:
        raise NotImplementedError

    @property
    def replica_specs(self) -> dict[str, ReplicaSpec]:
        raise NotImplementedError

    @property
    def run_policy(self) -> RunPolicy:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    @property
    def host_network(self) -> bool:
        annotations = self.metadata.annotations or {}
        return annotations.get(c.ANNOTATION_NETWORK_MODE) == c.NETWORK_MODE_HOST

    def to_dict(self) -> dict[str, Any]:
        """The wire form, with apiVersion and kind first as kubectl prints them."""
        body = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        ordered: dict[str, Any] = {
            key: body.pop(key) for key in ("apiVersion", "kind", "metadata", "spec") if key in body
        }
        ordered.update(body)
        return ordered


class PyTorchJob(_Job):
    api_version: Literal["training.kubedl.io/v1alpha1"] = "training.kubedl.io/v1alpha1"
    kind: Literal["PyTorchJob"] = c.PYTORCH_KIND
    spec: PyTorchJobSpec

    @property
    def framework(self) -> Framework:
        return PYTORCH

    @property
    def replica_specs(self) -> dict[str, ReplicaSpec]:
        return self.spec.pytorch_replica_specs

    @property
    def run_policy(self) -> RunPolicy:
        return self.spec


class TFJob(_Job):
    api_version: Literal["training.kubedl.io/v1alpha1"] = "training.kubedl.io/v1alpha1"
    kind: Literal["TFJob"] = c.TF_KIND
    spec: TFJobSpec

    @property
    def framework(self) -> Framework:
        return TENSORFLOW

    @property
    def replica_specs(self) -> dict[str, ReplicaSpec]:
        return self.spec.tf_replica_specs

    @property
    def run_policy(self) -> RunPolicy:
        return self.spec


Job = PyTorchJob | TFJob
JOB_MODELS: dict[str, type[PyTorchJob] | type[TFJob]] = {c.PYTORCH_KIND: PyTorchJob, c.TF_KIND: TFJob}
