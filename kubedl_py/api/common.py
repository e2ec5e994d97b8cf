"""Models shared by PyTorchJob and TFJob: replica specs, run policy, status, and a lossless pod template.

The pod template is the user's, not ours: it must come back byte-for-byte equivalent after a round trip
through the models, whatever Kubernetes fields it carries. So only the few fields the controller reads are
typed; everything else is kept as extra fields (``extra="allow"``) and dumped back unchanged.
Optional fields default to ``None`` and are dumped with ``exclude_none`` so that defaults are applied
explicitly (``defaults.py``), never smuggled in by a round trip.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kubedl_py.api.constants import MAX_TOTAL_REPLICAS

RestartPolicy = Literal["Always", "OnFailure", "Never", "ExitCode"]
CleanPodPolicy = Literal["All", "Running", "None"]
#: ``runPolicy.managedBy`` values (groups.py: KUBEFLOW_MANAGER, MULTIKUEUE_MANAGER, KUBEDL_MANAGER)
ManagedBy = Literal["kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue", "kubedl.io/kubedl-py"]
ConditionType = Literal["Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended", "Stalled"]
#: who a pod failure is charged to: the program (``User``: spends ``backoffLimit``) or the cluster
#: (``Infrastructure``: eviction, preemption, lost node, disruption, a hang; spends
#: ``failurePolicy.infrastructureBackoffLimit``); see controllers/failures.py
FailureClass = Literal["User", "Infrastructure"]
ConditionStatus = Literal["True", "False", "Unknown"]

NonNegativeInt = Annotated[int, Field(ge=0)]


class KubeModel(BaseModel):
    """Base for our own (closed) structures: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", validate_assignment=True)

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, unset optionals omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class OpenModel(BaseModel):
    """Base for Kubernetes structures we only partly type: unknown fields are kept losslessly."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", validate_assignment=True)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ObjectMeta(OpenModel):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None


class ContainerPort(OpenModel):
    container_port: int = Field(ge=1, le=65535)
    name: str | None = None
    host_port: int | None = Field(default=None, ge=0, le=65535)
    protocol: str | None = None


class EnvVar(OpenModel):
    name: str
    value: str | None = None


class Container(OpenModel):
    name: str = Field(min_length=1)
    image: str = Field(min_length=1)
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    ports: list[ContainerPort] | None = None


class PodSpec(OpenModel):
    containers: list[Container] = Field(min_length=1)
    restart_policy: str | None = None
    host_network: bool | None = None
    scheduler_name: str | None = None


class PodTemplateSpec(OpenModel):
    metadata: dict[str, Any] | None = None
    spec: PodSpec


class ReplicaSpec(KubeModel):
    replicas: Annotated[int, Field(ge=0, le=MAX_TOTAL_REPLICAS)] | None = None
    restart_policy: RestartPolicy | None = None
    #: restarts of this replica type's pods that fail the job, counted as the job-wide ``backoffLimit`` is
    #: (the job fails when they reach it): e.g. no restart of a parameter server, a few of the workers
    backoff_limit: NonNegativeInt | None = None
    template: PodTemplateSpec


# A Kubernetes quantity (``16Gi``, ``512M``, ``1.5G``): what an emptyDir's ``sizeLimit`` takes.
Quantity = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[0-9]+)?$")]


class SchedulingPolicy(KubeModel):
    """Gang-scheduling settings: KubeDL's names plus the Training Operator's (``priorityClass``,
    ``minResources``, ``scheduleTimeoutSeconds``), so a job file of either peer applies unchanged."""

    min_available: Annotated[int, Field(ge=1)] | None = None
    queue: str | None = None
    #: KubeDL's name of the PodGroup's priority class
    priority_class_name: str | None = None
    #: the Training Operator's name of the same (used when ``priorityClassName`` is unset)
    priority_class: str | None = None
    #: the PodGroup's minResources, quantities by resource name (unset: computed from the replica specs).
    #: Not checked here: a per-value CEL rule on an unbounded map is over the real API server's cost budget,
    #: and the PodGroup's own API server validates its quantities.
    min_resources: dict[str, int | str] | None = None
    #: scheduler-plugins' PodGroup scheduleTimeoutSeconds
    schedule_timeout_seconds: Annotated[int, Field(ge=1)] | None = None

    @property
    def priority(self) -> str | None:
        return self.priority_class_name or self.priority_class


# A Multus network-attachment reference: ``name`` or ``namespace/name``, optionally ``@interface``.
NetworkRef = Annotated[
    str, Field(pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?(@[A-Za-z0-9_.-]+)?$")
]
# A per-GPU name template: ``{index}`` becomes 1..count.
IndexTemplate = Annotated[str, Field(min_length=1, pattern=r"\{index\}")]


class PerGpu(KubeModel):
    """One SR-IOV device and one Multus network per GPU (Spiderpool style): ``{index}`` runs 1..count."""

    count: Annotated[int, Field(ge=1, le=64)]
    #: resource name template, e.g. ``spidernet.io/gpu{index}sriov``; each gets a count of 1
    resource: IndexTemplate | None = None
    #: network template, e.g. ``kube-system/gpu{index}-sriov``
    network: IndexTemplate | None = None


class RdmaSpec(KubeModel):
    """Opt-in RDMA settings for every replica: devices, networks, /dev/shm, IPC_LOCK and NCCL variables."""

    #: extended resources added to the framework container's limits and requests, e.g. ``{rdma/hca: 1}``
    devices: dict[str, Annotated[int, Field(ge=1)]] | None = None
    per_gpu: PerGpu | None = None
    #: Multus attachments for the ``k8s.v1.cni.cncf.io/networks`` pod annotation
    networks: list[NetworkRef] | None = None
    #: size of the memory-backed /dev/shm (unset: no sizeLimit, bounded by the pod's memory)
    shm_size: Quantity | None = None
    #: add the IPC_LOCK capability (RDMA pins memory); default true
    ipc_lock: bool | None = None
    #: environment variables (NCCL_*) for the framework container
    nccl: dict[str, str | int] | None = None


class Placement(KubeModel):
    """Keep a job's pods in one topology domain (a leaf switch, a rail group) named by a node label."""

    topology_key: Annotated[str, Field(min_length=1, max_length=316)]
    #: Preferred (default): pod affinity weight 100; Required: pods wait until they fit in one domain
    mode: Literal["Preferred", "Required"] | None = None


