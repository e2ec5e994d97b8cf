"""Host-network mode: host ports for pods, ClusterIP Services that forward to them, and failover.

A job annotated ``kubedl.io/network-mode: host`` (or whose pod templates ask for ``hostNetwork: true``, see
docs/host-network.md) runs its pods on the node's network. Each pod gets a host port P, declared as its
``hostPort``, chosen by the allocator (``ports.py``) where it is least used: ports need only be unique per node,
and kube-scheduler keeps two pods declaring one port off a node. The pod's Service is a ClusterIP Service with
``port`` = the framework's port and ``targetPort`` = P, so peers keep one stable address ``<svc>.<ns>.svc:<port>``.

Failover: when a replica's pod goes (replaced after a failure, evicted, lost with its node, deleted by hand)
the replacement gets a port again, a *new* one where the range has room (the old one only when nothing else is
left), and the Service is re-pointed to it **before** the new pod is created: as soon as the old pod is seen
terminating, not only once it is gone. Its name is taken until it is gone, but the re-point need not wait; done
meanwhile, it leaves the create as the only write between the old pod's end and its replacement (new
connections then stop reaching the stopping process, which is no peer to a training job any more). The port
stays reserved for the replica until the replacement is made (or the job is finished or gone). So at every
moment each live pod is the target of its Service; between the re-point and the create the Service points at a
port no pod has yet, which is harmless. While a pod lives, its own port is the truth: a Service found pointing
elsewhere (a crash between steps, a hand edit) is re-pointed to the live pod, and a healthy pod's port is never
changed, also not by a controller restart (a restart forgets the reservations of replicas still waiting for
their replacement: their Services are simply re-pointed once more).

A pod that the scheduler cannot place because no node has its port free (the ``NodePorts`` reason) is the one
case where a port changes before the pod runs: after ``port_retry_after`` seconds Pending for that reason (then
twice as long each time for the same replica, up to ``PORT_RETRY_MAX``) the pod, still unbound, is deleted and
made again with another port, its Service re-pointed first, and a ``HostPortReassigned`` event says so.

Changing the annotation on a job that already has pods or Services is refused: the job keeps the mode its
objects were made in, and a ``NetworkModeChangeRefused`` event says so (once per requested change, not per
reconcile: a resync must cost no writes). Switching the network of running replicas would strand their
peers; delete and resubmit the job instead.

All of this is a feature of the reconcile (``features.py``): :class:`HostNetwork`, shared by every kind's
reconciler (one allocator, fed by a watch of every host-network pod in the cluster, and a :class:`JobPorts` per
job), begins one :class:`HostNetworkSession` per reconcile, which takes part in the reconcile's creates
(``AroundCreates``): ``observe`` (the events above), ``recreate`` (pods no node can take for their port),
``replacing`` (reserve the replacement's port and re-point the Service while the old pod terminates), ``reserve``
(ports for the pods about to be made, their Services re-pointed first), ``address`` (the ports peers and pods are
built with), ``not_created`` (give back the port of a pod that was not made), ``report`` and ``settle`` (every
Service pointed at its live pod); the job's mode is the plan's (``plan.network_mode``). It writes Services with its
own client.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from kubedl_py.api import constants as c
from kubedl_py.api.plain import Object, parse_time
from kubedl_py.controllers.addressing import Addressing, replica_name
from kubedl_py.controllers.features import Wiring
from kubedl_py.controllers.hostnetwork.ports import HostPortAllocator, pod_host_ports
from kubedl_py.controllers.observation import Replica, Slot
from kubedl_py.controllers.plan import Plan
from kubedl_py.controllers.pods import service_target_port
from kubedl_py.controllers.trimming import trim_pod
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.informer import Handler
from kubedl_py.kube.resources import PODS, SERVICES

logger = logging.getLogger(__name__)


#: seconds a pod may be Pending because no node has its host port free before it gets another port (the
#: default of ``--host-port-retry-after``): long enough for a node draining its old pods to free the port
PORT_RETRY_AFTER = 15.0
#: the longest wait between two port changes of one replica (the wait doubles each time)
PORT_RETRY_MAX = 300.0
#: kube-scheduler's NodePorts filter's reason, in its "0/N nodes are available: ..." message
NODE_PORTS_REASON = "didn't have free ports for the requested pod ports"


def pod_port(pod: Object) -> int | None:
    """The host port recorded on one of our pods (annotation, else the declared host port)."""
    annotation = ((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_HOST_PORT)
    if annotation and annotation.isdigit():
        return int(annotation)
    ports = pod_host_ports(pod)
    return ports[0] if ports else None


def _holds_ports(pod: Object) -> bool | None:
    """Whether a host-network pod holds its ports: bound to a node (its node cannot take another pod with them)
    or ours (it will be bound soon); None when it has ended (Succeeded, Failed) and holds nothing."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_CONTROLLER) == c.CONTROLLER_NAME


