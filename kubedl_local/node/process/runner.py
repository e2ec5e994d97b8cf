"""Run a pod's container as a local process, with Kubernetes container semantics.

Why a process instead of a container: the process runtime (``local up``'s default, docs/local-cluster.md)
needs nothing that runs images, so it executes the container's ``command``/``args`` directly on the host and
ignores the image. What still has to hold, because the controller and users observe it:

- argv is ``command + args`` with ``$(VAR)`` expanded from the container env (kubelet semantics). ``command``
  replaces the image ENTRYPOINT and ``args`` the CMD; there is no image here, so a container without
  ``command`` cannot run and is refused with ``CreateContainerConfigError`` instead of guessing.
- exit status becomes a ``terminated`` state: ``exitCode`` (128+N when killed by signal N, as a shell and
  containerd report it), ``reason`` ``Completed`` for 0 and ``Error`` otherwise (``OOMKilled`` does not apply:
  no memory cgroup), ``startedAt``/``finishedAt``. An executable that cannot be started gives the
  ``StartError`` / exit code 128 state that containerd reports.
- stop(grace): SIGTERM to the container's process group, wait the grace period, SIGKILL the group. (A real
  runtime signals only PID 1 of the container; signalling the group means ``sh -c "python x.py"`` still
  stops gracefully, which is what users expect of a container.) When the main process exits, whatever is
  left in its group is killed, like a container's cgroup being torn down.
- no process outlives its container: each container's first process joins a cgroup of its own before exec
  (``cgroup.py``), so whatever it starts is in it, even a process that left the group on purpose (``setsid``,
  as PaddlePaddle's launcher starts its trainers); when the main process exits, the cgroup is killed whole.
  Where cgroup v2 is not writable (no root, no delegation) the process group is all there is, and a
  ``setsid`` daemon escapes it.
- no process outlives the cluster, even when the cluster is SIGKILLed: each child gets
  ``PR_SET_PDEATHSIG(SIGKILL)`` and its own process group, and a watchdog process (``_reaper.py``) kills the
  registered groups, and the runtime's cgroups, when the cluster's end of a pipe closes.

``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits, so containers must be started from
the event loop's thread of a loop that lives as long as the cluster (asyncio subprocesses fork in the loop
thread, so this holds when the runtime is used from its loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import dataclasses
import datetime as dt
import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .cgroup import Scope, containment_root, remove_tree
from .logs import ContainerLog, pump_stream
from .sandbox import Mount, Sandbox, wrap_argv

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int

#: How long to wait for pipes to drain after the main process exited and its group was killed; only a
#: process that left the group (a daemon) can hold them open longer, and its output is then abandoned.
_DRAIN_TIMEOUT = 2.0


class ContainerConfigError(ValueError):
    """The container spec cannot be run by the process runtime (waiting reason CreateContainerConfigError)."""

    reason = "CreateContainerConfigError"


class ContainerStartError(RuntimeError):
    """The process could not be started; ``terminated`` is the state a real kubelet would report."""

    def __init__(self, message: str, terminated: TerminatedState) -> None:
        super().__init__(message)
        self.terminated = terminated


@dataclass(frozen=True, kw_only=True)
class PodRef:
    """Identifies the pod a container belongs to (the uid keeps logs of a re-created pod apart)."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    """The fields of a Kubernetes container that the process runtime honours."""

    name: str
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    image: str | None = None  # ignored: there is no image to run
    mounts: tuple[Mount, ...] = ()  # volumes, bind-mounted in the container's private mount namespace


@dataclass(frozen=True, kw_only=True)
class ExecContext:
    """How a container process was started, so a command can be run the same way beside it (exec probes)."""

    env: Mapping[str, str]
    cwd: str
    sandbox: Sandbox | None = None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def k8s_time(t: dt.datetime) -> str:
    """metav1.Time wire format (second precision, UTC, ``Z``)."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, kw_only=True)
