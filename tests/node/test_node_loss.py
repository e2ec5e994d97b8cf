"""A real node dies under a running host-network job; the job comes back on other nodes.

The node is killed as a power cut would: the kubelet, containerd, kube-proxy, every shim and every container
at once (``RealNode.crash``). Nothing tells the API server; the node lifecycle controller notices the Node's
Lease going stale (``--node-monitor-grace-period``, shortened here with the kubelet's lease period), marks it
unreachable, and taint-based eviction marks its pods for deletion, which no kubelet will ever confirm. What
an operator does about such a node today, Kubernetes' non-graceful node shutdown, is the
``node.kubernetes.io/out-of-service`` taint: the pod garbage collector then deletes those pods, and the
controller replaces them. One real node is all a machine has, so the replacements run on simulated nodes
that join the cluster beside it; in host-network mode each gets a new host port and the Master's Service (the
address its peers dial) follows.

The controller runs beside the cluster here (not in it: its pod would die with the node).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kubedl_local.image import BASE_IMAGE
from kubedl_local.kubernetes.controlplane import ControlPlaneOptions
from kubedl_py import TrainingClient
from kubedl_py.cli.local import EmbeddedController
from tests.node.conftest import LOCK_WAIT, NodeCluster, eventually, start_node_cluster, stop_node_cluster

pytestmark = pytest.mark.timeout(LOCK_WAIT + 900)

#: how fast the control plane gives up on a silent node, and how often the kubelet renews its Lease
GRACE_SECONDS = 8.0
KUBELET = {"nodeLeaseDurationSeconds": 4, "nodeStatusUpdateFrequency": "1s", "nodeStatusReportFrequency": "1s"}


@pytest.fixture(scope="module")
def lossy(node_images: tuple[str, ...]) -> Iterator[NodeCluster]:
    handle = start_node_cluster(
        install=True,
        images=node_images,
        control_plane=ControlPlaneOptions(node_monitor_grace_period=GRACE_SECONDS, toleration_seconds=2),
        kubelet_config=KUBELET,
    )
    controller = EmbeddedController()
    try:
        handle.loop.run(controller.start(handle.cluster), timeout=120)
        yield handle
    finally:
        handle.loop.run(controller.stop(), timeout=60)
        stop_node_cluster(handle)


def sleeper_job(name: str) -> dict[str, Any]:
    def replica() -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": BASE_IMAGE,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", "echo started; sleep 3600"],
        }
        return {"replicas": 1, "restartPolicy": "ExitCode", "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "default", "annotations": {"kubedl.io/network-mode": "host"}},
        "spec": {"backoffLimit": 5, "pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


def job_pods(cluster: NodeCluster, name: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = cluster.get("pods", "-n", "default", "-l", f"training.kubedl.io/job-name={name}")[
        "items"
    ]
    return pods


def host_port(pod: dict[str, Any]) -> int | None:
    return next((p.get("hostPort") for c in pod["spec"]["containers"] for p in c.get("ports") or []), None)


def test_a_job_comes_back_after_the_real_node_dies(lossy: NodeCluster) -> None:
    name = f"loss-{uuid.uuid4().hex[:6]}"
    real = lossy.node.name
    with TrainingClient(kubeconfig=lossy.kubeconfig) as client:
        client.submit(sleeper_job(name))
        try:

            def running_on_real_node() -> list[dict[str, Any]] | None:
                pods = job_pods(lossy, name)
                ok = len(pods) == 2 and all(
                    p["status"].get("phase") == "Running" and p["spec"].get("nodeName") == real for p in pods
                )
                return pods if ok else None

            before = eventually(running_on_real_node, within=120, what="both ranks running on the real node")
            old = {p["metadata"]["uid"]: host_port(p) for p in before}
            for i in (1, 2):
                lossy.loop.run(lossy.cluster.add_node(f"spare-{i}"), timeout=60)

            lossy.loop.run(lossy.node.crash(), timeout=60)

            def unreachable() -> bool:
                node = lossy.get("node", real)
                ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
                return ready["status"] == "Unknown"

            eventually(unreachable, within=GRACE_SECONDS + 60, what="the control plane to see the node gone")
            # Kubernetes' non-graceful node shutdown: the operator says the node is out of service.
            lossy.kubectl("taint", "node", real, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")

            def recovered() -> list[dict[str, Any]] | None:
                pods = job_pods(lossy, name)
                fresh = [p for p in pods if p["metadata"]["uid"] not in old]
                ok = (
                    len(pods) == 2
                    and len(fresh) == 2
                    and all(
                        p["status"].get("phase") == "Running" and p["spec"].get("nodeName", "").startswith("spare-")
                        for p in fresh
                    )
                )
                return fresh if ok else None

            after = eventually(recovered, within=120, what="both ranks running again on the spare nodes")
            assert f"{name}-master-0" in {p["metadata"]["name"] for p in after}
            for pod in after:
                port = host_port(pod)
                assert port is not None and port not in old.values()
                if pod["metadata"]["name"] != f"{name}-master-0":
                    continue  # only the Master is dialed, so only it has a Service (docs/controller.md)
                service = lossy.get("service", "-n", "default", pod["metadata"]["name"])
                assert service["spec"]["ports"][0]["targetPort"] == port
            job = client.get(name)
            assert job.status is not None
            conditions = {c.type: c.status for c in job.status.conditions or []}
            assert conditions.get("Running") == "True", conditions
        finally:
            client.delete(name)
