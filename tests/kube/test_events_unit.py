"""Event aggregation: a repeat patches count/lastTimestamp of the same Event instead of creating one."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from kubedl_py.kube import errors, events
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.events import EventRecorder
from kubedl_py.kube.resources import Resource


class FakeEvents:
    """Stores Events like the API server would (create, merge patch of top-level fields)."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.writes: list[str] = []
        self.fail_next: errors.KubeError | None = None

    async def create(self, resource: Resource, body: dict[str, Any], *, namespace: str) -> dict[str, Any]:
        self.writes.append("create")
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        await asyncio.sleep(0)  # let concurrent recorders interleave
        self.events[(namespace, body["metadata"]["name"])] = dict(body)
        return body

    async def patch(self, resource: Resource, name: str, patch: dict[str, Any], *, namespace: str) -> dict[str, Any]:
        self.writes.append("patch")
        event = self.events.get((namespace, name))
        if event is None:
            raise errors.NotFound(f'events "{name}" not found', status=404, reason="NotFound")
        event.update(patch)
        return event


JOB = {
    "apiVersion": "training.kubedl.io/v1alpha1",
    "kind": "PyTorchJob",
    "metadata": {"name": "mnist", "namespace": "kubedl", "uid": "u-1", "resourceVersion": "7"},
}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def recorder(api: FakeEvents) -> EventRecorder:
    return EventRecorder(cast(KubeClient, api), component="kubedl-py", host="node-1", now=Clock())


async def test_first_event_is_created_with_the_involved_object_and_source() -> None:
    api = FakeEvents()
    await recorder(api).warning(JOB, "InvalidSpec", "two masters")
    [event] = api.events.values()
    assert event["involvedObject"] == {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "namespace": "kubedl",
        "name": "mnist",
        "uid": "u-1",
        "resourceVersion": "7",
    }
    assert event["type"] == "Warning"
    assert event["reason"] == "InvalidSpec"
    assert event["message"] == "two masters"
    assert event["source"] == {"component": "kubedl-py", "host": "node-1"}
    assert event["count"] == 1
    assert event["metadata"]["namespace"] == "kubedl"
    assert event["metadata"]["name"].startswith("mnist.")
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2025-01-01T00:00:01Z"


async def test_repeats_are_aggregated_into_one_event() -> None:
    api = FakeEvents()
    rec = recorder(api)
    for _ in range(5):
        await rec.normal(JOB, "SuccessfulCreatePod", "Created pod mnist-master-0")
    await rec.normal(JOB, "SuccessfulCreatePod", "Created pod mnist-worker-0")  # another message: new event
    assert len(api.events) == 2
    first = next(e for e in api.events.values() if e["message"].endswith("master-0"))
    assert first["count"] == 5
    assert first["firstTimestamp"] == "2025-01-01T00:00:01Z"
    assert first["lastTimestamp"] == "2025-01-01T00:00:05Z"
    assert api.writes == ["create", "patch", "patch", "patch", "patch", "create"]


async def test_concurrent_repeats_create_only_one_event() -> None:
    api = FakeEvents()
    rec = recorder(api)
    await asyncio.gather(*(rec.warning(JOB, "BackOff", "restarting") for _ in range(10)))
    [event] = api.events.values()
    assert event["count"] == 10


async def test_expired_event_is_created_again() -> None:
    api = FakeEvents()
    rec = recorder(api)
    await rec.normal(JOB, "Running", "job is running")
    api.events.clear()  # the server's event TTL removed it
    await rec.normal(JOB, "Running", "job is running")
    [event] = api.events.values()
    assert event["count"] == 1


async def test_failures_are_swallowed() -> None:
    api = FakeEvents()
    api.fail_next = errors.Forbidden("events is forbidden", status=403, reason="Forbidden")
    rec = recorder(api)
    await rec.normal(JOB, "Running", "job is running")  # does not raise into the reconcile
    assert api.events == {}
    await rec.normal(JOB, "Running", "job is running")
    assert len(api.events) == 1


async def test_a_key_whose_create_fails_leaves_no_lock_behind() -> None:
    api = FakeEvents()
    rec = recorder(api)
    for i in range(20):
        api.fail_next = errors.ServerError("etcdserver: request timed out", status=503)
        await rec.warning(JOB, "BackOff", f"restart {i}")  # every message its own key, never created
    assert api.events == {}
    assert rec._locks == {}, "locks of keys that never made an Event must not pile up"
    await rec.warning(JOB, "BackOff", "restarting")
    assert len(rec._locks) == 1  # kept while the key is remembered for aggregation


async def test_one_lock_per_key_not_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[asyncio.Lock] = []
    real = asyncio.Lock

    def counting_lock() -> asyncio.Lock:
        lock = real()
        made.append(lock)
        return lock

    api = FakeEvents()
    rec = recorder(api)
    monkeypatch.setattr(events.asyncio, "Lock", counting_lock)
    for _ in range(5):
        await rec.warning(JOB, "BackOff", "restarting")
    monkeypatch.undo()
    assert len(made) == 1
    [event] = api.events.values()
    assert event["count"] == 5


async def test_concurrent_repeats_after_a_failed_create_still_aggregate() -> None:
    api = FakeEvents()
    api.fail_next = errors.ServerError("etcdserver: request timed out", status=503)
    rec = recorder(api)
    await asyncio.gather(*(rec.warning(JOB, "BackOff", "restarting") for _ in range(10)))
    [event] = api.events.values()
    assert event["count"] == 9  # the first was lost; the rest waited on the same lock: one create, 8 patches
    assert api.writes.count("create") == 2


async def test_evicted_keys_drop_their_locks() -> None:
    api = FakeEvents()
    rec = EventRecorder(cast(KubeClient, api), component="kubedl-py", host="node-1", now=Clock(), cache_size=2)
    for i in range(5):
        await rec.normal(JOB, "Step", f"step {i}")
    assert len(rec._seen) == 2
    assert set(rec._locks) == set(rec._seen)
