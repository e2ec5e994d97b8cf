"""What a job kind is, as far as the API is concerned: the plug-in interface of the API half.

Why plug-ins: the kinds differ only in a few facts (replica types, default container and port, defaults, a
handful of validation rules) and in their rendezvous. Everything else — pods, Services, host-network mode,
run policies, status, CRD generation, the SDK and the CLI — is the same code for every kind. So a kind is
two small modules, this API half (``kubedl_py/api/kinds/<name>.py``: model, defaults, validation, CRD rules)
and its controller half (``kubedl_py/controllers/kinds/<name>.py``: rendezvous settings, success rule,
extra owned objects), and one line in the registry (``kubedl_py/api/kinds/__init__.py``). Nothing else in
the code base names a kind.

Each kind's model is a :class:`TrainingJob` subclass whose ``spec`` is the kind's own spec class (a
:class:`~kubedl_py.api.common.RunPolicy` subclass holding ``<kind>ReplicaSpecs`` and the kind's extra
fields). Code outside the kind's modules only uses the :class:`TrainingJob` interface (``framework``,
``replica_specs``, ``run_policy``) and its :class:`KindAPI` hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from kubedl_py.api import constants as c
from kubedl_py.api.common import JobStatus, KubeModel, ObjectMeta, ReplicaSpec, RunPolicy
from kubedl_py.api.errors import FieldError
from kubedl_py.api.groups import GROUPS, KUBEDL, ApiGroup, group_of, to_wire

#: the apiVersions a kind's model reads (which ones a kind is served in: ``KindAPI.groups``)
ServedIn = Literal["training.kubedl.io/v1alpha1", "kubeflow.org/v1"]


@dataclass(frozen=True)
class Framework:
    """The facts about a kind that generic code needs (names, defaults of containers and ports)."""

    kind: str
    plural: str
    #: the spec field holding the replica specs (``pytorchReplicaSpecs``)
    replica_specs_field: str
    #: the replica types, in the order pods are listed and ranks are given
    replica_types: tuple[str, ...]
    #: the container that runs the framework (gets the rendezvous settings and the port) when present
    container_name: str
    port_name: str
    default_port: int
    default_restart_policy: str
    default_clean_pod_policy: str
    #: the replica type of the job's interchangeable workers: what ``completionPolicy`` counts unless told, and
    #: the replica whose first pod stands for a job without a master type (its log, ``replica="master"``)
    worker_type: str
    #: ``kubectl get <short name>``
    short_names: tuple[str, ...] = ()
    #: replica types with exactly one pod (PyTorch's Master, TF's Chief): the pod labelled ``job-role: master``
    master_types: tuple[str, ...] = ()
    #: more names the SDK and the command line take for the kind, beside its kind, plural and short names
    aliases: tuple[str, ...] = ()
    #: the Training Operator's defaults where they differ from ours, for jobs in kubeflow.org (None: the same)
    kubeflow_restart_policy: str | None = None
    kubeflow_clean_pod_policy: str | None = None

    def restart_policy_for(self, group: ApiGroup) -> str:
        if group.name == "kubeflow" and self.kubeflow_restart_policy is not None:
            return self.kubeflow_restart_policy
        return self.default_restart_policy

    def clean_pod_policy_for(self, group: ApiGroup) -> str:
        if group.name == "kubeflow" and self.kubeflow_clean_pod_policy is not None:
            return self.kubeflow_clean_pod_policy
        return self.default_clean_pod_policy

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def start_order(self) -> tuple[str, ...]:
        """The replica types in the order a job needs them to start: its master types first (the pods it cannot
        start without), then the others as ``replica_types`` lists them. A gang's ``minMember`` fills this way."""
        return (*self.master_types, *(t for t in self.replica_types if t not in self.master_types))


