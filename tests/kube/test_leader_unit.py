"""Leader election over a fake Lease store with resourceVersion semantics (optimistic concurrency)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any, cast

import pytest

from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.leader import LeaderElectionSettings, LeaderElector, LeadershipLost
from kubedl_py.kube.resources import Resource
from tests.kube.support import eventually


class FakeLeases:
    """One namespace of Leases; a write with a stale resourceVersion gets Conflict, like the server."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.rv = 0
        self.broken = False  # simulate an unreachable API server

    def _check(self) -> None:
        if self.broken:
            raise errors.TransportError("connection refused")

    async def get(self, resource: Resource, name: str, *, namespace: str) -> dict[str, Any]:
        self._check()
        if name not in self.leases:
            raise errors.NotFound(f'leases "{name}" not found', status=404)
        return copy.deepcopy(self.leases[name])

    async def create(self, resource: Resource, body: dict[str, Any], *, namespace: str) -> dict[str, Any]:
        self._check()
        name = body["metadata"]["name"]
        if name in self.leases:
            raise errors.AlreadyExists("exists", status=409, reason="AlreadyExists")
        return self._write(name, body)

    async def replace(self, resource: Resource, body: dict[str, Any], *, namespace: str) -> dict[str, Any]:
        self._check()
        name = body["metadata"]["name"]
        if body["metadata"].get("resourceVersion") != self.leases[name]["metadata"]["resourceVersion"]:
            raise errors.Conflict("the object has been modified", status=409, reason="Conflict")
        return self._write(name, body)

    def _write(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[name] = stored
        return copy.deepcopy(stored)


def settings(identity: str) -> LeaderElectionSettings:
    return LeaderElectionSettings(
        name="kubedl-py",
        namespace="kubedl",
        identity=identity,
        lease_duration=0.6,
        renew_deadline=0.4,
        retry_period=0.05,
    )


class Watchdog:
    """Fails the test if two electors ever lead at the same moment."""

    def __init__(self, electors: list[LeaderElector]) -> None:
        self.electors = electors
        self.both = False

    async def run(self) -> None:
        while True:
            if sum(e.is_leader for e in self.electors) > 1:
                self.both = True
            await asyncio.sleep(0.005)


async def cancel(*tasks: asyncio.Task[Any]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
            await task


async def test_only_one_leads_and_release_hands_over_at_once() -> None:
    api = FakeLeases()
    a = LeaderElector(cast(KubeClient, api), settings("a"))
    b = LeaderElector(cast(KubeClient, api), settings("b"))
    watchdog = Watchdog([a, b])
    tasks = [asyncio.create_task(a.run()), asyncio.create_task(b.run()), asyncio.create_task(watchdog.run())]
    await eventually(lambda: a.is_leader or b.is_leader, what="a leader")
    leader, other = (a, b) if a.is_leader else (b, a)
    # Several renew periods pass: the leader keeps it, the other keeps waiting.
    renew_time = api.leases["kubedl-py"]["spec"]["renewTime"]
    await eventually(lambda: api.leases["kubedl-py"]["spec"]["renewTime"] != renew_time, what="a renewal")
    assert leader.is_leader and not other.is_leader
    spec = api.leases["kubedl-py"]["spec"]
    assert spec["holderIdentity"] == leader.identity
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 0
    # Graceful stop: release, and the other takes over well within the lease duration.
    leader_task = tasks[0] if leader is a else tasks[1]
    await cancel(leader_task)
    await leader.release()
    loop = asyncio.get_running_loop()
    released_at = loop.time()
    await eventually(lambda: other.is_leader, within=2, what="takeover")
    assert loop.time() - released_at < 0.3
    assert api.leases["kubedl-py"]["spec"]["holderIdentity"] == other.identity
    assert api.leases["kubedl-py"]["spec"]["leaseTransitions"] == 1
    await cancel(*tasks)
    assert not watchdog.both


async def test_dead_leader_is_replaced_after_the_lease_and_steps_down_first() -> None:
    api = FakeLeases()
    a = LeaderElector(cast(KubeClient, api), settings("a"))
    task_a = asyncio.create_task(a.run())
    await eventually(lambda: a.is_leader, what="a leads")
    # Freeze a's view of the world: its renewals fail (a network partition between a and the server)...
    original_replace = api.replace

    async def partitioned(resource: Resource, body: dict[str, Any], *, namespace: str) -> dict[str, Any]:
        if body["spec"]["holderIdentity"] == "a":
            raise errors.TransportError("partitioned")
        return await original_replace(resource, body, namespace=namespace)

    api.replace = partitioned  # type: ignore[method-assign]
    b = LeaderElector(cast(KubeClient, api), settings("b"))
    watchdog = Watchdog([a, b])
    dog = asyncio.create_task(watchdog.run())
    task_b = asyncio.create_task(b.run())
    # ...so a steps down after renew_deadline, and b acquires after lease_duration.
    with pytest.raises(LeadershipLost):
        async with asyncio.timeout(3):
            await task_a
    assert a.lost.is_set() and not a.is_leader
    await eventually(lambda: b.is_leader, within=3, what="b takes over")
    assert api.leases["kubedl-py"]["spec"]["leaseTransitions"] == 1
    assert not watchdog.both
    await cancel(task_b, dog)


async def test_settings_must_order_the_durations() -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        LeaderElectionSettings(name="x", namespace="y", lease_duration=5, renew_deadline=10)


async def test_the_fence_refuses_writes_once_the_renewal_is_older_than_the_renew_deadline() -> None:
    """A leader paused past its lease (SIGSTOP, a stalled VM) resumes with its workers mid-write and has not yet
    run the renewal that would tell it it lost: its clock has moved on, so the fence refuses every write."""
    api = FakeLeases()
    now = [100.0]
    a = LeaderElector(cast(KubeClient, api), settings("a"), clock=lambda: now[0])
    with pytest.raises(errors.NotLeader, match="is not the leader"):
        a.fence()  # a candidate writes nothing
    assert await a._try_acquire_or_renew()
    a._became_leader()
    a.fence()  # just renewed
    now[0] += 0.39
    a.fence()  # within renew_deadline (0.4)
    now[0] += 0.02  # the process was paused: no renewal ran
    with pytest.raises(errors.NotLeader, match="over the renew deadline"):
        a.fence()
    assert await a._try_acquire_or_renew()  # the Lease's own writes are not fenced
    a.fence()
