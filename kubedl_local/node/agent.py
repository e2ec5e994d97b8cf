"""The node agent: what a kubelet does towards the API server, shared by every runtime.

Why one core: the simulated and the process runtime differ only in how containers "run"; registering the
Node, renewing its Lease, watching the pods bound to it, writing their status through ``/status``,
confirming graceful deletions, recording events and serving logs over HTTPS are the same, and they must
work unchanged against the embedded API server and a real kube-apiserver. So the agent is an ordinary API
client (:class:`~kubedl_py.kube.client.KubeClient`, :class:`~kubedl_py.kube.informer.Informer`) and touches
nothing of the server's internals.

- **Registration**: create the Node with its status (capacity, allocatable, addresses InternalIP and
  Hostname, conditions with heartbeat times, nodeInfo, ``daemonEndpoints.kubeletEndpoint.Port``); when it
  exists already (a restart), update its labels and status instead. Then a Lease in ``kube-node-lease``
  owned by the Node (``leaseDurationSeconds`` 40), renewed every ``lease_renew_interval``; the node status
  (conditions' heartbeats) is re-posted every ``node_status_interval``.
- **Pods**: one watch. One node: ``spec.nodeName=<name>`` as a kubelet; several (simulated): every bound pod
  (``spec.nodeName!=``), filtered locally, so hundreds of nodes cost one watch. Changes go to the runtime.
- **Status** through :class:`~.status.PodStatusWriter` (strategic merge patches of ``pods/{name}/status``).
- **Graceful deletion**: the runtime stops containers within ``deletionGracePeriodSeconds``, reports the
  final status, then the agent confirms with DELETE ``gracePeriodSeconds=0`` and a uid precondition.
- **Events** as the kubelet records them (``source.component: kubelet``, ``source.host: <node>``).
- **Logs**: :class:`~.server.KubeletServer` on every node's InternalIP and advertised port.
- **Test hooks** (used by ``LocalCluster``): freeze a node (lost: no heartbeats, no writes, no actions),
  thaw it, add or remove nodes, evict a pod.
- **Power**, for ``kubedl-py local node stop|start|remove`` (any process, either control plane): the agent
  watches the Nodes labelled :data:`POWER_LABEL` and, for its own, freezes (``off``), thaws (``on``) or stops
  running (``removed``) the node, saying it did so in the :data:`POWER_STATE` annotation. A label selector
  keeps the watch to the few nodes someone switched, so it costs nothing on a large simulated cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubedl_local.node.dra import DraDriver
from kubedl_local.node.execs import ExecError, ExecTarget
from kubedl_local.node.logs import LogError, LogStream
from kubedl_local.node.server import KubeletServer, KubeletTLS
from kubedl_local.node.spec import (
    LEASE_DURATION_SECONDS,
    NODE_LEASE_NAMESPACE,
    USER_AGENT,
    NodeSpec,
    node_conditions,
    node_status,
)
from kubedl_local.node.status import PodStatusWriter
from kubedl_py.kube.client import ClientSettings, KubeClient
from kubedl_py.kube.errors import AlreadyExists, KubeError, NotFound
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.informer import Handler, Informer
from kubedl_py.kube.resources import LEASES, NODES, PODS

log = logging.getLogger(__name__)

Obj = dict[str, Any]
NODE_INDEX = "node"
#: what ``kubedl-py local node`` asks of a node's agent: ``off`` (a crashed machine), ``on``, ``removed``
POWER_LABEL = "local.kubedl.io/power"
#: the agent's answer: the power state it has put the node in
POWER_STATE = "local.kubedl.io/power-state"
POWER_STATES = ("off", "on", "removed")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def agent_client_settings(max_connections: int = 64) -> ClientSettings:
    """KubeClient settings for node agents: their own User-Agent and a bigger pool (many writes at once)."""
    return ClientSettings(user_agent=USER_AGENT, max_connections=max_connections)


@dataclass(frozen=True)
class AgentSettings:
    lease_renew_interval: float = 10.0
    node_status_interval: float = 60.0
    status_workers: int = 16
    event_workers: int = 2
    #: watch every bound pod and filter locally (needed to add nodes later); default: only with several nodes
    watch_all_bound_pods: bool | None = None


class SyncQueue:
    """The pods a runtime must look at again, synced in batches by one task.

    Why: watch events come faster than pods change state; a pod marked twice before the task wakes is
    synced once, and a failed sync is logged without stopping the others. Both runtimes (simulated and
    process/container) drain their pods this way."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._keys: dict[tuple[str, str], None] = {}  # insertion-ordered, deduplicated
        self._wake = asyncio.Event()

    def add(self, namespace: str, name: str) -> None:
        self._keys[(namespace, name)] = None
        self._wake.set()

    async def drain(self, sync: Callable[[tuple[str, str]], None]) -> None:
        """Call ``sync`` for each queued pod as they come, forever (cancel the task to stop)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = list(self._keys)
            self._keys.clear()
            for key in batch:
                try:
                    sync(key)
                except Exception:
                    log.exception("%s sync of %s/%s failed", self.what, *key)


class Runtime:
    """How pods of the agent's nodes run; the agent calls these (override them)."""

    runtime_version = "unknown://0"
    agent: NodeAgent

    def bind(self, agent: NodeAgent) -> None:
        self.agent = agent

    async def start(self) -> None:
        """Before the pod watch starts (nodes are registered)."""

    async def stop(self) -> None:
        """Release everything; the agent is going away."""

    def pod_changed(self, pod: Obj) -> None:
        """A pod bound to one of our (not frozen) nodes was added or changed; cheap, non-blocking."""

    def pod_deleted(self, pod: Obj) -> None:
        """A pod object is gone from the API (whatever its node)."""

    def freeze(self, node: str) -> None:
        """The node is lost: stop acting for it (its pods keep their last reported status)."""

    def thaw(self, node: str) -> None:
        """The node is back: resync its pods (the agent calls :meth:`pod_changed` for each afterwards)."""

    def node_removed(self, node: str) -> None:
        """The node is gone for good: drop its pods' state without reporting anything."""

    async def evict(self, pod: Obj, message: str) -> None:
        """Node-pressure eviction: stop the pod's containers and report Failed/Evicted."""
        raise NotImplementedError

    def log_stream(self, pod: Obj, container: str, previous: bool) -> LogStream:
        """The log of a container of ``pod``; raises :class:`~.logs.LogError` (400) when there is none."""
        raise LogError(400, f'container "{container}" in pod "{pod["metadata"]["name"]}" is waiting to start')

    def exec_target(self, pod: Obj, container: str) -> ExecTarget:
        """How to run a command beside a running container of ``pod`` (``kubectl exec``); raises
        :class:`~.execs.ExecError` where this runtime cannot."""
        raise ExecError(400, f"this node's runtime ({self.runtime_version}) does not run commands in containers")


