"""The process kubelet: runs a bound pod's containers as real local processes (``runtime="process"``).

Why it exists: the README's first command must train for real, so pods must run their ``command``/``args``,
reach each other through Services by name, and fail over with the exit codes a real runtime reports. This is
the kubelet half; the OS half (processes, logs, per-pod hosts files, pod netns, the userspace Service proxy)
is :mod:`kubedl_py.local.process`, used through one :class:`ProcessNode` in the shape of the CRI.

Organised like the real kubelet:

- one *pod worker* per pod (``PodWorker``), owning its sandbox, its containers and the pod's status;
- a *container loop* per container: start (env with downward API and ``$(VAR)`` expansion), wait, report
  ``terminated``, apply ``restartPolicy`` with a doubling back-off (``CrashLoopBackOff`` meanwhile);
- deletion: SIGTERM to every container, wait ``deletionGracePeriodSeconds``, SIGKILL, report the final
  status, tear down the sandbox, then confirm the deletion (grace 0), as the kubelet does;
- the kube-proxy and cluster-DNS roles: the Service set is pushed to ``ProcessNode.set_services`` whenever
  Services (or headless endpoints) change; the proxy resolves a Service port to ready endpoints per new
  connection from the ``Endpoints`` objects, so a re-pointed ``targetPort`` affects the next connection.

One node only: host-network pods bind on the node IP 127.0.0.1 and a second process node on the same host
would share that port space while the scheduler believed otherwise. ``LocalCluster`` refuses ``nodes > 1``
with this runtime (see docs/local-cluster.md).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import events
from .errors import ApiError
from .kubelet import _conditions
from .podlogs import PodLogs
from .process import (
    Backend,
    ContainerConfigError,
    ContainerProcess,
    ContainerSpec,
    ContainerStartError,
    PodNetworkUnavailable,
    PodRef,
    PodSandbox,
    ProcessNode,
    SandboxUnavailable,
    ServiceInfo,
    ServicePort,
    TerminatedState,
    expand_vars,
)
from .registry import Registry, iso_at
from .store import Event, Obj

log = logging.getLogger(__name__)

PODS = ("", "pods")
SERVICES = ("", "services")
ENDPOINTS = ("", "endpoints")
CONFIGMAPS = ("", "configmaps")
SECRETS = ("", "secrets")


class EnvError(ValueError):
    """A container's env cannot be built (missing ConfigMap key, bad fieldRef): CreateContainerConfigError."""


def _process_base_env() -> dict[str, str]:
    """What the "image" provides: the cluster's environment, with its own Python first on PATH.

    Why: ``command: ["python", ...]`` should find the interpreter ``local up`` runs under (the venv with
    torch), even when the venv is not activated in the shell that started it.
    """
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    parts = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != bindir]
    env["PATH"] = os.pathsep.join([bindir, *parts])
    env.pop("KUBECONFIG", None)  # a pod has no kubeconfig of the user's
    return env


