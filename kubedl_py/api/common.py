"""Models shared by PyTorchJob and TFJob: replica specs, run policy, status, and a lossless pod template.

Each field's docstring (the string under it) is its description in the generated CRD, so ``kubectl explain
pytorchjob.spec`` shows it: write it for users.

The pod template is the user's, not ours: it must come back byte-for-byte equivalent after a round trip
through the models, whatever Kubernetes fields it carries. So only the few fields the controller reads are
typed; everything else is kept as extra fields (``extra="allow"``) and dumped back unchanged.
Optional fields default to ``None`` and are dumped with ``exclude_none`` so that defaults are applied
explicitly (``defaults.py``), never smuggled in by a round trip.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool
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

#: Kubernetes' int32 fields (counts, seconds, limits): a value past it is refused by name, not sent to fail as a raw
#: "Integer exceeds 64-bit range" (an adversary's ``ttlSecondsAfterFinished: 1e20``)
INT32_MAX = 2**31 - 1
NonNegativeInt = Annotated[int, Field(ge=0, le=INT32_MAX)]
#: a boolean field takes true or false only: "yes", "no" or "3" are refused, as the API server refuses them
Bool = StrictBool


class KubeModel(BaseModel):
    """Base for our own (closed) structures: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
        defer_build=True,
    )

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, unset optionals omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class OpenModel(BaseModel):
    """Base for Kubernetes structures we only partly type: unknown fields are kept losslessly."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        validate_assignment=True,
        defer_build=True,
    )

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
    """A port of a container (a Kubernetes ContainerPort: ``kubectl explain pod.spec.containers.ports``)."""

    container_port: int = Field(ge=1, le=65535)
    """The port the container listens on (in host-network mode, the controller sets it to the host port)."""
    name: str | None = None
    """The port's name; the framework's port (``pytorchjob-port``, ``tfjob-port``) is the rendezvous port."""
    host_port: int | None = Field(default=None, ge=0, le=65535)
    """The node's port to expose it on; in host-network mode the controller chooses it."""
    protocol: str | None = None
    """TCP (default), UDP or SCTP."""


class EnvVar(OpenModel):
    """An environment variable of a container (a Kubernetes EnvVar)."""

    name: str
    """The variable's name."""
    value: str | None = None
    """Its value (or use valueFrom, as in any pod)."""


class Container(OpenModel):
    """A container of the pod (a Kubernetes Container: every field of ``kubectl explain pod.spec.containers``
    is allowed; unknown ones fail the job, see docs/api.md)."""

    name: str = Field(min_length=1)
    """The container's name; the framework's (``pytorch``, ``tensorflow``...) gets the rendezvous settings."""
    image: str = Field(min_length=1)
    """The container image."""
    command: list[str] | None = None
    """The program and its arguments, as a list (the image's entrypoint when unset)."""
    args: list[str] | None = None
    """Arguments for the command (the image's CMD when unset)."""
    env: list[EnvVar] | None = None
    """Environment variables, besides those the controller sets (MASTER_ADDR, RANK, TF_CONFIG...)."""
    ports: list[ContainerPort] | None = None
    """Ports; the framework's port is added when missing."""


class PodSpec(OpenModel):
    """The pod's spec (a Kubernetes PodSpec: every field of ``kubectl explain pod.spec`` is allowed)."""

    containers: list[Container] = Field(min_length=1)
    """The pod's containers: at least one."""
    restart_policy: str | None = None
    """Set by the controller from the replica spec's restartPolicy."""
    host_network: Bool | None = None
    """Use the node's network; the job's kubedl.io/network-mode: host annotation sets it for every pod."""
    scheduler_name: str | None = None
    """The scheduler of the pods (a gang scheduler's, with schedulingPolicy)."""


class PodTemplateSpec(OpenModel):
    """The pods of this replica type: a Kubernetes pod template (metadata and spec)."""

    metadata: dict[str, Any] | None = None
    """Labels and annotations for the pods (the controller adds its own)."""
    spec: PodSpec
    """The pods' spec."""