class TrainingJob(KubeModel):
    """The common shape of every training job; each kind subclasses it with its ``spec`` and ``FRAMEWORK``."""

    FRAMEWORK: ClassVar[Framework]

    api_version: str = c.API_VERSION
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: RunPolicy
    status: JobStatus | None = None

    @property
    def framework(self) -> Framework:
        return self.FRAMEWORK

    @property
    def replica_specs(self) -> dict[str, ReplicaSpec]:
        specs: dict[str, ReplicaSpec] = getattr(self.spec, _snake(self.FRAMEWORK.replica_specs_field))
        return specs

    @property
    def run_policy(self) -> RunPolicy:
        return self.spec

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    @property
    def api_group(self) -> ApiGroup:
        """The API group the job was written for (its layout, labels and reasons: ``groups.py``)."""
        return group_of(self.api_version) or KUBEDL

    @property
    def host_network(self) -> bool:
        """Host-network mode: the annotation says ``host``, or it is absent and a replica's pod template asks for
        ``hostNetwork: true`` (such a template gets host ports chosen for it like an annotated job's: a host
        network without them would put two ranks on one port)."""
        mode = (self.metadata.annotations or {}).get(c.ANNOTATION_NETWORK_MODE)
        if mode is not None:
            return mode == c.NETWORK_MODE_HOST
        return bool(self.host_network_templates)

    @property
    def service_per_replica(self) -> bool:
        """A Service for every replica (``kubedl.io/replica-services: all``), not only for those their peers
        dial (``dialed``); without the annotation, the API group's default (kubeflow.org: every replica)."""
        wanted = (self.metadata.annotations or {}).get(c.ANNOTATION_REPLICA_SERVICES)
        if wanted is not None:
            return wanted == c.REPLICA_SERVICES_ALL
        return self.api_group.service_per_replica

    @property
    def host_network_templates(self) -> list[str]:
        """The replica types whose pod templates ask for ``hostNetwork: true`` themselves."""
        return [name for name, spec in self.replica_specs.items() if spec.template.spec.host_network]

    def to_dict(self) -> dict[str, Any]:
        """The wire form, with apiVersion and kind first as kubectl prints them."""
        body = to_wire(self.model_dump(by_alias=True, exclude_none=True, mode="json"), self.api_group)
        ordered: dict[str, Any] = {
            key: body.pop(key) for key in ("apiVersion", "kind", "metadata", "spec") if key in body
        }
        ordered.update(body)
        return ordered


def _snake(camel: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in camel)


Validator = Callable[[Any], list[FieldError]]
Defaulter = Callable[[Any], None]


def _no_errors(job: Any) -> list[FieldError]:
    return []


def _no_defaults(job: Any) -> None:
    return None


@dataclass(frozen=True)
class KindAPI:
    """The API half of a kind plug-in.

    - ``model``: the kind's :class:`TrainingJob` subclass (its ``FRAMEWORK`` is ``framework``);
    - ``validate(job)``: the kind's semantic rules beyond the schema (each a FieldError naming field and fix);
    - ``defaults(job)``: fills the kind's own defaults in place (the generic ones are applied before);
    - ``cel_rules``: CEL rules on the replica-spec map (what a schema cannot state, e.g. "one Master"),
      each ``{"rule": ..., "message": ...}``; the generic "known replica types" rule is added for every kind;
    - ``controller``: the dotted module of the controller half (default ``kubedl_py.controllers.kinds.<name>``);
    - ``owned_resources``: (API group, resource) of the objects its jobs own besides pods and Services (the
      install manifests grant the controller those, e.g. MPI's ``("", "configmaps")``);
    - ``kubeflow``: the kind is also served in ``kubeflow.org/v1`` (opt-in at install), because the Training
      Operator v1 has it; same model, the Training Operator's layout (``groups.py``).
    """

    name: str
    model: type[TrainingJob]
    validate: Validator = _no_errors
    defaults: Defaulter = _no_defaults
    cel_rules: tuple[Mapping[str, str], ...] = ()
    controller: str = ""
    owned_resources: tuple[tuple[str, str], ...] = ()
    kubeflow: bool = False

    @property
    def framework(self) -> Framework:
        return self.model.FRAMEWORK

    @property
    def kind(self) -> str:
        return self.framework.kind

    @property
    def api_version(self) -> str:
        """``group/version`` of the kind (the model's fixed ``apiVersion``)."""
        return str(self.model.model_fields["api_version"].default)

    @property
    def group(self) -> str:
        return self.api_version.partition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.partition("/")[2]

    @property
    def groups(self) -> tuple[ApiGroup, ...]:
        """The API groups the kind is served in: its own, and kubeflow.org when the Training Operator has it."""
        return GROUPS if self.kubeflow else (KUBEDL,)

    @property
    def controller_module(self) -> str:
        return self.controller or f"kubedl_py.controllers.kinds.{self.name}"