#: a count of replicas, or a share of them (``"75%"``)
Share = Annotated[int, Field(ge=0)] | Annotated[str, Field(pattern=r"^(100|[1-9]?[0-9])%$")]


class FailurePolicy(KubeModel):
    """What a failure does to the rest of the job (docs/policies.md)."""

    #: ``Replica`` (default): a failed replica's pod is replaced alone. ``Job``: every pod of the job is
    #: replaced together, new ones only once all old ones are gone (a fresh rendezvous), one restart per time
    restart_scope: Literal["Replica", "Job"] | None = None
    #: fail the job when one of its pods has been Pending this long, naming the pod and why (an image that
    #: cannot be pulled, no node that fits, a volume that cannot be mounted); unset: wait forever
    pending_timeout_seconds: Annotated[int, Field(ge=1)] | None = None
    #: restarts caused by the cluster (eviction, preemption, a lost node, a disruption, a hang) that fail the
    #: job, counted as ``backoffLimit`` counts the program's own failures, which they never spend; unset: the
    #: controller's ``--infrastructure-backoff-limit`` (100)
    infrastructure_backoff_limit: NonNegativeInt | None = None
    #: a pod on a node that is not Ready (lost, partitioned, its kubelet down) is deleted at once (grace
    #: period 0) and replaced elsewhere once the node has not been Ready for this long; unset: the
    #: controller's ``--node-lost-timeout`` (60 s, after Kubernetes' own node-monitor-grace-period)
    node_lost_timeout_seconds: NonNegativeInt | None = None
    #: opt-in: keep the job's new pods off a node once this many of its failures happened there (a lost node
    #: at once); the nodes are listed in ``status.avoidedNodes`` until the job finishes
    avoid_node_after_failures: Annotated[int, Field(ge=1, le=10)] | None = None


class CompletionPolicy(KubeModel):
    """Success and failure by share of one replica type (docs/policies.md)."""

    #: the replica type counted (default ``Worker``)
    replica_type: str | None = None
    #: the job succeeds once this many (or this share) of them have succeeded
    min_succeeded: Share | None = None
    #: this many (or this share) of them may fail for good without failing the job; one more fails it
    max_failed: Share | None = None


