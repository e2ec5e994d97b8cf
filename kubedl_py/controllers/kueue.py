"""Kueue's job contract, kept by kubedl-py itself: a Workload per queued job, no pod before it is admitted.

Why: Kueue queues jobs against quotas, but its built-in ``kubeflow.org`` integration is deprecated (v0.19) and
going away, and it never knew ``training.kubedl.io``. Kueue documents a path for any other job controller
(an *external framework*): the controller makes the job's ``Workload`` and obeys it. This module is that
controller half, for both API groups and every kind; Kueue decides, kubedl-py acts:

- a job labelled ``kueue.x-k8s.io/queue-name`` gets a Workload owned by the job (controller owner
  reference, so the garbage collector removes it with the job): one pod set per replica type (name = the type
  in lower case, count = its replicas, template = its pod template), the LocalQueue from the label, and the
  priority of the ``kueue.x-k8s.io/priority-class`` WorkloadPriorityClass (else of the templates'
  ``priorityClassName``, else 0), computed here because Kueue leaves that to the job's controller;
- until the Workload is ``Admitted`` the job is held like a suspended one: no pods, no Services, condition
  ``Suspended`` naming the Workload and its queue. The job's own ``suspend`` field is the user's and is never
  written here;
- once admitted, the pods are made with what the admission says (:func:`pod_set_infos`): the node labels
  and tolerations of the assigned ResourceFlavors, the admission checks' pod-set updates, Kueue's pod-set and
  queue labels, and, where topology-aware scheduling assigned a topology, Kueue's topology scheduling gate
  and workload annotation, so Kueue's ungater places each pod in its domain;
- an ``Evicted`` Workload (preempted, deactivated, its queue stopped) stops the job: pods deleted, job
  ``Suspended`` again; once none of its pods is running the quota reservation is released (the job
  controller's part of an eviction in Kueue's contract) and Kueue queues it again;
- a finished job marks its Workload ``Finished`` (``Succeeded``/``Failed``), which frees the quota.

Which jobs: ``--kueue-workloads`` (:data:`KUEUE_MODES`). ``kubedl`` (the default) handles
``training.kubedl.io`` jobs and leaves ``kubeflow.org`` ones to Kueue's own integration, which flips
``runPolicy.suspend`` (the old path, while Kueue ships it); ``all`` handles both groups and is for a Kueue
whose ``kubeflow.org`` integrations are disabled (else two controllers would make a Workload for each
job); ``off`` handles none.

One step of the reconcile (:class:`Workloads`: :meth:`~Workloads.gate` before any pod, :meth:`~Workloads.
prepare` and :meth:`~Workloads.apply` for each pod made, :meth:`~Workloads.finish` once the job ended): the
job reconcile asks it, and it writes only Workloads.
"""

from __future__ import annotations

import copy
import logging
import re
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.api.groups import KUBEDL, ApiGroup
from kubedl_py.api.plain import Object
from kubedl_py.controllers import status as st
from kubedl_py.controllers.features import Wiring
from kubedl_py.controllers.kueue_status import condition, set_condition, workload_is
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.outcomes import JobFailure
from kubedl_py.controllers.ownership import owner_reference
from kubedl_py.controllers.plan import Plan
from kubedl_py.controllers.podstate import is_active
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.informer import OWNER_INDEX, Informer
from kubedl_py.kube.resources import Resource

logger = logging.getLogger(__name__)

KueueMode = Literal["off", "kubedl", "all"]
#: ``--kueue-workloads`` choices: which API groups' queued jobs get a Workload made by kubedl-py
KUEUE_MODES: Final = ("off", "kubedl", "all")
DEFAULT_KUEUE_MODE: Final[KueueMode] = "kubedl"

GROUP: Final = "kueue.x-k8s.io"
VERSION: Final = "v1beta2"
WORKLOADS: Final = Resource(GROUP, VERSION, "workloads", "Workload")
RESOURCE_FLAVORS: Final = Resource(GROUP, VERSION, "resourceflavors", "ResourceFlavor", namespaced=False)
WORKLOAD_PRIORITY_CLASSES: Final = Resource(
    GROUP, VERSION, "workloadpriorityclasses", "WorkloadPriorityClass", namespaced=False
)
PRIORITY_CLASSES: Final = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)

