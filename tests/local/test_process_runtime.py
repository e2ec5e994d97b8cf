"""The process kubelet (``runtime="process"``): real processes behind the pod API, observed over HTTP.

Each test runs a 1-node embedded cluster whose pods are local processes, and asserts what a client sees:
pod status, container states and exit codes, logs through ``pods/log``, Services reached by name through
the proxy, deletion with a grace period. No process outlives a test (checked at the end of each).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubedl_local import LocalCluster
from kubedl_local.node import primary_ipv4
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import CONFIGMAPS, EVENTS, PODS, SERVICES
from tests.local.conftest import eventually

NS = "default"


SLOW = 20.0  # real processes start and stop more slowly than the simulated kubelet


def _descendants() -> set[int]:
    me = str(os.getpid())
    out: set[int] = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] not in ("Z", "X"):
                out.add(int(d))
    return out


@pytest.fixture
async def cluster() -> AsyncIterator[LocalCluster]:
    before = _descendants()
    async with LocalCluster(runtime="process", process_bridge=f"kdt{uuid.uuid4().hex[:6]}") as local:
        yield local
    assert _descendants() - before == set(), "a pod process outlived the cluster"


@pytest.fixture
async def kube(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    async with KubeClient(configuration=cluster.configuration) as client:
        yield client


def pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox:ignored", "command": ["sh", "-c", script]}
    container.update(spec.pop("container", {}))
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": {"containers": [container], **spec}}


async def phase_of(kube: KubeClient, name: str, *phases: str) -> dict[str, Any] | None:
    p = await kube.get(PODS, name, namespace=NS)
    return p if (p.get("status") or {}).get("phase") in phases else None


async def test_env_downward_api_and_var_expansion(kube: KubeClient, cluster: LocalCluster) -> None:
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "GREETING", "value": "hi-$(POD_NAME)"},
    ]
    spec = pod(
        "envpod",
        'echo "$POD_NAME $POD_NS $POD_IP $NODE $GREETING $(GREETING) $PWD"',
        hostNetwork=True,
        restartPolicy="Never",
        container={"env": env, "workingDir": "/tmp"},
    )
    await kube.create(PODS, spec, namespace=NS)
    done = await eventually(lambda: phase_of(kube, "envpod", "Succeeded", "Failed"), timeout=SLOW)
    assert done["status"]["phase"] == "Succeeded"
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (0, "Completed")
    # The node IP is the host's primary address (a real API server refuses loopback endpoints).
    node_ip = cluster.node_ips["local-node-0"]
    assert done["status"]["podIP"] == done["status"]["hostIP"] == node_ip == primary_ipv4()
    log = await kube.read_log("envpod", namespace=NS)
    assert log == f"envpod default {node_ip} local-node-0 hi-envpod hi-envpod /tmp\n"


async def test_exit_codes_restarts_and_previous_logs(kube: KubeClient) -> None:
    # OnFailure: exit 3 restarts in place (restartCount, lastState); the third instance exits 0 and it ends.
    script = 'n=$(ls /tmp/{d} | wc -l); touch /tmp/{d}/$n; echo "run $n"; [ "$n" -ge 2 ] || exit 3'
    d = f"kdl-restart-{uuid.uuid4().hex[:6]}"
    os.makedirs(f"/tmp/{d}")
    try:
        await kube.create(
            PODS, pod("flaky", script.format(d=d), hostNetwork=True, restartPolicy="OnFailure"), namespace=NS
        )
        done = await eventually(lambda: phase_of(kube, "flaky", "Succeeded", "Failed"), timeout=SLOW)
    finally:
        for f in os.listdir(f"/tmp/{d}"):
            os.unlink(f"/tmp/{d}/{f}")
        os.rmdir(f"/tmp/{d}")
    cs = done["status"]["containerStatuses"][0]
    assert done["status"]["phase"] == "Succeeded"
    assert cs["restartCount"] == 2
    assert cs["lastState"]["terminated"]["exitCode"] == 3
    assert cs["lastState"]["terminated"]["reason"] == "Error"
    assert await kube.read_log("flaky", namespace=NS) == "run 2\n"
    assert await kube.read_log("flaky", namespace=NS, previous=True) == "run 1\n"
    # Never: a non-zero exit fails the pod, 128+N for a process killed by signal N. ("$$$$": the kubelet's
    # $(VAR) expansion turns "$$" into "$", as in Kubernetes.)
    await kube.create(PODS, pod("killed", "kill -9 $$$$", hostNetwork=True, restartPolicy="Never"), namespace=NS)
    failed = await eventually(lambda: phase_of(kube, "killed", "Failed"), timeout=SLOW)
    assert failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


async def test_a_container_ends_with_its_main_process_though_a_daemon_holds_its_output(
    kube: KubeClient, tmp_path: Any
) -> None:
    # sshd forks each login into its own session with the container's stderr; Open MPI's orted runs under it.
    # Such a daemon keeps the container's pipes open after the main process has gone; the container must end
    # then all the same (Python 3.11's Process.wait() would wait for the pipes, i.e. for the daemon).
    pidfile = tmp_path / "daemon.pid"
    script = f"setsid sh -c 'echo $$$$ > {pidfile}; exec sleep 120' & sleep 0.5; echo main-done; exit 3"
    started = time.monotonic()
    await kube.create(PODS, pod("daemonizer", script, hostNetwork=True, restartPolicy="Never"), namespace=NS)
    try:
        failed = await eventually(lambda: phase_of(kube, "daemonizer", "Failed"), timeout=SLOW)
        assert time.monotonic() - started < SLOW / 2, "the container ended only when its daemon did"
        assert failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
        assert "main-done" in await kube.read_log("daemonizer", namespace=NS)
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), 9)


async def test_logs_follow_and_tail(kube: KubeClient) -> None:
    script = "for i in 1 2 3 4 5; do echo line $i; done; exec sleep 30"
    await kube.create(PODS, pod("talker", script, hostNetwork=True), namespace=NS)
    await eventually(
        lambda: _log_has(kube, "talker", "line 5"),
        timeout=SLOW,
    )
    assert await kube.read_log("talker", namespace=NS, tail_lines=2) == "line 4\nline 5\n"
    lines = []
    async for line in kube.stream_log("talker", namespace=NS, tail_lines=1):
        lines.append(line)
        break
    assert lines and "line 5" in str(lines[0])


async def _log_has(kube: KubeClient, name: str, text: str) -> bool:
    try:
        return text in await kube.read_log(name, namespace=NS)
    except Exception:
        return False


async def test_deletion_sigterm_grace_then_sigkill(kube: KubeClient) -> None:
    # The process ignores SIGTERM: it is killed when the grace period (1s) runs out, then the pod is gone.
    script = "trap 'echo got TERM' TERM; echo ready; while true; do sleep 0.05; done"
    await kube.create(PODS, pod("stubborn", script, hostNetwork=True, terminationGracePeriodSeconds=1), namespace=NS)
    await eventually(lambda: _log_has(kube, "stubborn", "ready"), timeout=SLOW)
    started = time.monotonic()
    await kube.delete(PODS, "stubborn", namespace=NS)

    async def gone() -> bool:
        try:
            await kube.get(PODS, "stubborn", namespace=NS)
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=SLOW)
    assert 0.9 <= time.monotonic() - started < 10


async def test_service_proxy_and_hosts_follow_the_target_port(kube: KubeClient, cluster: LocalCluster) -> None:
    # A host-network "server" pod; its Service is re-pointed from one port to another, and a client pod
    # resolving the Service by name reaches whichever port the Service points at, per new connection.
    ports = [_free_port(), _free_port()]
    server = (
        f'{sys.executable} -c "import socket,threading,sys\n'
        "def s(p):\n"
        " l=socket.create_server(('',p))\n"
        " while True:\n"
        "  c,_=l.accept(); c.sendall(str(p).encode()); c.close()\n"
        f'[threading.Thread(target=s,args=(p,)).start() for p in ({ports[0]},{ports[1]})]"'
    )
    await kube.create(PODS, pod("srv", server, hostNetwork=True), namespace=NS)
    svc = {
        "metadata": {"name": "echo"},
        "spec": {"selector": {"app": "srv"}, "ports": [{"port": 7000, "targetPort": ports[0]}]},
    }
    await kube.create(SERVICES, svc, namespace=NS)
    # Until the server listens the proxy resets the connection (empty read): exit 1, OnFailure restarts it.
    connect = "socket.create_connection(('echo.default.svc',7000))"
    ask = f'{sys.executable} -c "import socket,sys;d={connect}.recv(9).decode();print(d);sys.exit(0 if d else 1)"'

    async def answer(name: str) -> str:
        await kube.create(PODS, pod(name, ask, hostNetwork=True, restartPolicy="OnFailure"), namespace=NS)
        await eventually(lambda: phase_of(kube, name, "Succeeded"), timeout=SLOW)
        return await kube.read_log(name, namespace=NS)

    assert await answer("ask1") == f"{ports[0]}\n"
    await kube.patch(SERVICES, "echo", {"spec": {"ports": [{"port": 7000, "targetPort": ports[1]}]}}, namespace=NS)
    assert await answer("ask2") == f"{ports[1]}\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_process_runtime_runs_one_node() -> None:
    with pytest.raises(ValueError, match="exactly 1 node"):
        LocalCluster(nodes=2, runtime="process")


async def test_pod_network_pod_without_a_network_fails_clearly(cluster: LocalCluster, kube: KubeClient) -> None:
    # Without root a pod netns cannot be made; as root we make it impossible by letting another cluster hold
    # the bridge first. Either way the pod must not half-run: Failed, reason PodNetworkUnavailable, an event.
    holder_bridge = cluster.process_bridge
    if os.geteuid() == 0:  # the first cluster takes the bridge with a pod-network pod of its own
        await kube.create(PODS, pod("holder", "exec sleep 30"), namespace=NS)
        await eventually(lambda: phase_of(kube, "holder", "Running"), timeout=SLOW)
    other = LocalCluster(runtime="process", process_bridge=holder_bridge)
    async with other, KubeClient(configuration=other.configuration) as other_kube:
        await other_kube.create(PODS, pod("netless", "echo should not run"), namespace=NS)
        failed = await eventually(lambda: phase_of(other_kube, "netless", "Failed"), timeout=SLOW)
        assert failed["status"]["reason"] == "PodNetworkUnavailable"
        assert failed["status"]["message"]
        assert await other_kube.list(EVENTS, namespace=NS, field_selector="reason=FailedCreatePodSandBox")


async def test_volumes_projected_token_configmap_downward_api_and_empty_dir(
    kube: KubeClient, cluster: LocalCluster
) -> None:
    cm = {"metadata": {"name": "settings"}, "data": {"mode": "fast", "other": "x"}}
    await kube.create(CONFIGMAPS, cm, namespace=NS)
    sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    # A host that ran older versions keeps their leftovers: only paths absent now can show that none is made
    # (tests/local_process/test_hosts.py shows it with paths of its own).
    absent = [p for p in ("/etc/settings", "/etc/info", "/var/run/secrets", "/scratch") if not os.path.lexists(p)]  # noqa: ASYNC240
    script = (
        f"cat {sa_dir}/namespace; echo; head -c 20 {sa_dir}/token | cut -c1-2; grep -c BEGIN {sa_dir}/ca.crt; "
        "cat /etc/settings/renamed; echo; stat -c %a /etc/settings/..data/renamed; ls /etc/settings; "
        "cat /etc/info/labels; echo; echo shared > /scratch/f; cat /scratch/f"
    )
    spec = pod(
        "vols",
        script,
        hostNetwork=True,
        restartPolicy="Never",
        volumes=[
            {
                "name": "cfg",
                "configMap": {"name": "settings", "items": [{"key": "mode", "path": "renamed"}], "defaultMode": 0o600},
            },
            {
                "name": "info",
                "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
            },
            {"name": "scratch", "emptyDir": {}},
        ],
        container={
            "volumeMounts": [
                {"name": "cfg", "mountPath": "/etc/settings", "readOnly": True},
                {"name": "info", "mountPath": "/etc/info"},
                {"name": "scratch", "mountPath": "/scratch"},
            ]
        },
    )
    await kube.create(PODS, spec, namespace=NS)
    done = await eventually(lambda: phase_of(kube, "vols", "Succeeded", "Failed"), timeout=SLOW)
    log = await kube.read_log("vols", namespace=NS)
    assert done["status"]["phase"] == "Succeeded", log
    assert log.splitlines() == ["default", "ey", "1", "fast", "600", "renamed", 'app="vols"', "shared"], log
    # The pod's own view only: nothing was mounted on the host, and its mount points were made in the pod's
    # mount namespace (issue 36), except /scratch, right under /, made on the host for the pod's life.
    assert not os.path.exists("/etc/settings/renamed")  # noqa: ASYNC240 - one stat in a test
    assert [p for p in absent if p != "/scratch" and os.path.lexists(p)] == []  # noqa: ASYNC240
    await kube.delete(PODS, "vols", namespace=NS)

    async def scratch_gone() -> bool:
        return not os.path.lexists("/scratch")  # noqa: ASYNC240

    if "/scratch" in absent:
        await eventually(scratch_gone, timeout=SLOW)


async def test_in_cluster_files_are_refreshed_from_a_config_map_change(kube: KubeClient) -> None:
    await kube.create(CONFIGMAPS, {"metadata": {"name": "live"}, "data": {"v": "one"}}, namespace=NS)
    script = "while ! grep -q two /cfg/v; do sleep 0.05; done; cat /cfg/v"
    spec = pod(
        "watcher",
        script,
        hostNetwork=True,
        restartPolicy="Never",
        volumes=[{"name": "c", "configMap": {"name": "live"}}],
        container={"volumeMounts": [{"name": "c", "mountPath": "/cfg"}]},
    )
    await kube.create(PODS, spec, namespace=NS)
    await eventually(lambda: phase_of(kube, "watcher", "Running"), timeout=SLOW)
    await kube.patch(CONFIGMAPS, "live", {"data": {"v": "two"}}, namespace=NS)
    done = await eventually(lambda: phase_of(kube, "watcher", "Succeeded", "Failed"), timeout=SLOW)
    assert done["status"]["phase"] == "Succeeded"
    assert await kube.read_log("watcher", namespace=NS) == "two\n"


def _status_of(p: dict[str, Any], name: str) -> dict[str, Any]:
    """The status of the pod's (init) container ``name``; empty while there is none."""
    status = p.get("status") or {}
    statuses = status.get("initContainerStatuses", []) + status.get("containerStatuses", [])
    found: dict[str, Any] = next((s for s in statuses if s["name"] == name), {})
    return found


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


