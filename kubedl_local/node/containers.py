"""The container runtime of the process node: pods whose images are in the local podman store run in containers.

Why: the install path of a release is ``kubectl apply -f deploy/kubedl-py.yaml``, and what it installs is a
Deployment that runs the controller *from its image*, as uid 65532 on a read-only root filesystem, with the
ServiceAccount token a kubelet projects, behind liveness and readiness probes. The process runtime runs a
container's ``command`` on the host and ignores the image, so it cannot prove any of that. This module runs
such pods with podman (the engine ``make image`` builds with, flags from :class:`~kubedl_local.image.Engine`),
inside the pieces the process runtime already provides: the pod sandbox (network namespace and IP, or the
host network; the hosts file that plays cluster DNS; the Service proxy listening inside the pod's netns),
the volumes the agent materialises (the projected ``kube-api-access-*`` token from the TokenRequest API among
them), the environment the kubelet builds, and the CRI-format logs ``kubectl logs`` reads.

Which runtime runs a pod (the node decides once, when the pod starts): with the container runtime on
(``runtime="container"``), a pod whose every image (containers and init containers) is in the local image
store runs in containers; any other pod runs as processes, as before. So the controller's Deployment runs
from its image while job pods whose programs live in this checkout (their images are not built here) keep
running as processes. Nothing is ever pulled: a missing image means "processes", whatever
``imagePullPolicy`` says.

What a container gets, as a CRI runtime would give it (:func:`create_args`, unit-tested without podman):

- its argv by Kubernetes' rules over the image's ENTRYPOINT/CMD (``command`` replaces the entrypoint and
  drops CMD, ``args`` replace CMD), ``$(VAR)`` expanded; ``workingDir``; the environment on top of the image's;
- the security context, container over pod: ``runAsUser``/``runAsGroup`` (``--user``), ``runAsNonRoot``
  (refused with ``CreateContainerConfigError`` and the kubelet's message when the container would run as
  root), ``supplementalGroups`` and ``fsGroup`` (``--group-add``), ``readOnlyRootFilesystem`` (``--read-only``
  without podman's writable tmpfs mounts: Kubernetes adds none), ``capabilities`` add/drop,
  ``allowPrivilegeEscalation: false`` (no-new-privileges), ``privileged``, ``seccompProfile`` (none or
  ``Unconfined``: unconfined, the kubelet's default; ``RuntimeDefault``: podman's profile), pod ``sysctls``;
- memory and CPU limits and the CPU request as cgroup settings (``--memory``, ``--cpus``, ``--cpu-shares``);
- the device nodes of the GPUs the device manager gave it (``--device /dev/nvidia<N>`` and the driver's
  control nodes; :mod:`.devices`), and no others;
- the pod network namespace (``--network ns:/run/netns/<name>``, hostname = the pod's) or ``--network host``;
  the pod's hosts file at ``/etc/hosts``; volumes bind-mounted at their ``mountPath`` (read-only when asked,
  and always for ConfigMap, Secret, downward API and projected volumes, as Kubernetes mounts them);
- ``terminationMessagePath`` (a per-instance file; ``FallbackToLogsOnError`` honoured).

Lifecycle of an instance (:class:`PodmanContainer`): ``podman create`` (a failure is ``CreateContainerError``),
``podman start --attach`` whose stdout and stderr are pumped into the instance's CRI log like a process's,
exit code and OOM from ``podman inspect``, then the container is removed (its log stays for ``previous``).
Stop: the image's stop signal, the grace period, SIGKILL. Exec probes run with ``podman exec``.

No container outlives the agent. Containers belong to podman's monitor, not to us, so process groups and
``PR_SET_PDEATHSIG`` cannot catch them: every container is registered with the node's watchdog
(``process/_reaper.py``) before it is created, and the watchdog removes what is still registered when the
agent dies, even by SIGKILL. Each container also carries its agent's identity (pid and start time) in a
label; an agent starting up removes containers whose agent is gone (a watchdog killed too).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import math
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from kubedl_local.image import Engine
from kubedl_local.node.process import (
    ContainerConfigError,
    ContainerLog,
    ContainerSpec,
    ContainerStartError,
    Mount,
    PodRef,
    PodSandbox,
    ProcessRuntime,
    TerminatedState,
    expand_vars,
)
from kubedl_local.node.process.logs import pump_stream
from kubedl_local.node.process.runner import ContainerInstance, Watchdog
from kubedl_local.node.process.sandbox import NETNS_DIR
from kubedl_py.api.quantities import QuantityError, parse

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: the label that names the agent process owning a container: ``<pid>:<start time in clock ticks>``
OWNER_LABEL = "io.kubedl-py.owner"
#: where the kubelet keeps ``Localhost`` seccomp profiles (its ``--root-dir`` + ``/seccomp``)
KUBELET_SECCOMP_DIR = "/var/lib/kubelet/seccomp"
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
#: the kubelet reads at most this much of a termination message, and of the log for FallbackToLogsOnError
MAX_TERMINATION_MESSAGE = 4096
FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES = 80, 2048
#: seconds a podman command may take (the store lock is shared with every other podman on the machine)
PODMAN_TIMEOUT = 120.0
#: how a container that has not started within this many seconds of ``podman start`` is given up on
START_TIMEOUT = 120.0
#: volume kinds Kubernetes always mounts read-only (the kubelet's atomic writer owns their content)
READ_ONLY_VOLUMES = ("configMap", "secret", "downwardAPI", "projected")


class ContainerCreateError(ContainerConfigError):
    """The engine refused to create the container (waiting reason ``CreateContainerError``; retried)."""

    reason = "CreateContainerError"


class ContainerRuntimeUnavailable(RuntimeError):
    """podman is missing or does not work here; the message says what failed."""


@dataclass(frozen=True, kw_only=True)
class ImageConfig:
    """What the runtime needs of an image in the local store (``podman image inspect``)."""

    ref: str
    id: str
    user: str = ""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    working_dir: str = ""
    stop_signal: str = "SIGTERM"

    @classmethod
    def from_inspect(cls, ref: str, data: Mapping[str, Any]) -> ImageConfig:
        config = data.get("Config") or {}
        return cls(
            ref=ref,
            id=str(data.get("Id", "")).removeprefix("sha256:"),
            user=str(config.get("User") or ""),
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
            working_dir=str(config.get("WorkingDir") or ""),
            stop_signal=str(config.get("StopSignal") or "SIGTERM"),
        )

    @property
    def image_id(self) -> str:
        """``imageID`` in a container status."""
        return f"sha256:{self.id}"


# --------------------------------------------------------------------------------------------- the mapping


def container_argv(container: Obj, image: ImageConfig, env: Mapping[str, str]) -> list[str]:
    """The process a container runs, by Kubernetes' rules: ``command`` replaces the image's ENTRYPOINT (and
    its CMD with it), ``args`` replace CMD; ``$(VAR)`` references expanded from the container's env."""
    command = [expand_vars(str(a), env) for a in container.get("command") or []]
    args = [expand_vars(str(a), env) for a in container.get("args") or []]
    if command:
        argv = command + args
    elif args:
        argv = [*image.entrypoint, *args]
    else:
        argv = [*image.entrypoint, *image.cmd]
    if not argv:
        raise ContainerCreateError(
            f"no command specified: neither container {container.get('name')!r} nor image {image.ref} names one"
        )
    return argv


