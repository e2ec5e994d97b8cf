"""Pod-network mode (root): per-pod netns and IPs on a bridge, Services reachable from inside pods."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from kubedl_local.node.process import (
    NODE_IP,
    Backend,
    ContainerProcess,
    ContainerSpec,
    PodNetwork,
    PodNetworkUnavailable,
    PodRef,
    ProcessNode,
    ServiceInfo,
    ServicePort,
)
from kubedl_local.node.process.sandbox import NETNS_DIR
from tests.local_process.conftest import free_port, random_cluster_ip, requires_root, wait_until

REPO = Path(__file__).resolve().parents[2]

SERVER = """
import socket, sys
s = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(socket.gethostname().encode())
    c.close()
"""

# Connects to each host:port argument (retrying briefly) and prints "<target> <answer>".
CLIENT = """
import socket, sys, time
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    deadline = time.monotonic() + 5
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2) as c:
                print(target, c.recv(100).decode() or "<closed>", flush=True)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                print(target, "ERROR", e, flush=True)
                break
            time.sleep(0.05)
"""


def netns_names(prefix: str) -> set[str]:
    return {p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix)} if NETNS_DIR.is_dir() else set()


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


@requires_root
async def test_pods_share_a_port_and_reach_each_other_and_services(tmp_path: Path) -> None:
    services: dict[ServicePort, Backend] = {}
    tag = random.randint(0, 0xFFFF)
    bridge = f"kdt{tag:04x}"
    node = ProcessNode(
        tmp_path / "node",
        resolver=lambda sp: [services[sp]] if sp in services else [],
        pod_cidr=f"10.251.{random.randint(0, 255)}.0/24",
        bridge=bridge,
    )
    await node.start()
    try:
        refs = {n: PodRef(namespace="ns", name=n, uid=uuid.uuid4().hex) for n in ("pod-a", "pod-b", "host-pod")}
        a = await node.create_pod_sandbox(refs["pod-a"], host_network=False)
        b = await node.create_pod_sandbox(refs["pod-b"], host_network=False)
        h = await node.create_pod_sandbox(refs["host-pod"], host_network=True)
        assert a.ip != b.ip and h.ip == NODE_IP and a.interface is not None
        assert a.interface.netns in netns_names(f"{bridge}-")

        host_port = free_port()
        servers: list[ContainerProcess] = []
        for sb, port in ((a, 8080), (b, 8080), (h, host_port)):  # two pods on the same port
            spec = ContainerSpec(name="server", command=[sys.executable, "-c", SERVER, str(port)])
            servers.append(await node.start_container(sb, spec))
        for c in servers:
            await wait_until(lambda c=c: any(ln.text == "listening" for ln in c.log.read()), what="server up")

        web_ip, host_ip = random_cluster_ip(), random_cluster_ip()
        services[ServicePort("ns", "web-b", 80)] = Backend(b.ip, 8080)
        services[ServicePort("ns", "hostsvc", 81)] = Backend(NODE_IP, host_port)
        await node.set_services(
            [
                ServiceInfo(namespace="ns", name="web-b", cluster_ip=web_ip, ports=[80]),
                ServiceInfo(namespace="ns", name="hostsvc", cluster_ip=host_ip, ports=[81]),
                ServiceInfo(namespace="ns", name="peers", cluster_ip=None, endpoint_ips=[a.ip, b.ip]),
            ]
        )

        # From the host: both pods answer on the same port at their own IPs.
        for ip, name in ((a.ip, "pod-a"), (b.ip, "pod-b")):
            reader, writer = await asyncio.open_connection(ip, 8080)
            assert await asyncio.wait_for(reader.read(), 5) == name.encode()
            writer.close()

        # From inside pod-a: a pod by IP, Services by DNS name (proxy listening inside the pod netns), a
        # host-network backend through a Service, the headless name, and the host at the gateway IP.
        targets = [
            f"{b.ip}:8080",
            "web-b.ns.svc.cluster.local:80",
            "hostsvc:81",
            "peers.ns.svc:8080",
            f"{a.interface.gateway}:{host_port}",
        ]
        client = await node.start_container(
            a, ContainerSpec(name="client", command=[sys.executable, "-c", CLIENT, *targets])
        )
        await client.wait()
        answers = {ln.text.split(" ", 1)[0]: ln.text.split(" ", 1)[1] for ln in client.log.read()}
        hostname = os.uname().nodename
        assert answers == {
            targets[0]: "pod-b",
            targets[1]: "pod-b",
            targets[2]: hostname,
            targets[3]: "pod-a",  # the first headless line: pod-a's own IP
            targets[4]: hostname,
        }

        # A host-network pod uses the same names and clusterIPs.
        host_client = await node.start_container(
            h, ContainerSpec(name="client", command=[sys.executable, "-c", CLIENT, "web-b.ns:80"])
        )
        await host_client.wait()
        assert [ln.text for ln in host_client.log.read()] == ["web-b.ns:80 pod-b"]

        await node.remove_pod_sandbox(a, grace_seconds=1)
        assert a.interface.netns not in netns_names(f"{bridge}-")
        assert not servers[0].running
    finally:
        await node.close(grace_seconds=1)
    assert netns_names(f"{bridge}-") == set()
    assert not link_exists(bridge)


@requires_root
async def test_stale_network_of_a_crashed_run_is_removed_and_live_one_protected() -> None:
    tag = random.randint(0, 0xFFFF)
    bridge, cidr = f"kdt{tag:04x}", f"10.252.{random.randint(0, 255)}.0/24"
    crashed = PodNetwork(bridge=bridge, cidr=cidr)
    await crashed.start()
    fresh: PodNetwork | None = None
    try:
        pod = await crashed.create_pod("x")
        assert link_exists(pod.host_veth)
        # Simulate the crash: the lock dies with the process, the kernel objects stay behind.
        assert crashed._lock_fd is not None
        os.close(crashed._lock_fd)
        crashed._lock_fd = None
        fresh = PodNetwork(bridge=bridge, cidr=cidr)
        await fresh.start()
        assert netns_names(f"{bridge}-") == set() and not link_exists(pod.host_veth)
        with pytest.raises(PodNetworkUnavailable, match="in use by another running cluster"):
            await PodNetwork(bridge=bridge, cidr=cidr).start()
    finally:
        if fresh is not None:
            await fresh.close()
        else:
            await crashed.cleanup_stale()
    assert not link_exists(bridge)


@requires_root
async def test_overlapping_pod_cidr_is_refused() -> None:
    with pytest.raises(PodNetworkUnavailable, match="overlaps"):
        await PodNetwork(bridge=f"kdt{random.randint(0, 0xFFFF):04x}", cidr="127.0.0.0/16").start()


@requires_root
def test_without_root_pod_network_refuses_and_host_mode_dns_works() -> None:
    # Run as "nobody": the pod network must refuse with a clear message, the hosts sandbox must still work.
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    with tempfile.TemporaryDirectory() as d:  # pytest's tmp_path is private to root; "nobody" must read it
        Path(d).chmod(0o755)
        hosts = Path(d) / "hosts"
        hosts.write_text("127.1.3.4\tsvc.ns.svc.cluster.local\n")
        _run_as_nobody(hosts)


def _run_as_nobody(hosts: Path) -> None:
    script = f"""
import asyncio, subprocess
from pathlib import Path
from kubedl_local.node.process import PodNetwork, PodNetworkUnavailable, Sandbox, wrap_argv
try:
    asyncio.run(PodNetwork(bridge="kdtnoroot").start())
except PodNetworkUnavailable as e:
    print("REFUSED", e)
argv = wrap_argv(["getent", "hosts", "svc.ns.svc.cluster.local"], Sandbox(hosts_file=Path("{hosts}")))
print("DNS", subprocess.run(argv, capture_output=True, text=True).stdout.split()[0])
"""
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run(
        [*as_nobody, sys.executable, "-c", "import kubedl_py"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    if probe.returncode != 0:
        # The checkout (or its .venv) sits where user "nobody" may not read, e.g. under a 0700 temp dir.
        pytest.skip(f"user nobody cannot run {sys.executable} with this checkout: {probe.stderr.strip()[-200:]}")
    out = subprocess.run(
        [*as_nobody, sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    lines = out.stdout.splitlines()
    assert lines, out.stderr
    assert lines[0].startswith("REFUSED pod-network pods need root"), out.stderr
    assert "host-network" in lines[0]
    assert lines[1] == "DNS 127.1.3.4", out.stderr