#: the label that puts a job in a LocalQueue
QUEUE_LABEL: Final = f"{GROUP}/queue-name"
#: the label that gives a job a WorkloadPriorityClass
PRIORITY_CLASS_LABEL: Final = f"{GROUP}/priority-class"
#: on the Workload: the uid of its job (what Kueue's own integrations put there, and ``kubectl get -l`` finds)
JOB_UID_LABEL: Final = f"{GROUP}/job-uid"
#: on pods: the pod set (replica type) they belong to, and their queues (Kueue's names)
PODSET_LABEL: Final = f"{GROUP}/podset"
LOCAL_QUEUE_LABEL: Final = f"{GROUP}/local-queue-name"
CLUSTER_QUEUE_LABEL: Final = f"{GROUP}/cluster-queue-name"
#: topology-aware scheduling: Kueue's ungater lifts this gate once it has placed the pod in its domain
TOPOLOGY_GATE: Final = f"{GROUP}/topology"
WORKLOAD_ANNOTATION: Final = f"{GROUP}/workload"
UNCONSTRAINED_TOPOLOGY: Final = f"{GROUP}/podset-unconstrained-topology"
REQUIRED_TOPOLOGY: Final = f"{GROUP}/podset-required-topology"
PREFERRED_TOPOLOGY: Final = f"{GROUP}/podset-preferred-topology"

#: Workload condition types (``apis/kueue/v1beta2/workload_types.go``)
ADMITTED: Final = "Admitted"
QUOTA_RESERVED: Final = "QuotaReserved"
EVICTED: Final = "Evicted"
FINISHED: Final = "Finished"
REQUEUED: Final = "Requeued"
#: eviction reasons after which Kueue expects the job back in the queue (``Requeued`` True)
REQUEUED_AFTER: Final = frozenset({"Preempted", "NodeFailures"})

#: seconds between looks at a Workload while waiting, when no informer announces its admission
POLL_SECONDS: Final = 5.0


def group_managed(mode: KueueMode, api_group: ApiGroup) -> bool:
    """Whether ``--kueue-workloads=mode`` makes Workloads for jobs of ``api_group``."""
    return mode == "all" or (mode == "kubedl" and api_group is KUBEDL)


def queue_name(job: TrainingJob) -> str | None:
    return (job.metadata.labels or {}).get(QUEUE_LABEL) or None


def workload_name(job: TrainingJob) -> str:
    """``<kind>-<job>-<uid 5>``, as Kueue names the Workloads of its own integrations; within 253 characters."""
    suffix = f"-{(job.metadata.uid or '')[:5]}"
    return f"{job.kind.lower()}-{job.name}"[: 253 - len(suffix)] + suffix


def pod_set_name(replica_type: str) -> str:
    return replica_type.lower()


def _topology_request(template: Object) -> Object | None:
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    request: Object = {}
    if annotations.get(REQUIRED_TOPOLOGY):
        request["required"] = annotations[REQUIRED_TOPOLOGY]
    elif annotations.get(PREFERRED_TOPOLOGY):
        request["preferred"] = annotations[PREFERRED_TOPOLOGY]
    elif annotations.get(UNCONSTRAINED_TOPOLOGY) == "true":
        request["unconstrained"] = True
    if not request:
        return None
    request["podIndexLabel"] = c.LABEL_REPLICA_INDEX
    return request


def pod_sets(job: TrainingJob) -> list[Object]:
    """One pod set per replica type, in the job's order: what Kueue counts quota from."""
    sets: list[Object] = []
    for replica_type, spec in job.replica_specs.items():
        template = spec.template.to_dict()
        meta = template.get("metadata") or {}
        pod_set: Object = {
            "name": pod_set_name(replica_type),
            "count": spec.replicas or 0,
            "template": {
                "metadata": {k: meta[k] for k in ("labels", "annotations") if meta.get(k)},
                "spec": template["spec"],
            },
        }
        topology = _topology_request(template)
        if topology is not None:
            pod_set["topologyRequest"] = topology
        sets.append(pod_set)
    return sets


def build_workload(job: TrainingJob, *, priority: int, priority_ref: Object | None) -> Object:
    spec: Object = {"queueName": queue_name(job) or "", "podSets": pod_sets(job), "priority": priority}
    if priority_ref is not None:
        spec["priorityClassRef"] = priority_ref
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": WORKLOADS.kind,
        "metadata": {
            "name": workload_name(job),
            "namespace": job.namespace,
            "labels": {
                c.LABEL_CONTROLLER: c.CONTROLLER_NAME,
                c.LABEL_JOB_NAME: job.name[:63],
                JOB_UID_LABEL: job.metadata.uid or "",
            },
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }


@dataclass
class PodSetInfo:
    """What an admission adds to the pods of one pod set (Kueue's ``podset.PodSetInfo``)."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[Object] = field(default_factory=list)
    scheduling_gates: list[str] = field(default_factory=list)


class PlacementConflict(ValueError):
    """The admission's node labels contradict the pod template's nodeSelector: the pods could never run there."""


def apply(pod: Object, info: PodSetInfo) -> None:
    """Merge ``info`` into ``pod`` (in place), as Kueue's ``podset.Merge`` does when it starts a job: labels,
    annotations and node selectors added (a node selector the template sets to another value is a
    :class:`PlacementConflict`), tolerations and scheduling gates appended unless already there."""
    meta = pod.setdefault("metadata", {})
    spec = pod.setdefault("spec", {})
    meta["labels"] = {**(meta.get("labels") or {}), **info.labels}
    if info.annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **info.annotations}
    selector = dict(spec.get("nodeSelector") or {})
    for key, value in info.node_selector.items():
        if key in selector and selector[key] != value:
            raise PlacementConflict(
                f"the pod template's nodeSelector {key}={selector[key]} contradicts the admitted flavor's {key}={value}"
            )
        selector[key] = value
    if selector:
        spec["nodeSelector"] = selector
    tolerations = list(spec.get("tolerations") or [])
    for toleration in info.tolerations:
        if toleration not in tolerations:
            tolerations.append(copy.deepcopy(toleration))
    if tolerations:
        spec["tolerations"] = tolerations
    gates = list(spec.get("schedulingGates") or [])
    for gate in info.scheduling_gates:
        if not any(g.get("name") == gate for g in gates):
            gates.append({"name": gate})
    if gates:
        spec["schedulingGates"] = gates


def pod_set_infos(workload: Object, flavors: dict[str, Object]) -> dict[str, PodSetInfo]:
    """Per pod set, what the Workload's admission asks of its pods; ``flavors`` are the ResourceFlavors by name."""
    status = workload.get("status") or {}
    admission = status.get("admission") or {}
    spec_sets = {str(s.get("name")): s for s in (workload.get("spec") or {}).get("podSets") or []}
    infos: dict[str, PodSetInfo] = {}
    for assignment in admission.get("podSetAssignments") or []:
        name = str(assignment.get("name"))
        info = PodSetInfo(labels={PODSET_LABEL: name})
        queue = (workload.get("spec") or {}).get("queueName")
        if queue:
            info.labels[LOCAL_QUEUE_LABEL] = str(queue)
        cluster_queue = str(admission.get("clusterQueue") or "")
        if re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", cluster_queue):
            info.labels[CLUSTER_QUEUE_LABEL] = cluster_queue
        if assignment.get("topologyAssignment"):
            info.scheduling_gates.append(TOPOLOGY_GATE)
            info.annotations[WORKLOAD_ANNOTATION] = str((workload.get("metadata") or {}).get("name"))
            if not (spec_sets.get(name) or {}).get("topologyRequest"):
                info.annotations[UNCONSTRAINED_TOPOLOGY] = "true"
        seen_flavors: set[str] = set()
        for flavor_name in (assignment.get("flavors") or {}).values():
            if flavor_name in seen_flavors:
                continue
            seen_flavors.add(flavor_name)
            flavor_spec = (flavors.get(flavor_name) or {}).get("spec") or {}
            info.node_selector.update(flavor_spec.get("nodeLabels") or {})
            info.tolerations.extend(flavor_spec.get("tolerations") or [])
        infos[name] = info
    for check in status.get("admissionChecks") or []:
        for update in check.get("podSetUpdates") or []:
            updated = infos.get(str(update.get("name")))
            if updated is None:
                continue
            info = updated
            info.labels.update(update.get("labels") or {})
            info.annotations.update(update.get("annotations") or {})
            info.node_selector.update(update.get("nodeSelector") or {})
            info.tolerations.extend(update.get("tolerations") or [])
    return infos