def security_context(pod_spec: Obj, container: Obj) -> Obj:
    """The container's effective security context: its own fields over the pod's (the pod-level ones that
    also exist per container)."""
    pod_sc = pod_spec.get("securityContext") or {}
    merged = {
        key: pod_sc[key]
        for key in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile", "seLinuxOptions", "appArmorProfile")
        if key in pod_sc
    }
    merged.update(container.get("securityContext") or {})
    return merged


def _pod_string(pod: Obj) -> str:
    md = pod.get("metadata") or {}
    return f"{md.get('name')}_{md.get('namespace')}({md.get('uid')})"


def verify_run_as_non_root(pod: Obj, container: Obj, security: Obj, image: ImageConfig) -> None:
    """The kubelet's ``verifyRunAsNonRoot``, with its messages (``CreateContainerConfigError``)."""
    if not security.get("runAsNonRoot"):
        return
    where = f"(pod: {json.dumps(_pod_string(pod))}, container: {container.get('name')})"  # Go's %q
    if security.get("runAsUser") is not None:
        if int(security["runAsUser"]) == 0:
            raise ContainerConfigError(f"container's runAsUser breaks non-root policy {where}")
        return
    user = image.user.split(":", 1)[0]
    if user == "" or user.isdigit():
        if int(user or 0) == 0:
            raise ContainerConfigError(f"container has runAsNonRoot and image will run as root {where}")
        return
    raise ContainerConfigError(
        f"container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root {where}"
    )