def ports_unschedulable_since(pod: Object) -> datetime | None:
    """When the scheduler last found no node with this pod's host ports free (its PodScheduled condition),
    or None when that is not why it waits."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") != "PodScheduled" or condition.get("status") != "False":
            continue
        if NODE_PORTS_REASON in str(condition.get("message") or ""):
            return parse_time(condition.get("lastTransitionTime"))
    return None


@dataclass
class _Unplaceable:
    """The ports a replica could not be scheduled with, and how many times it got another port."""

    ports: set[int] = field(default_factory=set)
    changes: int = 0


class HostNetworkSettings(Protocol):
    """The controller options this step reads (``setup.ControllerOptions``)."""

    @property
    def host_port_range(self) -> tuple[int, int]: ...

    @property
    def host_port_retry_after(self) -> float: ...

    @property
    def host_pods_everywhere(self) -> bool | None: ...


def install(wiring: Wiring[HostNetworkSettings]) -> HostNetwork:
    """The feature's factory (``setup.FEATURES``): one for the whole controller, fed by a watch of every host-network
    pod in the cluster, because a host port is taken whoever's pod holds it (a namespaced install that may not
    list pods everywhere: those of its namespaces only, docs/install.md)."""

    def start() -> HostNetwork:
        low, high = wiring.options.host_port_range
        network = HostNetwork(
            HostPortAllocator(low, high),
            wiring.recorder,
            wiring.client,
            port_retry_after=wiring.options.host_port_retry_after,
        )
        pods = wiring.manager.informer(
            PODS,
            namespaces=None if wiring.options.host_pods_everywhere is not False else wiring.namespaces,
            field_selector="spec.hostNetwork=true",
            transform=trim_host_pod,
        )
        pods.add_handler(
            Handler(
                on_add=network.on_pod,
                on_update=lambda _old, new: network.on_pod(new),
                on_delete=network.on_pod_deleted,
            )
        )
        return network

    return wiring.shared("hostnetwork", start)


def trim_host_pod(pod: Object) -> Object:
    """What the port allocator needs of a host-network pod, whoever's it is."""
    trimmed = trim_pod(pod)
    meta = trimmed["metadata"]
    trimmed["metadata"] = {k: v for k, v in meta.items() if k in ("name", "namespace", "uid", "deletionTimestamp")}
    if (meta.get("labels") or {}).get(c.LABEL_CONTROLLER) == c.CONTROLLER_NAME:
        trimmed["metadata"]["labels"] = {c.LABEL_CONTROLLER: c.CONTROLLER_NAME}  # ours: holds its ports unbound
    trimmed["status"] = {"phase": trimmed["status"]["phase"]}
    spec = pod.get("spec") or {}
    trimmed["spec"]["initContainers"] = [{"ports": ctr.get("ports") or []} for ctr in spec.get("initContainers") or []]
    return trimmed


@dataclass
class JobPorts:
    """What host network keeps about one job between reconciles."""

    #: ports reserved (and Services re-pointed) for replicas whose old pod is still terminating
    ahead: dict[Slot, int] = field(default_factory=dict)
    #: replicas whose pods could not be placed for their host ports
    unplaceable: dict[Slot, _Unplaceable] = field(default_factory=dict)
    #: the job was told that its templates decided its mode (once, when its first objects are made)
    noted: bool = False
    #: the network mode (host?) the job asked for when its change was last refused with an event
    refused: bool | None = None