async def test_a_native_sidecar_runs_beside_the_main_container_and_is_stopped_after_it(
    kube: KubeClient, cluster: LocalCluster, tmp_path: Any
) -> None:
    # An init container with restartPolicy Always is left running (started, ready, in initContainerStatuses);
    # the main container starts once its startup probe has passed; it is restarted when it exits, and stopped
    # once the main container has ended; its exit (143, SIGTERM) does not decide the pod's phase.
    go, up = tmp_path / "go", tmp_path / "up"
    sidecar = {
        "name": "helper",
        "image": "busybox:ignored",
        "restartPolicy": "Always",
        "command": ["sh", "-c", "exec sleep 120"],
        "startupProbe": {"exec": {"command": ["test", "-e", str(up)]}, "periodSeconds": 1, "failureThreshold": 60},
    }
    script = f"while [ ! -e {go} ]; do sleep 0.05; done; echo main-done"
    spec = pod("sided", script, hostNetwork=True, restartPolicy="Never", initContainers=[sidecar])
    await kube.create(PODS, spec, namespace=NS)

    async def probing() -> dict[str, Any] | None:
        p = await phase_of(kube, "sided", "Pending")
        side = _status_of(p, "helper") if p is not None else {}
        return p if "running" in side.get("state", {}) and not side.get("started") else None

    waiting = await eventually(probing, timeout=SLOW)
    assert "waiting" in _status_of(waiting, "main")["state"], waiting["status"]  # not before the probe passed
    up.touch()

    async def both_running(restarts: int) -> dict[str, Any] | None:
        p = await phase_of(kube, "sided", "Running")
        if p is None:
            return None
        side, main = _status_of(p, "helper"), _status_of(p, "main")
        ok = "running" in side.get("state", {}) and side["restartCount"] == restarts and "running" in main["state"]
        return p if ok else None

    running = await eventually(lambda: both_running(0), timeout=SLOW)
    side = _status_of(running, "helper")
    assert (side["started"], side["ready"]) == (True, True), side
    assert [c["status"] for c in running["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    first = cluster.container_pid(NS, "sided", "helper")
    assert first is not None
    os.kill(first, 9)  # the sidecar crashes: it is started again in the pod, the main container untouched
    await eventually(lambda: both_running(1), timeout=SLOW)
    second = cluster.container_pid(NS, "sided", "helper")
    assert second is not None and second != first

    go.touch()
    done = await eventually(lambda: phase_of(kube, "sided", "Succeeded", "Failed"), timeout=SLOW)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert _status_of(done, "main")["state"]["terminated"]["exitCode"] == 0
    stopped = _status_of(done, "helper")["state"]["terminated"]
    assert stopped["exitCode"] == 143, stopped  # SIGTERM, once the main container had ended
    assert not _pid_alive(second)
    assert await kube.read_log("sided", namespace=NS) == "main-done\n"


async def test_deleting_a_pod_stops_its_sidecar_too(kube: KubeClient, cluster: LocalCluster) -> None:
    # The sidecar is stopped after the main container, within the grace period; no process is left (the
    # cluster fixture checks) and the pod is gone.
    sidecar = {"name": "helper", "image": "busybox:ignored", "restartPolicy": "Always", "command": ["sleep", "60"]}
    spec = pod(
        "sided-gone", "exec sleep 60", hostNetwork=True, initContainers=[sidecar], terminationGracePeriodSeconds=5
    )
    await kube.create(PODS, spec, namespace=NS)
    await eventually(lambda: phase_of(kube, "sided-gone", "Running"), timeout=SLOW)
    pids = [cluster.container_pid(NS, "sided-gone", name) for name in ("helper", "main")]
    assert all(pids), pids
    await kube.delete(PODS, "sided-gone", namespace=NS)

    async def gone() -> bool:
        try:
            await kube.get(PODS, "sided-gone", namespace=NS)
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=SLOW)
    assert [pid for pid in pids if pid is not None and _pid_alive(pid)] == []


async def test_restart_all_containers_restarts_the_pod_whole_in_its_sandbox(kube: KubeClient) -> None:
    # The main container's rule RestartAllContainers on 137: its first run leaves a marker in the emptyDir and
    # exits 137; the pod restarts whole (the init container runs again: two lines), in the same sandbox (same
    # uid and pod IP, the emptyDir kept), and the second run finds the marker and succeeds.
    rule = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [137]}}
    init = {
        "name": "prepare",
        "image": "busybox:ignored",
        "command": ["sh", "-c", "echo ran >> /data/init-runs"],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    script = (
        'if [ -e /data/marker ]; then echo "marker kept, init ran $(wc -l < /data/init-runs) times"; exit 0; fi; '
        "touch /data/marker; exit 137"
    )
    spec = pod(
        "whole",
        script,
        hostNetwork=os.geteuid() != 0,  # as root in the pod network: its IP must be kept too
        restartPolicy="Never",
        initContainers=[init],
        volumes=[{"name": "data", "emptyDir": {}}],
        container={
            "restartPolicy": "Never",
            "restartPolicyRules": [rule],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        },
    )
    seen: list[dict[str, Any]] = []

    async def watch_until_done() -> None:
        async with contextlib.aclosing(
            kube.watch(PODS, namespace=NS, field_selector="metadata.name=whole", timeout_seconds=60)
        ) as events:
            async for event in events:
                seen.append(event.object)
                if (event.object.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    return

    watching = asyncio.create_task(watch_until_done())
    try:
        created = await kube.create(PODS, spec, namespace=NS)
        await asyncio.wait_for(asyncio.shield(watching), SLOW)
    finally:
        watching.cancel()
    done = seen[-1]
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["metadata"]["uid"] == created["metadata"]["uid"]
    ips = {p["status"]["podIP"] for p in seen if (p.get("status") or {}).get("podIP")}
    assert len(ips) == 1, ips
    assert await kube.read_log("whole", namespace=NS) == "marker kept, init ran 2 times\n"
    for name in ("prepare", "main"):
        assert _status_of(done, name)["restartCount"] == 1, done["status"]
        assert _status_of(done, name)["lastState"]["terminated"]["reason"] == "RestartingAllContainers"

    def restarting(p: dict[str, Any]) -> str | None:
        conds = (p.get("status") or {}).get("conditions") or []
        return next((c["status"] for c in conds if c["type"] == "AllContainersRestarting"), None)

    values = [restarting(p) for p in seen]
    changes = [v for i, v in enumerate(values) if v is not None and (i == 0 or values[i - 1] != v)]
    assert changes == ["True", "False"], values
    shown = next(p for p in seen if restarting(p) == "True")
    assert _status_of(shown, "main")["state"]["terminated"]["exitCode"] == 137, shown["status"]
    assert _status_of(shown, "main")["restartCount"] == 0
    assert next(c for c in shown["status"]["conditions"] if c["type"] == "AllContainersRestarting")["reason"] == (
        "RestartAllContainersStarted"
    )


async def test_downward_api_files_follow_the_pod_s_annotations(kube: KubeClient) -> None:
    # A downward API volume and a projected one show the pod's annotations; an annotation patched on the running
    # pod reaches both files (the in-place restart agent reads the controller's signals so).
    items = [{"path": "signal", "fieldRef": {"fieldPath": "metadata.annotations['example.com/signal']"}}]
    script = (
        "while ! grep -q go /dw/signal || ! grep -q go /pj/signal; do sleep 0.05; done; cat /dw/signal; echo; "
        "cat /pj/signal"
    )
    spec = pod(
        "signalled",
        script,
        hostNetwork=True,
        restartPolicy="Never",
        volumes=[
            {"name": "dw", "downwardAPI": {"items": items}},
            {"name": "pj", "projected": {"sources": [{"downwardAPI": {"items": items}}]}},
        ],
        container={"volumeMounts": [{"name": "dw", "mountPath": "/dw"}, {"name": "pj", "mountPath": "/pj"}]},
    )
    spec["metadata"]["annotations"] = {"example.com/signal": "wait"}
    await kube.create(PODS, spec, namespace=NS)
    await eventually(lambda: phase_of(kube, "signalled", "Running"), timeout=SLOW)
    patch = {"metadata": {"annotations": {"example.com/signal": "go"}}}
    await kube.patch(PODS, "signalled", patch, namespace=NS)
    done = await eventually(lambda: phase_of(kube, "signalled", "Succeeded", "Failed"), timeout=SLOW)
    assert done["status"]["phase"] == "Succeeded"
    assert await kube.read_log("signalled", namespace=NS) == "go\ngo\n"
