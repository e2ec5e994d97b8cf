"""``local up --runtime kubelet`` leaves the machine as it found it, even when it is SIGKILLed, and refuses a
second real node.

The machine's state (``HostState``: iptables and nftables rules, sysctls, mounts, cgroups, network
interfaces, the fixed paths) is captured before, while the node runs pods that change it the most (a
host-network pod with a hostPort, a pod on the pod network with a hostPort, which the CNI portmap plugin
forwards, and a NodePort Service, which kube-proxy forwards), and after. "While" must differ from "before"
(else the comparison would prove nothing); "after" must equal "before".

The path: a first ``local up`` (the CLI, as a user runs it) starts the node; a second one is refused with a
message naming the holder; the first is SIGKILLed (its kubelet, containerd and kube-proxy die with it, the
pods' containers and containerd's shims do not); a third start finds the journal, puts the machine back
first (saying so in its log), runs, and stops on SIGTERM, restoring the machine once more.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubedl_local.image import BASE_IMAGE
from kubedl_local.kubernetes.real_node import HostState
from kubedl_local.kubernetes.real_node.host import KUBEPODS, _pod_processes
from kubedl_local.kubernetes.real_node.images import pause_image
from kubedl_local.kubernetes.real_node.journal import JOURNAL_PATH, MachineLock, replay_leftovers
from tests.node.conftest import KUBECTL, LOCK_WAIT, REPO, require_node_tier

pytestmark = pytest.mark.timeout(LOCK_WAIT + 900)

#: what other programs do on a development machine shared with other work while this test runs, by their
#: names: podman's builds (buildah cgroups) and container networks (netavark's chains and bridge), and
#: kubedl-py's own process runtime in other test runs (its cgroups ``kubedl-py-<pid>-*``, bridges and veths
#: ``kd*``/``kubedl0``, network namespaces in /run/netns). None of these names is one the real node uses
#: (kubepods, kubedl-cni0, veth*, cni-*); on a CI machine, where nothing else runs, none of them appears.
OTHERS = re.compile(
    r"^(cgroup (added|removed): [^/ ]+/(buildah-|libpod|kubedl-py-\d+-)"
    r"|network interface (added|removed): (kd[a-z]|kubedl0|podman\d)"
    r"|mount (added|removed): /run/netns/(kd|kubedl0|netns-)"
    r"|(iptables \(ipv[46]\)|nftables) (added|removed): .*(NETAVARK|netavark))"
)
FORWARDING = re.compile(r"^sysctl net\.ipv4\.(ip_forward|conf\.[^.]+\.forwarding):")


def node_changes(before: HostState, after: HostState) -> list[str]:
    """The differences between two snapshots, but what other programs did meanwhile (:data:`OTHERS`; and IP
    forwarding when another container network appeared, which turns it on for itself)."""
    changes = before.differences(after)
    netavark = any(OTHERS.match(change) and "NETAVARK" in change.upper() for change in changes)
    return [c for c in changes if not OTHERS.match(c) and not (netavark and FORWARDING.match(c))]


def local_up(kubeconfig: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubedl_py.cli",
                "local",
                "up",
                "--control-plane",
                "kubernetes",
                "--runtime",
                "kubelet",
                "--no-controller",
                "--kubeconfig",
                str(kubeconfig),
                *extra,
            ],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_ready(proc: subprocess.Popen[bytes], kubeconfig: Path, log: Path) -> None:
    deadline = time.monotonic() + 600
    while not kubeconfig.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"local up did not start (exit {proc.returncode}):\n{log.read_text()[-5000:]}")
        time.sleep(0.1)


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"kubectl {args}: {result.stderr}"
    return result.stdout


CONNECT = (
    "import socket; peer = socket.create_connection(('kubernetes.default.svc', 443), timeout=10).getpeername(); "
    "print('reached', peer)"
)


def workload() -> str:
    """Pods and a Service that make the node change the machine the most (module docstring)."""
    image = pause_image()
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "host-net", "labels": {"app": "host-net"}},
            "spec": {
                "hostNetwork": True,
                "containers": [
                    {
                        "name": "pause",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "ports": [{"containerPort": 29871, "hostPort": 29871}],
                    }
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pod-net", "labels": {"app": "pod-net"}},
            "spec": {
                "containers": [
                    {
                        "name": "pause",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "ports": [{"containerPort": 8080, "hostPort": 29872}],
                    }
                ]
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "client"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": BASE_IMAGE,
                        "imagePullPolicy": "Never",
                        # the API server through its Service: cluster DNS (CoreDNS), then kube-proxy's forwarding
                        "command": ["python3", "-c", CONNECT],
                    }
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "pod-net"},
            "spec": {"type": "NodePort", "selector": {"app": "pod-net"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    ]
    return "\n---\n".join(json.dumps(d) for d in documents)


@pytest.fixture
def no_node_left() -> Iterator[None]:
    """A test that failed halfway must not leave its node behind on the machine."""
    yield
    clean_up_after_a_failure()


def test_the_machine_is_restored_after_a_run_and_after_sigkill(
    node_images: tuple[str, ...], tmp_path: Path, no_node_left: None
) -> None:
    require_node_tier()
    assert not JOURNAL_PATH.exists(), f"{JOURNAL_PATH} is left from an earlier run: the machine is not clean"
    before = HostState.capture()
    log = tmp_path / "local-up.log"
    first_kc = tmp_path / "first.kubeconfig"
    # kube-proxy in nftables mode here, in iptables mode in the third start below: both are undone
    first = local_up(first_kc, log, "--proxy-mode", "nftables", "--image", BASE_IMAGE)
    try:
        wait_ready(first, first_kc, log)
        kubectl(first_kc, "apply", "-f", "-", stdin=workload())
        kubectl(first_kc, "wait", "--for=condition=Ready", "pod/host-net", "pod/pod-net", "--timeout=120s")
        kubectl(first_kc, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/client", "--timeout=120s")
        assert "reached ('10.96.0.1', 443)" in kubectl(first_kc, "logs", "client")
        during = HostState.capture()
        changes = node_changes(before, during)
        print("while the node runs:\n  " + "\n  ".join(changes))
        expected_changes = (
            "table ip kube-proxy",
            "KUBE-FIREWALL",
            "CNI-HOSTPORT",
            "kubepods",
            "kubedl-cni0",
            "overlay",
        )
        for expected in (*expected_changes, "kernel.panic"):
            assert any(expected in change for change in changes), f"no change mentions {expected}: {changes}"

        # One real node per machine: a second start is refused, naming the holder.
        second_log = tmp_path / "second.log"
        second = local_up(tmp_path / "second.kubeconfig", second_log)
        assert second.wait(timeout=300) == 2, second_log.read_text()[-3000:]
        refusal = second_log.read_text()
        assert "a real node already runs on this machine" in refusal and f"pid {first.pid}" in refusal, refusal

        # SIGKILL: the node's programs die with local up; its pods' containers and containerd's shims do not.
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
        assert JOURNAL_PATH.exists()
        assert _pod_processes(KUBEPODS), "the pods' containers should outlive a SIGKILLed local up"
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    restart_and_stop(tmp_path)
    after = HostState.capture()
    assert node_changes(before, after) == []


def restart_and_stop(tmp_path: Path) -> None:
    """The start after a SIGKILL puts the machine back first (and says so); then an orderly stop."""
    third_kc = tmp_path / "third.kubeconfig"
    third_log = tmp_path / "third.log"
    third = local_up(third_kc, third_log)
    try:
        wait_ready(third, third_kc, third_log)
        assert "did not stop cleanly" in third_log.read_text()
        nodes = kubectl(
            third_kc, "get", "nodes", "-o", "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}"
        )
        assert nodes.split() == ["True"]
    finally:
        third.send_signal(signal.SIGTERM)
        code = third.wait(timeout=300)
    assert code == 0, third_log.read_text()[-5000:]
    assert not JOURNAL_PATH.exists()


def clean_up_after_a_failure() -> None:
    """Replay what a failed test left (nothing after a pass)."""
    if JOURNAL_PATH.exists():
        lock = MachineLock()
        lock.acquire(wait=60)
        try:
            replay_leftovers()
        finally:
            lock.release()
