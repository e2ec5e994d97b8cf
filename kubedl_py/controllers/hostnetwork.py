"""Host-network mode: host ports for pods, ClusterIP Services that forward to them, and failover.

A job annotated ``kubedl.io/network-mode: host`` runs its pods on the node's network. Each pod gets a host
port P from the allocator (``ports.py``); its Service is a ClusterIP Service with ``port`` = the
framework's port and ``targetPort`` = P, so peers keep one stable address ``<svc>.<ns>.svc:<port>``.

Failover: when a replica's pod goes (replaced after a failure, evicted, lost with its node, deleted by hand)
the replacement gets a *new* port, and the Service is re-pointed to it **before** the new pod is created: as
soon as the old pod is seen terminating, not only once it is gone. Its name is taken until it is gone, but the
re-point need not wait; done meanwhile, it leaves the create as the only write between the old pod's end and
its replacement (new connections then stop reaching the stopping process, which is no peer to a training job
any more). The port stays reserved for the replica until the replacement is made (or the job is finished or
gone). So at every moment each live pod is the target of its Service; between the re-point and the create the
Service points at a port no pod has yet, which is harmless. While a pod lives, its own port is the truth: a
Service found pointing elsewhere (a crash between steps) is re-pointed to the live pod, and a healthy pod's
port is never changed, also not by a controller restart (a restart forgets the reservations of replicas still
waiting for their replacement: their Services are simply re-pointed once more).

Changing the annotation on a job that already has pods or Services is refused: the job keeps the mode its
objects were made in, and a ``NetworkModeChangeRefused`` event says so (once per requested change, not per
reconcile: a resync must cost no writes). Switching the network of running replicas would strand their
peers; delete and resubmit the job instead.

The reconcile meets all of this through one object per reconcile, :class:`HostNetworkStep`
(``HostNetwork.step(seen)``): it knows the job's effective mode, reserves ports for the pods about to be
made or about to replace a terminating one (re-pointing their Services first), gives back ports of pods
that were not made, and at the end keeps every Service pointed at its live pod. It writes Services with its
own client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubedl_py.api import constants as c
from kubedl_py.controllers.addressing import replica_name
from kubedl_py.controllers.observation import Observation, Replica, Slot
from kubedl_py.controllers.pods import service_target_port
from kubedl_py.controllers.ports import HostPortAllocator, PortsExhausted, pod_host_ports
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.resources import SERVICES

logger = logging.getLogger(__name__)

Object = dict[str, Any]


def pod_port(pod: Object) -> int | None:
    """The host port recorded on one of our pods (annotation, else the declared host port)."""
    annotation = ((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_HOST_PORT)
    if annotation and annotation.isdigit():
        return int(annotation)
    ports = pod_host_ports(pod)
    return ports[0] if ports else None


def _is_live(pod: Object) -> bool:
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return not meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def _queue_of(api_version: str, kind: str) -> str:
    """Which work queue a job is in: a kind is served in two API groups, each with its own controller."""
    return f"{api_version} {kind}"


class HostNetwork:
    """Shared by the reconcilers of every kind: one allocator for the whole cluster."""

    def __init__(self, allocator: HostPortAllocator, recorder: EventRecorder, client: KubeClient) -> None:
        self.allocator = allocator
        self.recorder = recorder
        self.client = client
        #: jobs waiting for free ports, by "<apiVersion> <kind>" -> keys; woken when a host-network pod goes away
        self._waiting: dict[str, set[str]] = {}
        self._enqueue: dict[str, Callable[[str], None]] = {}
        #: the network mode (host?) each job asked for when its change was last refused with an event
        self._refused: dict[str, bool] = {}
        #: ports reserved (and Services re-pointed) for replicas whose old pod is still terminating, by job key
        self._ahead: dict[str, dict[Slot, int]] = {}

    # ----------------------------------------------------------------------- the cluster-wide pod watch

    def register(self, api_version: str, kind: str, enqueue: Callable[[str], None]) -> None:
        """The work queue of the jobs of one kind in one API group (a kind is served in two)."""
        self._enqueue[_queue_of(api_version, kind)] = enqueue

    def on_pod(self, pod: Object) -> None:
        """Informer handler (add/update) of every host-network pod in the cluster."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        if _is_live(pod):
            self.allocator.observe_pod(uid, f"{meta.get('namespace')}/{meta.get('name')}", pod_host_ports(pod))
        else:
            self._release(uid)

    def on_pod_deleted(self, pod: Object) -> None:
        self._release(str((pod.get("metadata") or {}).get("uid")))

    def _release(self, uid: str) -> None:
        before = self.allocator.free_count
        self.allocator.forget_pod(uid)
        if self.allocator.free_count > before:
            self._wake_waiting()

    def _wake_waiting(self) -> None:
        for kind, keys in self._waiting.items():
            enqueue = self._enqueue.get(kind)
            if enqueue is not None:
                for key in keys:
                    enqueue(key)

    def job_gone(self, key: str) -> None:
        """The job is deleted: stop waiting for ports on its behalf, forget its refused change, give back the
        ports reserved for replacements it will not make (:meth:`job_finished`)."""
        self._stop_waiting(key)
        self._refused.pop(key, None)
        self.job_finished(key)

    def job_finished(self, key: str) -> None:
        """The job makes no more pods: give back the ports reserved for replacements of its terminating pods."""
        namespace, _, name = key.partition("/")
        for (rtype, index), port in self._ahead.pop(key, {}).items():
            self.allocator.release(f"{namespace}/{replica_name(name, rtype, index)}", port)

    def _stop_waiting(self, key: str) -> None:
        for keys in self._waiting.values():
            keys.discard(key)

    # ------------------------------------------------------------------------------------- the reconcile

    def step(self, seen: Observation) -> HostNetworkStep:
        """This reconcile's host-network part (see the module docstring)."""
        host, refusal = _mode(seen)
        return HostNetworkStep(self, seen, host, refusal)

    def exhausted_message(self) -> str:
        return (
            f"waiting for free host ports: the range {self.allocator.low}-{self.allocator.high} has "
            f"{self.allocator.free_count} free, fewer than this job's pods need; the job proceeds when "
            "host-network pods end (or widen --hostnetwork-port-range)"
        )

    async def _point(self, seen: Observation, name: str, service: Object, port: int) -> None:
        await self.client.patch(SERVICES, name, _target_port_patch(service, port), namespace=seen.job.namespace)