class HostNetwork:
    """Shared by the reconcilers of every kind: one allocator for the whole cluster, and what is kept per job."""

    def __init__(
        self,
        allocator: HostPortAllocator,
        recorder: EventRecorder,
        client: KubeClient,
        *,
        port_retry_after: float = PORT_RETRY_AFTER,
    ) -> None:
        self.allocator = allocator
        self.recorder = recorder
        self.client = client
        self.port_retry_after = port_retry_after
        self._jobs: dict[str, JobPorts] = {}

    def kept(self, key: str) -> JobPorts:
        """What is kept about the job ``key`` (made on first use)."""
        kept = self._jobs.get(key)
        if kept is None:
            kept = self._jobs[key] = JobPorts()
        return kept

    # ----------------------------------------------------------------------- the cluster-wide pod watch

    def on_pod(self, pod: Object) -> None:
        """Informer handler (add/update) of every host-network pod in the cluster."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        holds = _holds_ports(pod)
        if holds is None:
            self.allocator.forget_pod(uid)
            return
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        self.allocator.observe_pod(uid, key, pod_host_ports(pod), holds=holds)

    def on_pod_deleted(self, pod: Object) -> None:
        self.allocator.forget_pod(str((pod.get("metadata") or {}).get("uid")))

    def forget(self, key: str) -> None:
        """The job is deleted: forget what was kept about it, give back the ports reserved for replacements it
        will not make (:meth:`job_finished`)."""
        self.job_finished(key)
        self._jobs.pop(key, None)

    def job_finished(self, key: str) -> None:
        """The job makes no more pods: give back the ports reserved for replacements of its terminating pods."""
        kept = self._jobs.get(key)
        if kept is None:
            return
        namespace, _, name = key.partition("/")
        for (rtype, index), port in kept.ahead.items():
            self.allocator.release(f"{namespace}/{replica_name(name, rtype, index)}", port)
        kept.ahead.clear()
        kept.unplaceable.clear()

    async def finished(self, plan: Plan) -> None:
        """The job makes no more pods: the ports reserved for its replacements are free again."""
        self.job_finished(plan.key)

    # ------------------------------------------------------------------------------------- the reconcile

    def begin(self, plan: Plan) -> HostNetworkSession:
        """This reconcile's host-network part (see the module docstring)."""
        return HostNetworkSession(self)

    async def point(self, plan: Plan, name: str, service: Object, port: int) -> None:
        """Re-point the job's Service ``name`` to host port ``port``."""
        await self.client.patch(SERVICES, name, _target_port_patch(service, port), namespace=plan.job.namespace)