class TerminatedState:
    """``ContainerStateTerminated``; ``signal`` is kept for callers but not serialized (CRI leaves it 0)."""

    exit_code: int
    reason: str
    started_at: dt.datetime | None
    finished_at: dt.datetime
    container_id: str
    signal: int | None = None
    message: str | None = None

    @classmethod
    def from_returncode(
        cls, returncode: int, *, started_at: dt.datetime, container_id: str, message: str | None = None
    ) -> TerminatedState:
        sig = -returncode if returncode < 0 else None
        code = 128 + sig if sig is not None else returncode
        return cls(
            exit_code=code,
            signal=sig,
            reason="Completed" if code == 0 else "Error",
            started_at=started_at,
            finished_at=_now(),
            container_id=container_id,
            message=message,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "finishedAt": k8s_time(self.finished_at),
            "containerID": self.container_id,
        }
        if self.started_at is not None:
            out["startedAt"] = k8s_time(self.started_at)
        if self.message:
            out["message"] = self.message
        return out


_VAR_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known vars replaced, unknown kept verbatim, ``$$`` escapes ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR_REF.sub(sub, text)


def build_argv(spec: ContainerSpec, env: Mapping[str, str]) -> list[str]:
    """``command + args`` with ``$(VAR)`` expanded; refuses a spec that relies on an image entrypoint."""
    if not spec.command:
        raise ContainerConfigError(
            f"container {spec.name!r} has no command: the process runtime ignores images, so there is no "
            "image ENTRYPOINT/CMD to fall back on; set command (and args) in the pod spec"
        )
    return [expand_vars(a, env) for a in (*spec.command, *spec.args)]


def _child_setup(parent_pid: int, scope: Scope | None = None) -> None:  # pragma: no cover - in the forked child
    # Runs between fork and exec. SIGKILL, not SIGTERM: when the cluster is gone nobody honours a grace.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    if scope is not None:  # before exec: everything the program starts is born in the container's cgroup
        scope.join()


def _resolve_executable(argv0: str, env: Mapping[str, str], cwd: str) -> str | None:
    """Why pre-resolve: inside the sandbox wrapper an exec failure would only be a shell's exit 127."""
    if "/" in argv0:
        path = argv0 if os.path.isabs(argv0) else os.path.join(cwd, argv0)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(argv0, path=env.get("PATH", os.defpath))


class RunningContainer(Protocol):
    """One instance of a container, whatever runs it: a host process (:class:`ContainerProcess`) or an engine's
    container (``kubedl_local.node.containers``). The kubelet sees only this."""

    pod: PodRef
    spec: ContainerSpec
    restart_count: int
    log: ContainerLog
    container_id: str
    started_at: dt.datetime
    pid: int

    @property
    def running(self) -> bool: ...

    @property
    def terminated(self) -> TerminatedState | None: ...

    def state(self) -> dict[str, Any]: ...

    async def wait(self) -> TerminatedState: ...

    async def stop(self, grace_seconds: float) -> TerminatedState: ...

    async def exec(self, argv: Sequence[str], time_limit: float) -> tuple[int, str]: ...


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The stream protocol, plus a future resolved the moment the process exits."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=2**16, loop=loop)
        self.exited: asyncio.Future[int] = loop.create_future()

    def process_exited(self) -> None:
        transport = self._transport  # type: ignore[attr-defined]  # the parent drops it once all is closed
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(transport.get_returncode())


async def spawn(argv: Sequence[str], **kwargs: Any) -> tuple[asyncio.subprocess.Process, asyncio.Future[int]]:
    """``asyncio.create_subprocess_exec``, plus a future of the exit code resolved when the process exits.

    Why not ``Process.wait()``: since Python 3.11 it also waits until every pipe to the child is closed, so a
    daemon the container started (``sshd`` forks a session per login into its own session; Open MPI's
    ``orted`` runs under it) would keep a container whose main process is long dead "running". In
    Kubernetes a container ends when its main process does.
    """
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(lambda: _ExitProtocol(loop), *argv, **kwargs)
    return asyncio.subprocess.Process(transport, protocol, loop), protocol.exited