@dataclass
class HostNetworkStep:
    """One reconcile's host-network part: the effective mode, the ports it reserved, the Services it pointed."""

    network: HostNetwork
    seen: Observation
    #: the job's effective mode: the one its existing objects were made in, else what it asks for
    host: bool
    #: why a requested change of mode is refused, if one is
    refusal: str | None
    #: ports reserved in this reconcile for the replicas about to be made
    reserved: dict[Slot, int] = field(default_factory=dict)
    #: the messages of the Services this reconcile re-pointed, for ``report``
    repointed: list[str] = field(default_factory=list)

    async def announce(self) -> None:
        """Say (once per requested change) that a change of network mode is refused."""
        key, refused = self.seen.key, self.network._refused
        if not self.refusal:
            refused.pop(key, None)
        elif refused.get(key) != self.seen.job.host_network:
            refused[key] = self.seen.job.host_network
            await self.network.recorder.warning(self.seen.raw, "NetworkModeChangeRefused", self.refusal)

    async def repoint_ahead(self, terminating: list[Replica]) -> None:
        """Replicas whose pod is terminating and will be replaced: reserve the replacement's port now and
        re-point the Service to it, so the create is all that is left once the old pod is gone. Without a free
        port nothing is done here; :meth:`reserve` waits for one when the pod is due."""
        seen, network = self.seen, self.network
        if not self.host or not (terminating or seen.key in network._ahead):
            return
        ahead = network._ahead.setdefault(seen.key, {})
        for slot in [slot for slot in ahead if slot not in seen.replicas]:  # the job was scaled down meanwhile
            self._release(slot, ahead.pop(slot))
        for replica in terminating:
            slot = (replica.replica_type, replica.index)
            name = replica_name(seen.job.name, *slot)
            service = seen.services.get(name)
            if slot in ahead or service is None:
                continue
            old = service_target_port(service)
            try:
                ahead[slot] = network.allocator.reserve(f"{seen.job.namespace}/{name}", avoid=[old] if old else [])
            except PortsExhausted:
                break
            await self._repoint(slot, service, ahead[slot], "while the old pod terminates")
        if not ahead:
            del network._ahead[seen.key]

    async def reserve(self, missing: list[Replica]) -> bool:
        """A host port for each replica about to be made: the one reserved while its old pod terminated, else a
        new one; its existing Service is re-pointed first (failover) unless it targets that port already.
        False when the range has no room for all of them: nothing new is kept reserved then, the job waits
        (woken when a host-network pod goes away)."""
        seen, network = self.seen, self.network
        job = seen.job
        ahead = network._ahead.get(seen.key, {})
        chosen: dict[Slot, int] = {}
        for replica in missing:
            slot = (replica.replica_type, replica.index)
            if slot in ahead:
                chosen[slot] = ahead[slot]
                continue
            name = replica_name(job.name, *slot)
            old = service_target_port(seen.services[name]) if name in seen.services else None
            try:
                chosen[slot] = network.allocator.reserve(f"{job.namespace}/{name}", avoid=[old] if old else [])
            except PortsExhausted:
                for taken, port in chosen.items():
                    if taken not in ahead:  # those reserved ahead stay reserved for their replica
                        self._release(taken, port)
                network._waiting.setdefault(_queue_of(job.api_version, job.kind), set()).add(seen.key)
                return False
        network._stop_waiting(seen.key)
        try:
            for slot, port in chosen.items():
                service = seen.services.get(replica_name(job.name, *slot))
                if service is not None and service_target_port(service) != port:
                    await self._repoint(slot, service, port, "for the new pod")
        except BaseException:
            for taken, port in chosen.items():
                if taken not in ahead:  # a Service not re-pointed: its new port is free again
                    self._release(taken, port)
            raise
        for slot in chosen:
            ahead.pop(slot, None)  # from here on this reconcile's: made into a pod, or released (not_created)
        if seen.key in network._ahead and not ahead:
            del network._ahead[seen.key]
        self.reserved.update(chosen)
        return True

    def _release(self, slot: Slot, port: int) -> None:
        """Give back a port reserved for the replica ``slot`` of this job."""
        self.network.allocator.release(f"{self.seen.job.namespace}/{replica_name(self.seen.job.name, *slot)}", port)

    async def _repoint(self, slot: Slot, service: Object, port: int, why: str) -> None:
        seen = self.seen
        name = replica_name(seen.job.name, *slot)
        old = service_target_port(service)
        await self.network._point(seen, name, service, port)
        message = f"{slot[0]} {slot[1]}: Service {name} re-pointed from host port {old} to {port} {why}"
        logger.info("%s: %s", seen.key, message)
        self.repointed.append(message)

    async def report(self) -> None:
        """The ``HostPortChanged`` events of the Services this reconcile re-pointed. Called once the new pods
        are sent, not between the Service and its pod: an Event is one more round trip to the API server, and
        a failover's peers wait for the pod, not for the Event."""
        messages, self.repointed = self.repointed, []
        for message in messages:
            await self.network.recorder.normal(self.seen.raw, "HostPortChanged", message)

    def ports(self) -> dict[Slot, int]:
        """Host ports of every replica: live pods' own ports plus the ones just reserved."""
        ports = dict(self.reserved)
        for slot, replica in self.seen.replicas.items():
            if replica.pod is not None and slot not in ports:
                port = pod_port(replica.pod)
                if port is not None:
                    ports[slot] = port
        return ports

    def not_created(self, pod_key: str, slot: Slot) -> None:
        """A pod that was not made: its reserved port is free again."""
        port = self.reserved.pop(slot, None)
        if port is not None:
            self.network.allocator.release(pod_key, port)

    async def settle(self) -> None:
        """A live pod's port is the truth: re-point a Service that points elsewhere (crash recovery)."""
        if not self.host:
            return
        seen = self.seen
        for replica in seen.replicas.values():
            if replica.pod is None:
                continue
            name = replica_name(seen.job.name, replica.replica_type, replica.index)
            service = seen.services.get(name)
            port = pod_port(replica.pod)
            if service is None or port is None or service_target_port(service) == port:
                continue
            await self.network._point(seen, name, service, port)
            logger.info("%s: Service %s re-pointed to its live pod's host port %d", seen.key, name, port)


def _mode(seen: Observation) -> tuple[bool, str | None]:
    """The job's effective mode (the one its existing objects were made in, else the annotation), and
    why a requested change is refused, if one is."""
    wanted = seen.job.host_network
    actual: bool | None = None
    for replica in seen.replicas.values():
        if replica.pod is not None:
            actual = bool((replica.pod.get("spec") or {}).get("hostNetwork"))
            break
    if actual is None:
        for service in seen.services.values():
            actual = (service.get("spec") or {}).get("clusterIP") != "None"
            break
    if actual is None or actual == wanted:
        return wanted, None
    now, was = ("host", "pod") if wanted else ("pod", "host")
    return actual, (
        f"the {c.ANNOTATION_NETWORK_MODE} annotation asks for {now} network, but the job's pods and "
        f"Services were made for {was} network; the change is refused (delete and resubmit the job to "
        "switch modes)"
    )


def _target_port_patch(service: Object, port: int) -> Object:
    ports = [dict(p) for p in (service.get("spec") or {}).get("ports") or []]
    for entry in ports:
        entry["targetPort"] = port
    return {"spec": {"ports": ports}}