def _quantity(value: Any) -> Fraction:
    q = parse(str(value))
    return Fraction(q.unscaled) * Fraction(10) ** q.scale


def _capability(name: str) -> str:
    upper = str(name).upper()
    return "all" if upper == "ALL" else upper if upper.startswith("CAP_") else f"CAP_{upper}"


def _bind(source: Path | str, target: str, *, read_only: bool) -> list[str]:
    if "," in str(source) or "," in target:
        raise ContainerCreateError(f"cannot bind-mount {source} at {target}: a path contains a comma")
    return ["--mount", f"type=bind,source={source},destination={target}" + (",ro=true" if read_only else "")]


def create_args(
    engine: Engine,
    *,
    name: str,
    pod: Obj,
    container: Obj,
    image: ImageConfig,
    env: Mapping[str, str],
    mounts: Sequence[Mount],
    sandbox: PodSandbox,
    labels: Mapping[str, str] | None = None,
    termination_log: Path | None = None,
    devices: Sequence[str] = (),
) -> list[str]:
    """The ``podman create`` command line of one container instance (see the module docstring for the
    mapping). Raises :class:`ContainerConfigError` for what the kubelet refuses before creating anything."""
    spec = pod.get("spec") or {}
    pod_sc = spec.get("securityContext") or {}
    security = security_context(spec, container)
    verify_run_as_non_root(pod, container, security, image)
    argv = container_argv(container, image, env)
    flags = ["--pull=never", "--log-driver=none", "--replace", "--name", name]
    for key, value in (labels or {}).items():
        flags += ["--label", f"{key}={value}"]

    # who it runs as
    user, group = security.get("runAsUser"), security.get("runAsGroup")
    if user is not None or group is not None:
        uid = str(user) if user is not None else (image.user.split(":", 1)[0] or "0")
        flags += ["--user", uid if group is None else f"{uid}:{group}"]
    groups = [*(pod_sc.get("supplementalGroups") or [])]
    if pod_sc.get("fsGroup") is not None:
        groups.append(pod_sc["fsGroup"])
    for gid in dict.fromkeys(groups):
        flags += ["--group-add", str(gid)]

    # what it may do
    if security.get("privileged"):
        flags.append("--privileged")
    if security.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]
    capabilities = security.get("capabilities") or {}
    for cap in capabilities.get("drop") or []:
        flags += ["--cap-drop", _capability(cap)]
    for cap in capabilities.get("add") or []:
        flags += ["--cap-add", _capability(cap)]
    if security.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    seccomp = security.get("seccompProfile") or {}
    if seccomp.get("type") == "Localhost":
        flags += ["--security-opt", f"seccomp={KUBELET_SECCOMP_DIR}/{seccomp.get('localhostProfile', '')}"]
    elif seccomp.get("type") != "RuntimeDefault" and not security.get("privileged"):
        flags += ["--security-opt", "seccomp=unconfined"]  # the kubelet's default (seccompDefault: false)
    for sysctl in pod_sc.get("sysctls") or []:
        flags += ["--sysctl", f"{sysctl['name']}={sysctl.get('value', '')}"]

    # what it may use
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    try:
        if "memory" in limits:
            memory = str(math.ceil(_quantity(limits["memory"])))
            flags += ["--memory", memory, "--memory-swap", memory]  # no swap, as the kubelet's default
        if "cpu" in limits:
            flags += ["--cpus", f"{float(_quantity(limits['cpu'])):g}"]
        if "cpu" in requests:
            millis = math.ceil(_quantity(requests["cpu"]) * 1000)
            flags += ["--cpu-shares", str(max(2, millis * 1024 // 1000))]  # the kubelet's MilliCPUToShares
    except QuantityError as e:
        raise ContainerConfigError(f"container {container.get('name')!r}: {e}") from None

    # where it runs
    if sandbox.host_network:
        flags += ["--network", "host"]
    else:
        if sandbox.interface is None:
            raise ContainerCreateError(f"pod {sandbox.pod.namespace}/{sandbox.pod.name} has no network namespace")
        flags += ["--network", f"ns:{NETNS_DIR / sandbox.interface.netns}", "--hostname", sandbox.hostname]
    if spec.get("hostPID"):
        flags += ["--pid", "host"]
    if spec.get("hostIPC"):
        flags += ["--ipc", "host"]
    for path in devices:  # the device plugin's allocation (GPUs): those device nodes and no others
        flags += ["--device", path]
    if sandbox.hosts_file is not None:
        flags += ["--no-hosts", *_bind(sandbox.hosts_file, "/etc/hosts", read_only=False)]
    for mount in sorted(mounts, key=lambda m: m.target.count("/")):  # parents before children
        flags += _bind(mount.source, mount.target, read_only=mount.read_only)
    if termination_log is not None:
        target = container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
        flags += _bind(termination_log, target, read_only=False)

    # what it runs
    for key, value in env.items():
        flags += ["--env", f"{key}={value}"]
    if container.get("workingDir"):
        flags += ["--workdir", str(container["workingDir"])]
    flags += ["--entrypoint", json.dumps(argv)]  # the whole argv: podman drops the image's CMD with it
    return engine.command("create", *engine.container_flags(), *flags, image.id)


# --------------------------------------------------------------------------------------------- podman


@dataclass(frozen=True)
class _Result:
    code: int
    out: str
    err: str


async def _run(command: Sequence[str], *, time_limit: float = PODMAN_TIMEOUT) -> _Result:
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), time_limit)
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    code = proc.returncode if proc.returncode is not None else 1
    return _Result(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def _process_start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks since boot): with the pid it names one process for good."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_alive(owner: str) -> bool:
    pid, _, started = owner.partition(":")
    return pid.isdigit() and _process_start_time(int(pid)) == started


def _engine_time(text: str) -> dt.datetime | None:
    """podman's ``2026-01-02T03:04:05.123456789Z`` (or with an offset); None for Go's zero time."""
    if not text or text.startswith("0001-"):
        return None
    text = text.replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6]}{zone}"
    with contextlib.suppress(ValueError):
        return dt.datetime.fromisoformat(text)
    return None