class ContainerInstance:
    """What a running container of either runtime (a process here, podman's in containers.py) keeps and
    shows the same way: who it is, its ``ContainerState`` as the API shows it, and the wait for its end.
    A subclass starts it and calls :meth:`_finish` once, when it has ended."""

    def __init__(
        self,
        *,
        pod: PodRef,
        spec: ContainerSpec,
        restart_count: int,
        log: ContainerLog,
        container_id: str,
        started_at: dt.datetime,
        pid: int,
    ) -> None:
        self.pod = pod
        self.spec = spec
        self.restart_count = restart_count
        self.log = log
        self.container_id = container_id
        self.started_at = started_at
        self.pid = pid
        self._terminated: TerminatedState | None = None
        self._done: asyncio.Future[TerminatedState] = asyncio.get_running_loop().create_future()

    def describe(self) -> str:
        return f"{self.pod.namespace}/{self.pod.name}/{self.spec.name}#{self.restart_count}"

    @property
    def running(self) -> bool:
        return self._terminated is None

    @property
    def terminated(self) -> TerminatedState | None:
        return self._terminated

    def state(self) -> dict[str, Any]:
        """``ContainerState`` as the API shows it: ``{"running": {...}}`` or ``{"terminated": {...}}``."""
        if self._terminated is None:
            return {"running": {"startedAt": k8s_time(self.started_at)}}
        return {"terminated": self._terminated.to_dict()}

    async def wait(self) -> TerminatedState:
        """Wait for the container to end (and, for a process, its output to be in the log)."""
        return await asyncio.shield(self._done)

    def _finish(self, terminated: TerminatedState) -> None:
        self._terminated = terminated
        log.info("container %s exited: exitCode=%s reason=%s", self.describe(), terminated.exit_code, terminated.reason)
        self._done.set_result(terminated)