@dataclass(frozen=True)
class Gate:
    """What the job's Workload allows now."""

    admitted: bool
    #: why not, for the job's ``Suspended`` condition (empty when admitted)
    message: str = ""
    workload: Object | None = None
    #: Kueue evicted the Workload: the job must stop, then give its reservation back
    evicted: bool = False


class Workloads:
    """The Workloads of one kind's queued jobs (see the module docstring).

    With ``cache`` (an informer of the Workloads this controller made, indexed by owner uid) an admission
    wakes the job and a running job costs no request; without it (Kueue installed after the controller
    started) the Workload is read on each reconcile of a waiting job, every :data:`POLL_SECONDS`.
    """

    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        mode: KueueMode,
        cache: Informer | None = None,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.mode = mode
        self.cache = cache
        #: job key -> (workload resourceVersion, pod set infos) of its admission, computed once per admission
        self._infos: dict[str, tuple[str, dict[str, PodSetInfo]]] = {}
        #: job key -> the last reason given in an event, so a resync says nothing new
        self._said: dict[str, str] = {}

    def manages(self, job: TrainingJob) -> bool:
        return queue_name(job) is not None and group_managed(self.mode, job.api_group)

    def watches(self) -> tuple[Informer, ...]:
        """An admission or an eviction of a Workload wakes its job."""
        return (self.cache,) if self.cache is not None else ()

    def forget(self, key: str) -> None:
        self._infos.pop(key, None)
        self._said.pop(key, None)

    def begin(self, plan: Plan) -> Queued:
        """This reconcile's part: the gate it found, and the admission's additions to the pods."""
        return Queued(self)

    # ------------------------------------------------------------------------------------------ the gate

    async def gate(self, seen: Observation) -> Gate | None:
        """None for a job Kueue does not queue here; else whether its pods may exist (making its Workload
        first if it has none)."""
        job = seen.job
        if not self.manages(job):
            return None
        workload = await self._find(seen)
        if workload is None:
            workload = await self._create(seen)
            if workload is None:
                return Gate(False, self._said.get(seen.key, "its Workload could not be made yet"))
        name = (workload.get("metadata") or {}).get("name")
        where = f"Workload {job.namespace}/{name} (LocalQueue {queue_name(job)})"
        if workload_is(workload, FINISHED):
            cond = condition(workload, FINISHED) or {}
            return Gate(False, f"{where} is Finished ({cond.get('reason')}): {cond.get('message')}", workload)
        if workload_is(workload, EVICTED):
            cond = condition(workload, EVICTED) or {}
            message = f"{where} was evicted by Kueue ({cond.get('reason')}): {cond.get('message')}"
            return Gate(False, message, workload, evicted=True)
        if workload_is(workload, ADMITTED):
            return Gate(True, "", workload)
        reserved = condition(workload, QUOTA_RESERVED)
        why = f": {reserved.get('message')}" if reserved and reserved.get("message") else ""
        if self.cache is None:
            seen.want_requeue(POLL_SECONDS)  # nothing announces the admission without a watch
        return Gate(False, f"waiting for Kueue to admit {where}{why}", workload)

    async def _find(self, seen: Observation) -> Object | None:
        if self.cache is None:
            return await self._get(seen)
        for workload in self.cache.list(OWNER_INDEX, seen.job.metadata.uid or ""):
            if not (workload.get("metadata") or {}).get("deletionTimestamp"):
                return workload
        return None

    async def _get(self, seen: Observation) -> Object | None:
        try:
            found: Object = await self.client.get(WORKLOADS, workload_name(seen.job), namespace=seen.job.namespace)
        except errors.NotFound:
            return None
        owners = {ref.get("uid") for ref in (found.get("metadata") or {}).get("ownerReferences") or []}
        return found if seen.job.metadata.uid in owners and not found["metadata"].get("deletionTimestamp") else None

    async def _priority(self, job: TrainingJob) -> tuple[int, Object | None]:
        """The WorkloadPriorityClass of the label, else the PriorityClass of the first template naming one."""
        wanted = (job.metadata.labels or {}).get(PRIORITY_CLASS_LABEL)
        if wanted:
            found = await self.client.get(WORKLOAD_PRIORITY_CLASSES, wanted)
            ref = {"group": GROUP, "kind": "WorkloadPriorityClass", "name": wanted}
            return int(found.get("value") or 0), ref
        for spec in job.replica_specs.values():
            name = spec.template.spec.to_dict().get("priorityClassName")
            if name:
                found = await self.client.get(PRIORITY_CLASSES, str(name))
                return int(found.get("value") or 0), {
                    "group": "scheduling.k8s.io",
                    "kind": "PriorityClass",
                    "name": name,
                }
        return 0, None

    async def _create(self, seen: Observation) -> Object | None:
        job = seen.job
        try:
            priority, ref = await self._priority(job)
        except errors.NotFound as exc:
            await self._trouble(seen, "WorkloadPriorityMissing", f"its priority class is not found ({exc})")
            return None
        body = build_workload(job, priority=priority, priority_ref=ref)
        try:
            created: Object = await self.client.create(WORKLOADS, body, namespace=job.namespace)
        except errors.AlreadyExists:
            existing = await self._get(seen)
            if existing is None:
                seen.backoff = True  # a predecessor's, being collected, or deleted meanwhile: tried again
            return existing
        except errors.NotFound as exc:
            await self._trouble(
                seen,
                "KueueNotInstalled",
                f"cannot create its Workload: {WORKLOADS} is not served ({exc}); install Kueue, or remove the "
                f"{QUEUE_LABEL} label to run the job without queueing",
            )
            return None
        except (errors.Invalid, errors.BadRequest, errors.Forbidden) as exc:
            await self._trouble(seen, "WorkloadRefused", f"the API server refused its Workload: {exc}")
            return None
        logger.info("%s: made Workload %s in LocalQueue %s", seen.key, body["metadata"]["name"], queue_name(job))
        await self.recorder.normal(
            seen.raw, "CreatedWorkload", f"Created Workload {job.namespace}/{body['metadata']['name']}"
        )
        return created

    async def _trouble(self, seen: Observation, reason: str, message: str) -> None:
        """A Workload that cannot be made: the job waits (no pods), says why once, and retries with backoff."""
        seen.backoff = True
        if self._said.get(seen.key) != message:
            self._said[seen.key] = message
            logger.warning("%s: %s", seen.key, message)
            await self.recorder.warning(seen.raw, reason, message)

    # ------------------------------------------------------------------------------------------- pods

    async def prepare(self, seen: Observation, gate: Gate | None) -> dict[str, PodSetInfo] | None:
        """The admission's additions to the pods, per pod set (read once per admission: ResourceFlavor look-ups)."""
        if gate is None or gate.workload is None:
            return None
        workload = gate.workload
        version = str((workload.get("metadata") or {}).get("resourceVersion") or "")
        known = self._infos.get(seen.key)
        if known is not None and known[0] == version:
            return known[1]
        flavors: dict[str, Object] = {}
        for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
            for flavor_name in (assignment.get("flavors") or {}).values():
                if flavor_name not in flavors:
                    flavors[flavor_name] = await self.client.get(RESOURCE_FLAVORS, flavor_name)
        infos = pod_set_infos(workload, flavors)
        self._infos[seen.key] = (version, infos)
        return infos

    # --------------------------------------------------------------------------------------- eviction

    async def release(self, seen: Observation, gate: Gate) -> None:
        """After an eviction, once none of the job's pods runs any more: give the quota reservation back
        (``QuotaReserved`` False, admission cleared, ``Requeued`` for a preemption), so Kueue queues it again."""
        workload = gate.workload
        if workload is None or not gate.evicted or not (workload.get("status") or {}).get("admission"):
            return
        if any(is_active(pod) for pod in seen.pods):
            return  # the deleted pods still stop; their deletion wakes the job again
        evicted = condition(workload, EVICTED) or {}
        reason, message = str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "evicted")
        status = copy.deepcopy(workload.get("status") or {})
        conditions: list[Object] = status.get("conditions") or []
        generation = int((workload.get("metadata") or {}).get("generation") or 0)
        set_condition(conditions, REQUEUED, reason in REQUEUED_AFTER, reason=reason, message=message, gen=generation)
        set_condition(conditions, QUOTA_RESERVED, False, reason="Pending", message=message, gen=generation)
        set_condition(
            conditions,
            ADMITTED,
            False,
            reason="NoReservation",
            message="The workload has no reservation",
            gen=generation,
        )
        meta = workload.get("metadata") or {}
        patch = {
            "metadata": {"resourceVersion": meta.get("resourceVersion")},
            "status": {"conditions": conditions, "admission": None},
        }
        try:
            await self.client.patch_status(WORKLOADS, str(meta.get("name")), patch, namespace=seen.job.namespace)
        except errors.Conflict:
            seen.want_requeue(0.1)  # Kueue wrote it meanwhile: again on the newer copy
            return
        except errors.NotFound:
            return
        self._infos.pop(seen.key, None)
        logger.info("%s: stopped after eviction (%s); released Workload %s", seen.key, reason, meta.get("name"))

    # ----------------------------------------------------------------------------------------- finish

    async def mark_finished(self, seen: Observation, *, succeeded: bool, message: str) -> None:
        """A finished job's Workload is ``Finished`` too, which gives its quota back (once)."""
        job = seen.job
        if not self.manages(job):
            return
        workload = await self._find(seen)
        if workload is None or workload_is(workload, FINISHED):
            return
        status = copy.deepcopy(workload.get("status") or {})
        conditions: list[Object] = status.get("conditions") or []
        meta = workload.get("metadata") or {}
        generation = int(meta.get("generation") or 0)
        outcome = "Succeeded" if succeeded else "Failed"
        set_condition(conditions, FINISHED, True, reason=outcome, message=message, gen=generation)
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": {"conditions": conditions}}
        try:
            await self.client.patch_status(WORKLOADS, str(meta.get("name")), patch, namespace=job.namespace)
        except errors.Conflict:
            seen.want_requeue(0.1)
            return
        except errors.NotFound:
            return
        self.forget(seen.key)
        logger.info("%s: Workload %s finished", seen.key, meta.get("name"))