class PodmanContainer(ContainerInstance):
    """One instance of a container run by podman; the kubelet sees it as any ``RunningContainer``."""

    def __init__(
        self,
        *,
        runtime: PodmanRuntime,
        pod: PodRef,
        spec: ContainerSpec,
        restart_count: int,
        name: str,
        engine_id: str,
        attach: asyncio.subprocess.Process,
        log: ContainerLog,
        started_at: dt.datetime,
        pid: int,
        stop_signal: str,
        termination_log: Path | None,
        fallback_to_logs: bool,
    ) -> None:
        super().__init__(
            pod=pod,
            spec=spec,
            restart_count=restart_count,
            log=log,
            container_id=f"podman://{engine_id}",
            started_at=started_at,
            pid=pid,
        )
        self.runtime = runtime
        self.name = name
        self.engine_id = engine_id
        self._attach = attach
        self._stop_signal = stop_signal
        self._termination_log = termination_log
        self._fallback_to_logs = fallback_to_logs
        self._on_exit = runtime.registry.adopt(self)
        self._supervisor = asyncio.create_task(self._supervise(), name=f"container {self.describe()}")

    async def exec(self, argv: Sequence[str], time_limit: float) -> tuple[int, str]:
        """``podman exec`` in the container, as its user: what an exec probe runs."""
        command = self.runtime.engine.command("exec", self.engine_id, *argv)
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), time_limit)
        except (TimeoutError, asyncio.CancelledError):  # past its time, or its probe closed
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        return (proc.returncode if proc.returncode is not None else 1), out.decode("utf-8", "replace")

    async def stop(self, grace_seconds: float) -> TerminatedState:
        """The image's stop signal, up to ``grace_seconds`` to exit, then SIGKILL; the final state."""
        if self._terminated is not None:
            return self._terminated
        if grace_seconds > 0:
            await self._kill(self._stop_signal)
            try:
                return await asyncio.wait_for(asyncio.shield(self._done), grace_seconds)
            except TimeoutError:
                log.info("container %s ignored its stop signal for %ss; killing it", self.describe(), grace_seconds)
        await self._kill("KILL")
        try:
            return await asyncio.wait_for(asyncio.shield(self._done), PODMAN_TIMEOUT)
        except TimeoutError:
            # podman lost track of it: end the client; the supervisor removes the container by force
            with contextlib.suppress(ProcessLookupError):
                self._attach.kill()
            return await self.wait()

    async def _kill(self, sig: str) -> None:
        if self._terminated is None:
            with contextlib.suppress(OSError, TimeoutError):
                await _run(self.runtime.engine.command("kill", "--signal", sig, self.engine_id), time_limit=30)

    async def _supervise(self) -> None:
        assert self._attach.stdout is not None and self._attach.stderr is not None
        pumps = [
            asyncio.create_task(pump_stream(self._attach.stdout, "stdout", self.log)),
            asyncio.create_task(pump_stream(self._attach.stderr, "stderr", self.log)),
        ]
        try:
            await self._attach.wait()
            _done, pending = await asyncio.wait(pumps, timeout=5)
            for t in pending:
                t.cancel()
            terminated = await self._final_state()
        except BaseException:
            for t in pumps:
                t.cancel()
            with contextlib.suppress(ProcessLookupError):
                self._attach.kill()
            await asyncio.shield(self.runtime.remove(self.name))
            self.log.close()
            self._on_exit(self)
            self._done.cancel()
            raise
        await self.runtime.remove(self.name)
        self.log.close()
        self._finish(terminated)  # before the registry hears of it: it finds the container ended
        self._on_exit(self)

    async def _final_state(self) -> TerminatedState:
        state = await self.runtime.inspect_state(self.engine_id)
        finished = _engine_time(str(state.get("FinishedAt", ""))) or dt.datetime.now(dt.UTC)
        code = int(state.get("ExitCode", self._attach.returncode or 0) or 0)
        reason = "OOMKilled" if state.get("OOMKilled") else "Completed" if code == 0 else "Error"
        message = self._termination_message(code)
        return TerminatedState(
            exit_code=code,
            reason=reason,
            started_at=self.started_at,
            finished_at=finished,
            container_id=self.container_id,
            message=message or None,
        )

    def _termination_message(self, code: int) -> str:
        message = ""
        if self._termination_log is not None:
            with contextlib.suppress(OSError), open(self._termination_log, "rb") as f:
                message = f.read(MAX_TERMINATION_MESSAGE).decode("utf-8", "replace")
        if not message and code != 0 and self._fallback_to_logs:
            lines = [line.text for line in self.log.read(tail_lines=FALLBACK_LOG_LINES)]
            message = "\n".join(lines)[-FALLBACK_LOG_BYTES:]
        return message


