"""Recovery first at the API server: while a manager reconciles an urgent key (a job that lost a pod), the other
writes of its process wait at the client, and reach the server only after it (kubedl_py.kube.priority)."""

from __future__ import annotations

import asyncio
import contextlib

from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.manager import Manager, ManagerSettings, Result
from kubedl_py.kube.resources import CONFIGMAPS
from tests.integration.conftest import Env, Kube, eventually


async def now(value: bool) -> bool:
    return value


def configmap(name: str, namespace: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


async def test_other_writes_reach_the_server_after_an_urgent_reconcile(cluster: Env, kube: Kube) -> None:
    ns = cluster.namespace
    seen_during: list[str] = []
    async with cluster.client() as client:
        manager = Manager(client, settings=ManagerSettings(workers=1, urgent_workers=1, urgent_write_hold=60.0))

        class Repairs:
            async def reconcile(self, key: str) -> Result | None:
                # the new job's write waits at the gate, and is not on the server
                await eventually(lambda: now(manager.write_gate.waiting == 1), what="the new job's write at the gate")
                with contextlib.suppress(NotFound):
                    await client.get(CONFIGMAPS, "new-job", namespace=ns)
                    seen_during.append("new-job")
                await client.create(CONFIGMAPS, configmap("repair", ns), namespace=ns)  # ours is not held
                seen_during.append("repair")
                return None

        controller = manager.add_controller("repairs", Repairs())
        run = asyncio.create_task(manager.run())
        await eventually(lambda: now(manager.ready()), what="the manager running")
        controller.queue.add(f"{ns}/job", urgent=True)
        await eventually(lambda: now(manager.write_gate.held == 1), what="the urgent reconcile running")
        async with asyncio.timeout(30):
            await client.create(CONFIGMAPS, configmap("new-job", ns), namespace=ns)  # waits for the reconcile
        assert seen_during == ["repair"] and manager.write_gate.held == 0
        manager.stop()
        async with asyncio.timeout(10):
            await run
    assert {c["metadata"]["name"] for c in (await kube.list(CONFIGMAPS, namespace=ns)).items} >= {"repair", "new-job"}
