"""The reconciler's write slots under the write gate (kubedl_py.kube.priority): a reconcile from the urgent lane
never waits for the slots shared with new jobs, which may all be held by writes parked at the gate for it."""

from __future__ import annotations

import asyncio
from typing import Any

from kubedl_py.controllers.job import ReconcilerOptions
from kubedl_py.controllers.writes import WRITE_CONCURRENCY
from kubedl_py.kube.priority import WriteGate
from tests.controllers.building import bare_reconciler
from tests.kube.support import eventually


async def test_an_urgent_reconcile_writes_while_every_shared_slot_waits_at_the_gate() -> None:
    gate = WriteGate(60.0)
    job = bare_reconciler()
    sent: list[str] = []

    async def write(name: str) -> str:
        await gate.before_write()  # what the client does before sending
        sent.append(name)
        return name

    holding, shared_full = asyncio.Event(), asyncio.Event()

    async def urgent_reconcile() -> list[Any]:
        with gate.urgent():
            holding.set()
            await shared_full.wait()
            # a job that lost every pod: no "urgent" argument, the lane's mark alone picks the slots
            return await job.writes.gather(write(f"replacement {i}") for i in range(2))

    failover = asyncio.create_task(urgent_reconcile())
    await holding.wait()
    # other jobs' writes, started outside the urgent block: one more than the shared slots
    new_jobs = asyncio.create_task(job.writes.gather(write(f"new job pod {i}") for i in range(WRITE_CONCURRENCY + 1)))
    # every shared slot held by a write waiting at the gate
    await eventually(lambda: gate.waiting == WRITE_CONCURRENCY, what="the shared slots full of parked writes")
    shared_full.set()
    async with asyncio.timeout(5):  # well under the 60 s hold: the failover's writes did not wait for a slot
        assert await failover == ["replacement 0", "replacement 1"]
        await new_jobs
    assert sent[:2] == ["replacement 0", "replacement 1"] and len(sent) == WRITE_CONCURRENCY + 3


async def test_write_concurrency_caps_the_writes_in_flight() -> None:
    job = bare_reconciler(ReconcilerOptions(write_concurrency=3))
    in_flight, most = 0, 0
    release = asyncio.Event()

    async def write(i: int) -> int:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await release.wait()
        in_flight -= 1
        return i

    batch = asyncio.create_task(job.writes.gather(write(i) for i in range(10)))
    # without the cap all ten would be in flight at once, and this would time out
    await eventually(lambda: in_flight == 3, what="three writes in flight")
    release.set()
    async with asyncio.timeout(5):
        assert await batch == list(range(10))
    assert most == 3