@dataclass
class _Node:
    spec: NodeSpec
    port: int = 0
    uid: str = ""
    frozen: bool = False
    registered: bool = False
    boot_id: str = ""
    recorder: EventRecorder | None = None


class NodeAgent:
    """Runs ``nodes`` with ``runtime`` against the API server ``client`` talks to.

    ``client`` must be open (``async with KubeClient(...)``) and stays the caller's. Use ``await start()`` /
    ``await stop()``; after ``start()`` the Nodes exist, their kubelet endpoints serve and the pod watch
    has synced.
    """

    def __init__(
        self,
        client: KubeClient,
        nodes: Sequence[NodeSpec],
        runtime: Runtime,
        *,
        tls: KubeletTLS | None = None,
        settings: AgentSettings | None = None,
    ) -> None:
        if not nodes:
            raise ValueError("a node agent needs at least one node")
        self.client = client
        self.settings = settings or AgentSettings()
        self.runtime = runtime
        self.nodes: dict[str, _Node] = {s.name: _Node(s, boot_id=str(uuid.uuid4())) for s in nodes}
        self._by_ip: dict[str, list[str]] = {}
        for s in nodes:
            self._by_ip.setdefault(s.ip, []).append(s.name)
        watch_all = self.settings.watch_all_bound_pods
        if watch_all is None:
            watch_all = len(nodes) > 1
        selector = "spec.nodeName!=" if watch_all else f"spec.nodeName={nodes[0].name}"
        self.pods = Informer(client, PODS, field_selector=selector, indexers={NODE_INDEX: _node_of})
        self.pods.add_handler(Handler(on_add=self._pod_event, on_update=self._pod_update, on_delete=self._pod_gone))
        self.power = Informer(client, NODES, label_selector=POWER_LABEL)
        self.power.add_handler(Handler(on_add=self._power_event, on_update=lambda _old, new: self._power_event(new)))
        self._power_tasks: set[asyncio.Task[None]] = set()
        self._power_lock = asyncio.Lock()
        self.status = PodStatusWriter(
            client, workers=self.settings.status_workers, frozen=self.is_frozen, current_uid=self._current_uid
        )
        self.server = KubeletServer(
            self._log_stream,
            tls or KubeletTLS(),
            [s.ip for s in nodes],
            nodes[0].name,
            exec_provider=self._exec_target,
        )
        self._events: asyncio.Queue[tuple[str, Obj, str, str, str]] = asyncio.Queue(maxsize=10_000)
        self._tasks: list[asyncio.Task[None]] = []
        self._node_writes: dict[str, int] = {}  # heartbeats in flight per node (freeze waits for them)
        self._node_idle: dict[str, asyncio.Event] = {}
        self._started = False
        #: the DRA driver of the nodes that publish devices (``NodeSpec.dra``)
        self.dra = DraDriver(client)
        runtime.bind(self)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.server.start()
        for st in self.nodes.values():
            st.port = await self.server.listen(st.spec.ip, st.spec.kubelet_port)
        await _gather_limited([self._register(st) for st in self.nodes.values()], 16)
        self.status.start()
        await self.runtime.start()
        self._tasks.append(asyncio.create_task(self.pods.run(), name="node-agent-pods"))
        self._tasks.append(asyncio.create_task(self.power.run(), name="node-agent-power"))
        self._tasks.append(asyncio.create_task(self._heartbeats(), name="node-agent-heartbeats"))
        for i in range(self.settings.event_workers):
            self._tasks.append(asyncio.create_task(self._event_worker(), name=f"node-agent-events-{i}"))
        await self.pods.wait_synced()
        self._started = True
        log.info("node agent running %d node(s): %s", len(self.nodes), ", ".join(list(self.nodes)[:5]))

    async def stop(self) -> None:
        for t in [*self._tasks, *self._power_tasks]:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._power_tasks, return_exceptions=True)
        self._tasks = []
        self._power_tasks.clear()
        await self.runtime.stop()
        await self.status.stop()
        await self.server.stop()

    # ---- nodes --------------------------------------------------------------------------------------------

    def node(self, name: str) -> NodeSpec | None:
        st = self.nodes.get(name)
        return st.spec if st is not None else None

    def node_port(self, name: str) -> int:
        return self.nodes[name].port

    def is_frozen(self, name: str) -> bool:
        st = self.nodes.get(name)
        return st is None or st.frozen

    def manages(self, name: str) -> bool:
        return name in self.nodes

    async def _register(self, st: _Node) -> None:
        spec = st.spec
        labels = spec.all_labels()
        status = node_status(spec, st.port, now_iso(), st.boot_id)
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": spec.name, "labels": labels, "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {},
            "status": status,
        }
        try:
            node = await self.client.create(NODES, body)
        except AlreadyExists:
            # A restart: the Node stays (with whatever others put on it); labels and status become ours again.
            await self.client.patch(NODES, spec.name, {"metadata": {"labels": labels}})
            patch_status = dict(status)
            patch_status["capacity"] = {"$patch": "replace", **status["capacity"]}
            patch_status["allocatable"] = {"$patch": "replace", **status["allocatable"]}
            for c in patch_status["conditions"]:
                c.pop("lastTransitionTime", None)
            node = await self.client.patch_status(NODES, spec.name, {"status": patch_status}, patch_type="strategic")
        st.uid = str(node["metadata"]["uid"])
        st.registered = True
        await self._renew_lease(st)
        if spec.dra is not None:
            await self.dra.publish(spec.name, st.uid, spec.dra)

    async def _renew_lease(self, st: _Node) -> None:
        name = st.spec.name
        lease_spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": micro_now()}
        try:
            await self.client.patch(LEASES, name, {"spec": lease_spec}, namespace=NODE_LEASE_NAMESPACE)
            return
        except NotFound:
            pass
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": NODE_LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": st.uid}],
            },
            "spec": lease_spec,
        }
        with contextlib.suppress(AlreadyExists):
            await self.client.create(LEASES, body, namespace=NODE_LEASE_NAMESPACE)

    async def _post_status(self, st: _Node, *, transition: bool = False) -> None:
        now = now_iso()
        conds = node_conditions(now)
        if transition:  # back from a loss: every condition changed just now
            for c in conds:
                c["lastTransitionTime"] = now
        patch = {"status": {"conditions": conds}}
        await self.client.patch_status(NODES, st.spec.name, patch, patch_type="strategic")

    async def _heartbeat(self, st: _Node, *, status: bool) -> None:
        if st.frozen or not st.registered:
            return
        name = st.spec.name
        self._node_writes[name] = self._node_writes.get(name, 0) + 1
        try:
            await self._renew_lease(st)
            if status:
                await self._post_status(st)
        except KubeError as e:
            log.warning("heartbeat of node %s failed: %s", name, e)
        finally:
            self._node_writes[name] -= 1
            if not self._node_writes[name] and name in self._node_idle:
                self._node_idle[name].set()

    async def _heartbeats(self) -> None:
        loop = asyncio.get_running_loop()
        last_status = loop.time()
        while True:
            await asyncio.sleep(self.settings.lease_renew_interval)
            status = loop.time() - last_status >= self.settings.node_status_interval
            if status:
                last_status = loop.time()
            await _gather_limited([self._heartbeat(st, status=status) for st in list(self.nodes.values())], 16)

    # ---- test hooks ---------------------------------------------------------------------------------------

    async def freeze(self, name: str) -> None:
        """The node is lost: no heartbeats, no status writes, no actions; waits for writes in flight."""
        st = self.nodes[name]
        st.frozen = True
        self.runtime.freeze(name)
        await self.status.quiesce(name)
        while self._node_writes.get(name):
            idle = self._node_idle.setdefault(name, asyncio.Event())
            idle.clear()
            await idle.wait()

    async def thaw(self, name: str) -> None:
        """The node is back: Ready again (posted before this returns), pods resynced and re-reported."""
        st = self.nodes[name]
        st.frozen = False
        await self._renew_lease(st)
        await self._post_status(st, transition=True)
        self.runtime.thaw(name)
        self.status.resync(name)
        for pod in self.pods.list(NODE_INDEX, name):
            self.runtime.pod_changed(pod)

    async def add_node(self, spec: NodeSpec) -> None:
        if spec.name in self.nodes:
            raise ValueError(f"node {spec.name} exists")
        if self.pods.field_selector != "spec.nodeName!=":
            raise ValueError("this agent watches one node's pods only; it cannot take more nodes")
        st = _Node(spec, boot_id=str(uuid.uuid4()))
        st.port = await self.server.listen(spec.ip, spec.kubelet_port)
        self.nodes[spec.name] = st
        self._by_ip.setdefault(spec.ip, []).append(spec.name)
        await self._register(st)
        for pod in self.pods.list(NODE_INDEX, spec.name):
            self.runtime.pod_changed(pod)

    async def remove_node(self, name: str) -> None:
        """Stop running ``name`` at all (its machine is gone); the Node object is the caller's business."""
        st = self.nodes[name]
        st.frozen = True
        self.runtime.node_removed(name)
        await self.status.quiesce(name)
        del self.nodes[name]
        self._by_ip[st.spec.ip].remove(name)
        await self.server.unlisten(st.spec.ip, st.port)

    async def evict(self, namespace: str, name: str, message: str) -> Obj:
        pod = self.pods.get(name, namespace=namespace)
        if pod is None:
            raise NotFound(f'pods "{name}" not found', status=404, reason="NotFound")
        await self.runtime.evict(pod, message)
        written = await self.status.flush(namespace, name)
        return written if written is not None else pod

    # ---- power (kubedl-py local node) ---------------------------------------------------------------------

    def _power_event(self, node: Obj) -> None:
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        wanted = (meta.get("labels") or {}).get(POWER_LABEL)
        if name not in self.nodes or wanted not in POWER_STATES:
            return
        if (meta.get("annotations") or {}).get(POWER_STATE) == wanted:
            return
        task = asyncio.create_task(self._switch(name, str(wanted)), name=f"node-agent-power-{name}")
        self._power_tasks.add(task)
        task.add_done_callback(self._power_tasks.discard)

    async def _switch(self, name: str, wanted: str) -> None:
        """Put node ``name`` in the power state asked for, then say so on the Node (written before freezing:
        the answer is no heartbeat, and a frozen node writes nothing)."""
        async with self._power_lock:
            st = self.nodes.get(name)
            if st is None:
                return
            try:
                if wanted == "on" and st.frozen:
                    await self.thaw(name)
                    log.info("node %s started again (%s=on)", name, POWER_LABEL)
                await self._answer(name, wanted)
                if wanted == "off" and not st.frozen:
                    await self.freeze(name)
                    log.info("node %s stopped as a crashed machine (%s=off)", name, POWER_LABEL)
                elif wanted == "removed":
                    await self.remove_node(name)
                    log.info("node %s removed (%s=removed)", name, POWER_LABEL)
            except KubeError as e:
                log.warning("node %s: could not switch it %s: %s", name, wanted, e)

    async def _answer(self, name: str, state: str) -> None:
        await self.client.patch(NODES, name, {"metadata": {"annotations": {POWER_STATE: state}}})

    # ---- pods ---------------------------------------------------------------------------------------------

    def pod(self, namespace: str, name: str) -> Obj | None:
        """The agent's latest view of a pod (from its watch)."""
        return self.pods.get(name, namespace=namespace)

    def _current_uid(self, namespace: str, name: str) -> str | None:
        pod = self.pods.get(name, namespace=namespace)
        return str(pod["metadata"]["uid"]) if pod is not None else None

    def _pod_event(self, pod: Obj) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        st = self.nodes.get(node or "")
        if st is None or st.frozen:
            return
        self.runtime.pod_changed(pod)

    def _pod_update(self, _old: Obj, new: Obj) -> None:
        self._pod_event(new)

    def _pod_gone(self, pod: Obj) -> None:
        md = pod["metadata"]
        self.status.forget(md["namespace"], md["name"], md.get("uid", ""))
        self.runtime.pod_deleted(pod)

    # ---- events -------------------------------------------------------------------------------------------

    def event(self, pod: Obj, type_: str, reason: str, message: str) -> None:
        """Record a kubelet event about ``pod`` (best effort, asynchronous)."""
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if self.is_frozen(node):
            return
        with contextlib.suppress(asyncio.QueueFull):
            self._events.put_nowait((node, pod, type_, reason, message))

    async def _event_worker(self) -> None:
        while True:
            node, pod, type_, reason, message = await self._events.get()
            st = self.nodes.get(node)
            if st is None:
                continue
            if st.recorder is None:
                st.recorder = EventRecorder(self.client, component="kubelet", host=node)
            obj = dict(pod)
            obj.setdefault("apiVersion", "v1")
            obj.setdefault("kind", "Pod")
            await st.recorder.event(obj, type=type_, reason=reason, message=message)  # type: ignore[arg-type]

    # ---- logs ---------------------------------------------------------------------------------------------

    def _log_stream(self, local_ip: str, namespace: str, name: str, container: str, previous: bool) -> LogStream:
        pod = self.pods.get(name, namespace=namespace)
        node = (pod.get("spec") or {}).get("nodeName") if pod is not None else None
        # Answer for the node whose address the request came to (with one node, whatever the address).
        here = self._by_ip.get(local_ip) or (list(self.nodes) if len(self.nodes) == 1 else [])
        if pod is None or node not in here:
            raise LogError(404, f'pod "{namespace}/{name}" does not exist')
        spec = pod.get("spec") or {}
        names = [c.get("name") for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])]
        if container not in names:
            raise LogError(404, f'container "{container}" not found in pod "{namespace}/{name}"')
        return self.runtime.log_stream(pod, container, previous)

    def _exec_target(self, local_ip: str, namespace: str, name: str, container: str) -> ExecTarget:
        pod = self.pods.get(name, namespace=namespace)
        node = (pod.get("spec") or {}).get("nodeName") if pod is not None else None
        here = self._by_ip.get(local_ip) or (list(self.nodes) if len(self.nodes) == 1 else [])
        if pod is None or node not in here:
            raise ExecError(404, f'pod "{namespace}/{name}" does not exist')
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if container not in names:
            raise ExecError(404, f'container "{container}" not found in pod "{namespace}/{name}"')
        return self.runtime.exec_target(pod, container)


def _node_of(obj: Any) -> list[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []


async def _gather_limited(coros: Sequence[Any], limit: int) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(c: Any) -> None:
        async with sem:
            await c

    results = await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
            raise r
