"""The container runtime for real (``runtime="container"``): pods whose image is in the local podman store run
in containers, observed over HTTP like any kubelet's pods.

Each test runs a 1-node embedded cluster whose node runs containers with podman (and processes for the other
pods) and asserts what a client sees: who the container runs as, its filesystem and volumes, exit codes,
restarts and logs, probes, graceful deletion, Services reached from a pod network namespace, and that no
container outlives the node, even a SIGKILLed one. The image is the Debian base ``make image`` builds on
(cached in podman's store; built here when missing). Skipped only when podman is not installed.
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubedl_local import LocalCluster
from kubedl_local.image import BASE_IMAGE, INSTALL_HINT, Engine, ensure_base_image
from kubedl_local.node.containers import OWNER_LABEL, PodmanRuntime
from kubedl_local.node.process import ProcessRuntime
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import CONFIGMAPS, EVENTS, PODS, SERVICES
from tests.local.conftest import eventually

pytestmark = pytest.mark.skipif(
    shutil.which("podman") is None, reason=f"podman is not installed ({INSTALL_HINT}): no container can run"
)
requires_root = pytest.mark.skipif(os.geteuid() != 0, reason="pod network namespaces need root")

NS = "default"
SLOW = 60.0
ENGINE = Engine("podman")
ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def image() -> str:
    """The debootstrapped Debian base (sh, coreutils, python3), as ``make image`` makes and caches it."""
    ensure_base_image(ENGINE, out=io.StringIO())
    return BASE_IMAGE


def _network() -> dict[str, str]:
    """A bridge and pod CIDR of our own: other clusters (other test runs) may be up on this machine."""
    return {
        "process_bridge": f"kdc{uuid.uuid4().hex[:6]}",
        "pod_cidr": f"10.{random.randint(200, 250)}.{random.randint(0, 255)}.0/24",
    }


@pytest.fixture
async def cluster(image: str) -> AsyncIterator[LocalCluster]:
    async with LocalCluster(runtime="container", **_network()) as local:
        yield local
    left = _containers(f"label={OWNER_LABEL}={_owner()}")
    assert left == [], f"containers outlived the cluster: {left}"


@pytest.fixture
async def kube(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    async with KubeClient(configuration=cluster.configuration) as client:
        yield client


def _owner() -> str:
    with open(f"/proc/{os.getpid()}/stat") as f:
        started = f.read().rsplit(")", 1)[1].split()[19]
    return f"{os.getpid()}:{started}"


def _containers(*filters: str) -> list[str]:
    args = [a for f in filters for a in ("--filter", f)]
    out = subprocess.run(
        ENGINE.command("ps", "--all", *args, "--format", "{{.Names}}"), capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def _podman(*command: str) -> None:
    subprocess.run(command, capture_output=True, check=False)


def pod(name: str, image: str, script: str, *, host_network: bool = not ROOT, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": image, "command": ["sh", "-c", script]}
    container.update(spec.pop("container", {}))
    body = {"hostNetwork": host_network, "terminationGracePeriodSeconds": 2, "containers": [container], **spec}
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": body}


async def phase_of(kube: KubeClient, name: str, *phases: str) -> dict[str, Any] | None:
    p = await kube.get(PODS, name, namespace=NS)
    return p if (p.get("status") or {}).get("phase") in phases else None


async def status_of(kube: KubeClient, name: str) -> dict[str, Any]:
    p = await kube.get(PODS, name, namespace=NS)
    statuses = (p.get("status") or {}).get("containerStatuses") or [{}]
    result: dict[str, Any] = statuses[0]
    return result


async def ready(kube: KubeClient, name: str, value: str = "True") -> bool:
    p = await kube.get(PODS, name, namespace=NS)
    return any(c["type"] == "Ready" and c["status"] == value for c in (p.get("status") or {}).get("conditions") or [])


async def test_a_pod_runs_from_its_image_as_its_security_context_says(kube: KubeClient, image: str) -> None:
    await kube.create(CONFIGMAPS, {"metadata": {"name": "settings"}, "data": {"mode": "fast"}}, namespace=NS)
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    script = (
        'id -u; id -g; id -G; touch /root-fs 2>/dev/null || echo "root fs read-only"; '
        "grep NoNewPrivs /proc/self/status | tr -d '\\t'; grep CapEff /proc/self/status | tr -d '\\t'; "
        'echo "$POD_NAME $GREETING $KUBERNETES_SERVICE_PORT"; '
        f'cat {sa}/namespace; echo; stat -c "%u %a" {sa}/..data/token; '
        f"head -c 2 {sa}/token; echo; cat /etc/settings/mode; echo; touch /etc/settings/x 2>/dev/null || echo cm ro; "
        "echo scratch > /scratch/f && cat /scratch/f; cat /etc/hostname; "
        "echo bye > /dev/termination-log; exit 3"
    )
    security = {
        "runAsUser": 1000,
        "runAsGroup": 3000,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    spec = pod(
        "locked",
        image,
        script,
        restartPolicy="Never",
        securityContext={"runAsNonRoot": True, "supplementalGroups": [4000]},
        volumes=[{"name": "cfg", "configMap": {"name": "settings"}}, {"name": "scratch", "emptyDir": {}}],
        container={
            "securityContext": security,
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "GREETING", "value": "hi-$(POD_NAME)"},
            ],
            "volumeMounts": [
                {"name": "cfg", "mountPath": "/etc/settings"},
                {"name": "scratch", "mountPath": "/scratch"},
            ],
        },
    )
    await kube.create(PODS, spec, namespace=NS)
    done = await eventually(lambda: phase_of(kube, "locked", "Failed", "Succeeded"), timeout=SLOW)
    log = await kube.read_log("locked", namespace=NS)
    status = done["status"]["containerStatuses"][0]
    assert done["status"]["phase"] == "Failed", log
    term = status["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term.get("message")) == (3, "Error", "bye\n")
    assert status["containerID"].startswith("podman://") and status["imageID"].startswith("sha256:")
    hostname = "locked" if not spec["spec"]["hostNetwork"] else socket.gethostname()
    assert log.splitlines() == [
        "1000",
        "3000",
        "3000 4000",
        "root fs read-only",
        "NoNewPrivs:1",
        "CapEff:0000000000000000",
        "locked hi-locked 443",  # downward API, $(VAR), and the kubernetes Service's variables
        "default",
        "1000 600",  # the token belongs to the pod's user, as the kubelet's fsUser rule makes it
        "ey",
        "fast",
        "cm ro",  # ConfigMap volumes are read-only whatever the mount says
        "scratch",
        hostname,
    ], log
    events = {e["reason"] for e in (await kube.list(EVENTS, namespace=NS)).items}
    assert {"Pulled", "Created", "Started"} <= events


async def test_runtime_is_chosen_per_pod_by_the_image_store(kube: KubeClient, image: str) -> None:
    in_store = pod("in-store", image, "cat /etc/debian_version", host_network=True, restartPolicy="Never")
    await kube.create(PODS, in_store, namespace=NS)
    elsewhere = pod(
        "not-in-store", "kubedl-py-test/not-here:1", f"{sys.executable} -c 'print(1)'", restartPolicy="Never"
    )
    await kube.create(PODS, elsewhere, namespace=NS)
    a = await eventually(lambda: phase_of(kube, "in-store", "Succeeded", "Failed"), timeout=SLOW)
    b = await eventually(lambda: phase_of(kube, "not-in-store", "Succeeded", "Failed"), timeout=SLOW)
    assert a["status"]["containerStatuses"][0]["containerID"].startswith("podman://")
    assert a["status"]["podIP"] == a["status"]["hostIP"]  # --network host
    assert b["status"]["containerStatuses"][0]["containerID"].startswith("process://")
    assert (await kube.read_log("in-store", namespace=NS)).strip()[:2] == "12"  # Debian bookworm
    assert await kube.read_log("not-in-store", namespace=NS) == "1\n"


async def test_run_as_non_root_refuses_an_image_that_runs_as_root(kube: KubeClient, image: str) -> None:
    spec = pod("rooted", image, "id -u", securityContext={"runAsNonRoot": True})
    await kube.create(PODS, spec, namespace=NS)

    async def refused() -> dict[str, Any] | None:
        waiting = ((await status_of(kube, "rooted")).get("state") or {}).get("waiting") or {}
        return waiting if waiting.get("reason") == "CreateContainerConfigError" else None

    waiting = await eventually(refused, timeout=SLOW)
    assert waiting["message"].startswith('container has runAsNonRoot and image will run as root (pod: "rooted_default(')
    assert _containers("label=io.kubernetes.pod.name=rooted") == []  # refused before anything was created


async def test_exit_codes_restarts_start_errors_and_previous_logs(kube: KubeClient, image: str) -> None:
    # The emptyDir outlives the container instances: the third start succeeds.
    script = 'n=$(ls /data | wc -l); touch /data/$n; echo "run $n"; [ "$n" -ge 2 ] || exit 3'
    spec = pod(
        "flaky",
        image,
        script,
        restartPolicy="OnFailure",
        volumes=[{"name": "data", "emptyDir": {}}],
        container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
    )
    await kube.create(PODS, spec, namespace=NS)
    done = await eventually(lambda: phase_of(kube, "flaky", "Succeeded", "Failed"), timeout=SLOW)
    status = done["status"]["containerStatuses"][0]
    assert done["status"]["phase"] == "Succeeded"
    assert status["restartCount"] == 2
    assert (status["lastState"]["terminated"]["exitCode"], status["lastState"]["terminated"]["reason"]) == (3, "Error")
    assert await kube.read_log("flaky", namespace=NS) == "run 2\n"
    assert await kube.read_log("flaky", namespace=NS, previous=True) == "run 1\n"

    bad = pod("nothing-to-run", image, "", restartPolicy="Never", container={"command": ["/no/such/program"]})
    await kube.create(PODS, bad, namespace=NS)
    failed = await eventually(lambda: phase_of(kube, "nothing-to-run", "Failed"), timeout=SLOW)
    term = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (128, "StartError")
    assert "/no/such/program" in term["message"]


async def test_probes_in_a_container_flip_ready_and_restart_it(kube: KubeClient, image: str, tmp_path: Path) -> None:
    """Exec probes run inside the container (``podman exec``), reading files the test controls on the host."""
    control = tmp_path / "control"
    control.mkdir()
    (control / "alive").write_text("")
    spec = pod(
        "probed",
        image,
        "exec sleep 300",
        volumes=[{"name": "control", "hostPath": {"path": str(control)}}],
        container={
            "volumeMounts": [{"name": "control", "mountPath": "/control"}],
            "readinessProbe": {
                "exec": {"command": ["cat", "/control/ready"]},
                "periodSeconds": 1,
                "failureThreshold": 1,
            },
            "livenessProbe": {
                "exec": {"command": ["test", "-e", "/control/alive"]},
                "periodSeconds": 1,
                "failureThreshold": 2,
            },
        },
    )
    await kube.create(PODS, spec, namespace=NS)
    await eventually(lambda: phase_of(kube, "probed", "Running"), timeout=SLOW)
    assert not await ready(kube, "probed")
    (control / "ready").write_text("")
    await eventually(lambda: ready(kube, "probed"), timeout=SLOW)
    (control / "ready").unlink()
    await eventually(lambda: ready(kube, "probed", "False"), timeout=SLOW)
    first = (await status_of(kube, "probed"))["containerID"]
    (control / "alive").unlink()

    async def restarted() -> dict[str, Any] | None:
        status = await status_of(kube, "probed")
        return status if status.get("restartCount", 0) >= 1 and "running" in status.get("state", {}) else None

    status = await eventually(restarted, timeout=SLOW)
    (control / "alive").write_text("")
    assert status["lastState"]["terminated"]["containerID"] == first != status["containerID"]
    reasons = [(e["reason"], e["message"]) for e in (await kube.list(EVENTS, namespace=NS)).items]
    assert ("Killing", "Container main failed liveness probe, will be restarted") in reasons
    assert any(r == "Unhealthy" and m.startswith("Readiness probe failed: cat: /control/ready") for r, m in reasons)


async def test_graceful_deletion_signals_the_container_then_kills_it(
    kube: KubeClient, image: str, tmp_path: Path
) -> None:
    control = tmp_path / "control"
    control.mkdir(mode=0o777)
    volumes = [{"name": "control", "hostPath": {"path": str(control)}}]
    mounts = {"volumeMounts": [{"name": "control", "mountPath": "/control"}]}
    polite = "trap 'echo term > /control/polite; exit 0' TERM; echo up; while true; do sleep 0.1; done"
    stubborn = "trap '' TERM; echo up; while true; do sleep 0.1; done"
    await kube.create(PODS, pod("polite", image, polite, volumes=volumes, container=mounts), namespace=NS)
    await kube.create(PODS, pod("stubborn", image, stubborn, terminationGracePeriodSeconds=1), namespace=NS)
    for name in ("polite", "stubborn"):
        await eventually(lambda n=name: _log_has(kube, n, "up"), timeout=SLOW)  # type: ignore[misc]
    started = time.monotonic()
    await asyncio.gather(kube.delete(PODS, "polite", namespace=NS), kube.delete(PODS, "stubborn", namespace=NS))
    for name in ("polite", "stubborn"):
        await eventually(lambda n=name: _gone(kube, n), timeout=SLOW)  # type: ignore[misc]
    assert (control / "polite").read_text() == "term\n"
    assert 0.9 <= time.monotonic() - started < 20
    assert (
        _containers("label=io.kubernetes.pod.name=polite") == _containers("label=io.kubernetes.pod.name=stubborn") == []
    )


@requires_root
async def test_pods_reach_a_container_through_its_service_on_the_same_port(kube: KubeClient, image: str) -> None:
    """The server listens on 0.0.0.0 on its Service's own port inside its pod netns (the Service proxy must not
    hold that port there), and a client container in another pod netns reaches it by Service name."""
    server = "echo hello > /tmp/index.html && cd /tmp && exec python3 -m http.server 8080"
    probe = {"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": 1}
    await kube.create(
        PODS, pod("web", image, server, host_network=False, container={"readinessProbe": probe}), namespace=NS
    )
    svc = {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080}]}}
    await kube.create(SERVICES, svc, namespace=NS)
    await eventually(lambda: ready(kube, "web"), timeout=SLOW)
    fetch = "python3 -c \"import urllib.request as u; print(u.urlopen('http://web.default.svc:8080/index.html').read().decode())\""
    await kube.create(PODS, pod("client", image, fetch, host_network=False, restartPolicy="OnFailure"), namespace=NS)
    await eventually(lambda: phase_of(kube, "client", "Succeeded"), timeout=SLOW)
    assert await kube.read_log("client", namespace=NS) == "hello\n\n"
    web = await kube.get(PODS, "web", namespace=NS)
    assert web["status"]["podIP"] != web["status"]["hostIP"]


async def _log_has(kube: KubeClient, name: str, text: str) -> bool:
    try:
        return text in await kube.read_log(name, namespace=NS)
    except Exception:
        return False


async def _gone(kube: KubeClient, name: str) -> bool:
    try:
        await kube.get(PODS, name, namespace=NS)
    except NotFound:
        return True
    return False


# --------------------------------------------------------------------------------------------- no leftovers


@pytest.fixture
def local_up(image: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``kubedl-py local up --runtime container`` in a process of its own (to be SIGKILLed)."""
    kubeconfig = tmp_path / "kubeconfig"
    network = _network()
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubedl_py.cli",
            "local",
            "up",
            "--runtime",
            "container",
            "--no-controller",
            "--kubeconfig",
            str(kubeconfig),
            # its state under tmp_path: a SIGKILLed cluster cannot remove a temporary directory of its own
            "--data-dir",
            str(tmp_path / "data"),
            "--bridge",
            network["process_bridge"],
            "--pod-cidr",
            network["pod_cidr"],
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not kubeconfig.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "up.log").read_text()
            time.sleep(0.05)
        yield proc, kubeconfig
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.close()
        subprocess.run(["ip", "link", "del", network["process_bridge"]], capture_output=True, check=False)