class ReplicaSpec(KubeModel):
    """One replica type: how many pods, how they restart, and their pod template."""

    replicas: Annotated[int, Field(ge=0, le=MAX_TOTAL_REPLICAS)] | None = None
    """How many pods of this type (default 1)."""
    restart_policy: RestartPolicy | None = None
    """When a failed pod is restarted: Always, OnFailure, Never, or ExitCode (the controller replaces it when
    it ended by a signal, 128+n, or was OOMKilled or evicted, and fails the job on other exit codes)."""
    backoff_limit: NonNegativeInt | None = None
    """Restarts of this type's pods that fail the job, counted like the job's backoffLimit: e.g. 0 for a
    parameter server, a few for the workers (unset: only the job's limit)."""
    template: PodTemplateSpec
    """The pods' template."""


# A Kubernetes quantity (``16Gi``, ``512M``, ``1.5G``): what an emptyDir's ``sizeLimit`` takes.
Quantity = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[0-9]+)?$")]


class SchedulingPolicy(KubeModel):
    """Gang-scheduling settings: KubeDL's names plus the Training Operator's (``priorityClass``,
    ``minResources``, ``scheduleTimeoutSeconds``), so a job file of either peer applies unchanged."""

    min_available: Annotated[int, Field(ge=1)] | None = None
    """Pods that must be schedulable together before any starts (default: all of the job's replicas)."""
    queue: str | None = None
    """The gang scheduler's queue (Volcano) of the PodGroup."""
    priority_class_name: str | None = None
    """The PodGroup's priority class (KubeDL's name for it)."""
    priority_class: str | None = None
    """The same under the Training Operator's name (used when priorityClassName is unset)."""
    min_resources: dict[str, int | str] | None = None
    """The PodGroup's minResources, quantities by resource name (unset: the sum of the pods' requests)."""
    # Not checked by the schema: a per-value CEL rule on an unbounded map is over the real API server's
    # cost budget, and the PodGroup's own API server validates its quantities.
    schedule_timeout_seconds: Annotated[int, Field(ge=1)] | None = None
    """scheduler-plugins' PodGroup scheduleTimeoutSeconds: how long the gang may wait to be scheduled."""

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
    """GPUs per pod: {index} runs from 1 to count."""
    resource: IndexTemplate | None = None
    """Resource name template, e.g. spidernet.io/gpu{index}sriov; each gets a count of 1."""
    network: IndexTemplate | None = None
    """Network template, e.g. kube-system/gpu{index}-sriov."""


class DraSpec(KubeModel):
    """GPUs and RDMA NICs through Dynamic Resource Allocation: one ResourceClaimTemplate per replica type, each
    GPU requested with its NICs on the same PCIe root (``resource.kubernetes.io/pcieRoot``)."""

    gpus: Annotated[int, Field(ge=1, le=16)]
    """GPUs per pod."""
    nics_per_gpu: Annotated[int, Field(ge=0, le=8)] | None = None
    """RDMA NICs per GPU (default 1; 0: GPUs only)."""
    align: Literal["pcieRoot", "none"] | None = None
    """pcieRoot (default): each GPU's NICs on its PCIe root (GPUDirect RDMA); none: any NICs of the node."""
    gpu_device_class: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """The DeviceClass of the GPUs (default gpu.nvidia.com, NVIDIA's DRA driver's)."""
    nic_device_class: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """The DeviceClass of the NICs (default dranet, kubernetes-sigs/dranet's)."""
    replica_types: list[Annotated[str, Field(min_length=1, max_length=63)]] | None = None
    """The replica types that get the devices (default: every one)."""


