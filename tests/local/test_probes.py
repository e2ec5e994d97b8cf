"""Probes as the node agent runs them: one attempt of each handler, the kubelet's thresholds and ordering, and
what a client sees on a process node (``Ready`` following readiness, restarts after a failing liveness probe).

The container runtime's probes (exec through ``podman exec``) are in ``test_container_runtime.py``.
"""

from __future__ import annotations

import dataclasses
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kubedl_local import LocalCluster
from kubedl_local.node.probes import ContainerProbes, ProbeSpec, resolve_port, run_probe
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import EVENTS, PODS
from tests.local.conftest import eventually

NS = "default"
SLOW = 30.0


class FakeInstance:
    """An exec target whose command result the test decides."""

    def __init__(self) -> None:
        self.code = 0
        self.output = "ok"
        self.delay = 0.0
        self.calls: list[list[str]] = []

    async def exec(self, argv: Sequence[str], time_limit: float) -> tuple[int, str]:
        self.calls.append(list(argv))
        if self.delay > time_limit:
            raise TimeoutError
        return self.code, self.output


@pytest.fixture
async def http_server() -> AsyncIterator[dict[str, Any]]:
    """A local HTTP server whose answer on /health the test sets (``state["status"]``)."""
    state: dict[str, Any] = {"status": 200, "seen": []}

    async def health(request: web.Request) -> web.Response:
        state["seen"].append(dict(request.headers))
        return web.Response(status=state["status"], text="fine" if state["status"] < 400 else "sick")

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state["port"] = runner.addresses[0][1]
    yield state
    await runner.cleanup()


def test_probe_fields_get_the_api_servers_defaults() -> None:
    container = {"name": "c", "readinessProbe": {"exec": {"command": ["true"]}}, "livenessProbe": None}
    spec = ProbeSpec.of(container, "readiness")
    assert spec is not None
    assert (spec.initial_delay, spec.period, spec.timeout, spec.success_threshold, spec.failure_threshold) == (
        0.0,
        10.0,
        1.0,
        1,
        3,
    )
    assert ProbeSpec.of(container, "liveness") is None
    liveness = ProbeSpec.of({"livenessProbe": {"tcpSocket": {"port": 1}, "successThreshold": 5}}, "liveness")
    assert liveness is not None and liveness.success_threshold == 1  # always 1 for liveness and startup


def test_ports_are_numbers_or_container_port_names() -> None:
    container = {"name": "c", "ports": [{"name": "metrics", "containerPort": 8080}]}
    assert resolve_port(container, "metrics") == 8080
    assert resolve_port(container, 9090) == 9090
    assert resolve_port(container, "9091") == 9091
    with pytest.raises(ValueError, match="port name 'http' not found"):
        resolve_port(container, "http")


async def test_one_attempt_of_each_handler(http_server: dict[str, Any]) -> None:
    port = http_server["port"]
    container = {"name": "c", "ports": [{"name": "web", "containerPort": port}]}
    instance = FakeInstance()

    async def attempt(kind: str, handler: dict[str, Any]) -> Any:
        probe = ProbeSpec(kind=kind, handler=handler, timeout=2)
        return await run_probe(probe, container, pod_ip="127.0.0.1", instance=instance)

    http = {"httpGet": {"path": "health", "port": "web", "httpHeaders": [{"name": "X-Probe", "value": "yes"}]}}
    assert (await attempt("readiness", http)).success
    headers = http_server["seen"][-1]
    assert headers["User-Agent"].startswith("kube-probe/") and headers["X-Probe"] == "yes"
    http_server["status"] = 503
    failed = await attempt("readiness", http)
    assert not failed.success and failed.message == "HTTP probe failed with statuscode: 503"
    refused = await attempt("liveness", {"httpGet": {"path": "/", "port": _closed_port()}})
    assert not refused.success and "connect: connection refused" in refused.message

    assert (await attempt("liveness", {"tcpSocket": {"port": port}})).success
    closed = await attempt("liveness", {"tcpSocket": {"port": _closed_port()}})
    assert not closed.success and closed.message.endswith("connect: connection refused")

    assert (await attempt("startup", {"exec": {"command": ["cat", "/tmp/x"]}})).success
    assert instance.calls[-1] == ["cat", "/tmp/x"]
    instance.code, instance.output = 1, "cat: /tmp/x: No such file or directory\n"
    failed_exec = await attempt("startup", {"exec": {"command": ["cat", "/tmp/x"]}})
    assert not failed_exec.success and failed_exec.message == "cat: /tmp/x: No such file or directory"
    instance.delay = 5
    assert "timed out" in (await attempt("startup", {"exec": {"command": ["sleep", "9"]}})).message

    grpc = await attempt("readiness", {"grpc": {"port": port}})
    assert grpc.success and "not implemented" in grpc.warning


