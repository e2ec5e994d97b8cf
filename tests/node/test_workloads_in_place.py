"""Recovery in place through the real kubelet and containerd (``failurePolicy.restartMode``, docs/policies.md).

In a file of its own, after test_workloads.py: run before that file's MPIJob test, on the same node, the MPIJob's
launcher could not start its ranks over ssh (twice in a row on 2026-12-02; the MPIJob passes alone and in the
order of this layout). Not understood yet: docs/local-cluster.md, "The node tier".
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kubedl_local.image import BASE_IMAGE
from kubedl_py import TrainingClient
from kubedl_py.sdk import job_state
from tests.node.conftest import NodeCluster, eventually
from tests.node.test_workloads import _master_status, installed  # noqa: F401  (the module-scoped fixture)


def marker_job(name: str, mode: str) -> dict[str, Any]:
    """A host-network one-Master PyTorchJob whose program exits 137 (a signal: retryable) unless the marker it
    leaves in an ``emptyDir`` is there: only a restart that keeps the pod's sandbox can succeed."""
    script = 'if [ -e /data/marker ]; then echo "marker kept"; exit 0; fi; touch /data/marker; echo "first"; exit 137'
    container = {
        "name": "pytorch",
        "image": BASE_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "default", "annotations": {"kubedl.io/network-mode": "host"}},
        "spec": {
            "backoffLimit": 3,
            "cleanPodPolicy": "None",  # the pod stays to be looked at
            "failurePolicy": {"restartMode": mode},
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "ExitCode",
                    "template": {"spec": {"containers": [container], "volumes": [{"name": "data", "emptyDir": {}}]}},
                }
            },
        },
    }


@pytest.mark.parametrize("mode", ["Auto", "Recreate"])
def test_a_killed_rank_restarts_in_its_own_pod_through_the_real_kubelet(installed: NodeCluster, mode: str) -> None:  # noqa: F811
    """The real kubelet's container restart rules (Kubernetes 1.37.2, ContainerRestartRules): in place (Auto)
    the second run finds its marker (the sandbox and its emptyDir kept), in the same pod on the same host port,
    and the job succeeds with one restart counted and a ``RestartedInPlace`` event. Recreated, every new pod
    has a new emptyDir, so every run exits 137 until backoffLimit fails the job."""
    name = f"inplace-{mode.lower()}-{uuid.uuid4().hex[:6]}"
    pod_name = f"{name}-master-0"
    with TrainingClient(kubeconfig=installed.kubeconfig) as client:
        client.submit(marker_job(name, mode))
        try:
            first = eventually(lambda: _pod_or_none(installed, pod_name), within=120, what="the Master's pod")
            finished = client.wait(name, ("Succeeded", "Failed"), timeout=240)
            master = _master_status(client.get(name))
            pod = installed.get("pod", pod_name)
            if mode == "Auto":
                assert job_state(finished) == "Succeeded", finished.status
                assert pod["metadata"]["uid"] == first["metadata"]["uid"]
                assert (
                    pod["metadata"]["annotations"]["training.kubedl.io/host-port"]
                    == (first["metadata"]["annotations"]["training.kubedl.io/host-port"])
                )
                assert pod["status"]["containerStatuses"][0]["restartCount"] == 1
                assert client.logs(name, "master", 0).strip() == "marker kept"
                assert (master.restarts, master.infrastructure_restarts or 0) == (1, 0), master
                events = installed.get("events", "-n", "default", "--field-selector", f"involvedObject.name={name}")
                reasons = [e.get("reason") for e in events["items"]]
                assert reasons.count("RestartedInPlace") == 1, reasons
            else:
                assert job_state(finished) == "Failed", finished.status
                assert pod["metadata"]["uid"] != first["metadata"]["uid"]
                assert client.logs(name, "master", 0).strip() == "first"
        finally:
            # gone with its pods before the next test (a later MPIJob on this node failed while they went)
            client.delete(name, wait=True, timeout=120)


def _pod_or_none(cluster: NodeCluster, name: str) -> dict[str, Any] | None:
    found = cluster.get("pods", "-n", "default", "--field-selector", f"metadata.name={name}")["items"]
    return found[0] if found else None