class RunPolicy(KubeModel):
    """Fields that KubeDL keeps inline in ``spec``; shared by every job kind.

    ``rdma`` and ``placement`` are not run policies in KubeDL's sense, but they too are shared by every
    kind, so they live in this common base of the job specs.
    """

    clean_pod_policy: CleanPodPolicy | None = None
    ttl_seconds_after_finished: NonNegativeInt | None = None
    active_deadline_seconds: Annotated[int, Field(ge=1)] | None = None
    backoff_limit: NonNegativeInt | None = None
    scheduling_policy: SchedulingPolicy | None = None
    #: no pods while true (what Kueue drives); set back to false to start the job, with a fresh startTime
    suspend: bool | None = None
    #: who reconciles the job: unset or ``kubeflow.org/training-operator`` (kubedl-py is its drop-in) or
    #: ``kubedl.io/kubedl-py``; ``kueue.x-k8s.io/multikueue`` leaves the job to MultiKueue. Any other value is
    #: refused, and the field cannot change once set (the Training Operator's rules: ``crd.py`` writes the
    #: second as a CEL transition rule)
    managed_by: ManagedBy | None = None
    failure_policy: FailurePolicy | None = None
    completion_policy: CompletionPolicy | None = None
    #: opt-in hang detection: while the job runs, a rank that has written no log line for this long (the
    #: rendezvous host's, read with ``tailLines=1``) makes the job ``Stalled``, and it is restarted whole,
    #: counted as an infrastructure failure
    progress_deadline_seconds: Annotated[int, Field(ge=10)] | None = None
    rdma: RdmaSpec | None = None
    placement: Placement | None = None


class StatusModel(BaseModel):
    """Base for status structures: written by a controller, so unknown fields from a newer writer are
    ignored rather than refused (a client must never fail to read a job because its status grew)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", validate_assignment=True)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class JobCondition(StatusModel):
    type: ConditionType
    status: ConditionStatus
    reason: str | None = None
    message: str | None = None
    last_update_time: datetime | None = None
    last_transition_time: datetime | None = None


class ReplicaFailure(StatusModel):
    """One failure of a replica's pod, as the controller saw it before the pod went: the evidence."""

    #: the replica (in ``status.failures``; ``lastFailure`` sits under its type already)
    replica_type: str | None = None
    index: NonNegativeInt | None = None
    pod: str | None = None
    pod_uid: str | None = Field(default=None, alias="podUID")
    #: which run of the pod's container failed: 0 the first, 1 after one in-place restart
    attempt: NonNegativeInt | None = None
    failure_class: FailureClass = Field(alias="class")
    #: the pod's or the container's reason (``Error``, ``OOMKilled``, ``Evicted``, ``NodeLost``, ``Stalled``)
    reason: str
    exit_code: int | None = None
    #: the signal that ended the container (exit codes 128+n)
    signal: int | None = None
    node: str | None = None
    time: datetime | None = None
    #: the container's termination message: with ``FallbackToLogsOnError`` its last log lines (bounded)
    message: str | None = None


class AvoidedNode(StatusModel):
    """A node the job's new pods are kept off (``failurePolicy.avoidNodeAfterFailures``)."""

    node: str
    reason: str
    time: datetime | None = None


class ReplicaStatus(StatusModel):
    active: NonNegativeInt | None = None
    succeeded: NonNegativeInt | None = None
    failed: NonNegativeInt | None = None
    #: restarts charged to the program (user failures): pods of this type replaced after one, plus in-place
    #: container restarts; with the live pods' restart counts it is what backoffLimit is checked against
    restarts: NonNegativeInt | None = None
    #: restarts charged to the cluster (infrastructure failures), checked against
    #: failurePolicy.infrastructureBackoffLimit
    infrastructure_restarts: NonNegativeInt | None = None
    #: the latest failure of a pod of this type
    last_failure: ReplicaFailure | None = None
    #: the pods of this type as a label selector string and object (the Training Operator writes both)
    selector: str | None = None
    label_selector: dict[str, Any] | None = None


class JobStatus(StatusModel):
    conditions: list[JobCondition] | None = None
    replica_statuses: dict[str, ReplicaStatus] | None = None
    #: the job's latest failures (at most 10, oldest first): what ``describe`` lists as the attempts and
    #: ``logs --previous`` prints for ranks whose pods are gone
    failures: list[ReplicaFailure] | None = None
    #: nodes the job's new pods are kept off (``failurePolicy.avoidNodeAfterFailures``), until it finishes
    avoided_nodes: list[AvoidedNode] | None = None
    start_time: datetime | None = None
    completion_time: datetime | None = None
    last_reconcile_time: datetime | None = None
