"""The node agent's status writer serves the nodes in turn: one node's backlog does not hold another's writes.

A real kubelet writes only its own node's pods; the simulated agent writes for every node through one pool
of workers, so without turns a deletion confirmed on a quiet node waited behind every write queued before it
(the whole burst of another node's pods).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kubedl_local.node.status import PodStatusWriter
from kubedl_py.kube.client import KubeClient

WORKERS = 4
BACKLOG = 200


class SlowServer:
    """Answers each write after a few milliseconds and records the order in which writes finished."""

    def __init__(self) -> None:
        self.done: list[tuple[str, str]] = []
        self.confirmed = asyncio.Event()

    async def patch(self, _resource: Any, name: str, _patch: Any, **_kw: Any) -> dict[str, Any]:
        await asyncio.sleep(0.002)
        self.done.append(("status", name))
        return {"metadata": {"name": name}}

    async def delete(self, _resource: Any, name: str, **_kw: Any) -> None:
        await asyncio.sleep(0.002)
        self.done.append(("delete", name))
        self.confirmed.set()


def pod(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}"}, "spec": {"nodeName": node}}


async def test_a_quiet_nodes_deletion_does_not_wait_for_a_busy_nodes_backlog() -> None:
    server = SlowServer()
    writer = PodStatusWriter(
        cast(KubeClient, server), workers=WORKERS, frozen=lambda _node: False, current_uid=lambda _ns, _name: None
    )
    for i in range(BACKLOG):  # a burst of pods starting on one node, queued first
        writer.set(pod(f"busy-{i}", "node-busy"), {"phase": "Running"})
    writer.confirm_deletion(pod("deleted", "node-quiet"))
    writer.start()
    try:
        await asyncio.wait_for(server.confirmed.wait(), timeout=10)
        before = server.done.index(("delete", "deleted"))
        # its turn comes right after the busy node's first: at most one write per worker finishes before it
        assert before <= WORKERS, (before, server.done[: before + 1])
        await asyncio.wait_for(writer.flush("default", f"busy-{BACKLOG - 1}"), timeout=10)
        assert sorted(n for kind, n in server.done if kind == "status") == sorted(f"busy-{i}" for i in range(BACKLOG))
    finally:
        await writer.stop()
