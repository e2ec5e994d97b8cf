"""The whole job restarted in place (``restartScope: Job``, ``restartMode: InPlace``, docs/policies.md) on the
process runtime, end to end: the controller over HTTP, the embedded control plane, and a process node that
restarts a pod whole as kubelet 1.37 does (RestartAllContainers) and runs the in-place agent's two programs
(``kubedl-py-agent barrier|watcher``, from the venv) as real processes, which read the controller's signals
from their pod's downward API volume.

It fails on the code before it: the process node did not declare ``RestartAllContainersOnContainerExits`` (the
job's pods were never scheduled), kept no sidecar running, restarted no pod whole and never rewrote a downward
API file after the pod changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubedl_local import LocalCluster
from kubedl_py import agent
from kubedl_py.controllers.failures.whole_in_place import STATE, restarts_whole
from kubedl_py.controllers.setup import build_manager
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.manager import Manager
from tests.integration.conftest import (
    PYTORCHJOBS,
    Kube,
    events_for,
    eventually,
    fast_options,
    install_crds,
    pods_of,
    wait_condition,
)
from tests.local.test_process_runtime import _descendants

NS = "default"
#: a run that finds the marker its pod's emptyDir kept succeeds; a first run leaves it
MARKER_KEPT = 'if [ -e /data/marker ]; then echo "marker kept"; exit 0; fi; touch /data/marker'


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    """A process-runtime cluster with the CRDs and the controller running; the administrator's client."""
    before = _descendants()
    async with (
        LocalCluster(runtime="process", process_bridge=f"kdw{uuid.uuid4().hex[:6]}") as local,
        Kube(configuration=local.configuration) as client,
        KubeClient(configuration=local.configuration) as controller_client,
    ):
        await install_crds(client)
        manager = build_manager(controller_client, fast_options(namespace=NS))
        task = asyncio.create_task(manager.run())
        try:
            await eventually(lambda: _ready(manager), what="controller ready")
            yield client
        finally:
            manager.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert _descendants() - before == set(), "a pod process outlived the cluster"


async def _ready(manager: Manager) -> bool:
    return manager.ready()


def whole_job(name: str) -> dict[str, Any]:
    """A host-network PyTorchJob, Master + Worker, restartScope Job in place: each rank leaves a marker in its
    ``emptyDir`` on its first run; the Worker then exits 137 (a signal: retryable), the Master waits. A second
    run finds its marker and succeeds, so the job succeeds only if every rank restarted in its own pod."""
    first_run = {"Master": "exec sleep 3600", "Worker": "sleep 2; exit 137"}

    def replica(replica_type: str) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "busybox:ignored",
            "command": ["sh", "-c", f"{MARKER_KEPT}; {first_run[replica_type]}"],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }
        spec = {"containers": [container], "volumes": [{"name": "data", "emptyDir": {}}]}
        return {"replicas": 1, "restartPolicy": "ExitCode", "template": {"spec": spec}}

    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": {"kubedl.io/network-mode": "host"}},
        "spec": {
            "backoffLimit": 3,
            "cleanPodPolicy": "None",  # the pods stay to be looked at
            "failurePolicy": {"restartScope": "Job", "restartMode": "InPlace"},
            "pytorchReplicaSpecs": {"Master": replica("Master"), "Worker": replica("Worker")},
        },
    }


async def test_the_whole_job_restarts_in_place_on_the_process_runtime(kube: Kube) -> None:
    """The Worker exits 137: every rank's pod restarts whole in place (same uid, each main container and each
    barrier restarted once, the agent's attempt released), every second run finds its marker, and the job
    succeeds with one restart charged and ``RestartedInPlace``."""
    await kube.create(PYTORCHJOBS, whole_job("whole"), namespace=NS)

    async def both_pods() -> dict[str, str] | None:
        pods = await pods_of(kube, "whole")
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods} if len(pods) == 2 else None

    uids = await eventually(both_pods, what="the job's two pods")
    done = await wait_condition(kube, PYTORCHJOBS, "whole", "Succeeded", within=30)
    assert int(done["status"][STATE]["released"]) >= 1, done["status"]
    assert sum(int(s.get("restarts") or 0) for s in done["status"]["replicaStatuses"].values()) == 1, done["status"]
    pods = {p["metadata"]["name"]: p for p in await pods_of(kube, "whole")}
    assert {name: p["metadata"]["uid"] for name, p in pods.items()} == uids
    for name, p in pods.items():
        assert p["status"]["phase"] == "Succeeded", (name, p["status"])
        assert restarts_whole(p) == 1, (name, p["status"])
        main = p["status"]["containerStatuses"][0]
        assert (main["restartCount"], main["state"]["terminated"]["exitCode"]) == (1, 0), (name, main)
        watcher = next(s for s in p["status"]["initContainerStatuses"] if s["name"] == agent.WATCHER)
        assert "terminated" in watcher["state"], (name, watcher)  # stopped once the program ended
        assert await kube.read_log(name, namespace=NS, container="pytorch") == "marker kept\n"
    reasons = [e.get("reason") for e in await events_for(kube, "whole")]
    assert reasons.count("RestartingInPlace") == 1 and reasons.count("RestartedInPlace") == 1, reasons
    assert "JobRestarting" not in reasons, reasons