class RdmaSpec(KubeModel):
    """Opt-in RDMA settings for every replica: devices, networks, /dev/shm, IPC_LOCK and NCCL variables."""

    devices: dict[str, Annotated[int, Field(ge=1)]] | None = None
    """Extended resources added to the framework container's limits and requests, e.g. {rdma/hca: 1}."""
    per_gpu: PerGpu | None = None
    """One SR-IOV device and one Multus network per GPU (Spiderpool style)."""
    networks: list[NetworkRef] | None = None
    """Multus attachments for the k8s.v1.cni.cncf.io/networks pod annotation (name or namespace/name)."""
    shm_size: Quantity | None = None
    """Size of the memory-backed /dev/shm (unset: no sizeLimit, bounded by the pod's memory)."""
    ipc_lock: Bool | None = None
    """Add the IPC_LOCK capability (RDMA pins memory); default true."""
    nccl: dict[str, str | int] | None = None
    """Environment variables (NCCL_*) for the framework container."""
    dra: DraSpec | None = None
    """GPUs and NICs claimed through Dynamic Resource Allocation, aligned on PCIe roots (docs/rdma.md)."""


class Placement(KubeModel):
    """Keep a job's pods in one topology domain (a leaf switch, a rail group) named by a node label."""

    topology_key: Annotated[str, Field(min_length=1, max_length=316)]
    """The node label naming the domain, e.g. a leaf switch's."""
    mode: Literal["Preferred", "Required"] | None = None
    """Preferred (default): pod affinity weight 100; Required: pods wait until they fit in one domain."""


#: a count of replicas, or a share of them (``"75%"``)
Share = Annotated[int, Field(ge=0)] | Annotated[str, Field(pattern=r"^(100|[1-9]?[0-9])%$")]


class FailurePolicy(KubeModel):
    """What a failure does to the rest of the job (docs/policies.md)."""

    restart_scope: Literal["Replica", "Job"] | None = None
    """Replica (default): a failed replica's pod is replaced alone. Job: every pod of the job is replaced
    together, new ones only once all old ones are gone (a fresh rendezvous), one restart per time."""
    restart_mode: Literal["Auto", "InPlace", "Recreate"] | None = None
    """How a retryable failure of a restartPolicy ExitCode replica restarts it. Auto (default) and InPlace:
    in its own pod (the kubelet's container restart rules: exits 128-255 restart the container; same pod,
    node, IP and host port, its emptyDir volumes kept), recreated only where the node cannot (a kubelet
    before 1.35, ContainerRestartRules off), with an InPlaceRestartUnavailable event. Recreate: a new pod
    every time. With restartScope Job, Auto and InPlace restart every pod whole in its place (the kubelet's
    RestartAllContainers, Kubernetes 1.36+: an agent container in each pod is told the job's attempt and
    holds the program until every rank has stopped the one before); Auto recreates where no node declares
    RestartAllContainersOnContainerExits, InPlace waits for one."""
    pending_timeout_seconds: Annotated[int, Field(ge=1)] | None = None
    """Fail the job when one of its pods has been Pending this long, naming the pod and why (an image that
    cannot be pulled, no node that fits, a volume that cannot be mounted); unset: wait forever."""
    infrastructure_backoff_limit: NonNegativeInt | None = None
    """Restarts caused by the cluster (eviction, preemption, a lost node, a disruption, a hang) that fail the
    job, counted as backoffLimit counts the program's own failures, which they never spend; unset: the
    controller's --infrastructure-backoff-limit (100)."""
    node_lost_timeout_seconds: NonNegativeInt | None = None
    """A pod on a node that is not Ready (lost, partitioned, its kubelet down) is deleted at once (grace
    period 0) and replaced elsewhere once the node has not been Ready for this long; unset: the
    controller's --node-lost-timeout (60 s, after Kubernetes' own node-monitor-grace-period)."""
    avoid_node_after_failures: Annotated[int, Field(ge=1, le=10)] | None = None
    """Opt-in: keep the job's new pods off a node once this many of its failures happened there (a lost node
    at once); the nodes are listed in status.avoidedNodes until the job finishes."""