class ContainerProcess(ContainerInstance):
    """One running (or finished) instance of a container; created by ``ProcessRuntime.start_container``."""

    def __init__(
        self,
        *,
        pod: PodRef,
        spec: ContainerSpec,
        restart_count: int,
        proc: asyncio.subprocess.Process,
        exited: asyncio.Future[int],
        log: ContainerLog,
        container_id: str,
        started_at: dt.datetime,
        on_exit: Any,
        exec_context: ExecContext | None = None,
        scope: Scope | None = None,
    ) -> None:
        super().__init__(
            pod=pod,
            spec=spec,
            restart_count=restart_count,
            log=log,
            container_id=container_id,
            started_at=started_at,
            pid=proc.pid,
        )
        self._proc = proc
        self._exited = exited
        self._on_exit = on_exit
        self._exec_context = exec_context
        #: the container's cgroup (``cgroup.py``); None where cgroups cannot contain it
        self.scope = scope
        self._supervisor = asyncio.create_task(self._supervise(), name=f"container {self.describe()}")

    @property
    def exec_context(self) -> ExecContext:
        """Its sandbox, environment and directory, for a command run beside it (exec probes, ``kubectl exec``)."""
        return self._exec_context or ExecContext(env=dict(os.environ), cwd=os.getcwd())

    def send_signal(self, sig: int, *, group: bool = False) -> None:
        """Signal the main process (like ``kill -9`` of a pod's process) or its whole process group."""
        if self._terminated is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)

    async def exec(self, argv: Sequence[str], time_limit: float) -> tuple[int, str]:
        """Run ``argv`` as this container runs (its sandbox, environment and directory): what an exec probe
        runs. Returns the exit code and the combined output; a run past ``time_limit`` seconds is killed
        (TimeoutError)."""
        context = self._exec_context or ExecContext(env=dict(os.environ), cwd=os.getcwd())
        try:
            proc = await asyncio.create_subprocess_exec(
                *wrap_argv(list(argv), context.sandbox),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=context.cwd,
                env=dict(context.env),
                start_new_session=True,
                preexec_fn=functools.partial(_child_setup, os.getpid()),
            )
        except OSError as e:
            return 127, f"{e.strerror or e}: {argv[0] if argv else ''!r}"
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), time_limit)
        except (TimeoutError, asyncio.CancelledError):
            # past its time, or its probe closed (the container stopped): nothing of it may outlive the call
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise
        code = proc.returncode if proc.returncode is not None else 1
        return (128 - code if code < 0 else code), out.decode("utf-8", "replace")

    async def stop(self, grace_seconds: float) -> TerminatedState:
        """SIGTERM the process group, wait up to ``grace_seconds``, then SIGKILL it; return the final state."""
        if self._terminated is not None:
            return self._terminated
        if grace_seconds > 0:
            self.send_signal(signal.SIGTERM, group=True)
            try:
                return await asyncio.wait_for(asyncio.shield(self._done), grace_seconds)
            except TimeoutError:
                log.info("container %s ignored SIGTERM for %ss; sending SIGKILL", self.describe(), grace_seconds)
        self.send_signal(signal.SIGKILL, group=True)
        return await self.wait()

    async def _supervise(self) -> None:
        assert self._proc.stdout is not None and self._proc.stderr is not None
        pumps = [
            asyncio.create_task(pump_stream(self._proc.stdout, "stdout", self.log)),
            asyncio.create_task(pump_stream(self._proc.stderr, "stderr", self.log)),
        ]
        try:
            returncode = await self._exited
            # The container is over: nothing it started may keep running (cgroup teardown).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            if self.scope is not None:
                self.scope.kill()  # what left the group too; its pipes close with it
            _done, pending = await asyncio.wait(pumps, timeout=_DRAIN_TIMEOUT)
            for t in pending:
                log.warning("container %s: output still held open by a detached process", self.describe())
                t.cancel()
            if pending:  # abandon the pipes (the process itself has been reaped)
                self._proc._transport.close()  # type: ignore[attr-defined]
            if self.scope is not None:
                await self.scope.remove()
        except BaseException:
            for t in pumps:
                t.cancel()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            if self.scope is not None:
                self.scope.kill()
            self._done.cancel()  # wake waiters instead of leaving them hanging
            raise
        finally:
            self.log.close()
            self._on_exit(self)
        self._finish(
            TerminatedState.from_returncode(returncode, started_at=self.started_at, container_id=self.container_id)
        )


class Watchdog:
    """The cluster's side of ``_reaper.py``: what must not outlive the cluster, told over a pipe.

    ``remove_command`` (e.g. ``podman ... rm --force --time 0``) is what the watchdog runs, with the ids
    appended, for the engine containers still registered when the pipe closes.
    """

    def __init__(self, remove_command: Sequence[str] = ()) -> None:
        self.remove_command = list(remove_command)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        if self._process is not None:
            return
        # Plain Popen, not asyncio: the watchdog must be writable synchronously from any callback.
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("_reaper.py")), *self.remove_command],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )

    def tell(self, op: bytes, what: bytes) -> None:
        """``+``/``-`` a process group id, ``c:<id>`` for an engine container, or ``g:<path>`` for a cgroup
        whose processes (its children's included) are killed and which is then removed."""
        process = self._process
        if process is None or process.stdin is None:
            return
        try:
            process.stdin.write(b"%s%s\n" % (op, what))
            process.stdin.flush()
        except OSError:
            log.error("process watchdog is gone; containers may outlive a crashed cluster")

    async def close(self) -> None:
        """EOF: it kills and removes whatever is still registered (nothing, normally) and exits."""
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            await asyncio.to_thread(process.wait, 120 if self.remove_command else 5)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)


