"""WriteGate: while an urgent reconcile runs, other writes wait (bounded); its own writes and exempt ones pass."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from kubedl_py.kube.metrics import Metrics
from kubedl_py.kube.priority import WriteGate
from tests.kube.support import eventually


@asynccontextmanager
async def urgent_reconcile(gate: WriteGate) -> AsyncIterator[None]:
    """An urgent reconcile in a task of its own (as a worker runs it) for as long as the block lasts."""
    holding, release = asyncio.Event(), asyncio.Event()

    async def reconcile() -> None:
        with gate.urgent():
            holding.set()
            await release.wait()

    task = asyncio.create_task(reconcile())
    await holding.wait()
    try:
        yield
    finally:
        release.set()
        await task


async def test_nothing_waits_while_no_urgent_reconcile_runs() -> None:
    gate = WriteGate(5.0)
    async with asyncio.timeout(1):
        await gate.before_write()
    assert gate.waiting == 0


async def test_a_write_waits_until_the_urgent_reconcile_ends_and_the_reconciles_own_writes_pass() -> None:
    gate = WriteGate(30.0)
    sent: list[str] = []

    async def write(name: str) -> None:
        await gate.before_write()
        sent.append(name)

    ordinary: asyncio.Task[None] | None = None
    holding, release = asyncio.Event(), asyncio.Event()

    async def reconcile() -> None:
        with gate.urgent():
            holding.set()
            await write("replacement pod")
            await asyncio.create_task(write("its Service"))  # a task it starts inherits the mark
            await release.wait()

    task = asyncio.create_task(reconcile())
    await holding.wait()
    ordinary = asyncio.create_task(write("new job's pod"))
    await eventually(lambda: gate.waiting == 1 and len(sent) == 2, what="the urgent writes sent, the other held")
    assert sent == ["replacement pod", "its Service"] and not ordinary.done()
    release.set()
    async with asyncio.timeout(5):
        await task
        await ordinary
    assert sent[-1] == "new job's pod" and gate.waiting == 0 and gate.held == 0


async def test_the_gate_opens_when_the_last_of_several_urgent_reconciles_ends() -> None:
    gate = WriteGate(30.0)
    async with urgent_reconcile(gate):
        async with urgent_reconcile(gate):
            ordinary = asyncio.create_task(gate.before_write())
            await eventually(lambda: gate.waiting == 1, what="the ordinary write at the gate")
        assert gate.held == 1 and gate.waiting == 1 and not ordinary.done()
    async with asyncio.timeout(5):
        await ordinary
    assert gate.held == 0


async def test_a_stuck_urgent_reconcile_delays_a_write_by_at_most_max_hold() -> None:
    metrics = Metrics()
    gate = WriteGate(0.05, metrics=metrics)
    loop = asyncio.get_running_loop()
    async with urgent_reconcile(gate):
        started = loop.time()
        async with asyncio.timeout(5):
            await gate.before_write()
        waited = loop.time() - started
        assert gate.held == 1  # still held: the write went because its wait ran out
    assert waited >= 0.05
    assert "kubedl_write_gate_wait_seconds_count 1.0" in metrics.render().decode()


async def test_exempt_writes_and_a_zero_hold_never_wait() -> None:
    gate = WriteGate(30.0)
    async with urgent_reconcile(gate):
        with WriteGate.exempt():
            async with asyncio.timeout(1):
                await asyncio.create_task(gate.before_write())  # the task copies the exemption
        assert gate.waiting == 0
    off = WriteGate(0)
    async with urgent_reconcile(off):
        async with asyncio.timeout(1):
            await off.before_write()


def test_a_negative_hold_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="max_hold must be >= 0 seconds"):
        WriteGate(-1)
