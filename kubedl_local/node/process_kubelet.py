"""The process runtime: a bound pod's containers run as real local processes (``runtime="process"``).

Why it exists: the README's first command must train for real, so pods must run their ``command``/``args``,
reach each other through Services by name, read their volumes, and fail over with the exit codes a real
runtime reports. This is the kubelet half, plugged into the :class:`~.agent.NodeAgent` core (which talks
to the API server); the OS half (processes, logs, per-pod hosts files, pod netns, the userspace Service
proxy) is :mod:`.process`, used through one :class:`ProcessNode` in the shape of the CRI, and volumes are
:mod:`.volumes`.

Organised like the real kubelet:

- one *pod worker* per pod (``PodWorker``), owning its sandbox, volumes, containers and the pod's status;
- a *container loop* per container: start (env with downward API and ``$(VAR)`` expansion), wait, report
  ``terminated``, restart it by the kubelet's rules (``restarts.should_restart``) with a doubling back-off
  (``CrashLoopBackOff`` meanwhile);
- init containers in order, each run to completion, except a *native sidecar* (``restartPolicy: Always``):
  it is left running once started (its startup probe passed, if any; then the next init container starts),
  restarted whenever it exits, its readiness counted in the pod's, and stopped (SIGTERM, then SIGKILL within
  the pod's grace period, the last sidecar first) once the main containers have ended for good; the pod's
  phase is the main containers' alone;
- *RestartAllContainers* (kubelet 1.37): an exit matching a container's ``restartPolicyRules`` rule with that
  action shows in its status with the pod's ``AllContainersRestarting`` condition True; every container still
  running is killed (the main ones first, then the init ones, one after the other, 2 s of grace each, as the
  kubelet does), each container's ``restartCount`` goes up by one (waiting ``RestartingAllContainers``), the
  condition turns False, and the pod runs again from its first init container in the same sandbox (IP,
  network namespace), with the same volumes (an ``emptyDir`` keeps its files) and uid;
- deletion: SIGTERM to every main container, wait ``deletionGracePeriodSeconds``, SIGKILL, then the sidecars
  the same way in what is left of it (as the kubelet orders them), report the final status, tear down the
  sandbox, then the agent confirms the deletion (grace 0), as the kubelet does;
- volumes (:mod:`.volumes`): written before the first container starts; ConfigMap/Secret changes and, on
  every change of the pod's labels or annotations, its downward API files are rewritten atomically (the
  in-place restart agent, ``kubedl_py.agent``, reads its signals there);
- the kube-proxy and cluster-DNS roles: Services and Endpoints come from informers (list + watch, like
  every other API object this runtime reads: ConfigMaps, Secrets); the Service set is pushed to
  ``ProcessNode.set_services`` whenever they change, and the proxy resolves a Service port to ready
  endpoints per new connection, so a re-pointed ``targetPort`` affects the next connection. The
  ``default/kubernetes`` Service is answered by forwarding to the API server address the agent was given:
  a real API server cannot put a loopback address in its Endpoints.

One node only: host-network pods bind on the node IP (the host's primary address) and a second process node
on the same host would share that port space while the scheduler believed otherwise.

A container's ``securityContext`` is not applied to a process: it runs as the user the node runs as (so do the
in-place restart agent's containers, whatever their ``runAsUser: 65532``, read-only root filesystem and dropped
capabilities say). In podman it is applied (:mod:`.containers`); without ``fsGroup`` the agent's user can still
write its ``emptyDir`` (mode 0777) and read its downward API files (0644), as the kubelet makes them.

Containers (``containers=True``, ``runtime="container"``): when a pod starts, the node looks up all its
images in the local podman store; found, the pod's containers run with podman (:mod:`.containers`) in the
same sandbox, with the same volumes, environment, logs, restarts and deletion; otherwise the pod runs as
processes. Probes (:mod:`.probes`) run for both kinds: readiness decides ``ready`` (and so the pod's
``Ready``), a failing liveness or startup probe gets the instance stopped and restarted per the policy.

Devices (:mod:`.devices`): a pod is admitted by the device manager before its sandbox exists (its GPUs and
pretend devices reserved, or the pod fails ``OutOf<resource>``); each container starts with the device
plugins' variables (and, in podman, the device nodes) and frees its devices when it ends for good.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import logging
import random
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from kubedl_local.node.agent import Runtime, SyncQueue, now_iso
from kubedl_local.node.containers import ContainerCreateError, ImageConfig, PodmanRuntime
from kubedl_local.node.devices import PRETEND_EVENT, AdmissionError, DeviceManager, NodeDevices, pretend_message
from kubedl_local.node.env import EnvError, field_ref, process_base_env, resource_field, service_link_env
from kubedl_local.node.execs import ExecError, ExecTarget
from kubedl_local.node.logs import LogEntry, LogError, LogStream
from kubedl_local.node.probes import DEFAULT_GRACE, ContainerProbes, probe_grace
from kubedl_local.node.process import (
    Backend,
    ContainerConfigError,
    ContainerLog,
    ContainerSpec,
    ContainerStartError,
    Mount,
    PodNetworkUnavailable,
    PodRef,
    PodSandbox,
    ProcessNode,
    Sandbox,
    SandboxUnavailable,
    ServiceInfo,
    ServicePort,
    TerminatedState,
    expand_vars,
    wrap_argv,
)
from kubedl_local.node.process.runner import RunningContainer
from kubedl_local.node.restarts import matching_rule, should_restart
from kubedl_local.node.status import all_containers_restarting, pod_conditions
from kubedl_local.node.termination import MAX_LOG_LINES, termination_message
from kubedl_local.node.volumes import Ownership, VolumeError, VolumeManager
from kubedl_py.kube.claims import claim_names
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.informer import Handler, Informer
from kubedl_py.kube.resources import CONFIGMAPS, SERVICES, Resource

log = logging.getLogger(__name__)
#: our own generator: background threads must not move the global one (tests seed it; hypothesis checks it)
_RNG = random.Random()

Obj = dict[str, Any]
ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints")
SECRETS = Resource("", "v1", "secrets", "Secret")
NAMESPACE_INDEX = "namespace"
#: the kubelet's shortest stop (``minimumGracePeriodInSeconds``): what a container killed to restart its pod
#: whole gets (its override of 0 is raised to it), and the least each sidecar gets when the pod ends
MIN_KILL_GRACE = 2.0


def iso_at(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _by_namespace(obj: Any) -> list[str]:
    return [str((obj.get("metadata") or {}).get("namespace", ""))]


@dataclass
class _Container:
    spec: Obj
    restarts: int = 0
    proc: RunningContainer | None = None
    status: Obj = field(default_factory=dict)
    task: asyncio.Task[TerminatedState | None] | None = None
    image: ImageConfig | None = None  # set when the pod runs in containers
    probes: ContainerProbes | None = None
    kill: asyncio.Task[TerminatedState] | None = None  # a probe's kill of the current instance
    init: bool = False
    #: set while the current instance runs and is started (its startup probe passed): a sidecar's is awaited
    up: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def sidecar(self) -> bool:
        """A native sidecar: an init container with ``restartPolicy: Always``, left running."""
        return self.init and self.spec.get("restartPolicy") == "Always"


class PodWorker:
    """Runs one pod (one uid) from sandbox creation to confirmed deletion."""

    def __init__(self, kubelet: LocalProcessRuntime, pod: Obj) -> None:
        self.kubelet = kubelet
        md = pod["metadata"]
        self.ns: str = md["namespace"]
        self.name: str = md["name"]
        self.uid: str = md["uid"]
        self.ref = PodRef(namespace=self.ns, name=self.name, uid=self.uid)
        # What the status writer needs to address this pod (namespace, name, uid, node).
        self.ident: Obj = {
            "metadata": {"namespace": self.ns, "name": self.name, "uid": self.uid},
            "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")},
        }
        self.status: Obj = dict(pod.get("status") or {})
        self.mounts: dict[str, tuple[Mount, ...]] = {}
        self.sandbox: PodSandbox | None = None
        self.containers: dict[str, _Container] = {}
        self.init_containers: dict[str, _Container] = {}
        self.sidecar_tasks: list[asyncio.Task[None]] = []
        #: the pod's images, by container name, when it runs in containers (empty: it runs as processes)
        self.images: dict[str, ImageConfig] = {}
        #: per container, the variables of its DRA devices (the claims prepared before the sandbox)
        self.claim_env: dict[str, dict[str, str]] = {}
        self.stop_requested = asyncio.Event()
        #: every container loop returns (leaving its instance running for whoever set it): on deletion, when
        #: the pod restarts whole, and when its sidecars are stopped
        self.halt = asyncio.Event()
        #: the container whose exit restarts the pod whole, while it does (RestartAllContainers)
        self.restart_source: str | None = None
        self.terminal = False
        self.task = asyncio.create_task(self._run(), name=f"pod worker {self.ns}/{self.name}")

    # ---- API access -------------------------------------------------------------------------------------

    def _pod(self) -> Obj | None:
        pod = self.kubelet.agent.pod(self.ns, self.name)
        if pod is None or pod["metadata"].get("uid") != self.uid:
            return None
        return pod

    def _write(self, mutate: Any) -> None:
        """Let ``mutate(status)`` change a copy of the status we own, and have the agent write it."""
        status = dict(self.status)
        mutate(status)
        if status == self.status:
            return
        self.status = status
        self.kubelet.agent.status.set(self.ident, status)

    def _event(self, type_: str, reason: str, message: str) -> None:
        pod = self._pod()
        if pod is not None:
            self.kubelet.agent.event(pod, type_, reason, message)

    def _report(self, phase: str | None = None, extra: Obj | None = None) -> None:
        def mutate(status: Obj) -> None:
            statuses = [dict(c.status) for c in self.containers.values() if c.status]
            if statuses:
                status["containerStatuses"] = statuses
            init_statuses = [dict(c.status) for c in self.init_containers.values() if c.status]
            if init_statuses:
                status["initContainerStatuses"] = init_statuses
            if phase is not None:
                status["phase"] = phase
            status.update(extra or {})
            # As the kubelet's ContainersReady: the sidecars' readiness counts with the main containers'.
            sidecars = [c.status for c in self.init_containers.values() if c.sidecar]
            ready = bool(statuses) and all(s.get("ready") for s in statuses + sidecars) and not self.terminal
            now = now_iso()
            conditions = pod_conditions(status, ready=ready, terminal=self.terminal, now=now)
            restarting = all_containers_restarting(status, restarting=self.restart_source is not None, now=now)
            status["conditions"] = conditions if restarting is None else [*conditions, restarting]

        self._write(mutate)

    def _stop(self) -> None:
        """Deletion, eviction or the node going away: every container loop returns, and none starts again."""
        self.stop_requested.set()
        self.halt.set()

    def _all(self) -> list[_Container]:
        """Every container of the pod: the main containers, then the init containers (the kubelet's order of
        removal when it restarts a pod whole)."""
        return [*self.containers.values(), *self.init_containers.values()]

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
        if not self._admit_devices(pod):
            await self._until_deleted()
            return
        self.images = await self.kubelet.pod_images(spec)
        if claim_names(pod):  # the kubelet's DRA manager prepares the claims before the sandbox
            self.claim_env = await self.kubelet.agent.dra.prepare(pod, self.kubelet.node_name)
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
            self._release_devices()
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
            status["conditions"] = pod_conditions(status, ready=False, now=now_iso())

        self._write(initial)
        await self.kubelet.services_current()
        if not await self._setup_volumes(pod):
            return
        policy = spec.get("restartPolicy", "Always")
        for c in spec.get("initContainers") or []:
            self.init_containers[c["name"]] = _Container(
                spec=c, status=_waiting_status(c, "PodInitializing", None), image=self.images.get(c["name"]), init=True
            )
        for c in spec.get("containers") or []:
            self.containers[c["name"]] = _Container(
                spec=c, status=_waiting_status(c, "ContainerCreating", None), image=self.images.get(c["name"])
            )
        while True:
            outcome = await self._attempt(policy)
            if outcome is not None or self.stop_requested.is_set():
                break
            await self._restart_all()  # halted by a RestartAllContainers exit: the pod runs again, whole
        if self.stop_requested.is_set():
            await self._join_sidecars()  # their instances are the deletion's to stop
            return
        await self._stop_sidecars(probe_grace(spec))
        # Every main container ended for good (restartPolicy said so), or an init container failed for good:
        # the pod is terminal. Its phase is the main containers' alone.
        codes = [
            ((c.status.get("state") or {}).get("terminated") or {}).get("exitCode", 1) for c in self.containers.values()
        ]
        self.terminal = True
        self._release_devices()
        succeeded = outcome == "ended" and all(code == 0 for code in codes)
        self._report("Succeeded" if succeeded else "Failed")
        await self.kubelet.node.remove_pod_sandbox(self.sandbox, grace_seconds=0)
        self.sandbox = None

    async def _attempt(self, policy: str) -> Literal["ended", "failed"] | None:
        """One run of the pod's containers: the init containers in order (a sidecar is left running once it
        has started), then the main containers until each has ended for good. ``"ended"``, ``"failed"`` (an
        init container failed for good), or None when halted: deletion, or the pod restarting whole."""
        for ctr in self.init_containers.values():
            ok = await self._start_sidecar(ctr) if ctr.sidecar else await self._run_init(ctr, policy)
            if ok is None or self.halt.is_set():
                return None
            if not ok:
                return "failed"
        if self.kubelet.devices is not None:
            self.kubelet.devices.init_done(self.uid)
        for ctr in self.containers.values():
            ctr.task = asyncio.create_task(self._container_loop(ctr, policy))
        tasks = [ctr.task for ctr in self.containers.values() if ctr.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        return None if self.halt.is_set() else "ended"

    async def _until_deleted(self) -> None:
        await self.stop_requested.wait()

    def _admit_devices(self, pod: Obj) -> bool:
        """The device manager's admission: the pod's devices are reserved, or it fails as the kubelet fails
        a pod the node cannot hold (reason ``OutOf<resource>``). Pretend devices are announced."""
        devices = self.kubelet.devices
        if devices is None:
            return True
        try:
            devices.admit(pod)
        except AdmissionError as e:
            self._event("Warning", e.reason, e.message)
            self.terminal = True
            self._report("Failed", {"reason": e.reason, "message": e.message})
            return False
        spec = pod.get("spec") or {}
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            init = c in (spec.get("initContainers") or [])
            allocation = devices.allocation(self.uid, c["name"], init=init)
            if allocation.pretend:
                self._event("Normal", PRETEND_EVENT, pretend_message(c["name"], allocation))
        return True

    def _release_devices(self, container: str | None = None) -> None:
        """Free the devices ``container`` (or the whole pod) holds: before its end is reported, so a pod the
        scheduler places next in its stead finds them free."""
        if self.kubelet.devices is not None:
            self.kubelet.devices.release(self.uid, container)

    async def _setup_volumes(self, pod: Obj) -> bool:
        """Write the pod's volumes before any container starts; as the kubelet, a volume that cannot be set
        up yet (a missing ConfigMap) keeps the pod in ContainerCreating with FailedMount events and is
        retried. False when deletion was requested meanwhile."""
        delay = 0.2
        warned = ""
        while not self.stop_requested.is_set():
            assert self.sandbox is not None
            try:
                if self.images:
                    self.mounts = await self.kubelet.volumes.setup(
                        pod, self.sandbox.ip, host_mount_points=False, owners=Ownership.of(pod)
                    )
                else:
                    self.mounts = await self.kubelet.volumes.setup(pod, self.sandbox.ip)
                return True
            except VolumeError as e:
                if str(e) != warned:
                    warned = str(e)
                    self._event("Warning", "FailedMount", f"MountVolume.SetUp failed: {e}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_requested.wait(), delay)
            delay = min(delay * 2, 5.0)
            pod = self._pod() or pod
        return False

    async def evict(self, message: str) -> None:
        """Node-pressure eviction: kill the containers at once, report Failed/Evicted; the pod object stays."""
        self._stop()
        with contextlib.suppress(Exception):
            await asyncio.shield(self.task)
        live = [(ctr, ctr.proc) for ctr in self._all() if ctr.proc is not None]
        finals = await asyncio.gather(*(proc.stop(0) for _ctr, proc in live))
        for (ctr, _proc), term in zip(live, finals, strict=True):
            ctr.status = _terminated_status(ctr.spec, ctr, term)
            ctr.proc = None
        if self.sandbox is not None:
            await self.kubelet.node.remove_pod_sandbox(self.sandbox, grace_seconds=0)
            self.sandbox = None
        self.terminal = True
        self._release_devices()
        self._report("Failed", {"reason": "Evicted", "message": message})

        def disruption(status: Obj) -> None:
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
            conds.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "TerminationByKubelet",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": now_iso(),
                }
            )
            status["conditions"] = conds

        self._write(disruption)

    async def _run_init(self, ctr: _Container, policy: str) -> bool | None:
        """Run one init container to completion, retrying per policy: True once it succeeded, False when it
        failed for good, None when halted."""
        while True:
            term = await self._start_and_wait(ctr)
            if term is None or self._restarts_all(ctr, term):
                return None
            ctr.status = _terminated_status(ctr.spec, ctr, term)
            if term.exit_code == 0:
                ctr.status = dict(ctr.status, ready=True)
                self._report()
                return True
            if not should_restart(ctr.spec, {"restartPolicy": policy}, term.exit_code):
                self._report()
                return False
            ctr.status = _backoff_status(ctr.spec, ctr, term)
            self._report()
            if not await self._backoff(ctr.restarts):
                return None
            ctr.restarts += 1

    async def _start_sidecar(self, ctr: _Container) -> bool | None:
        """Start a native sidecar and leave it running (restarted whenever it exits); the next init container
        starts once it is started (its startup probe passed, if it has one). None when halted first."""
        self.sidecar_tasks.append(asyncio.create_task(self._sidecar_loop(ctr), name=f"sidecar {ctr.spec['name']}"))
        up = asyncio.ensure_future(ctr.up.wait())
        halted = asyncio.ensure_future(self.halt.wait())
        try:
            await asyncio.wait({up, halted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            up.cancel()
            halted.cancel()
        return None if self.halt.is_set() else True

    async def _sidecar_loop(self, ctr: _Container) -> None:
        while True:
            term = await self._start_and_wait(ctr)
            if term is None or self._restarts_all(ctr, term):
                return
            ctr.status = _backoff_status(ctr.spec, ctr, term)
            self._report()
            if not await self._backoff(ctr.restarts):
                return
            ctr.restarts += 1

    async def _join_sidecars(self) -> None:
        """Wait for the sidecars' loops (they return once halted)."""
        tasks, self.sidecar_tasks = self.sidecar_tasks, []
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _stop_sidecars(self, pod_grace: float | None) -> None:
        """The main containers ended for good: stop the sidecars, the last one first, each with SIGTERM and
        then SIGKILL, all within the pod's grace period (the kubelet's termination ordering, at least its
        2 s minimum each)."""
        self.halt.set()
        await self._join_sidecars()
        deadline = time.monotonic() + (DEFAULT_GRACE if pod_grace is None else pod_grace)
        for ctr in reversed(list(self.init_containers.values())):
            if ctr.proc is None:
                continue
            term = await ctr.proc.stop(max(MIN_KILL_GRACE, deadline - time.monotonic()))
            ctr.proc, ctr.status = None, _terminated_status(ctr.spec, ctr, term)
            self._report()

    def _restarts_all(self, ctr: _Container, term: TerminatedState) -> bool:
        """Whether this exit restarts the pod whole (a ``RestartAllContainers`` rule of the container's own
        ``restartPolicyRules``). The first such exit shows in the container's status with the pod's
        ``AllContainersRestarting`` condition, and halts every container loop; :meth:`_restart_all` does the
        rest."""
        if ctr.spec.get("restartPolicy") is None:
            return False
        rule = matching_rule(ctr.spec, term.exit_code)
        if rule is None or rule.get("action") != "RestartAllContainers":
            return False
        ctr.status = _terminated_status(ctr.spec, ctr, term)
        if self.halt.is_set():  # already restarting, or stopping
            self._report()
            return True
        self.restart_source = ctr.spec["name"]
        self._report()
        self._event("Normal", "Killing", f"Container {ctr.spec['name']} exited: restarting all containers")
        self.halt.set()
        return True

    async def _restart_all(self) -> None:
        """RestartAllContainers as kubelet 1.37.2 does it (``kuberuntime_manager.go``, ``computePodActions``
        and ``SyncPod``): every container still running is killed, the main containers first, then the init
        containers, one after the other, each with SIGTERM and SIGKILL after the kubelet's 2 s minimum grace
        (its override of 0 is raised to that minimum); every container is removed (restartCount+1, waiting
        ``RestartingAllContainers``), and the pod initialises again from its first init container, in the same
        sandbox (IP, network namespace), with the same volumes."""
        with contextlib.suppress(TimeoutError):  # the exit is seen before its pod's containers go
            await asyncio.wait_for(self.kubelet.agent.status.flush(self.ns, self.name), 5.0)
        await self._join_sidecars()
        for ctr in self._all():
            if ctr.proc is not None:  # cleared once stopped: a cancelled stop leaves it to kill_now
                await ctr.proc.stop(MIN_KILL_GRACE)
                ctr.proc = None
        for ctr in self._all():
            ctr.restarts += 1
            ctr.status = _removed_status(ctr)
            ctr.task = None
        self.restart_source = None
        self._report("Pending")
        with contextlib.suppress(TimeoutError):  # as the simulated runtime: not at once, not in a busy loop
            await asyncio.wait_for(self.stop_requested.wait(), self.kubelet.restart_backoff)
        if not self.stop_requested.is_set():
            self.halt.clear()

    async def _container_loop(self, ctr: _Container, policy: str) -> TerminatedState | None:
        while True:
            term = await self._start_and_wait(ctr)
            if term is None or self._restarts_all(ctr, term):
                return None
            restart = should_restart(ctr.spec, {"restartPolicy": policy}, term.exit_code)
            if not restart:
                ctr.status = _terminated_status(ctr.spec, ctr, term)
                self._release_devices(ctr.spec["name"])
                self._report()
                return term
            ctr.status = _backoff_status(ctr.spec, ctr, term)
            self._report()
            if not await self._backoff(ctr.restarts):
                return None
            ctr.restarts += 1

    async def _backoff(self, restarts: int) -> bool:
        """Sleep the back-off unless halted meanwhile; True to go on restarting."""
        delay = min(self.kubelet.max_backoff, self.kubelet.restart_backoff * (2**restarts))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.halt.wait(), delay)
        return not self.halt.is_set()

    async def _start_and_wait(self, ctr: _Container) -> TerminatedState | None:
        """Start one instance and wait for its exit; None when halted (still running then)."""
        delay = self.kubelet.restart_backoff
        while True:
            if self.halt.is_set() or self.sandbox is None:
                return None
            c = ctr.spec
            pod = self._pod()
            if pod is None:
                return None
            try:
                proc = await self._start_instance(pod, ctr)
                break
            except ContainerCreateError as e:
                # The engine refused or failed: the kubelet reports why and tries again after a back-off.
                ctr.status = _waiting_status(c, e.reason, str(e), ctr.restarts)
                self._event("Warning", "Failed", f"Error: {e}")
                self._report()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.halt.wait(), delay)
                delay = min(delay * 2, self.kubelet.max_backoff)
            except (ContainerConfigError, EnvError) as e:
                # The real kubelet keeps retrying such a container; it cannot succeed until the pod is replaced.
                reason = e.reason if isinstance(e, ContainerConfigError) else "CreateContainerConfigError"
                ctr.status = _waiting_status(c, reason, str(e), ctr.restarts)
                self._event("Warning", "Failed", f"Error: {e}")
                self._report()
                await self.halt.wait()
                return None
            except ContainerStartError as e:
                self._event("Warning", "Failed", f"Error: {e}")
                return e.terminated
        ctr.proc = proc
        probes: ContainerProbes | None = None
        if not ctr.init or ctr.sidecar:
            probes = ContainerProbes(
                c,
                pod_ip=self.sandbox.ip,
                instance=proc,
                pod_grace=probe_grace(pod.get("spec") or {}),
                on_change=lambda: self._probed(ctr, proc, probes),
                event=self._event,
                kill=lambda grace: self._probe_kill(ctr, proc, grace),
            )
        ctr.status = _running_status(c, ctr, proc, probes)
        if ctr.status["started"]:
            ctr.up.set()
        self._report(None if ctr.init or not self._all_started() else "Running")
        self._event("Normal", "Started", f"Started container {c['name']}")
        if probes is not None:
            ctr.probes = probes
            probes.start()
        waiter = asyncio.ensure_future(proc.wait())
        stopper = asyncio.ensure_future(self.halt.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            ctr.up.clear()
            if probes is not None:
                ctr.probes = None
                await probes.close()
        kill, ctr.kill = ctr.kill, None
        if kill is not None:
            kill.add_done_callback(_retrieve)
        if not waiter.done():
            waiter.cancel()
            return None
        term = waiter.result()
        ctr.proc = None
        if not term.message:
            lines = (line.text for line in proc.log.read(tail_lines=MAX_LOG_LINES))
            message = termination_message(c, term.exit_code, lines)
            if message:
                term = dataclasses.replace(term, message=message)
        return term

    async def _start_instance(self, pod: Obj, ctr: _Container) -> RunningContainer:
        """Create and start one instance of the container, in podman when the pod runs in containers."""
        assert self.sandbox is not None
        c = ctr.spec
        env = self.kubelet.container_env(pod, c, pod_ip=self.sandbox.ip)
        device_paths: list[str] = []
        devices = self.kubelet.devices
        if devices is not None:
            allocation = devices.allocation(self.uid, c["name"], init=ctr.init)
            # the device plugins' variables come first: the container's own env may override them
            env = {**devices.env(allocation), **env}
            device_paths = devices.device_paths(allocation)
        # a DRA driver's CDI variables, which the container's own env may override as well
        env = {**self.claim_env.get(c["name"], {}), **env}
        mounts = self.mounts.get(c["name"], ())
        if ctr.image is not None:
            assert self.kubelet.containers is not None
            self._event("Normal", "Pulled", f'Container image "{c.get("image")}" already present on machine')
            proc = await self.kubelet.containers.start_container(
                self.sandbox,
                pod,
                c,
                image=ctr.image,
                env=env,
                mounts=mounts,
                restart_count=ctr.restarts,
                devices=device_paths,
            )
            self._event("Normal", "Created", f"Created container: {c['name']}")
            return proc
        spec = ContainerSpec(
            name=c["name"],
            command=list(c.get("command") or []),
            args=list(c.get("args") or []),
            env=env,
            working_dir=c.get("workingDir") or None,
            image=c.get("image"),
            mounts=mounts,
        )
        return await self.kubelet.node.start_container(self.sandbox, spec, restart_count=ctr.restarts)

    def _probed(self, ctr: _Container, proc: RunningContainer, probes: ContainerProbes | None) -> None:
        """A probe changed the instance's ``started`` or ``ready``: report it."""
        if ctr.proc is not proc or probes is None:
            return
        ctr.status = dict(ctr.status, ready=probes.started and probes.ready, started=probes.started)
        if probes.started:
            ctr.up.set()
        self._report()

    def _probe_kill(self, ctr: _Container, proc: RunningContainer, grace: float) -> None:
        """A liveness or startup probe gave up on the instance: stop it (the container loop restarts it)."""
        if ctr.proc is proc and ctr.kill is None:
            ctr.status = dict(ctr.status, ready=False)
            self._report()
            ctr.kill = asyncio.create_task(proc.stop(grace), name=f"probe kill of {proc.container_id}")

    def _all_started(self) -> bool:
        return all(
            c.proc is not None or "terminated" in (c.status.get("state") or {}) for c in self.containers.values()
        )

    # ---- deletion ---------------------------------------------------------------------------------------

    async def terminate(self, grace: float, *, confirm: bool = True) -> None:
        """Stop the pod: SIGTERM, grace, SIGKILL (the main containers together, then the sidecars, the last
        one first, in what is left of the grace period, as the kubelet orders it); report; tear down;
        confirm the deletion (grace 0)."""
        self._stop()
        with contextlib.suppress(Exception):
            await asyncio.shield(self.task)
        deadline = time.monotonic() + grace
        live = [(ctr, ctr.proc) for ctr in self._all() if ctr.proc is not None and not ctr.sidecar]
        finals = await asyncio.gather(*(proc.stop(grace) for _ctr, proc in live))
        for (ctr, _proc), term in zip(live, finals, strict=True):
            ctr.status = _terminated_status(ctr.spec, ctr, term)
            ctr.proc = None
        for ctr in reversed(list(self.init_containers.values())):
            if ctr.proc is not None:
                term = await ctr.proc.stop(max(0.0, deadline - time.monotonic()))
                ctr.proc, ctr.status = None, _terminated_status(ctr.spec, ctr, term)
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
        self._release_devices()
        if confirm:
            if self.status.get("phase") not in ("Succeeded", "Failed"):
                self.terminal = True
                codes = [
                    ((c.status.get("state") or {}).get("terminated") or {}).get("exitCode", 1)
                    for c in self.containers.values()
                ]
                self._report("Succeeded" if codes and all(code == 0 for code in codes) else "Failed")
            self.kubelet.agent.status.confirm_deletion(self.ident)
            await self.kubelet.agent.status.flush(self.ns, self.name)

    async def kill_now(self) -> None:
        """The pod object is gone (force deletion) or the cluster stops: SIGKILL everything, clean up."""
        self._stop()
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        for t in self.sidecar_tasks:
            t.cancel()
        await self._join_sidecars()
        for ctr in self._all():
            if ctr.proc is not None:
                await ctr.proc.stop(0)
        if self.sandbox is not None:
            await self.kubelet.node.remove_pod_sandbox(self.sandbox, grace_seconds=0)
            self.sandbox = None
        self._release_devices()


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


def _removed_status(ctr: _Container) -> Obj:
    """A container the kubelet removed to restart its pod whole (``kubelet_pods.go``: waiting, the last state
    terminated with reason ``RestartingAllContainers``), its restart counted."""
    message = "The container is removed because RestartAllContainers in place"
    return dict(
        ctr.status,
        ready=False,
        started=False,
        restartCount=ctr.restarts,
        state={"waiting": {"reason": "RestartingAllContainers", "message": message}},
        lastState={"terminated": {"exitCode": 137, "reason": "RestartingAllContainers", "message": message}},
    )


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Nobody awaits this task any more: consume its outcome so a failure is logged, not warned about."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("stopping a container after a failed probe: %s", task.exception())


def _image_id(ctr: _Container) -> str:
    return ctr.image.image_id if ctr.image is not None else "process://ignored"


def _running_status(c: Obj, ctr: _Container, proc: RunningContainer, probes: ContainerProbes | None) -> Obj:
    started = probes.started if probes is not None else True
    ready = started and (probes.ready if probes is not None else True)
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": _image_id(ctr),
        "ready": ready,
        "started": started,
        "restartCount": ctr.restarts,
        "containerID": proc.container_id,
        "state": proc.state(),
        "lastState": (ctr.status.get("lastState") or {}) if ctr.restarts else {},
    }


