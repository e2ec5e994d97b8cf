"""Cluster DNS through per-pod hosts files: rendering, in-place updates, and what real resolvers see."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kubedl_local.node.process import (
    ContainerSpec,
    HostsFiles,
    Mount,
    PodIdentity,
    PodRef,
    ProcessRuntime,
    Sandbox,
    ServiceRecord,
    check_mount_sandbox,
    render_hosts,
    wrap_argv,
)
from tests.local_process.conftest import requires_root, wait_until

C_RESOLVER = r"""
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    for (;;) {
        struct addrinfo hints, *res;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        char ip[INET_ADDRSTRLEN] = "none";
        if (getaddrinfo(argv[1], "80", &hints, &res) == 0) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, ip, sizeof ip);
            freeaddrinfo(res);
        }
        printf("c %s\n", ip);
        fflush(stdout);
        usleep(20000);
    }
}
"""

PY_RESOLVER = """
import socket, sys, time
while True:
    try:
        ip = socket.getaddrinfo(sys.argv[1], 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror:
        ip = "none"
    print("py", ip, flush=True)
    time.sleep(0.02)
"""


def test_render_lists_all_spellings_localhost_and_own_hostname() -> None:
    text = render_hosts(
        [
            ServiceRecord(namespace="ns", name="job-master-0", ips=["127.1.0.5"]),
            ServiceRecord(namespace="ns", name="headless", ips=["10.244.0.2", "10.244.0.3"]),
        ],
        pod=PodIdentity(hostname="job-worker-0", ip="10.244.0.9"),
        cluster_domain="example.org",
    )
    lines = text.splitlines()
    assert "127.0.0.1\tlocalhost" in lines
    assert "10.244.0.9\tjob-worker-0" in lines
    assert "127.1.0.5\tjob-master-0 job-master-0.ns job-master-0.ns.svc job-master-0.ns.svc.example.org" in lines
    assert sum(1 for ln in lines if ln.endswith("headless.ns.svc.example.org")) == 2


def test_updates_keep_the_inode_and_never_leave_a_torn_file(tmp_path: Path) -> None:
    hosts = HostsFiles(tmp_path)
    path = hosts.pod_file("uid1", PodIdentity(hostname="p", ip="127.0.0.1"))
    inode = path.stat().st_ino
    many = [ServiceRecord(namespace="ns", name=f"svc{i}", ips=[f"127.1.0.{i}"]) for i in range(1, 50)]
    hosts.set_services(many)
    assert path.stat().st_ino == inode and "svc49.ns.svc.cluster.local" in path.read_text()
    hosts.set_services(many[:1])  # shrinking: truncated to the exact new content
    assert path.stat().st_ino == inode
    assert path.read_text() == render_hosts(many[:1], pod=PodIdentity(hostname="p", ip="127.0.0.1"))
    hosts.remove_pod("uid1")
    assert not path.exists()


def test_nsswitch_consults_files_first() -> None:
    # The design relies on "files" being the first hosts source (Debian default); say so if not.
    conf = Path("/etc/nsswitch.conf")
    if not conf.exists():
        pytest.skip("no /etc/nsswitch.conf (musl or minimal image): musl always reads /etc/hosts first")
    hosts_line = next(ln for ln in conf.read_text().splitlines() if ln.startswith("hosts:"))
    assert hosts_line.split()[1] == "files", hosts_line


@pytest.fixture(params=[pytest.param(False, marks=requires_root, id="root-mountns"), pytest.param(True, id="userns")])
def rootless(request: pytest.FixtureRequest) -> bool:
    mode = bool(request.param)
    reason = check_mount_sandbox(rootless=mode)
    if reason is not None:
        pytest.skip(f"mount sandbox unavailable: {reason}")
    return mode


async def test_running_processes_see_hosts_updates(runtime: ProcessRuntime, tmp_path: Path, rootless: bool) -> None:
    hosts = HostsFiles(tmp_path / "hosts")
    hosts.set_services([ServiceRecord(namespace="ns", name="svc", ips=["127.1.0.10"])])
    hosts_file = hosts.pod_file("pod1", PodIdentity(hostname="pod1", ip="127.0.0.1"))
    sandbox = Sandbox(hosts_file=hosts_file, hostname="pod1", rootless=rootless)
    p = PodRef(namespace="ns", name="pod1", uid=uuid.uuid4().hex)
    name = "svc.ns.svc.cluster.local"

    loop = f"while :; do echo getent $(getent hosts {name} svc.ns svc | cut -d' ' -f1); sleep 0.02; done"
    specs = [
        ContainerSpec(name="getent", command=["/bin/sh", "-c", loop]),
        ContainerSpec(name="py", command=[sys.executable, "-c", PY_RESOLVER, "svc.ns"]),
        ContainerSpec(name="hostname", command=["hostname"]),
    ]
    if shutil.which("gcc"):
        exe = tmp_path / "resolve"
        src = tmp_path / "resolve.c"
        src.write_text(C_RESOLVER)
        gcc = await asyncio.create_subprocess_exec("gcc", "-O0", "-o", str(exe), str(src))
        assert await gcc.wait() == 0
        specs.append(ContainerSpec(name="c", command=[str(exe), "svc"]))
    containers = [await runtime.start_container(p, s, sandbox=sandbox) for s in specs]
    resolvers = [c for c in containers if c.spec.name != "hostname"]

    def all_see(ip: str) -> bool:
        return all(any(ln.text.endswith(f" {ip}") for ln in c.log.read(tail_lines=3)) for c in resolvers)

    await wait_until(lambda: all_see("127.1.0.10"), what="initial clusterIP resolved")
    # The pod's UTS namespace carries its hostname.
    hostname = containers[2]
    await hostname.wait()
    assert [ln.text for ln in hostname.log.read()] == ["pod1"]

    hosts.set_services([ServiceRecord(namespace="ns", name="svc", ips=["127.1.0.77"])])
    await wait_until(lambda: all_see("127.1.0.77"), what="updated clusterIP resolved by running processes")
    for c in containers:
        await c.stop(grace_seconds=1)
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed: the C getaddrinfo check did not run (getent and Python did)")


def test_bind_mount_does_not_leak_to_the_host(tmp_path: Path, rootless: bool) -> None:
    fake = tmp_path / "hosts"
    fake.write_text("127.1.9.9\tleak-check\n")
    argv = wrap_argv(["getent", "hosts", "leak-check"], Sandbox(hosts_file=fake, rootless=rootless))
    inside = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    assert inside.stdout.split() == ["127.1.9.9", "leak-check"], inside.stderr
    host = subprocess.run(["getent", "hosts", "leak-check"], capture_output=True, timeout=10, check=False)
    assert host.returncode != 0
    with open("/proc/self/mountinfo") as f:
        assert str(fake) not in f.read()
    assert os.stat("/etc/hosts").st_ino != fake.stat().st_ino


def test_a_missing_mount_point_is_made_in_the_pod_only(tmp_path: Path, rootless: bool) -> None:
    """A pod's service account token goes to ``/var/run/secrets/kubernetes.io/serviceaccount``; a mount point
    missing on the host is made inside the pod's mount namespace, never on the host (issue 36: a leftover
    directory there made ``import kubeflow.training`` fail on the host). The rest of ``/run`` and ``/etc`` is
    still the host's, writable where it was."""
    token = tmp_path / "token"
    token.mkdir()
    (token / "namespace").write_text("team-a\n")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("w-0 slots=1\n")
    unique = uuid.uuid4().hex[:8]
    account = f"/var/run/kubedl-test-{unique}/kubernetes.io/serviceaccount"
    config = f"/etc/kubedl-test-{unique}/hostfile"
    probe = f"/run/lock/kubedl-test-{unique}"
    script = f"cat {account}/namespace {config} && head -1 /etc/passwd && : > {probe}"
    sandbox = Sandbox(mounts=(Mount(token, account, True), Mount(hostfile, config, True)), rootless=rootless)
    try:
        argv = wrap_argv(["sh", "-c", script], sandbox)
        inside = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)
        assert inside.returncode == 0, inside.stderr
        assert inside.stdout.splitlines()[:2] == ["team-a", "w-0 slots=1"]
        assert inside.stdout.splitlines()[2].startswith("root:")
        assert not os.path.lexists(f"/run/kubedl-test-{unique}")
        assert not os.path.lexists(f"/etc/kubedl-test-{unique}")
        assert os.path.exists(probe)  # written through to the host's /run/lock
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(probe)
