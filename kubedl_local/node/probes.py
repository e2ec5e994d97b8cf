"""Container probes as the kubelet runs them: startup, liveness and readiness, with httpGet, tcpSocket and exec.

Why: without probes a pod was Ready the moment its processes ran, so a Deployment's ``rollout status``, an
EndpointSlice and the Service proxy trusted a controller that was still starting (or had wedged). Readiness
decides the container's ``ready``, hence the pod's ``Ready``/``ContainersReady`` conditions, hence whether the
endpoints controllers list the pod under ready addresses and whether a ReplicaSet counts it available; a
failing liveness (or startup) probe gets the container killed and restarted per ``restartPolicy``. Both the
process and the container runtime use this module (exec probes run through the instance: the sandbox for a
process, ``podman exec`` for a container).

The kubelet's rules, as implemented here (:class:`ContainerProbes`, one per container instance):

- a startup probe, when there is one, runs first; liveness and readiness wait until it has succeeded
  (``started`` is false until then). Without one the container is started as soon as it runs;
- each probe first runs ``initialDelaySeconds`` after the container started, then every ``periodSeconds``,
  each attempt bounded by ``timeoutSeconds``; the result changes only after ``successThreshold`` consecutive
  successes or ``failureThreshold`` consecutive failures (defaults 10 s, 1 s, 1 and 3, as the API server
  fills them in);
- readiness starts as failed: a container with a readiness probe is not ready until it first passes;
- every failed attempt records an ``Unhealthy`` warning event (``Liveness probe failed: ...``); a liveness or
  startup probe that reaches its failure threshold records ``Killing`` (``Container <name> failed liveness
  probe, will be restarted``) and has the container stopped with the probe's
  ``terminationGracePeriodSeconds`` (else the pod's); the restart policy does the rest;
- httpGet: ``scheme://host:port/path`` (host: the pod IP unless given; port: a number or the name of a
  container port), ``httpHeaders``, User-Agent ``kube-probe/<minor>``, redirects followed, certificates not
  verified; success is a status from 200 to 399. tcpSocket: a connection opens. exec: exit code 0.
  gRPC probes are not implemented: they count as passing, with one ``ProbeWarning`` event saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from kubedl_local.node.spec import KUBELET_VERSION

log = logging.getLogger(__name__)

Obj = dict[str, Any]

STARTUP, LIVENESS, READINESS = "startup", "liveness", "readiness"
PROBE_KINDS = (STARTUP, LIVENESS, READINESS)
#: the API server's defaults for probe fields left out (a real server fills them in; the embedded one not)
DEFAULT_PERIOD, DEFAULT_TIMEOUT, DEFAULT_SUCCESS, DEFAULT_FAILURE = 10, 1, 1, 3
DEFAULT_GRACE = 30.0
USER_AGENT = "kube-probe/" + ".".join(KUBELET_VERSION.lstrip("v").split(".")[:2])
#: how much of an HTTP body goes into a failure message (the kubelet keeps 10 KiB)
MAX_BODY = 10 * 1024


class Execable(Protocol):
    """What an exec probe runs in: a container instance."""

    async def exec(self, argv: Sequence[str], time_limit: float) -> tuple[int, str]: ...


@dataclass(frozen=True, kw_only=True)
class ProbeSpec:
    kind: str
    handler: Obj
    initial_delay: float = 0.0
    period: float = DEFAULT_PERIOD
    timeout: float = DEFAULT_TIMEOUT
    success_threshold: int = DEFAULT_SUCCESS
    failure_threshold: int = DEFAULT_FAILURE
    termination_grace: float | None = None

    @classmethod
    def of(cls, container: Obj, kind: str) -> ProbeSpec | None:
        """The container's ``<kind>Probe`` with the API server's defaults, or None."""
        probe = container.get(f"{kind}Probe")
        if not probe:
            return None
        handler = {k: v for k, v in probe.items() if k in ("httpGet", "tcpSocket", "exec", "grpc")}
        grace = probe.get("terminationGracePeriodSeconds")
        return cls(
            kind=kind,
            handler=handler,
            initial_delay=float(probe.get("initialDelaySeconds") or 0),
            period=float(probe.get("periodSeconds") or DEFAULT_PERIOD),
            timeout=float(probe.get("timeoutSeconds") or DEFAULT_TIMEOUT),
            # liveness and startup probes must have successThreshold 1 (the API server refuses anything else)
            success_threshold=int(probe.get("successThreshold") or DEFAULT_SUCCESS) if kind == READINESS else 1,
            failure_threshold=int(probe.get("failureThreshold") or DEFAULT_FAILURE),
            termination_grace=float(grace) if grace is not None else None,
        )


@dataclass(frozen=True)
class ProbeResult:
    success: bool
    message: str = ""
    #: set when the probe passed but something deserves a ``ProbeWarning`` event
    warning: str = ""


def resolve_port(container: Obj, port: Any) -> int:
    """A probe's port: a number, or the name of one of the container's ports (or a number written as text)."""
    if isinstance(port, int):
        return port
    name = str(port)
    for p in container.get("ports") or []:
        if p.get("name") == name:
            return int(p["containerPort"])
    if name.isdigit():
        return int(name)
    raise ValueError(f"port name {name!r} not found in container {container.get('name')!r}")


async def run_probe(
    spec: ProbeSpec,
    container: Obj,
    *,
    pod_ip: str,
    instance: Execable,
    session: aiohttp.ClientSession | None = None,
) -> ProbeResult:
    """One attempt of ``spec`` against the container."""
    handler = spec.handler
    try:
        if "exec" in handler:
            command = [str(a) for a in (handler["exec"] or {}).get("command") or []]
            try:
                code, output = await instance.exec(command, spec.timeout)
            except TimeoutError:
                return ProbeResult(False, f"command {command!r} timed out")
            return ProbeResult(code == 0, output.strip() if code == 0 else output.strip() or f"exit code {code}")
        if "tcpSocket" in handler:
            tcp = handler["tcpSocket"] or {}
            host, port = tcp.get("host") or pod_ip, resolve_port(container, tcp.get("port"))
            try:
                _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), spec.timeout)
            except TimeoutError:
                return ProbeResult(False, f"dial tcp {host}:{port}: i/o timeout")
            except OSError as e:
                return ProbeResult(False, f"dial tcp {host}:{port}: connect: {_reason(e)}")
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return ProbeResult(True)
        if "httpGet" in handler:
            return await _http(spec, container, handler["httpGet"] or {}, pod_ip, session)
        if "grpc" in handler:
            return ProbeResult(True, warning="gRPC probes are not implemented by the kubedl-py node agent: passing")
    except ValueError as e:
        return ProbeResult(False, str(e))
    return ProbeResult(False, "probe has no handler (httpGet, tcpSocket, exec or grpc)")


async def _http(
    spec: ProbeSpec, container: Obj, get: Obj, pod_ip: str, session: aiohttp.ClientSession | None
) -> ProbeResult:
    scheme = str(get.get("scheme") or "HTTP").lower()
    host, port = get.get("host") or pod_ip, resolve_port(container, get.get("port"))
    path = str(get.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    url = f"{scheme}://{host}:{port}{path}"
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    for header in get.get("httpHeaders") or []:
        headers[str(header.get("name"))] = str(header.get("value", ""))
    own = session is None
    http = session or aiohttp.ClientSession()
    try:
        async with http.get(
            url,
            headers=headers,
            ssl=False,
            allow_redirects=True,
            max_redirects=10,
            timeout=aiohttp.ClientTimeout(total=spec.timeout),
        ) as response:
            body = (await response.content.read(MAX_BODY)).decode("utf-8", "replace")
            if 200 <= response.status < 400:
                return ProbeResult(True, body)
            return ProbeResult(False, f"HTTP probe failed with statuscode: {response.status}")
    except TimeoutError:
        return ProbeResult(
            False, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
        )
    except aiohttp.ClientConnectorError as e:
        return ProbeResult(False, f'Get "{url}": dial tcp {host}:{port}: connect: {_reason(e.os_error)}')
    except aiohttp.ClientError as e:
        return ProbeResult(False, f'Get "{url}": {e}')
    finally:
        if own:
            await http.close()


def _reason(error: OSError) -> str:
    """``connection refused``, as Go words it (asyncio's own message names the call instead)."""
    return os.strerror(error.errno).lower() if error.errno else str(error)


class ContainerProbes:
    """The probes of one running container instance (see the module docstring).

    ``on_change()`` is called when ``started`` or ``ready`` changes (the kubelet writes the status then);
    ``event(type, reason, message)`` records an event; ``kill(grace)`` has the instance stopped after a
    liveness or startup failure (without waiting: the container loop sees it exit and applies the restart
    policy, and closes these probes).
    """

    def __init__(
        self,
        container: Obj,
        *,
        pod_ip: str,
        instance: Execable,
        pod_grace: float | None,
        on_change: Callable[[], None],
        event: Callable[[str, str, str], None],
        kill: Callable[[float], None],
    ) -> None:
        self.container = container
        self.pod_ip = pod_ip
        self.instance = instance
        self.pod_grace = DEFAULT_GRACE if pod_grace is None else pod_grace
        self.specs = {kind: spec for kind in PROBE_KINDS if (spec := ProbeSpec.of(container, kind)) is not None}
        self.started = STARTUP not in self.specs
        self.ready = READINESS not in self.specs
        self._started = asyncio.Event()
        if self.started:
            self._started.set()
        self._on_change = on_change
        self._event = event
        self._kill = kill
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self._warned = False
        #: attempts so far by probe kind: [successes, failures] (a test hook: no API shows passing probes)
        self.attempts: dict[str, list[int]] = {kind: [0, 0] for kind in self.specs}

    @property
    def any(self) -> bool:
        return bool(self.specs)

    def start(self) -> None:
        if not self.specs:
            return
        if any("httpGet" in spec.handler for spec in self.specs.values()):
            self._session = aiohttp.ClientSession()
        name = self.container.get("name")
        self._tasks = [
            asyncio.create_task(self._worker(spec), name=f"{kind} probe of {name}") for kind, spec in self.specs.items()
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _worker(self, spec: ProbeSpec) -> None:
        try:
            await self._probe_loop(spec)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s probe of container %s failed unexpectedly", spec.kind, self.container.get("name"))

    async def _probe_loop(self, spec: ProbeSpec) -> None:
        await asyncio.sleep(spec.initial_delay)
        if spec.kind != STARTUP:
            await self._started.wait()
        successes = failures = 0
        name = self.container.get("name")
        while True:
            result = await run_probe(
                spec, self.container, pod_ip=self.pod_ip, instance=self.instance, session=self._session
            )
            if result.warning and not self._warned:
                self._warned = True
                self._event("Warning", "ProbeWarning", f"{spec.kind.capitalize()} probe warning: {result.warning}")
            self.attempts[spec.kind][0 if result.success else 1] += 1
            if result.success:
                successes, failures = successes + 1, 0
            else:
                successes, failures = 0, failures + 1
                self._event("Warning", "Unhealthy", f"{spec.kind.capitalize()} probe failed: {result.message}")
            if result.success and successes >= spec.success_threshold:
                if spec.kind == STARTUP:
                    self.started = True
                    self._started.set()
                    self._on_change()
                    return
                if spec.kind == READINESS and not self.ready:
                    self.ready = True
                    self._on_change()
            elif not result.success and failures >= spec.failure_threshold:
                if spec.kind == READINESS:
                    if self.ready:
                        self.ready = False
                        self._on_change()
                else:
                    message = f"Container {name} failed {spec.kind} probe, will be restarted"
                    self._event("Normal", "Killing", message)
                    grace = spec.termination_grace if spec.termination_grace is not None else self.pod_grace
                    self._kill(grace)
                    return
            await asyncio.sleep(spec.period)


def probe_grace(pod_spec: Mapping[str, Any]) -> float | None:
    """The pod's ``terminationGracePeriodSeconds`` (what a probe kill waits for unless the probe says)."""
    value = pod_spec.get("terminationGracePeriodSeconds")
    return float(value) if value is not None else None