class Queued:
    """One reconcile's Kueue part, a feature of the reconcile (``features.py``): a queued job is held (no pods)
    until its Workload is admitted (``hold``), its reservation given back once its pods are gone after an eviction
    (``suspended``), the admission's flavors and topology applied to its pods (``admit``, ``shape_pod``), and its
    Workload finished with the job (``finished``)."""

    def __init__(self, workloads: Workloads) -> None:
        self.workloads = workloads
        self.gate: Gate | None = None
        self.infos: dict[str, PodSetInfo] | None = None

    async def hold(self, plan: Plan) -> str | None:
        self.gate = await self.workloads.gate(plan.seen)
        if self.gate is not None and not self.gate.admitted:
            return self.gate.message  # queued and not admitted (or evicted): held like a suspended job
        return None

    async def suspended(self, plan: Plan) -> None:
        if self.gate is not None and not self.gate.admitted:
            await self.workloads.release(plan.seen, self.gate)

    async def resumed(self, plan: Plan) -> None:
        """Nothing: a resumed job's gate is asked again by ``hold``."""

    async def admit(self, plan: Plan) -> bool:
        self.infos = await self.workloads.prepare(plan.seen, self.gate)
        return True

    def shape_pod(self, plan: Plan, replica: Replica, pod: Object) -> None:
        seen = plan.seen
        info = (self.infos or {}).get(pod_set_name(replica.replica_type))
        if info is None:
            return
        try:
            apply(pod, info)
        except PlacementConflict as exc:
            where = f"{replica.replica_type} pods cannot run where Kueue admitted them"
            raise JobFailure("PlacementConflict", f"{seen.job.kind} {seen.key}: {where}: {exc}.") from None

    async def finished(self, plan: Plan) -> None:
        status = plan.seen.status
        succeeded = st.is_true(status, st.SUCCEEDED)
        final = st.get_condition(status, st.SUCCEEDED if succeeded else st.FAILED) or {}
        await self.workloads.mark_finished(plan.seen, succeeded=succeeded, message=str(final.get("message") or ""))


class KueueSettings(Protocol):
    """The controller options this feature reads (``setup.ControllerOptions``)."""

    @property
    def kueue_workloads(self) -> KueueMode: ...


def install(wiring: Wiring[KueueSettings]) -> Workloads | None:
    """The feature's factory (``setup.FEATURES``): unless ``--kueue-workloads off``. The Workloads are watched only
    when known to be served (Kueue's CRDs may be absent, and a watch of an unserved resource never syncs);
    otherwise a queued job's Workload is read with requests."""
    mode = wiring.options.kueue_workloads
    if mode == "off":
        return None
    served = wiring.served is not None and (WORKLOADS.group, WORKLOADS.plural) in wiring.served
    return Workloads(wiring.client, wiring.recorder, mode, wiring.owned_informer(WORKLOADS) if served else None)