class CompletionPolicy(KubeModel):
    """Success and failure by share of one replica type (docs/policies.md)."""

    replica_type: str | None = None
    """The replica type counted (default: the kind's worker type, Worker)."""
    min_succeeded: Share | None = None
    """The job succeeds once this many (or this share, e.g. 75%) of them have succeeded."""
    max_failed: Share | None = None
    """This many (or this share) of them may fail for good without failing the job; one more fails it."""


class RunPolicy(KubeModel):
    """Fields that KubeDL keeps inline in ``spec``; shared by every job kind.

    ``rdma`` and ``placement`` are not run policies in KubeDL's sense, but they too are shared by every
    kind, so they live in this common base of the job specs.
    """

    clean_pod_policy: CleanPodPolicy | None = None
    """Which pods are deleted when the job finishes: All, Running (those still running), or None (keep
    them and their logs). Default: None for PyTorchJob, Running for TFJob."""
    ttl_seconds_after_finished: NonNegativeInt | None = None
    """Delete the job (with its pods and Services) this many seconds after it finished (unset: keep it)."""
    active_deadline_seconds: Annotated[int, Field(ge=1)] | None = None
    """Fail the job (reason DeadlineExceeded) when it has run this long since it started."""
    backoff_limit: NonNegativeInt | None = None
    """Fail the job (reason BackoffLimitExceeded) when its pods have restarted this many times in all
    (unset: no limit)."""
    scheduling_policy: SchedulingPolicy | None = None
    """Gang scheduling: a PodGroup for the job's pods (with a gang scheduler, docs/gang-scheduling.md)."""
    suspend: Bool | None = None
    """No pods while true (what Kueue drives); set back to false to start the job, with a fresh startTime."""
    managed_by: ManagedBy | None = None
    """Who reconciles the job: unset or kubeflow.org/training-operator (kubedl-py is its drop-in) or
    kubedl.io/kubedl-py; kueue.x-k8s.io/multikueue leaves the job to MultiKueue. Any other value is refused,
    and the field cannot change once set."""
    failure_policy: FailurePolicy | None = None
    """What a failure does to the rest of the job: whole-job restarts, pending timeouts (docs/policies.md)."""
    completion_policy: CompletionPolicy | None = None
    """Success and failure by share of one replica type (docs/policies.md)."""
    progress_deadline_seconds: Annotated[int, Field(ge=10)] | None = None
    """Opt-in hang detection: while the job runs, a rank that has written no log line for this long (the
    rendezvous host's) makes the job Stalled, and it is restarted whole, counted as an infrastructure
    failure."""
    rdma: RdmaSpec | None = None
    """Opt-in RDMA for every replica: devices, networks, /dev/shm, IPC_LOCK, NCCL variables (docs/rdma.md)."""
    placement: Placement | None = None
    """Keep the job's pods in one topology domain named by a node label (docs/rdma.md)."""


class StatusModel(BaseModel):
    """Base for status structures: written by a controller, so unknown fields from a newer writer are
    ignored rather than refused (a client must never fail to read a job because its status grew)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        validate_assignment=True,
        defer_build=True,
    )

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class JobCondition(StatusModel):
    """One condition of the job."""

    type: ConditionType
    """Created, Running, Restarting, Succeeded, Failed, Suspended or Stalled."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: str | None = None
    """Why, in one word (JobSucceeded, ReplicaFailed, BackoffLimitExceeded, InvalidSpec...)."""
    message: str | None = None
    """Why, in a sentence naming the replica and what happened."""
    last_update_time: datetime | None = None
    """When the condition was last written."""
    last_transition_time: datetime | None = None
    """When its status last changed."""