@dataclass
class HostNetworkSession:
    """One reconcile's host-network part: the ports it reserved and the events it owes. The mode is the plan's
    (``plan.host``, decided once); what is kept between reconciles is the job's :class:`JobPorts`."""

    network: HostNetwork
    #: ports reserved in this reconcile for the replicas about to be made
    reserved: dict[Slot, int] = field(default_factory=dict)
    #: the (reason, message) of the events this reconcile owes, for ``report``
    notes: list[tuple[str, str]] = field(default_factory=list)

    async def observe(self, plan: Plan) -> None:
        """Say (once per requested change) that a change of network mode is refused, and (once, when its first
        objects are made) that a job without the annotation runs in host-network mode because its templates ask
        for ``hostNetwork: true``."""
        seen = plan.seen
        templates = seen.job.host_network_templates
        annotated = c.ANNOTATION_NETWORK_MODE in (seen.job.metadata.annotations or {})
        kept = self.network.kept(plan.key)
        first = not seen.pods and not seen.services and not kept.noted
        if plan.host and templates and not annotated and first:
            kept.noted = True
            await self.network.recorder.normal(
                seen.raw,
                "HostNetworkFromTemplate",
                f"the pod templates of {', '.join(templates)} ask for hostNetwork: true and the job has no "
                f"{c.ANNOTATION_NETWORK_MODE} annotation: it runs in host-network mode (a host port chosen per "
                "pod, ClusterIP Services forwarding to them); annotate it 'host' to say so",
            )
        overridden = [name for name, spec in seen.job.replica_specs.items() if spec.template.spec.host_network is False]
        if plan.host and annotated and overridden and first:
            kept.noted = True
            await self.network.recorder.warning(
                seen.raw,
                "HostNetworkOverridden",
                f"the pod templates of {', '.join(overridden)} say hostNetwork: false, but the job is annotated "
                f"{c.ANNOTATION_NETWORK_MODE}: host: their pods run on the host network too (each with a host "
                "port); remove the annotation to keep them on the pod network",
            )
        if not plan.mode_refusal:
            kept.refused = None
        elif kept.refused != seen.job.host_network:
            kept.refused = seen.job.host_network
            await self.network.recorder.warning(seen.raw, "NetworkModeChangeRefused", plan.mode_refusal)

    def _job_ports(self, plan: Plan) -> set[int]:
        """The ports the job's pods have or are about to get: a new pod avoids them, so replicas of one job can
        share a node."""
        ports = set(self.reserved.values())
        ports.update(self.network.kept(plan.key).ahead.values())
        for replica in plan.seen.replicas.values():
            if replica.pod is not None:
                port = pod_port(replica.pod)
                if port is not None:
                    ports.add(port)
        return ports

    def _choose(self, plan: Plan, slot: Slot, old: int | None) -> int:
        """A port for the replica ``slot``: least used, not one of the job's, not its old one, never one it could
        not be scheduled with, each unless nothing else is left."""
        memory = self.network.kept(plan.key).unplaceable.get(slot)
        bad = memory.ports if memory is not None else set()
        reuse = [old] if old is not None and old not in bad else []
        pod_key = f"{plan.job.namespace}/{replica_name(plan.job.name, *slot)}"
        return self.network.allocator.reserve(pod_key, avoid=self._job_ports(plan), reuse=reuse, bad=bad)

    def recreate(self, plan: Plan) -> list[Replica]:
        """Host-network pods that no node can take for their host port get another port: the pod, never bound,
        is deleted at once by the reconcile, and made again with a new port like any replacement."""
        self.placed(plan)
        return self.unplaceable(plan)

    def unplaceable(self, plan: Plan) -> list[Replica]:
        """Replicas whose unbound pod waits because no node has its host port free, for long enough that it
        should get another port (the caller deletes those pods; :meth:`replacing` then chooses anew)."""
        if not plan.host:
            return []
        seen, network = plan.seen, self.network
        due: list[Replica] = []
        for slot, replica in seen.replicas.items():
            if replica.pod is None:
                continue
            since = ports_unschedulable_since(replica.pod)
            if since is None:
                continue
            memory = network.kept(plan.key).unplaceable.setdefault(slot, _Unplaceable())
            wait = min(network.port_retry_after * 2**memory.changes, PORT_RETRY_MAX)
            waited = (seen.now - since).total_seconds()
            if waited < wait:
                seen.want_requeue(wait - waited)
                continue
            port = pod_port(replica.pod)
            if port is not None:
                memory.ports.add(port)
            memory.changes += 1
            name = replica_name(seen.job.name, *slot)
            self.notes.append(
                (
                    "HostPortReassigned",
                    f"{slot[0]} {slot[1]}: pod {name} was Pending for {int(waited)}s because no node has host port "
                    f"{port} free; making it again with another port",
                )
            )
            due.append(replica)
        return due

    def placed(self, plan: Plan) -> None:
        """Forget the ports a replica could not be scheduled with once its pod is bound."""
        memory = self.network.kept(plan.key).unplaceable
        for slot in list(memory):
            replica = plan.seen.replicas.get(slot)
            if replica is None or (replica.pod is not None and (replica.pod.get("spec") or {}).get("nodeName")):
                del memory[slot]

    async def replacing(self, plan: Plan, terminating: list[Replica]) -> None:
        """Replicas whose pod is terminating and will be replaced: reserve the replacement's port now and
        re-point the Service to it, so the create is all that is left once the old pod is gone."""
        ahead = self.network.kept(plan.key).ahead
        if not plan.host or not (terminating or ahead):
            return
        seen = plan.seen
        for slot in [slot for slot in ahead if slot not in seen.replicas]:  # the job was scaled down meanwhile
            self._release(plan, slot, ahead.pop(slot))
        for replica in terminating:
            slot = (replica.replica_type, replica.index)
            name = replica_name(seen.job.name, *slot)
            service = seen.services.get(name)
            if slot in ahead or service is None:
                continue
            old = service_target_port(service)
            ahead[slot] = self._choose(plan, slot, old)
            if ahead[slot] != old:
                await self._repoint(plan, slot, service, ahead[slot], "while the old pod terminates")

    async def reserve(self, plan: Plan, missing: list[Replica]) -> None:
        """A host port for each replica about to be made: the one reserved while its old pod terminated, else a
        new one; its existing Service is re-pointed first (failover) unless it targets that port already."""
        if not plan.host or not missing:
            return
        seen, job = plan.seen, plan.job
        ahead = self.network.kept(plan.key).ahead
        chosen: dict[Slot, int] = {}
        for replica in missing:
            slot = (replica.replica_type, replica.index)
            if slot in ahead:
                chosen[slot] = ahead[slot]
                continue
            name = replica_name(job.name, *slot)
            old = service_target_port(seen.services[name]) if name in seen.services else None
            chosen[slot] = self._choose(plan, slot, old)
            self.reserved[slot] = chosen[slot]  # seen by _job_ports: the next replica avoids it
        try:
            for slot, port in chosen.items():
                service = seen.services.get(replica_name(job.name, *slot))
                if service is not None and service_target_port(service) != port:
                    await self._repoint(plan, slot, service, port, "for the new pod")
        except BaseException:
            for taken, port in chosen.items():
                self.reserved.pop(taken, None)
                if taken not in ahead:  # a Service not re-pointed: its new port is free again
                    self._release(plan, taken, port)
            raise
        for slot in chosen:
            ahead.pop(slot, None)  # from here on this reconcile's: made into a pod, or released (not_created)
        self.reserved.update(chosen)

    def _release(self, plan: Plan, slot: Slot, port: int) -> None:
        """Give back a port reserved for the replica ``slot`` of this job."""
        self.network.allocator.release(f"{plan.job.namespace}/{replica_name(plan.job.name, *slot)}", port)

    async def _repoint(self, plan: Plan, slot: Slot, service: Object, port: int, why: str) -> None:
        name = replica_name(plan.job.name, *slot)
        old = service_target_port(service)
        await self.network.point(plan, name, service, port)
        message = f"{slot[0]} {slot[1]}: Service {name} re-pointed from host port {old} to {port} {why}"
        logger.info("%s: %s", plan.key, message)
        self.notes.append(("HostPortChanged", message))

    async def report(self, plan: Plan) -> None:
        """The events of this reconcile (``HostPortChanged`` for the Services it re-pointed,
        ``HostPortReassigned``). Sent once the new pods are, not between the Service and its pod: an Event is one
        more round trip to the API server, and a failover's peers wait for the pod, not for the Event."""
        notes, self.notes = self.notes, []
        for reason, message in notes:
            await self.network.recorder.normal(plan.seen.raw, reason, message)

    def address(self, plan: Plan, addressing: Addressing, *, served: bool = False) -> Addressing:
        """In host-network mode each replica is reached on its host port: the live pods' own and the ones just
        reserved, or (``served``) the ports the job's Services forward to now (what a Service is compared with:
        :meth:`settle` keeps those right). A replica without one gets no Service yet."""
        if not plan.host:
            return addressing
        if not served:
            return replace(addressing, host=True, host_ports=self.ports(plan))
        seen = plan.seen
        forwarded: dict[Slot, int] = {}
        for slot in seen.replicas:
            live = seen.services.get(replica_name(seen.job.name, *slot))
            target = service_target_port(live) if live is not None else None
            if target is not None:
                forwarded[slot] = target
        return replace(addressing, host=True, host_ports=forwarded)

    def ports(self, plan: Plan) -> dict[Slot, int]:
        """Host ports of every replica: live pods' own ports plus the ones just reserved."""
        ports = dict(self.reserved)
        for slot, replica in plan.seen.replicas.items():
            if replica.pod is not None and slot not in ports:
                port = pod_port(replica.pod)
                if port is not None:
                    ports[slot] = port
        return ports

    def not_created(self, plan: Plan, replica: Replica) -> None:
        """A pod that was not made: its reserved port is free again."""
        port = self.reserved.pop((replica.replica_type, replica.index), None)
        if port is not None:
            self.network.allocator.release(plan.seen.pod_key(replica), port)

    async def settle(self, plan: Plan) -> None:
        """A live pod's port is the truth: re-point a Service that points elsewhere (crash recovery, hand edits)."""
        if not plan.host:
            return
        seen = plan.seen
        for replica in seen.replicas.values():
            if replica.pod is None:
                continue
            name = replica_name(seen.job.name, replica.replica_type, replica.index)
            service = seen.services.get(name)
            port = pod_port(replica.pod)
            if service is None or port is None or service_target_port(service) == port:
                continue
            await self.network.point(plan, name, service, port)
            logger.info("%s: Service %s re-pointed to its live pod's host port %d", seen.key, name, port)


def _target_port_patch(service: Object, port: int) -> Object:
    """The re-point, over the version it was decided on: a Service changed since (by a newer leader, by hand) is
    not overwritten blindly; the server refuses the patch (Conflict) and the reconcile decides again."""
    ports = [dict(p) for p in (service.get("spec") or {}).get("ports") or []]
    for entry in ports:
        entry["targetPort"] = port
    patch: Object = {"spec": {"ports": ports}}
    version = (service.get("metadata") or {}).get("resourceVersion")
    if version:
        patch["metadata"] = {"resourceVersion": version}
    return patch
