"""A new job's first status write yields to other jobs' pod creations (controllers/status_yield.py), and only
that write (status.is_first_report)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

from kubedl_py.controllers import status as st
from kubedl_py.controllers.observation import Observation
from kubedl_py.controllers.status_pacing import StatusYield
from tests.controllers.building import bare_reconciler

CREATED = {"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "created"}


def created(**more: Any) -> dict[str, Any]:
    return {"conditions": [dict(CREATED)], **more}


class Woken:
    """The work queue as the yield sees it: records the keys it is told to wake."""

    def __init__(self) -> None:
        self.keys: asyncio.Queue[str] = asyncio.Queue()

    def __call__(self, key: str) -> None:
        self.keys.put_nowait(key)

    async def next(self, within: float) -> str:
        return await asyncio.wait_for(self.keys.get(), within)


def woken_yield(**timing: float) -> tuple[StatusYield, Woken]:
    """A yield whose wake records the keys, as the work queue would take them."""
    held = StatusYield(**timing)
    woken = Woken()
    held.wake = woken
    return held, woken


def test_first_report_is_created_with_counts_and_start_time_only() -> None:
    counts = {"Worker": {"active": 0}}
    assert st.is_first_report({}, created())
    assert st.is_first_report({}, created(replicaStatuses=counts, startTime="2026-11-27T00:00:00Z"))
    running = {"type": "Running", "status": "True", "reason": "PyTorchJobRunning", "message": "running"}
    # Created and Running in one write: a transition someone waits for, written at once
    assert not st.is_first_report({}, {"conditions": [dict(CREATED), running]})
    # a reason to wait (Running False, Unschedulable) is news for the user
    waiting = {**running, "status": "False", "reason": "Unschedulable"}
    assert not st.is_first_report({}, {"conditions": [dict(CREATED), waiting]})
    # a selector beside the counts is part of it; a restart or a failure is news, written at once
    selected = {"Worker": {"active": 0, "labelSelector": {"matchLabels": {"a": "b"}}, "selector": "a=b"}}
    assert st.is_first_report({}, created(replicaStatuses=selected))
    assert not st.is_first_report({}, created(replicaStatuses={"Worker": {"active": 0, "restarts": 1}}))
    assert not st.is_first_report({}, created(replicaStatuses={"Worker": {"lastFailure": {"reason": "Error"}}}))
    # a later write is never a first report, even of counts alone
    assert not st.is_first_report(created(), created(replicaStatuses=counts))
    assert not st.is_first_report({}, {"replicaStatuses": counts})
    assert not st.is_first_report({}, created(completionTime="2026-11-27T00:00:00Z"))


async def test_nothing_is_held_without_a_queue_to_wake_the_job() -> None:
    held = StatusYield()
    with held.writing():
        assert not held.holds("ns/a")
    assert held.held == frozenset()


async def test_held_while_writes_are_in_flight_and_woken_once_they_stop() -> None:
    held, woken = woken_yield(settle=0.02)
    assert not held.holds("ns/idle")  # no write in flight: written at once
    with held.writing():
        assert held.holds("ns/a")
        assert held.holds("ns/b")
        with held.writing():
            pass
        # one write still in flight: nothing is woken
        assert woken.keys.empty()
    assert {await woken.next(1.0), await woken.next(1.0)} == {"ns/a", "ns/b"}
    # woken jobs write now (no write in flight), and are forgotten once they do
    assert not held.holds("ns/a")
    assert not held.holds("ns/b")
    assert held.held == frozenset()


async def test_a_write_that_resumes_within_the_settle_time_keeps_the_job_held() -> None:
    held, woken = woken_yield(settle=0.2)
    with held.writing():
        assert held.holds("ns/a")
    # the next job's creations begin before the settle time is over
    with held.writing(), pytest.raises(TimeoutError):
        await woken.next(0.4)
    assert await woken.next(1.0) == "ns/a"


async def test_never_held_longer_than_the_longest_wait() -> None:
    held, woken = woken_yield(longest=0.2, settle=0.01)
    with held.writing():  # creations that never stop
        started = time.monotonic()
        assert held.holds("ns/a")
        assert await woken.next(2.0) == "ns/a"
        assert time.monotonic() - started >= 0.2
        # past the longest wait the write goes out, creations or not
        assert not held.holds("ns/a")
        assert held.held == frozenset()


async def test_the_longest_wait_counts_from_the_first_hold() -> None:
    held, woken = woken_yield(longest=0.3, settle=0.01)
    with held.writing():
        assert held.holds("ns/a")
    assert await woken.next(1.0) == "ns/a"  # woken by a pause between bursts...
    with held.writing():
        assert held.holds("ns/a")  # ...and held again by the next burst, on its first time
        assert await woken.next(1.0) == "ns/a"
        assert not held.holds("ns/a")


async def test_a_forgotten_job_is_not_woken() -> None:
    held, woken = woken_yield(settle=0.01)
    with held.writing():
        assert held.holds("ns/gone")
        held.forget("ns/gone")
    with pytest.raises(TimeoutError):
        await woken.next(0.2)


async def test_a_burst_stays_held_after_the_creations_until_few_are_left() -> None:
    """Eight jobs' first reports held at once: the creations stopping wakes none of them (each waits for its own
    pods, then says Created and Running in one write); once one has gone (its pods ran) fewer than eight are
    left and those go out. Two jobs alone are woken when the writes stop, as before."""
    held, woken = woken_yield(settle=0.01, burst=8)
    keys = [f"ns/j{i}" for i in range(8)]
    with held.writing():
        assert all(held.holds(key) for key in keys)
    with pytest.raises(TimeoutError):
        await woken.next(0.2)
    assert held.holds("ns/j3")  # reconciled meanwhile (a pod started): still held, the burst goes on
    held.forget("ns/j0")  # its pods all run: its report is no first report any more, and goes out at once
    assert {await woken.next(1.0) for _ in range(7)} == set(keys[1:])
    assert not any(held.holds(key) for key in keys[1:])
    assert held.held == frozenset()


class Patches:
    """The client as ``Reporter.write`` uses it: records the status patches it is sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def patch_status(self, resource: Any, name: str, patch: Any, *, namespace: str) -> dict[str, Any]:
        self.sent.append(name)
        return {"metadata": {"resourceVersion": "2"}}