class ReplicaFailure(StatusModel):
    """One failure of a replica's pod, as the controller saw it before the pod went: the evidence."""

    replica_type: str | None = None
    """The replica type (in status.failures; lastFailure sits under its type already)."""
    index: NonNegativeInt | None = None
    """The replica's index."""
    pod: str | None = None
    """The pod's name."""
    pod_uid: str | None = Field(default=None, alias="podUID")
    """The pod's uid (a replaced pod has the same name, another uid)."""
    attempt: NonNegativeInt | None = None
    """Which run of the pod's container failed: 0 the first, 1 after one in-place restart."""
    failure_class: FailureClass = Field(alias="class")
    """User (the program's own failure) or Infrastructure (the cluster's: eviction, a lost node, a hang)."""
    reason: str
    """The pod's or the container's reason (Error, OOMKilled, Evicted, NodeLost, Stalled)."""
    exit_code: int | None = None
    """The container's exit code."""
    signal: int | None = None
    """The signal that ended the container (exit codes 128+n)."""
    node: str | None = None
    """The node it ran on."""
    time: datetime | None = None
    """When it failed."""
    message: str | None = None
    """The container's termination message: with FallbackToLogsOnError its last log lines (bounded)."""


class AvoidedNode(StatusModel):
    """A node the job's new pods are kept off (``failurePolicy.avoidNodeAfterFailures``)."""

    node: str
    """The node's name."""
    reason: str
    """Why it is avoided."""
    time: datetime | None = None
    """Since when."""


class RestartAttempt(StatusModel):
    """Where a job restarted whole in place stands (``failurePolicy.restartScope: Job``)."""

    attempt: NonNegativeInt | None = None
    """The job's attempt: raised by one on every restart of the whole job in place."""
    released: NonNegativeInt | None = None
    """The attempt the ranks may run: raised once every pod has stopped its program of the one before."""
    since: datetime | None = None
    """When the attempt was raised, while it is not released."""
    pods: dict[str, list[NonNegativeInt]] | None = None
    """Per live pod (by uid): the attempt it was at when the last one was released, and its restarts then."""
    unavailable: str | None = None
    """Why the job's pods are made without the in-place agent (restartMode Auto where no node can)."""


class ReplicaStatus(StatusModel):
    """The pods of one replica type."""

    active: NonNegativeInt | None = None
    """Pods running (or about to)."""
    succeeded: NonNegativeInt | None = None
    """Pods that succeeded."""
    failed: NonNegativeInt | None = None
    """Pods that failed for good."""
    restarts: NonNegativeInt | None = None
    """Restarts charged to the program (user failures): pods of this type replaced after one, plus in-place
    container restarts; with the live pods' restart counts it is what backoffLimit is checked against."""
    infrastructure_restarts: NonNegativeInt | None = None
    """Restarts charged to the cluster (infrastructure failures), checked against
    failurePolicy.infrastructureBackoffLimit."""
    last_failure: ReplicaFailure | None = None
    """The latest failure of a pod of this type."""
    selector: str | None = None
    """The pods of this type as a label selector (the Training Operator writes both forms)."""
    label_selector: dict[str, Any] | None = None
    """The same as a label selector object."""


class JobStatus(StatusModel):
    """What the controller observed: conditions, pods by replica type, times."""

    conditions: list[JobCondition] | None = None
    """The job's conditions, oldest first; the last True one is its state."""
    replica_statuses: dict[str, ReplicaStatus] | None = None
    """Pods by replica type: active, succeeded, failed, restarts, the latest failure."""
    failures: list[ReplicaFailure] | None = None
    """The job's latest failures (at most 10, oldest first): what describe lists as the attempts and
    logs --previous prints for ranks whose pods are gone."""
    avoided_nodes: list[AvoidedNode] | None = None
    """Nodes the job's new pods are kept off (failurePolicy.avoidNodeAfterFailures), until it finishes."""
    in_place_counted: dict[str, NonNegativeInt] | None = None
    """The container restarts of each live pod (by pod uid) already counted in replicaStatuses restarts:
    in-place restarts are counted as they happen, each once, also across a controller restart."""
    restart_attempt: RestartAttempt | None = None
    """A job restarted whole in place: its attempt, the released one, and where each pod stands."""
    start_time: datetime | None = None
    """When the controller started the job (again after a suspension)."""
    completion_time: datetime | None = None
    """When it succeeded or failed."""
    last_reconcile_time: datetime | None = None
    """When the controller last reconciled it."""