def _terminated_status(c: Obj, ctr: _Container, term: TerminatedState) -> Obj:
    return {
        "name": c["name"],
        "image": c.get("image", ""),
        "imageID": _image_id(ctr),
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


class _FileLog:
    """A container instance's CRI log file as the kubelet endpoint reads it."""

    def __init__(self, clog: ContainerLog) -> None:
        self.clog = clog

    def read(self) -> list[LogEntry]:
        return [LogEntry(line.timestamp, line.text) for line in self.clog.read()]

    async def follow(self, tail: int | None) -> AsyncIterator[list[LogEntry]]:
        async for batch in self.clog.follow_batches(tail_lines=tail):
            yield [LogEntry(line.timestamp, line.text) for line in batch]


class LocalProcessRuntime(Runtime):
    """The runtime of the one process node (``runtime="process"``, or ``"container"`` with ``containers``).

    ``api_server``: where ``default/kubernetes`` is forwarded (host, port); default: the address of the
    agent's own client. ``state_dir`` keeps container logs, hosts files and volumes. ``containers``: run the
    pods whose images are all in the local podman store in containers (:mod:`.containers`), the rest as
    processes; ``start()`` fails when podman does not work. ``devices``: the GPUs and pretend devices the
    node advertises, handed to containers as device plugins do (:mod:`.devices`).
    """

    runtime_version = "process://1.0"

    def __init__(
        self,
        *,
        state_dir: Path,
        restart_backoff: float = 0.1,
        max_backoff: float = 2.0,
        bridge: str = "kubedl0",
        pod_cidr: str = "10.244.0.0/16",
        api_server: tuple[str, int] | None = None,
        containers: bool = False,
        service_cidr: str | None = None,
        devices: NodeDevices | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        #: the device plugins' part (GPUs found here, pretend devices); None: a node without any
        self.devices = DeviceManager(devices) if devices else None
        self._want_containers = containers
        self._service_cidr = service_cidr
        self.containers: PodmanRuntime | None = None
        if containers:
            self.runtime_version = "podman+process://1.0"
        self.restart_backoff = restart_backoff
        self.max_backoff = max_backoff
        self._bridge = bridge
        self._pod_cidr = pod_cidr
        self._api_server = api_server
        self.workers: dict[tuple[str, str], PodWorker] = {}
        self.terminating: dict[str, asyncio.Task[None]] = {}  # uid -> termination in progress
        self._queue = SyncQueue("process runtime")
        self._services_dirty = asyncio.Event()
        self._services_wanted = 0  # generation of the Service set asked for / pushed to the node
        self._services_pushed = 0
        self._services_changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False

    # ---- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        agent = self.agent
        if len(agent.nodes) != 1:
            raise ValueError("the process runtime runs exactly one node")
        spec = next(iter(agent.nodes.values())).spec
        self.node_name, self.node_ip = spec.name, spec.ip
        if self._api_server is None:
            url = urlparse(agent.client.host)
            host = url.hostname or "127.0.0.1"
            port = url.port or (443 if url.scheme == "https" else 80)
            self._api_server = (socket.gethostbyname(host), port)
        client: KubeClient = agent.client
        self.services = Informer(client, SERVICES, indexers={NAMESPACE_INDEX: _by_namespace})
        self.endpoints = Informer(client, ENDPOINTS)
        self.configmaps = Informer(client, CONFIGMAPS)
        self.secrets = Informer(client, SECRETS)
        services_changed = Handler(
            on_add=lambda _o: self._services_changed_now(),
            on_update=lambda _a, _b: self._services_changed_now(),
            on_delete=lambda _o: self._services_changed_now(),
        )
        self.services.add_handler(services_changed)
        self.endpoints.add_handler(
            Handler(
                on_add=self._endpoints_event,
                on_update=lambda _a, b: self._endpoints_event(b),
                on_delete=self._endpoints_event,
            )
        )
        for informer, kind in ((self.configmaps, "configmap"), (self.secrets, "secret")):
            informer.add_handler(
                Handler(
                    on_add=lambda o, k=kind: self._object_event(k, o),  # type: ignore[misc]
                    on_update=lambda _a, b, k=kind: self._object_event(k, b),  # type: ignore[misc]
                )
            )
        self.node = ProcessNode(
            self.state_dir,
            resolver=self.resolve,
            base_env=process_base_env(),
            bridge=self._bridge,
            pod_cidr=self._pod_cidr,
            node_ip=self.node_ip,
            service_cidr=self._service_cidr,
        )
        self.volumes = VolumeManager(self.state_dir / "pods", client, self._lookup, host_ip=self.node_ip)
        await self.node.start()
        self._started = True
        if self._want_containers:
            self.containers = PodmanRuntime(self.node.runtime)
            await self.containers.start()
        self._tasks = [
            asyncio.create_task(i.run(), name=f"process-runtime-{i.resource}")
            for i in (self.services, self.endpoints, self.configmaps, self.secrets)
        ]
        for informer in (self.services, self.endpoints, self.configmaps, self.secrets):
            await informer.wait_synced()
        self._tasks += [
            asyncio.create_task(self._run(), name="process-runtime"),
            asyncio.create_task(self._sync_services(), name="process-runtime-services"),
        ]
        self._services_wanted += 1
        self._services_dirty.set()

    async def stop(self) -> None:
        """Kill every pod's processes (the node is going away) and release it."""
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
            await self.volumes.close()
            if self.containers is not None:
                await self.containers.close(grace_seconds=1.0)
            await self.node.close(grace_seconds=1.0)

    def thaw(self, node: str) -> None:
        for w in self.workers.values():
            w._report()

    def node_removed(self, node: str) -> None:
        workers = list(self.workers.values())
        self.workers.clear()
        for w in workers:
            self.terminating[w.uid] = asyncio.create_task(w.kill_now())

    # ---- events -------------------------------------------------------------------------------------------

    def pod_changed(self, pod: Obj) -> None:
        md = pod["metadata"]
        self._queue.add(md["namespace"], md["name"])

    def pod_deleted(self, pod: Obj) -> None:
        md = pod["metadata"]
        self._forget((md["namespace"], md["name"]), pod)

    def _services_changed_now(self) -> None:
        self._services_wanted += 1
        self._services_dirty.set()

    def _endpoints_event(self, ep: Obj) -> None:
        if self._started:
            self.node.proxy.backends_changed()  # a closed Service port probes its (new) endpoints now
        if _headless(self.services.get(ep["metadata"]["name"], namespace=ep["metadata"].get("namespace"))):
            self._services_changed_now()

    def _object_event(self, kind: str, obj: Obj) -> None:
        md = obj["metadata"]
        if self._started:
            self.volumes.object_changed(kind, md.get("namespace", ""), md["name"])
        # A pod waiting for this object (FailedMount) retries on its own back-off.

    def _lookup(self, kind: str, namespace: str, name: str) -> Obj | None:
        informer = self.configmaps if kind == "configmap" else self.secrets
        return informer.get(name, namespace=namespace)

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
        if not self._started:
            return
        self.node.runtime.remove_pod_logs(PodRef(namespace=md["namespace"], name=md["name"], uid=uid))
        self.volumes.teardown(uid)

    async def _run(self) -> None:
        await self._queue.drain(self._sync)

    def _sync(self, key: tuple[str, str]) -> None:
        if self.agent.is_frozen(self.node_name):
            return
        pod = self.agent.pod(*key)
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
                self.agent.status.confirm_deletion(pod)
                return
            grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
            if not worker.terminal:
                self.agent.event(pod, "Normal", "Killing", "Stopping container " + ", ".join(worker.containers))
            self.terminating[uid] = asyncio.create_task(worker.terminate(grace))
            return
        if worker is None:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return  # finished before a restart of the cluster: never run again
            self.workers[key] = PodWorker(self, pod)
            return
        # The pod's labels or annotations may have changed: its downward API files follow, as the kubelet's
        # volume manager rewrites them on a pod update (the in-place restart agent reads its signals there).
        self.volumes.pod_changed(pod)

    async def evict(self, pod: Obj, message: str) -> None:
        md = pod["metadata"]
        worker = self.workers.get((md["namespace"], md["name"]))
        if worker is None or worker.uid != md["uid"]:
            raise ValueError(f"pod {md['namespace']}/{md['name']} does not run on this node")
        await worker.evict(message)
        self.agent.event(pod, "Warning", "Evicted", message)

    # ---- containers: which runtime, env and logs ----------------------------------------------------------

    async def pod_images(self, spec: Obj) -> dict[str, ImageConfig]:
        """The images of the pod's containers when every one is in the local image store, by container name:
        the pod runs in containers then. Empty: it runs as processes (no container runtime, or an image that
        is not here: its program is expected on the host)."""
        if self.containers is None:
            return {}
        images: dict[str, ImageConfig] = {}
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            image = await self.containers.image(str(c.get("image") or ""))
            if image is None:
                return {}
            images[c["name"]] = image
        return images

    def container_env(self, pod: Obj, c: Obj, *, pod_ip: str) -> dict[str, str]:
        """The container's environment as the kubelet builds it: service links, envFrom, then env in order,
        each value ``$(VAR)``-expanded against what is defined before it."""
        ns = pod["metadata"]["namespace"]
        env: dict[str, str] = {}
        if (pod.get("spec") or {}).get("enableServiceLinks", True):
            env.update(service_link_env(self.services.list(NAMESPACE_INDEX, ns)))
        kube = self.services.get("kubernetes", namespace="default")
        if kube is not None:  # every pod gets the API server's variables, whatever its namespace
            env.update(service_link_env([kube]))
        for src in c.get("envFrom") or []:
            prefix = src.get("prefix", "")
            for kind, which in (("configMapRef", "configmap"), ("secretRef", "secret")):
                ref = src.get(kind)
                if ref is None:
                    continue
                data = self._data(which, ns, ref.get("name", ""), optional=bool(ref.get("optional")))
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
                env[name] = resource_field(c, vf["resourceFieldRef"])
            else:
                for kind, which in (("configMapKeyRef", "configmap"), ("secretKeyRef", "secret")):
                    ref = vf.get(kind)
                    if ref is None:
                        continue
                    optional = bool(ref.get("optional"))
                    data = self._data(which, ns, ref.get("name", ""), optional=optional)
                    if ref.get("key") in data:
                        env[name] = data[ref["key"]]
                    elif not optional:
                        raise EnvError(f"couldn't find key {ref.get('key')} in {kind[:-6]} {ns}/{ref.get('name')}")
        return env

    def _data(self, kind: str, ns: str, name: str, *, optional: bool) -> dict[str, str]:
        obj = self._lookup(kind, ns, name)
        if obj is None:
            if optional:
                return {}
            raise EnvError(f'{kind} "{name}" not found')
        if kind == "secret":
            return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
        return {k: str(v) for k, v in (obj.get("data") or {}).items()}

    def log_stream(self, pod: Obj, container: str, previous: bool) -> LogStream:
        md = pod["metadata"]
        ref = PodRef(namespace=md["namespace"], name=md["name"], uid=md["uid"])
        try:
            return _FileLog(self.node.container_log(ref, container, previous=previous))
        except FileNotFoundError:
            if previous:
                raise LogError(
                    400, f'previous terminated container "{container}" in pod "{md["name"]}" not found'
                ) from None
            raise LogError(
                400, f'container "{container}" in pod "{md["name"]}" is waiting to start: ContainerCreating'
            ) from None

    def exec_target(self, pod: Obj, container: str) -> ExecTarget:
        md = pod["metadata"]
        ref = PodRef(namespace=md["namespace"], name=md["name"], uid=md["uid"])
        context = self.node.runtime.exec_context(ref, container)
        if context is None:
            raise ExecError(
                400, f'container "{container}" in pod "{md["name"]}" is not running (or runs in an engine\'s container)'
            )
        return ExecTarget(env=context.env, cwd=context.cwd, wrap=functools.partial(_wrap, sandbox=context.sandbox))

    # ---- Services: proxy and DNS --------------------------------------------------------------------------

    def resolve(self, sp: ServicePort) -> list[Backend]:
        """Per new connection: the Service port's ready endpoints (IP, resolved targetPort), shuffled."""
        if (sp.namespace, sp.name) == ("default", "kubernetes") and self._api_server is not None:
            # A real API server cannot list a loopback address in Endpoints; the agent knows where it is.
            return [Backend(*self._api_server)]
        svc = self.services.get(sp.name, namespace=sp.namespace)
        ep = self.endpoints.get(sp.name, namespace=sp.namespace)
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
        _RNG.shuffle(backends)  # kube-proxy spreads connections over endpoints at random
        return backends

    def _service_infos(self) -> list[ServiceInfo]:
        out = []
        for svc in self.services.list():
            spec = svc.get("spec") or {}
            if spec.get("type") == "ExternalName":
                continue
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            if _headless(svc):
                ep = self.endpoints.get(name, namespace=ns) or {}
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

    def probe_attempts(self, namespace: str, pod: str, container: str) -> dict[str, list[int]]:
        """The running instance's probe attempts so far, by kind: ``[successes, failures]`` (no API shows a
        probe that passed; tests ask here)."""
        ctr = self._container(namespace, pod, container)
        probes = ctr.probes if ctr is not None else None
        return {kind: list(counts) for kind, counts in probes.attempts.items()} if probes is not None else {}

    def container_pid(self, namespace: str, pod: str, container: str) -> int | None:
        """PID of the container's running process (tests kill it to play a crash)."""
        ctr = self._container(namespace, pod, container)
        return ctr.proc.pid if ctr is not None and ctr.proc is not None else None

    def _container(self, namespace: str, pod: str, container: str) -> _Container | None:
        """A container of a pod running here, main or init (a sidecar)."""
        worker = self.workers.get((namespace, pod))
        if worker is None:
            return None
        return worker.containers.get(container) or worker.init_containers.get(container)


def _key(obj: Obj) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _headless(svc: Obj | None) -> bool:
    return svc is not None and (svc.get("spec") or {}).get("clusterIP") in ("None",)


def _wrap(argv: list[str], *, sandbox: Sandbox | None) -> list[str]:
    """A command run as a container runs: in its sandbox (network and mount namespaces, hosts file)."""
    return wrap_argv(argv, sandbox)