def field_ref(pod: Obj, path: str, *, pod_ip: str, host_ip: str) -> str:
    """The downward API (``valueFrom.fieldRef.fieldPath``) for the fields the kubelet supports."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": md.get("name", ""),
        "metadata.namespace": md.get("namespace", ""),
        "metadata.uid": md.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path in simple:
        return str(simple[path])
    for prefix, key in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((md.get(key) or {}).get(path[len(prefix) + 2 : -2], ""))
    raise EnvError(f"unsupported fieldPath {path!r}")


def service_link_env(services: list[Obj]) -> dict[str, str]:
    """Docker-link style variables of the namespace's Services (``enableServiceLinks``, on by default)."""
    env: dict[str, str] = {}
    for svc in services:
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP")
        ports = spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        prefix = svc["metadata"]["name"].upper().replace("-", "_")
        env[f"{prefix}_SERVICE_HOST"] = ip
        env[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
        for p in ports:
            if p.get("name"):
                env[f"{prefix}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
        first = ports[0]
        proto = first.get("protocol", "TCP")
        env[f"{prefix}_PORT"] = f"{proto.lower()}://{ip}:{first['port']}"
        for p in ports:
            pr = p.get("protocol", "TCP")
            base = f"{prefix}_PORT_{p['port']}_{pr}"
            env[base] = f"{pr.lower()}://{ip}:{p['port']}"
            env[f"{base}_PROTO"] = pr.lower()
            env[f"{base}_PORT"] = str(p["port"])
            env[f"{base}_ADDR"] = ip
    return env


@dataclass
class _Container:
    spec: Obj
    restarts: int = 0
    proc: ContainerProcess | None = None
    status: Obj = field(default_factory=dict)
    pump: asyncio.Task[None] | None = None
    task: asyncio.Task[TerminatedState | None] | None = None


class PodWorker:
    """Runs one pod (one uid) from sandbox creation to confirmed deletion."""

    def __init__(self, kubelet: ProcessKubelet, pod: Obj) -> None:
        self.kubelet = kubelet
        md = pod["metadata"]
        self.ns: str = md["namespace"]
        self.name: str = md["name"]
        self.uid: str = md["uid"]
        self.ref = PodRef(namespace=self.ns, name=self.name, uid=self.uid)
        self.sandbox: PodSandbox | None = None
        self.containers: dict[str, _Container] = {}
        self.init_statuses: list[Obj] = []
        self.stop_requested = asyncio.Event()
        self.terminal = False
        self.task = asyncio.create_task(self._run(), name=f"pod worker {self.ns}/{self.name}")

    # ---- store access -----------------------------------------------------------------------------------

    def _pod(self) -> Obj | None:
        pod = self.kubelet.store.get(PODS, self.ns, self.name)
        if pod is None or pod["metadata"].get("uid") != self.uid:
            return None
        return pod

    def _write(self, mutate: Any) -> Obj | None:
        """Read the latest pod, let ``mutate(status)`` change a copy of its status, write it back."""
        if self.kubelet.frozen:
            return None
        pod = self._pod()
        if pod is None:
            return None
        status = dict(pod.get("status") or {})
        mutate(status)
        if status == pod.get("status"):
            return pod
        new = dict(pod, status=status)
        new["metadata"] = dict(pod["metadata"], resourceVersion=str(self.kubelet.store.next_rv()))
        self.kubelet.store.put(PODS, new, pod)
        return new

    def _event(self, type_: str, reason: str, message: str) -> None:
        pod = self._pod()
        if pod is not None:
            events.record(
                self.kubelet.registry, pod, type_, reason, message, component="kubelet", host=self.kubelet.node_name
            )

    def _report(self, phase: str | None = None, extra: Obj | None = None) -> None:
        def mutate(status: Obj) -> None:
            statuses = [dict(c.status) for c in self.containers.values() if c.status]
            if statuses:
                status["containerStatuses"] = statuses
            if self.init_statuses:
                status["initContainerStatuses"] = [dict(s) for s in self.init_statuses]
            if phase is not None:
                status["phase"] = phase
            status.update(extra or {})
            ready = bool(statuses) and all(s.get("ready") for s in statuses) and not self.terminal
            status["conditions"] = _conditions(status, ready=ready, terminal=self.terminal)

        self._write(mutate)

    # ---- the pod's life ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._life()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pod worker %s/%s failed", self.ns, self.name)

    async def _life(self) -> None:
        pod = self._pod()
        if pod is None:
            return
        spec = pod.get("spec") or {}
        host_network = bool(spec.get("hostNetwork"))
        try:
            self.sandbox = await self.kubelet.node.create_pod_sandbox(
                self.ref, host_network=host_network, hostname=spec.get("hostname"), subdomain=spec.get("subdomain")
            )
        except Exception as e:
            # Refuse rather than half-run: the pod fails with the reason, so its job fails with it too.
            unavailable = isinstance(e, PodNetworkUnavailable | SandboxUnavailable)
            if not unavailable:
                log.exception("pod sandbox of %s/%s", self.ns, self.name)
            self._event("Warning", "FailedCreatePodSandBox", str(e))
            self.terminal = True
            reason = "PodNetworkUnavailable" if unavailable else "FailedCreatePodSandBox"
            self._report("Failed", {"reason": reason, "message": str(e)})
            await self._until_deleted()
            return
        host_ip = self.kubelet.node_ip
        start_ts = iso_at(time.time())

        def initial(status: Obj) -> None:
            status.update(
                phase="Pending",
                hostIP=host_ip,
                hostIPs=[{"ip": host_ip}],
                podIP=self.sandbox.ip if self.sandbox else host_ip,
                podIPs=[{"ip": self.sandbox.ip if self.sandbox else host_ip}],
                startTime=status.get("startTime") or start_ts,
            )
            status["containerStatuses"] = [
                _waiting_status(c, "ContainerCreating", None) for c in spec.get("containers") or []
            ]
            status["conditions"] = _conditions(status, ready=False)

        self._write(initial)
        await self.kubelet.services_current()
        policy = spec.get("restartPolicy", "Always")
        for c in spec.get("initContainers") or []:
            ok = await self._run_init(c, policy)
            if not ok:
                return
        for c in spec.get("containers") or []:
            self.containers[c["name"]] = _Container(spec=c, status=_waiting_status(c, "ContainerCreating", None))
        for ctr in self.containers.values():
            ctr.task = asyncio.create_task(self._container_loop(ctr, policy))
        tasks = [ctr.task for ctr in self.containers.values() if ctr.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.stop_requested.is_set():
            return
        # Every container ended for good (restartPolicy said so): the pod is terminal.
        codes = [
            ((c.status.get("state") or {}).get("terminated") or {}).get("exitCode", 1) for c in self.containers.values()
        ]
        self.terminal = True
        self._report("Succeeded" if all(code == 0 for code in codes) else "Failed")
        await self.kubelet.node.remove_pod_sandbox(self.sandbox, grace_seconds=0)
        self.sandbox = None

    async def _until_deleted(self) -> None:
        await self.stop_requested.wait()

    async def _run_init(self, c: Obj, policy: str) -> bool:
        """Run one init container to completion (retrying per policy); False when the pod failed or stops."""
        restarts = 0
        idx = len(self.init_statuses)
        self.init_statuses.append(_waiting_status(c, "PodInitializing", None))
        while True:
            ctr = _Container(spec=c, restarts=restarts)
            term = await self._start_and_wait(ctr, init=True)
            if term is None:  # deletion requested
                return False
            status = _terminated_status(c, ctr, term)
            self.init_statuses[idx] = status
            if term.exit_code == 0:
                self.init_statuses[idx] = dict(status, ready=True)
                self._report()
                return True
            if policy == "Never":
                self.terminal = True
                self._report("Failed")
                return False
            self.init_statuses[idx] = _backoff_status(c, ctr, term)
            self._report()
            if not await self._backoff(restarts):
                return False
            restarts += 1

    async def _container_loop(self, ctr: _Container, policy: str) -> TerminatedState | None:
        while True:
            term = await self._start_and_wait(ctr)
            if term is None:
                return None
            restart = policy == "Always" or (policy == "OnFailure" and term.exit_code != 0)
            if not restart:
                ctr.status = _terminated_status(ctr.spec, ctr, term)
                self._report()
                return term
            ctr.status = _backoff_status(ctr.spec, ctr, term)
            self._report()
            if not await self._backoff(ctr.restarts):
                return None
            ctr.restarts += 1

    async def _backoff(self, restarts: int) -> bool:
        """Sleep the back-off unless deletion is requested meanwhile; True to go on restarting."""
        delay = min(self.kubelet.max_backoff, self.kubelet.restart_backoff * (2**restarts))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop_requested.wait(), delay)
        return not self.stop_requested.is_set()

    async def _start_and_wait(self, ctr: _Container, *, init: bool = False) -> TerminatedState | None:
        """Start one instance and wait for its exit; None when deletion was requested (still running then)."""
        if self.stop_requested.is_set() or self.sandbox is None:
            return None
        c = ctr.spec
        pod = self._pod()
        if pod is None:
            return None
        try:
            env = self.kubelet.container_env(pod, c, pod_ip=self.sandbox.ip)
            spec = ContainerSpec(
                name=c["name"],
                command=list(c.get("command") or []),
                args=list(c.get("args") or []),
                env=env,
                working_dir=c.get("workingDir") or None,
                image=c.get("image"),
            )
            proc = await self.kubelet.node.start_container(self.sandbox, spec, restart_count=ctr.restarts)
        except (ContainerConfigError, EnvError) as e:
            # The real kubelet keeps retrying such a container; it cannot succeed until the pod is replaced.
            ctr.status = _waiting_status(c, "CreateContainerConfigError", str(e), ctr.restarts)
            self._event("Warning", "Failed", f"Error: {e}")
            self._report()
            await self.stop_requested.wait()
            return None
        except ContainerStartError as e:
            self._event("Warning", "Failed", f"Error: {e}")
            return e.terminated
        ctr.proc = proc
        key = (self.ns, self.name, c["name"])
        self.kubelet.logs.start(key)
        ctr.pump = asyncio.create_task(self.kubelet.pump_log(key, proc))
        ctr.status = _running_status(c, ctr, proc)
        if not init:
            self._report("Running" if self._all_started() else None)
        else:
            self._report()
        self._event("Normal", "Started", f"Started container {c['name']}")
        waiter = asyncio.ensure_future(proc.wait())
        stopper = asyncio.ensure_future(self.stop_requested.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if not waiter.done():
            waiter.cancel()
            return None
        term = waiter.result()
        await ctr.pump
        ctr.proc = None
        return term

    def _all_started(self) -> bool:
        return all(
            c.proc is not None or "terminated" in (c.status.get("state") or {}) for c in self.containers.values()
        )

    # ---- deletion ---------------------------------------------------------------------------------------

    async def terminate(self, grace: float, *, confirm: bool = True) -> None:
        """Stop the pod: SIGTERM, grace, SIGKILL; report; tear down; confirm the deletion (grace 0)."""
        self.stop_requested.set()
        with contextlib.suppress(Exception):
            await asyncio.shield(self.task)
        live = [(ctr, ctr.proc) for ctr in self.containers.values() if ctr.proc is not None]
        finals = await asyncio.gather(*(proc.stop(grace) for _ctr, proc in live))
        for (ctr, _proc), term in zip(live, finals, strict=True):
            if ctr.pump is not None:
                await ctr.pump
            ctr.status = _terminated_status(ctr.spec, ctr, term)
            ctr.proc = None
        for ctr in self.containers.values():
            if "terminated" not in (ctr.status.get("state") or {}):
                now = iso_at(time.time())
                ctr.status = dict(
                    ctr.status,
                    ready=False,
                    started=False,
                    state={"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown", "finishedAt": now}},
                )
        if self.sandbox is not None:
            await self.kubelet.node.remove_pod_sandbox(self.sandbox, grace_seconds=0)
            self.sandbox = None
        pod = self._pod()
        if pod is not None and confirm and not self.kubelet.frozen:
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                self.terminal = True
                codes = [
                    ((c.status.get("state") or {}).get("terminated") or {}).get("exitCode", 1)
                    for c in self.containers.values()
                ]
                self._report("Succeeded" if codes and all(code == 0 for code in codes) else "Failed")
            try:
                self.kubelet.registry.delete(
                    self.kubelet.registry.resource("", "pods"),
                    self.ns,
                    self.name,
                    {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
                )
            except ApiError as e:
                if e.code not in (404, 409):
                    raise

    async def kill_now(self) -> None:
        """The pod object is gone (force deletion) or the cluster stops: SIGKILL everything, clean up."""
        self.stop_requested.set()
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        for ctr in self.containers.values():
            if ctr.proc is not None:
                await ctr.proc.stop(0)
            if ctr.pump is not None:
                with contextlib.suppress(BaseException):
                    await ctr.pump
        if self.sandbox is not None:
            await self.kubelet.node.remove_pod_sandbox(self.sandbox, grace_seconds=0)
            self.sandbox = None


def _waiting_status(c: Obj, reason: str, message: str | None, restarts: int = 0) -> Obj:
    waiting: Obj = {"reason": reason}
    if message:
        waiting["message"] = message
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": restarts,
        "state": {"waiting": waiting},
        "lastState": {},
    }


def _running_status(c: Obj, ctr: _Container, proc: ContainerProcess) -> Obj:
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": "process://ignored",
        "ready": True,
        "started": True,
        "restartCount": ctr.restarts,
        "containerID": proc.container_id,
        "state": proc.state(),
        "lastState": (ctr.status.get("lastState") or {}) if ctr.restarts else {},
    }


def _terminated_status(c: Obj, ctr: _Container, term: TerminatedState) -> Obj:
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": "process://ignored",
        "ready": False,
        "started": False,
        "restartCount": ctr.restarts,
        "containerID": term.container_id,
        "state": {"terminated": term.to_dict()},
        "lastState": (ctr.status.get("lastState") or {}) if ctr.restarts else {},
    }


