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
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kubedl_py.local.kubernetes.node import HostState
from kubedl_py.local.kubernetes.node.host import KUBEPODS, _pod_processes
from kubedl_py.local.kubernetes.node.images import pause_image
from kubedl_py.local.kubernetes.node.journal import JOURNAL_PATH
from tests.node.conftest import KUBECTL, LOCK_WAIT, REPO, require_node_tier

pytestmark = pytest.mark.timeout(LOCK_WAIT + 900)


def local_up(kubeconfig: Path, log: Path) -> subprocess.Popen[bytes]:
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
            "kind": "Service",
            "metadata": {"name": "pod-net"},
            "spec": {"type": "NodePort", "selector": {"app": "pod-net"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    ]
    return "\n---\n".join(json.dumps(d) for d in documents)


def test_the_machine_is_restored_after_a_run_and_after_sigkill(tmp_path: Path) -> None:
    require_node_tier()
    assert not JOURNAL_PATH.exists(), f"{JOURNAL_PATH} is left from an earlier run: the machine is not clean"
    before = HostState.capture()
    log = tmp_path / "local-up.log"
    first_kc = tmp_path / "first.kubeconfig"
    first = local_up(first_kc, log)
    try:
        wait_ready(first, first_kc, log)
        kubectl(first_kc, "apply", "-f", "-", stdin=workload())
        kubectl(first_kc, "wait", "--for=condition=Ready", "pod/host-net", "pod/pod-net", "--timeout=120s")
        during = HostState.capture()
        changes = before.differences(during)
        print("while the node runs:\n  " + "\n  ".join(changes))
        for expected in ("KUBE-SERVICES", "CNI-HOSTPORT", "kubepods", "kubedl-cni0", "overlay", "kernel.panic"):
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
    after = HostState.capture()
    assert before.differences(after) == []