def observed(name: str, status: dict[str, Any]) -> Observation:
    raw = {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}, "status": {}}
    job = cast(Any, SimpleNamespace(name=name, namespace="ns", metadata=SimpleNamespace(name=name, namespace="ns")))
    return Observation(
        raw=raw, job=job, status=status, pods=[], services={}, replicas={}, surplus=[], now=datetime.now(UTC)
    )


async def test_the_reconciler_holds_a_first_report_while_other_jobs_pods_are_created() -> None:
    reconciler = bare_reconciler()
    client = Patches()
    reconciler.reporter.client = cast(Any, client)
    paced, woken = woken_yield(settle=0.01)
    reconciler.status_yield = reconciler.reporter.status_yield = reconciler.writes.status_yield = paced
    creating = asyncio.Event()
    release = asyncio.Event()

    async def create() -> None:
        creating.set()
        await release.wait()

    others = asyncio.create_task(reconciler.writes.gather([create()]))
    await asyncio.wait_for(creating.wait(), 5)
    running = {"type": "Running", "status": "True", "reason": "PyTorchJobRunning", "message": "running"}
    await reconciler.reporter.write(observed("new", created()))
    await reconciler.reporter.write(observed("running", {"conditions": [dict(CREATED), running]}))
    assert client.sent == ["running"]  # Running goes out at once; the first report waits
    release.set()
    await asyncio.wait_for(others, 5)
    assert await woken.next(1.0) == "ns/new"
    await reconciler.reporter.write(observed("new", created()))  # the reconcile the wake brings
    assert client.sent == ["running", "new"]