def _backoff_status(c: Obj, ctr: _Container, term: TerminatedState) -> Obj:
    reason = "CrashLoopBackOff" if term.exit_code else "Completed"
    return dict(
        _waiting_status(c, reason, f"back-off restarting failed container {c['name']}", ctr.restarts),
        containerID=term.container_id,
        lastState={"terminated": term.to_dict()},
    )


class ProcessKubelet:
    """The single node's kubelet for ``runtime="process"``; same surface as the simulated ``Kubelets``."""

    def __init__(
        self,
        registry: Registry,
        logs: PodLogs,
        node_ips: dict[str, str],
        *,
        state_dir: Path,
        restart_backoff: float = 0.1,
        max_backoff: float = 2.0,
        bridge: str = "kubedl0",
        pod_cidr: str = "10.244.0.0/16",
    ) -> None:
        if len(node_ips) != 1:
            raise ValueError("the process runtime runs exactly one node")
        self.registry = registry
        self.store = registry.store
        self.logs = logs
        self.node_name, self.node_ip = next(iter(node_ips.items()))
        self.restart_backoff = restart_backoff
        self.max_backoff = max_backoff
        self.node = ProcessNode(
            state_dir, resolver=self.resolve, base_env=_process_base_env(), bridge=bridge, pod_cidr=pod_cidr
        )
        self.workers: dict[tuple[str, str], PodWorker] = {}
        self.terminating: dict[str, asyncio.Task[None]] = {}  # uid -> termination in progress
        self.frozen = False
        self._queue: dict[tuple[str, str], None] = {}
        self._wake = asyncio.Event()
        self._services_dirty = asyncio.Event()
        self._services_wanted = 0  # generation of the Service set asked for / pushed to the node
        self._services_pushed = 0
        self._services_changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False

    # ---- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.node.start()
        self._started = True
        self.store.listeners.append(self._on_event)
        for pod in self.store.iter(PODS):
            if (pod.get("spec") or {}).get("nodeName") == self.node_name:
                self._queue[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = None
        self._tasks = [
            asyncio.create_task(self._run(), name="process-kubelet"),
            asyncio.create_task(self._sync_services(), name="process-kubelet-services"),
        ]
        self._wake.set()
        self._services_wanted += 1
        self._services_dirty.set()

    async def stop(self) -> None:
        """Kill every pod's processes (the cluster is going away) and release the node."""
        with contextlib.suppress(ValueError):
            self.store.listeners.remove(self._on_event)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for t in list(self.terminating.values()):
            t.cancel()
        await asyncio.gather(*self.terminating.values(), return_exceptions=True)
        workers = list(self.workers.values())
        self.workers.clear()
        await asyncio.gather(*(w.kill_now() for w in workers), return_exceptions=True)
        if self._started:
            self._started = False
            await self.node.close(grace_seconds=1.0)

    def freeze(self, node: str) -> None:
        """The kubelet stops reporting (node lost); its processes keep running, as on a partitioned node."""
        if node == self.node_name:
            self.frozen = True

    def thaw(self, node: str) -> None:
        if node != self.node_name:
            return
        self.frozen = False
        for pod in self.store.iter(PODS):
            if (pod.get("spec") or {}).get("nodeName") == node:
                self._queue[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = None
        for w in self.workers.values():
            w._report()
        self._wake.set()

    # ---- events -------------------------------------------------------------------------------------------

    def _on_event(self, ev: Event) -> None:
        if ev.rkey == PODS:
            md = ev.obj["metadata"]
            key = (md["namespace"], md["name"])
            if ev.type == "DELETED":
                self._forget(key, ev.obj)
                return
            if (ev.obj.get("spec") or {}).get("nodeName") == self.node_name:
                self._queue[key] = None
                self._wake.set()
        elif ev.rkey == SERVICES or (ev.rkey == ENDPOINTS and _headless(self.store.get(SERVICES, *_key(ev.obj)))):
            self._services_wanted += 1
            self._services_dirty.set()

    def _forget(self, key: tuple[str, str], obj: Obj) -> None:
        uid = obj["metadata"].get("uid", "")
        worker = self.workers.get(key)
        if worker is not None and worker.uid == uid:
            del self.workers[key]
            if uid not in self.terminating:  # force-deleted while running: nobody waits for a grace period
                self.terminating[uid] = asyncio.create_task(worker.kill_now())
            self.terminating[uid].add_done_callback(lambda _t: self._cleanup(uid, obj))
        else:
            self._cleanup(uid, obj)

    def _cleanup(self, uid: str, obj: Obj) -> None:
        self.terminating.pop(uid, None)
        md = obj["metadata"]
        if (md["namespace"], md["name"]) not in self.workers:  # not already re-created under the same name
            self.logs.forget_pod(md["namespace"], md["name"])
        self.node.runtime.remove_pod_logs(PodRef(namespace=md["namespace"], name=md["name"], uid=uid))

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = list(self._queue)
            self._queue.clear()
            for key in batch:
                try:
                    self._sync(key)
                except Exception:
                    log.exception("kubelet sync of %s/%s failed", *key)

    def _sync(self, key: tuple[str, str]) -> None:
        if self.frozen:
            return
        pod = self.store.get(PODS, *key)
        if pod is None or (pod.get("spec") or {}).get("nodeName") != self.node_name:
            return
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(key)
        if worker is not None and worker.uid != uid:  # a new pod of the same name; the old one is going
            self.workers.pop(key)
            if worker.uid not in self.terminating:
                self.terminating[worker.uid] = asyncio.create_task(worker.kill_now())
            worker = None
        if pod["metadata"].get("deletionTimestamp"):
            if uid in self.terminating:
                return
            if worker is None:  # nothing runs for it (never started, or finished before a restart)
                self._confirm_only(pod)
                return
            grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
            self._event(pod, "Normal", "Killing", "Stopping container " + ", ".join(worker.containers))
            self.terminating[uid] = asyncio.create_task(worker.terminate(grace))
            return
        if worker is None:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return  # finished before a restart of the cluster: never run again
            self.workers[key] = PodWorker(self, pod)

    def _confirm_only(self, pod: Obj) -> None:
        md = pod["metadata"]
        try:
            self.registry.delete(
                self.registry.resource("", "pods"),
                md["namespace"],
                md["name"],
                {"gracePeriodSeconds": 0, "preconditions": {"uid": md["uid"]}},
            )
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    def _event(self, pod: Obj, type_: str, reason: str, message: str) -> None:
        events.record(self.registry, pod, type_, reason, message, component="kubelet", host=self.node_name)

    # ---- containers: env and logs -------------------------------------------------------------------------

    def container_env(self, pod: Obj, c: Obj, *, pod_ip: str) -> dict[str, str]:
        """The container's environment as the kubelet builds it: service links, envFrom, then env in order,
        each value ``$(VAR)``-expanded against what is defined before it."""
        ns = pod["metadata"]["namespace"]
        env: dict[str, str] = {}
        if (pod.get("spec") or {}).get("enableServiceLinks", True):
            env.update(service_link_env(list(self.store.iter(SERVICES, ns))))
        kube = self.store.get(SERVICES, "default", "kubernetes")
        if kube is not None:  # every pod gets the API server's variables, whatever its namespace
            env.update(service_link_env([kube]))
        for src in c.get("envFrom") or []:
            prefix = src.get("prefix", "")
            for kind, rkey in (("configMapRef", CONFIGMAPS), ("secretRef", SECRETS)):
                ref = src.get(kind)
                if ref is None:
                    continue
                data = self._data(rkey, ns, ref.get("name", ""), optional=bool(ref.get("optional")))
                env.update({prefix + k: v for k, v in data.items()})
        for item in c.get("env") or []:
            name = item["name"]
            if "valueFrom" not in item:
                env[name] = expand_vars(str(item.get("value", "")), env)
                continue
            vf = item["valueFrom"] or {}
            if "fieldRef" in vf:
                env[name] = field_ref(pod, vf["fieldRef"].get("fieldPath", ""), pod_ip=pod_ip, host_ip=self.node_ip)
            elif "resourceFieldRef" in vf:
                env[name] = _resource_field(c, vf["resourceFieldRef"])
            else:
                for kind, rkey in (("configMapKeyRef", CONFIGMAPS), ("secretKeyRef", SECRETS)):
                    ref = vf.get(kind)
                    if ref is None:
                        continue
                    optional = bool(ref.get("optional"))
                    data = self._data(rkey, ns, ref.get("name", ""), optional=optional)
                    if ref.get("key") in data:
                        env[name] = data[ref["key"]]
                    elif not optional:
                        raise EnvError(f"couldn't find key {ref.get('key')} in {kind[:-6]} {ns}/{ref.get('name')}")
        return env

    def _data(self, rkey: tuple[str, str], ns: str, name: str, *, optional: bool) -> dict[str, str]:
        obj = self.store.get(rkey, ns, name)
        if obj is None:
            if optional:
                return {}
            kind = "configmap" if rkey == CONFIGMAPS else "secret"
            raise EnvError(f'{kind} "{name}" not found')
        if rkey == SECRETS:
            return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
        return {k: str(v) for k, v in (obj.get("data") or {}).items()}

    async def pump_log(self, key: tuple[str, str, str], proc: ContainerProcess) -> None:
        """Copy a container instance's output into the API server's pod logs as it is written."""
        try:
            async for line in proc.log.follow():
                self.logs.write(key, line.text)
        finally:
            self.logs.close(key)

    # ---- Services: proxy and DNS --------------------------------------------------------------------------

    def resolve(self, sp: ServicePort) -> list[Backend]:
        """Per new connection: the Service port's ready endpoints (IP, resolved targetPort), shuffled."""
        svc = self.store.get(SERVICES, sp.namespace, sp.name)
        ep = self.store.get(ENDPOINTS, sp.namespace, sp.name)
        if svc is None or ep is None:
            return []
        ports = (svc.get("spec") or {}).get("ports") or []
        port = next((p for p in ports if p.get("port") == sp.port), None)
        if port is None:
            return []
        pname = port.get("name", "")
        backends: list[Backend] = []
        for subset in ep.get("subsets") or []:
            match = next((q for q in subset.get("ports") or [] if q.get("name", "") == pname), None)
            if match is None:
                continue
            backends += [Backend(a["ip"], int(match["port"])) for a in subset.get("addresses") or []]
        random.shuffle(backends)  # kube-proxy spreads connections over endpoints at random
        return backends

    def _service_infos(self) -> list[ServiceInfo]:
        out = []
        for svc in self.store.iter(SERVICES):
            spec = svc.get("spec") or {}
            if spec.get("type") == "ExternalName":
                continue
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            if _headless(svc):
                ep = self.store.get(ENDPOINTS, ns, name) or {}
                ips = [a["ip"] for s in ep.get("subsets") or [] for a in s.get("addresses") or []]
                out.append(ServiceInfo(namespace=ns, name=name, cluster_ip=None, endpoint_ips=sorted(set(ips))))
                continue
            ports = [int(p["port"]) for p in spec.get("ports") or [] if p.get("protocol", "TCP") == "TCP"]
            out.append(ServiceInfo(namespace=ns, name=name, cluster_ip=spec.get("clusterIP"), ports=ports))
        return out

    async def _sync_services(self) -> None:
        while True:
            await self._services_dirty.wait()
            self._services_dirty.clear()
            generation = self._services_wanted
            try:
                await self.node.set_services(self._service_infos())
            except Exception:
                log.exception("updating Service listeners and hosts files failed")
            async with self._services_changed:
                self._services_pushed = generation
                self._services_changed.notify_all()

    async def services_current(self, within: float = 5.0) -> None:
        """Wait until the Services known now are in the hosts files and the proxy, so a container started
        next resolves them (the real kubelet has the same race with cluster DNS; here it is cheap to close)."""
        wanted = self._services_wanted
        async with self._services_changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._services_changed.wait_for(lambda: self._services_pushed >= wanted), within)

    # ---- test hooks ---------------------------------------------------------------------------------------

    def container_pid(self, namespace: str, pod: str, container: str) -> int | None:
        """PID of the container's running process (tests kill it to play a crash)."""
        worker = self.workers.get((namespace, pod))
        ctr = worker.containers.get(container) if worker is not None else None
        return ctr.proc.pid if ctr is not None and ctr.proc is not None else None

    def evict(self, ns: str, name: str, message: str) -> Obj:
        raise NotImplementedError("evict_pod is a hook of the simulated runtime; with processes, kill the process")


def _key(obj: Obj) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _headless(svc: Obj | None) -> bool:
    return svc is not None and (svc.get("spec") or {}).get("clusterIP") in ("None",)


def _resource_field(c: Obj, ref: Obj) -> str:
    """``resourceFieldRef``: the container's limit (or request); no limit means the node's capacity, 1 here."""
    res = ref.get("resource", "")
    section, _, name = res.partition(".")
    value = ((c.get("resources") or {}).get(section) or {}).get(name)
    return str(value) if value is not None else "1"