async def test_thresholds_startup_first_readiness_flips_liveness_kills() -> None:
    """The kubelet's state machine with exec probes on a fake instance: readiness waits for startup, flips only
    after its thresholds, and a liveness probe reaching its failure threshold asks for a kill with its grace."""
    instance = FakeInstance()
    instance.code = 1  # startup not there yet
    container = {
        "name": "c",
        "startupProbe": {"exec": {"command": ["startup"]}, "periodSeconds": 1, "failureThreshold": 30},
        "readinessProbe": {
            "exec": {"command": ["ready"]},
            "periodSeconds": 1,
            "successThreshold": 2,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "exec": {"command": ["alive"]},
            "periodSeconds": 1,
            "failureThreshold": 2,
            "terminationGracePeriodSeconds": 7,
        },
    }
    changes: list[tuple[bool, bool]] = []
    events: list[tuple[str, str, str]] = []
    kills: list[float] = []
    probes = ContainerProbes(
        container,
        pod_ip="127.0.0.1",
        instance=instance,
        pod_grace=30,
        on_change=lambda: changes.append((probes.started, probes.ready)),
        event=lambda *e: events.append(e),
        kill=kills.append,
    )
    # Fast periods for the test: the same state machine, a tenth of a second per period.
    probes.specs = {kind: dataclasses.replace(spec, period=0.1) for kind, spec in probes.specs.items()}
    assert (probes.started, probes.ready) == (False, False)
    probes.start()
    try:
        await eventually(lambda: _true(len(instance.calls) >= 3), timeout=5)
        assert {c[0] for c in instance.calls} == {"startup"}, "readiness and liveness ran before startup passed"
        instance.code = 0
        await eventually(lambda: _true(changes[-2:] == [(True, False), (True, True)]), timeout=5)
        assert sum(1 for c in instance.calls if c[0] == "ready") >= 2  # successThreshold 2
        assert any(e[1] == "Unhealthy" and e[2].startswith("Startup probe failed:") for e in events)
        instance.code = 1  # readiness and liveness fail from now on
        await eventually(lambda: _true(bool(kills)), timeout=5)
        assert kills == [7.0]
        assert ("Normal", "Killing", "Container c failed liveness probe, will be restarted") in events
        await eventually(lambda: _true(changes[-1] == (True, False)), timeout=5)
    finally:
        await probes.close()


async def _true(value: bool) -> bool:
    return value


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------------------------- on a process node


@pytest.fixture
async def kube() -> AsyncIterator[KubeClient]:
    async with (
        LocalCluster(runtime="process", process_bridge=f"kdp{uuid.uuid4().hex[:6]}") as cluster,
        KubeClient(configuration=cluster.configuration) as client,
    ):
        yield client


def _pod(name: str, script: str, **container: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox:ignored", "command": ["sh", "-c", script], **container}],
        },
    }


async def _condition(kube: KubeClient, name: str, kind: str) -> str | None:
    pod = await kube.get(PODS, name, namespace=NS)
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return str(cond["status"])
    return None


async def test_readiness_drives_ready_on_a_process_node(kube: KubeClient, tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    probe = {"exec": {"command": ["cat", str(flag)]}, "periodSeconds": 1, "failureThreshold": 1}
    await kube.create(PODS, _pod("gated", "exec sleep 300", readinessProbe=probe), namespace=NS)

    async def running_not_ready() -> bool:
        pod = await kube.get(PODS, "gated", namespace=NS)
        statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
        return "running" in (statuses[0].get("state") or {}) and statuses[0].get("ready") is False

    await eventually(running_not_ready, timeout=SLOW)
    assert await _condition(kube, "gated", "Ready") == "False"
    flag.write_text("yes")
    await eventually(lambda: _is(kube, "gated", "Ready", "True"), timeout=SLOW)
    flag.unlink()
    await eventually(lambda: _is(kube, "gated", "Ready", "False"), timeout=SLOW)
    unhealthy = await kube.list(EVENTS, namespace=NS, field_selector="reason=Unhealthy")
    assert any("Readiness probe failed: cat:" in e["message"] for e in unhealthy.items)


async def test_failing_liveness_restarts_a_process_container(kube: KubeClient, tmp_path: Path) -> None:
    alive = tmp_path / "alive"
    alive.write_text("")
    # The program counts its starts; it stays healthy until the test removes the flag.
    script = f"echo start >> {tmp_path}/starts; exec sleep 300"
    probe = {"exec": {"command": ["test", "-e", str(alive)]}, "periodSeconds": 1, "failureThreshold": 2}
    await kube.create(PODS, _pod("wedged", script, livenessProbe=probe), namespace=NS)
    await eventually(lambda: _is(kube, "wedged", "Ready", "True"), timeout=SLOW)
    started = time.monotonic()
    alive.unlink()

    async def restarted() -> dict[str, Any] | None:
        pod = await kube.get(PODS, "wedged", namespace=NS)
        statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
        return statuses[0] if statuses[0].get("restartCount", 0) >= 1 else None

    status = await eventually(restarted, timeout=SLOW)
    assert time.monotonic() - started >= 1.0  # two failures, a period apart
    # SIGTERM (grace 1 s) ends `sleep`: 143, reported as the last state
    assert status["lastState"]["terminated"]["exitCode"] in (143, 137)
    events = await kube.list(EVENTS, namespace=NS)
    reasons = [(e["reason"], e["message"]) for e in events.items]
    assert ("Killing", "Container main failed liveness probe, will be restarted") in reasons
    assert any(r == "Unhealthy" and m.startswith("Liveness probe failed") for r, m in reasons)
    await eventually(lambda: _true((tmp_path / "starts").read_text().count("start") >= 2), timeout=SLOW)


async def test_http_readiness_of_a_process_server(kube: KubeClient) -> None:
    port = _closed_port()
    server = f"exec {sys.executable} -m http.server {port} --bind 0.0.0.0"
    probe = {"httpGet": {"path": "/", "port": "web"}, "periodSeconds": 1}
    ports = [{"name": "web", "containerPort": port}]
    await kube.create(PODS, _pod("web", server, readinessProbe=probe, ports=ports), namespace=NS)
    await eventually(lambda: _is(kube, "web", "Ready", "True"), timeout=SLOW)


async def _is(kube: KubeClient, name: str, kind: str, value: str) -> bool:
    return await _condition(kube, name, kind) == value