class ProcessRuntime:
    """Starts container processes, keeps their logs, and guarantees none outlives the cluster.

    One per cluster (node). Use as ``async with ProcessRuntime(state_dir) as rt:`` or call ``start()`` /
    ``close()``. ``base_env`` is the environment the "image" would provide (default: the cluster's own
    environment, so ``python`` and the venv are found); the container's ``env`` is layered on top.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        base_env: Mapping[str, str] | None = None,
        default_working_dir: str | None = None,
        reaper: bool = True,
        cgroups: bool = True,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.logs_dir = self.state_dir / "pods"
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.default_working_dir = default_working_dir or os.getcwd()
        self._use_reaper = reaper
        self._use_cgroups = cgroups
        #: the cgroup holding one cgroup per container (``cgroup.py``); None: process groups only
        self.cgroup_root: Path | None = None
        self.watchdog = Watchdog()
        self._running: dict[tuple[str, str], RunningContainer] = {}
        self._latest: dict[tuple[str, str], int] = {}
        self._warned_image = False

    async def __aenter__(self) -> ProcessRuntime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        if self._use_reaper:
            self.watchdog.start()
        if self._use_cgroups and self.cgroup_root is None:
            self.cgroup_root = containment_root()
            if self.cgroup_root is not None:
                self.watchdog.tell(b"+", b"g:" + os.fsencode(self.cgroup_root))

    async def close(self, grace_seconds: float = 5.0) -> None:
        """Stop every running container (SIGTERM, grace, SIGKILL), then retire the watchdog."""
        running = list(self._running.values())
        if running:
            await asyncio.gather(*(c.stop(grace_seconds) for c in running), return_exceptions=True)
        root, self.cgroup_root = self.cgroup_root, None
        if root is not None:
            await asyncio.to_thread(remove_tree, root)
            self.watchdog.tell(b"-", b"g:" + os.fsencode(root))
        await self.watchdog.close()

    def log_path(self, pod: PodRef, container: str, restart_count: int) -> Path:
        """Kubelet layout: ``pods/<ns>_<name>_<uid>/<container>/<restartCount>.log``."""
        return self.logs_dir / f"{pod.namespace}_{pod.name}_{pod.uid}" / container / f"{restart_count}.log"

    async def start_container(
        self,
        pod: PodRef,
        spec: ContainerSpec,
        *,
        restart_count: int = 0,
        sandbox: Sandbox | None = None,
    ) -> ContainerProcess:
        """Start one instance of ``spec``. Raises ``ContainerConfigError`` (spec unusable, e.g. no command)
        or ``ContainerStartError`` (exec failed; carries the terminated state to report)."""
        key = (pod.uid, spec.name)
        if key in self._running:
            raise RuntimeError(f"container {spec.name!r} of pod {pod.namespace}/{pod.name} is already running")
        if spec.image and not self._warned_image:
            self._warned_image = True
            log.warning(
                "process runtime ignores container images (first seen: %s); commands run on the host", spec.image
            )
        env = {**self.base_env, **spec.env}
        if sandbox is not None and sandbox.hostname is not None:
            env.setdefault("HOSTNAME", sandbox.hostname)  # container runtimes set it to the pod's hostname
        argv = build_argv(spec, env)
        if spec.mounts:
            sandbox = dataclasses.replace(sandbox or Sandbox(), mounts=tuple(spec.mounts))
        cwd = spec.working_dir or self.default_working_dir
        container_id = f"process://{uuid.uuid4().hex}"
        started_at = _now()

        def start_error(message: str) -> ContainerStartError:
            term = TerminatedState(
                exit_code=128,
                reason="StartError",
                started_at=None,
                finished_at=_now(),
                container_id=container_id,
                message=message,
            )
            return ContainerStartError(message, term)

        if not os.path.isdir(cwd):  # noqa: ASYNC240 - a stat, cheaper than a thread hop
            # A container runtime creates workingDir inside the image; we do not create host directories.
            raise start_error(f"workingDir {cwd!r} does not exist on the host")
        if _resolve_executable(argv[0], env, cwd) is None:
            raise start_error(f'exec: "{argv[0]}": executable file not found in $PATH')
        container_log = ContainerLog(self.log_path(pod, spec.name, restart_count), writable=True)
        scope = Scope.create(self.cgroup_root, container_id.removeprefix("process://")) if self.cgroup_root else None
        try:
            proc, exited = await spawn(
                wrap_argv(argv, sandbox),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,  # own session and process group: group signals, no terminal signals
                preexec_fn=functools.partial(_child_setup, os.getpid(), scope),
            )
        except (OSError, subprocess.SubprocessError) as e:
            container_log.close()
            if scope is not None:
                await scope.remove()
            if isinstance(e, OSError):
                raise start_error(f"{e.strerror or e}: {argv[0]!r}") from e
            # only the preexec function raises this, and in it only joining the cgroup can fail
            where = scope.path if scope is not None else "(none)"
            raise start_error(f"the container's process could not join its cgroup {where}: {e}") from e
        self.watchdog.tell(b"+", b"%d" % proc.pid)
        container = ContainerProcess(
            pod=pod,
            spec=spec,
            restart_count=restart_count,
            proc=proc,
            exited=exited,
            log=container_log,
            container_id=container_id,
            started_at=started_at,
            on_exit=self._exited,
            exec_context=ExecContext(env=env, cwd=cwd, sandbox=sandbox),
            scope=scope,
        )
        self._running[key] = container
        self._latest[key] = restart_count
        log.info("started container %s pid=%s argv=%s", container.describe(), proc.pid, argv)
        return container

    def _exited(self, container: RunningContainer) -> None:
        if isinstance(container, ContainerProcess):
            self.watchdog.tell(b"-", b"%d" % container.pid)
        key = (container.pod.uid, container.spec.name)
        if self._running.get(key) is container:
            del self._running[key]

    def adopt(self, container: RunningContainer) -> Any:
        """Keep an instance another runtime started (an engine's container) with the node's own: its log is
        served like a process's, and :meth:`running`, :meth:`close` and sandbox removal stop it too. Returns
        the callback the instance calls once it has exited."""
        key = (container.pod.uid, container.spec.name)
        self._running[key] = container
        self._latest[key] = container.restart_count
        return self._exited

    def running(self) -> list[RunningContainer]:
        return list(self._running.values())

    def exec_context(self, pod: PodRef, container: str) -> ExecContext | None:
        """How to run a command beside the running instance of ``container`` (``kubectl exec``); None when it
        is not running as a host process here."""
        running = self._running.get((pod.uid, container))
        if not isinstance(running, ContainerProcess) or not running.running:
            return None
        return running.exec_context

    def container_log(self, pod: PodRef, container: str, *, previous: bool = False) -> ContainerLog:
        """The log of the current instance (or the one before it with ``previous``), like ``/log`` serves.

        The current instance's log is live (``follow()`` waits for new lines) while it runs. Raises
        ``FileNotFoundError`` when there is no such instance (the kubelet answers 400 "previous terminated
        container ... not found" in that case).
        """
        key = (pod.uid, container)
        restart = self._latest.get(key)
        if restart is None:
            restart = self._latest_on_disk(pod, container)
        if restart is None:
            raise FileNotFoundError(f"container {container!r} in pod {pod.namespace}/{pod.name} has no logs")
        if previous:
            restart -= 1
        path = self.log_path(pod, container, restart)
        live = self._running.get(key)
        if live is not None and live.restart_count == restart:
            return live.log
        if restart < 0 or not path.exists():
            raise FileNotFoundError(
                f"previous terminated container {container!r} in pod {pod.namespace}/{pod.name} not found"
            )
        return ContainerLog(path)

    def _latest_on_disk(self, pod: PodRef, container: str) -> int | None:
        d = self.log_path(pod, container, 0).parent
        counts = [int(p.stem) for p in d.glob("*.log") if p.stem.isdigit()] if d.is_dir() else []
        return max(counts) if counts else None

    def remove_pod_logs(self, pod: PodRef) -> None:
        """Delete a deleted pod's logs (the kubelet's garbage collection)."""
        shutil.rmtree(self.logs_dir / f"{pod.namespace}_{pod.name}_{pod.uid}", ignore_errors=True)
