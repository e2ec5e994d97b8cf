"""``kubedl-py local node stop|start|remove``: a node lost and found on a laptop, as a user rehearses it.

``kubedl-py local up --runtime simulated --nodes 2`` runs as a subprocess on each control plane (the real one:
its kube-controller-manager decides the node is NotReady); the ``local node`` commands run as subprocesses
too, and a job with a short ``nodeLostTimeoutSeconds`` is watched surviving the loss of the node its Master
ran on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubedl_local.pins import cache_root
from kubedl_py.api.common import FailurePolicy
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import EVENTS, NODES, PODS
from kubedl_py.sdk import AsyncTrainingClient, pytorch_job
from tests.integration.conftest import eventually
from tests.sdk.test_cli import kubedl
from tests.sdk.test_first_hour import LocalUp, clean_env
from tests.tiers import KUBERNETES, TIERS, require_tier

#: kube-controller-manager's grace period in these clusters (``--node-monitor-grace-period``)
GRACE = 8


def ready(node: dict[str, Any]) -> str:
    return next(str(cond["status"]) for cond in node["status"]["conditions"] if cond["type"] == "Ready")


@pytest.mark.parametrize("control_plane", TIERS)
async def test_a_stopped_node_is_lost_its_job_moves_and_it_comes_back(tmp_path: Path, control_plane: str) -> None:
    require_tier(control_plane)
    home = tmp_path / "home"
    home.mkdir()
    # A fresh HOME (no kubeconfig of the user's), but the real control plane's binaries from the usual cache.
    env = dict(clean_env(home), KUBEDL_PY_CACHE=str(cache_root()))
    config = tmp_path / "local.kubeconfig"
    plane = "kubernetes" if control_plane == KUBERNETES else "embedded"
    up = LocalUp(
        "--control-plane", plane, "--nodes", "2", "--node-monitor-grace-period", str(GRACE),
        "--kubeconfig", str(config), env=env,
    )  # fmt: skip
    await up.start()
    try:
        await up.ready(within=180)
        async with AsyncTrainingClient(kubeconfig=config) as client, KubeClient(kubeconfig=str(config)) as kube:
            job = pytorch_job("survivor", "busybox", ["python", "train.py"], workers=1)
            job.spec.failure_policy = FailurePolicy(node_lost_timeout_seconds=3)
            await client.submit(job)
            await client.wait("survivor", ["Running"], timeout=60)
            master = await kube.get(PODS, "survivor-master-0", namespace="default")
            lost = master["spec"]["nodeName"]
            env_cli = dict(env, KUBECONFIG=str(config))

            stopped = await kubedl(None, "local", "node", "stop", lost, env=env_cli)
            assert stopped.code == 0, stopped.err
            assert f"node {lost} stopped" in stopped.out

            async def not_ready() -> bool:
                return ready(await kube.get(NODES, lost)) != "True"

            await eventually(not_ready, within=GRACE + 30, interval=0.5, what=f"{lost} NotReady")

            async def moved() -> dict[str, Any] | None:
                try:
                    pod = await kube.get(PODS, "survivor-master-0", namespace="default")
                except errors.NotFound:
                    return None
                on_other = pod["spec"].get("nodeName") not in (None, lost)
                return pod if on_other and pod["status"].get("phase") == "Running" else None

            await eventually(moved, within=60, interval=0.5, what="the Master running on the other node")
            await client.wait("survivor", ["Running"], timeout=30)
            events = await kube.list(EVENTS, namespace="default")
            assert any(e["reason"] == "NodeLost" and lost in e["message"] for e in events.items)

            started = await kubedl(None, "local", "node", "start", lost, env=env_cli)
            assert started.code == 0, started.err

            async def back() -> bool:
                node = await kube.get(NODES, lost)
                taints = [t["key"] for t in node["spec"].get("taints") or []]
                return ready(node) == "True" and not any(key.startswith("node.kubernetes.io/") for key in taints)

            await eventually(back, within=60, interval=0.5, what=f"{lost} Ready without taints")

            removed = await kubedl(None, "local", "node", "remove", lost, env=env_cli)
            assert removed.code == 0, removed.err

            async def gone() -> bool:
                try:
                    await kube.get(NODES, lost)
                except errors.NotFound:
                    return True
                return False

            await eventually(gone, within=30, what=f"{lost} deleted")
            unknown = await kubedl(None, "local", "node", "stop", "no-such-node", env=env_cli)
            assert unknown.code == 2 and "no-such-node" in unknown.err and "nodes:" in unknown.err, unknown
    finally:
        assert await up.stop() == 0