async def test_no_container_outlives_a_sigkilled_node_agent(
    local_up: tuple[subprocess.Popen[bytes], Path], image: str
) -> None:
    proc, kubeconfig = local_up
    async with KubeClient(kubeconfig=kubeconfig) as kube:
        await kube.create(PODS, pod("survivor", image, "exec sleep 300", host_network=True), namespace=NS)
        running = await eventually(lambda: phase_of(kube, "survivor", "Running"), timeout=SLOW)
    engine_id = running["status"]["containerStatuses"][0]["containerID"].removeprefix("podman://")
    assert _containers(f"id={engine_id}")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + SLOW
    while _containers(f"id={engine_id}"):
        assert time.monotonic() < deadline, "the container outlived its SIGKILLed node agent"
        await asyncio.sleep(0.2)


async def test_an_agent_removes_containers_whose_agent_is_gone(image: str, tmp_path: Path) -> None:
    """Belt and braces for an agent killed together with its watchdog: the next agent removes what it left."""
    names = {"dead": f"kdtest-orphan-{uuid.uuid4().hex[:6]}", "alive": f"kdtest-kept-{uuid.uuid4().hex[:6]}"}
    owners = {"dead": f"{2**22 + 1}:1", "alive": _owner()}  # no such pid: pid_max is at most 2**22
    for key, name in names.items():
        create = ENGINE.command(
            "create", "--pull=never", "--name", name, "--label", f"{OWNER_LABEL}={owners[key]}", image, "true"
        )
        _podman(*create)
    try:
        async with ProcessRuntime(tmp_path) as registry:
            runtime = PodmanRuntime(registry)
            await runtime.start()  # what an agent does first
            await runtime.close()
        assert _containers(f"name={names['dead']}") == []
        assert _containers(f"name={names['alive']}") == [names["alive"]]
    finally:
        # one name at a time: podman 4.3's `rm --force A B` removes nothing when A is already gone
        for name in names.values():
            _podman(*ENGINE.command("rm", "--force", name))
