"""WriteGate: while an urgent reconcile runs, other writes wait (bounded); its own writes and exempt ones pass."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from kubedl_py.kube.metrics import Metrics
from kubedl_py.kube.priority import OrdinaryLimit, WriteGate
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


# ------------------------------------------------------------------------------------------ the repair window


async def test_the_repair_window_opens_on_a_repair_and_closes_after_its_length() -> None:
    gate = WriteGate(1.0, repair_window=0.2)
    assert gate.repair_left() == 0
    gate.repaired()
    assert 0.1 < gate.repair_left() <= 0.2
    loop = asyncio.get_running_loop()
    started = loop.time()
    await eventually(lambda: gate.repair_left() == 0, within=5)
    assert loop.time() - started >= 0.1
    off = WriteGate(1.0)  # no window: a repair changes nothing
    off.repaired()
    assert off.repair_left() == 0


async def test_ordinary_reconciles_are_limited_only_while_the_window_is_open() -> None:
    metrics = Metrics()
    gate = WriteGate(1.0, repair_window=0.3)
    limit = OrdinaryLimit(gate, normal=6, repairing=2, name="pytorchjob", metrics=metrics)
    most = 0
    release = asyncio.Event()

    async def reconcile() -> None:
        nonlocal most
        async with limit.slot():
            most = max(most, limit.running)
            await release.wait()

    # window closed: all six run at once
    tasks = [asyncio.create_task(reconcile()) for _ in range(6)]
    await eventually(lambda: limit.running == 6, within=5)
    release.set()
    await asyncio.gather(*tasks)
    assert most == 6
    assert "kubedl_repair_wait_seconds_count" not in metrics.render().decode()  # nobody waited

    # a repair: two at a time until the window closes, then the rest go at once
    most, release = 0, asyncio.Event()
    gate.repaired()
    tasks = [asyncio.create_task(reconcile()) for _ in range(6)]
    await eventually(lambda: limit.running == 2, within=5)
    assert gate.repair_left() > 0
    await eventually(lambda: limit.running == 6, within=5)  # the window closed while they waited
    assert gate.repair_left() == 0
    release.set()
    await asyncio.gather(*tasks)
    assert 'kubedl_repair_wait_seconds_count{controller="pytorchjob"} 4.0' in metrics.render().decode()


async def test_an_ending_reconcile_lets_the_first_waiter_in_while_the_window_stays_open() -> None:
    gate = WriteGate(1.0, repair_window=30.0)
    gate.repaired()
    limit = OrdinaryLimit(gate, normal=8, repairing=1)
    order: list[int] = []
    gates = [asyncio.Event() for _ in range(3)]

    async def reconcile(i: int) -> None:
        async with limit.slot():
            order.append(i)
            await gates[i].wait()

    tasks = []
    for i in range(3):
        tasks.append(asyncio.create_task(reconcile(i)))
        await asyncio.sleep(0)  # let each arrive in turn
    await eventually(lambda: order == [0], within=5)
    assert limit.running == 1
    gates[0].set()
    await eventually(lambda: order == [0, 1], within=5)
    gates[1].set()
    gates[2].set()
    async with asyncio.timeout(5):
        await asyncio.gather(*tasks)
    assert order == [0, 1, 2] and limit.running == 0


def test_bad_repair_settings_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="repair_window must be >= 0 seconds"):
        WriteGate(1.0, repair_window=float("nan"))
    with pytest.raises(ValueError, match="repairing must be at least 1 reconcile"):
        OrdinaryLimit(WriteGate(1.0), normal=4, repairing=0)


async def test_after_the_window_closes_every_worker_runs_at_once_again() -> None:
    """One slot while the window is open; once it has closed, the waiters and a worker coming back for its next
    key all run together (``normal``)."""
    gate = WriteGate(1.0, repair_window=0.2)
    limit = OrdinaryLimit(gate, normal=4, repairing=1)
    gate.repaired()
    closed, release = asyncio.Event(), asyncio.Event()
    rounds = 0

    async def worker(first: bool) -> None:
        nonlocal rounds
        for step in range(2):  # a worker takes a slot, reconciles, and comes back for the next key
            async with limit.slot():
                rounds += 1
                if first and step == 0:
                    await closed.wait()  # the one reconcile of the window, until it has closed
                else:
                    await release.wait()

    first = asyncio.create_task(worker(True))
    await eventually(lambda: limit.running == 1, within=5)
    others = [asyncio.create_task(worker(False)) for _ in range(3)]
    await eventually(lambda: gate.repair_left() == 0, within=5, what="the window closing")
    closed.set()
    await eventually(lambda: limit.running == 4, within=5, what="all four running once the window closed")
    release.set()
    async with asyncio.timeout(5):
        await asyncio.gather(first, *others)
    assert rounds == 8 and limit.running == 0