class PodmanRuntime:
    """Runs containers with podman for the process node (one per node); see the module docstring.

    ``registry`` is the node's :class:`~.process.ProcessRuntime`: it keeps every running instance, processes
    and containers alike, so logs, sandbox removal and shutdown treat them the same.
    """

    def __init__(self, registry: ProcessRuntime, *, engine: Engine | None = None) -> None:
        self.registry = registry
        self.engine = engine or Engine("podman")
        self.version = ""
        self.owner = f"{os.getpid()}:{_process_start_time(os.getpid())}"
        self.watchdog = Watchdog(self.engine.command("rm", "--force", "--ignore", "--time", "0"))

    @property
    def runtime_version(self) -> str:
        return f"podman://{self.version or 'unknown'}"

    async def start(self) -> None:
        """Check that podman answers, remove containers of agents that are gone, start the watchdog."""
        try:
            result = await _run(self.engine.command("version", "--format", "{{.Client.Version}}"), time_limit=60)
        except (OSError, TimeoutError) as e:
            raise ContainerRuntimeUnavailable(
                f"podman cannot run here ({e}); install it: apt-get install -y podman runc"
            ) from None
        if result.code != 0:
            raise ContainerRuntimeUnavailable(f"`podman version` failed ({result.code}): {result.err.strip()}")
        self.version = result.out.strip()
        await self.remove_orphans()
        self.watchdog.start()

    async def close(self, grace_seconds: float = 5.0) -> None:
        running = [c for c in self.registry.running() if isinstance(c, PodmanContainer)]
        await asyncio.gather(*(c.stop(grace_seconds) for c in running), return_exceptions=True)
        await self.watchdog.close()

    async def remove_orphans(self) -> list[str]:
        """Remove containers whose agent is gone (killed with its watchdog); the names removed."""
        listed = await _run(self.engine.command("ps", "--all", "--filter", f"label={OWNER_LABEL}", "--format", "json"))
        if listed.code != 0:
            log.warning("cannot list containers to remove orphans: %s", listed.err.strip())
            return []
        stale = []
        for entry in json.loads(listed.out or "[]"):
            owner = str((entry.get("Labels") or {}).get(OWNER_LABEL, ""))
            if not _owner_alive(owner):
                stale.append(str((entry.get("Names") or [entry.get("Id")])[0]))
        if stale:
            log.info("removing %d container(s) left by node agents that are gone: %s", len(stale), ", ".join(stale))
            await _run(self.engine.command("rm", "--force", "--ignore", "--time", "0", *stale))
        return stale

    async def image(self, ref: str) -> ImageConfig | None:
        """The image ``ref`` names in the local store (podman's short-name rules: ``kubedl-py:0.1.0`` finds
        ``localhost/kubedl-py:0.1.0``), or None when there is none."""
        if not ref:
            return None
        result = await _run(self.engine.command("image", "inspect", ref), time_limit=60)
        if result.code != 0:
            return None
        with contextlib.suppress(ValueError, IndexError, TypeError):
            return ImageConfig.from_inspect(ref, json.loads(result.out)[0])
        return None

    async def inspect_state(self, engine_id: str) -> Obj:
        result = await _run(self.engine.command("container", "inspect", "--format", "{{json .State}}", engine_id))
        if result.code != 0:
            return {}
        with contextlib.suppress(ValueError):
            state: Obj = json.loads(result.out)
            return state
        return {}

    async def remove(self, name: str) -> None:
        with contextlib.suppress(OSError, TimeoutError):
            await _run(self.engine.command("rm", "--force", "--ignore", "--time", "0", name))
        self.watchdog.tell(b"-", b"c:" + name.encode())

    async def start_container(
        self,
        sandbox: PodSandbox,
        pod: Obj,
        container: Obj,
        *,
        image: ImageConfig,
        env: Mapping[str, str],
        mounts: Sequence[Mount],
        restart_count: int,
        devices: Sequence[str] = (),
    ) -> PodmanContainer:
        """Create and start one instance. Raises :class:`ContainerConfigError` (the kubelet refuses it),
        :class:`ContainerCreateError` (podman refused it) or ``ContainerStartError`` (its process could not
        start: the terminated state to report)."""
        ref = sandbox.pod
        cname = str(container["name"])
        name = f"k8s_{cname}_{ref.name}_{ref.namespace}_{ref.uid}_{restart_count}"
        instance_dir = self.registry.logs_dir / f"{ref.namespace}_{ref.name}_{ref.uid}" / cname
        termination_log = instance_dir / f"{restart_count}.termination-log"
        labels = {
            "io.kubernetes.pod.name": ref.name,
            "io.kubernetes.pod.namespace": ref.namespace,
            "io.kubernetes.pod.uid": ref.uid,
            "io.kubernetes.container.name": cname,
            OWNER_LABEL: self.owner,
        }
        command = create_args(
            self.engine,
            name=name,
            pod=pod,
            container=container,
            image=image,
            env=env,
            mounts=mounts,
            sandbox=sandbox,
            labels=labels,
            termination_log=termination_log,
            devices=devices,
        )
        instance_dir.mkdir(parents=True, exist_ok=True)
        termination_log.write_bytes(b"")
        termination_log.chmod(0o666)  # whatever user the container runs as may write its message
        self.watchdog.tell(b"+", b"c:" + name.encode())  # before it exists: a crash right after leaves nothing
        attach: asyncio.subprocess.Process | None = None
        container_log: ContainerLog | None = None
        try:
            created = await _run(command)
            if created.code != 0:
                raise ContainerCreateError(_engine_error(created.err) or f"podman create exited {created.code}")
            engine_id = created.out.strip().splitlines()[-1]
            container_log = ContainerLog(self.registry.log_path(ref, cname, restart_count), writable=True)
            attach = await asyncio.create_subprocess_exec(
                *self.engine.command("start", "--attach", engine_id),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            state = await self._until_started(engine_id, attach)
            started_at = _engine_time(str(state.get("StartedAt", "")))
            if started_at is None:  # never ran: the OCI runtime could not start its process
                _, err = await attach.communicate()
                message = _engine_error(err.decode("utf-8", "replace")) or str(state.get("Error") or "start failed")
                term = TerminatedState(
                    exit_code=128,
                    reason="StartError",
                    started_at=None,
                    finished_at=dt.datetime.now(dt.UTC),
                    container_id=f"podman://{engine_id}",
                    message=message,
                )
                raise ContainerStartError(message, term)
            spec = ContainerSpec(
                name=cname,
                command=list(container.get("command") or []),
                args=list(container.get("args") or []),
                env=dict(env),
                working_dir=container.get("workingDir") or None,
                image=image.ref,
                mounts=tuple(mounts),
            )
            instance = PodmanContainer(
                runtime=self,
                pod=ref,
                spec=spec,
                restart_count=restart_count,
                name=name,
                engine_id=engine_id,
                attach=attach,
                log=container_log,
                started_at=started_at,
                pid=int(state.get("Pid") or 0),
                stop_signal=_signal_name(image.stop_signal),
                termination_log=termination_log,
                fallback_to_logs=(container.get("terminationMessagePolicy") or "File") == "FallbackToLogsOnError",
            )
        except BaseException:
            # refused, failed, or given up on (the pod went away while it started): nothing may stay behind
            if container_log is not None:
                container_log.close()
            await asyncio.shield(self._discard(name, attach))
            raise
        log.info("started container %s (%s, image %s, pid %s)", instance.describe(), name, image.ref, instance.pid)
        return instance

    async def _discard(self, name: str, attach: asyncio.subprocess.Process | None) -> None:
        if attach is not None:
            if attach.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    attach.kill()
            await attach.wait()
        await self.remove(name)

    async def _until_started(self, engine_id: str, attach: asyncio.subprocess.Process) -> Obj:
        """Poll the container until its process started (or the attempt is over): its state then."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        delay = 0.02
        while True:
            state = await self.inspect_state(engine_id)
            if _engine_time(str(state.get("StartedAt", ""))) is not None:
                return state
            if attach.returncode is not None or loop.time() > deadline:
                if attach.returncode is None:
                    attach.kill()
                return state
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(attach.wait()), delay)
            delay = min(delay * 2, 0.5)


def _engine_error(stderr: str) -> str:
    """podman's own message (``Error: ...``) among what a command wrote to stderr."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error: ")]
    return errors[-1] if errors else (lines[-1] if lines else "")


def _signal_name(value: str) -> str:
    """An image's StopSignal (``15``, ``SIGTERM``, ``TERM``) as ``podman kill --signal`` takes it."""
    if value.isdigit():
        with contextlib.suppress(ValueError):
            return signal.Signals(int(value)).name.removeprefix("SIG")
        return value
    return value.upper().removeprefix("SIG") or "TERM"
