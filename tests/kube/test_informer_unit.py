"""Informer logic against a scripted fake API (no HTTP): resume, 410 re-list diff, stale events, resync.

The same behaviours are exercised over real HTTP against the embedded cluster in test_informer.py; here
the server's answers are exact, so each branch of the list/watch loop is pinned down.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator
from typing import Any, cast

import pytest

from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient, ObjectList, WatchEvent
from kubedl_py.kube.informer import (
    OWNER_INDEX,
    Handler,
    Informer,
    InformerSettings,
    by_label,
    by_owner_uid,
)
from kubedl_py.kube.resources import PODS
from kubedl_py.kube.retry import RetrySettings
from tests.kube.support import eventually

FAST = InformerSettings(backoff=RetrySettings(initial_delay=0.001, max_delay=0.01, jitter=0.0), min_watch_duration=0.0)


def pod(name: str, rv: int, *, owner: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "resourceVersion": str(rv),
        "labels": labels,
        "managedFields": [{"manager": "kubectl"}],
    }
    if owner:
        meta["ownerReferences"] = [{"uid": owner, "kind": "PyTorchJob", "name": owner, "controller": True}]
    return {"metadata": meta}


Step = WatchEvent | BaseException


class FakeApi:
    """Answers list() from ``lists`` in turn and each watch() with the next script of ``watches``."""

    def __init__(self, lists: list[ObjectList], watches: list[list[Step]]) -> None:
        self.lists = lists
        self.watches = watches
        self.list_calls = 0
        self.watch_calls: list[dict[str, Any]] = []
        self.watch_times: list[float] = []
        self.hang = asyncio.Event()

    async def list(self, resource: Any, **kwargs: Any) -> ObjectList:
        self.list_calls += 1
        return self.lists.pop(0)

    async def watch(self, resource: Any, **kwargs: Any) -> AsyncGenerator[WatchEvent, None]:
        self.watch_calls.append(kwargs)
        self.watch_times.append(asyncio.get_running_loop().time())
        script = self.watches.pop(0) if self.watches else None
        if script is None:
            await self.hang.wait()  # a quiet, healthy watch
            return
        for step in script:
            if isinstance(step, BaseException):
                raise step
            yield step


class Recorder:
    def __init__(self) -> None:
        self.log: list[tuple[str, str, str]] = []

    def handler(self) -> Handler:
        def rv(o: dict[str, Any]) -> str:
            return str(o["metadata"]["resourceVersion"])

        return Handler(
            on_add=lambda o: self.log.append(("add", o["metadata"]["name"], rv(o))),
            on_update=lambda old, new: self.log.append(("update", new["metadata"]["name"], rv(new))),
            on_delete=lambda o: self.log.append(("delete", o["metadata"]["name"], rv(o))),
        )


async def run_informer(api: FakeApi, **kwargs: Any) -> tuple[Informer, Recorder, asyncio.Task[None]]:
    informer = Informer(cast(KubeClient, api), PODS, namespace="ns", settings=kwargs.pop("settings", FAST), **kwargs)
    recorder = Recorder()
    informer.add_handler(recorder.handler())
    task = asyncio.create_task(informer.run())
    async with asyncio.timeout(5):
        await informer.wait_synced()
    return informer, recorder, task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_list_then_watch_from_the_list_version_with_bookmarks() -> None:
    api = FakeApi([ObjectList([pod("a", 5), pod("b", 6)], "10")], [])
    informer, recorder, task = await run_informer(api)
    assert sorted(recorder.log) == [("add", "a", "5"), ("add", "b", "6")]
    await eventually(lambda: api.watch_calls, what="watch")
    assert api.watch_calls[0]["resource_version"] == "10"
    assert api.watch_calls[0]["allow_bookmarks"] is True
    assert api.watch_calls[0]["timeout_seconds"] == FAST.watch_timeout_seconds
    assert api.watch_calls[0]["read_timeout"] == FAST.inactivity_timeout
    assert informer.get("a", namespace="ns") is not None
    assert informer.get("zzz", namespace="ns") is None
    await stop(task)


async def test_events_update_the_cache_and_stale_ones_are_dropped() -> None:
    api = FakeApi(
        [ObjectList([pod("a", 5)], "10")],
        [
            [
                WatchEvent("MODIFIED", pod("a", 11)),
                WatchEvent("MODIFIED", pod("a", 9)),  # older than the cache: a stale overwrite, dropped
                WatchEvent("ADDED", pod("b", 12)),
                WatchEvent("DELETED", pod("b", 13)),
                WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "20"}}),
            ]
        ],
    )
    informer, recorder, task = await run_informer(api)
    await eventually(lambda: len(api.watch_calls) >= 2, what="resumed watch")
    assert recorder.log == [("add", "a", "5"), ("update", "a", "11"), ("add", "b", "12"), ("delete", "b", "13")]
    assert informer.get("a", namespace="ns")["metadata"]["resourceVersion"] == "11"  # type: ignore[index]
    assert informer.get("b", namespace="ns") is None
    # The ended watch resumed from the bookmark, without a new list.
    assert api.watch_calls[1]["resource_version"] == "20"
    assert api.list_calls == 1
    await stop(task)


async def test_gone_relists_and_delivers_what_was_missed() -> None:
    api = FakeApi(
        [
            ObjectList([pod("a", 5), pod("b", 6), pod("c", 7)], "10"),
            # While we were away: b was deleted, c changed, d was created, a is unchanged.
            ObjectList([pod("a", 5), pod("c", 30), pod("d", 31)], "40"),
        ],
        [[errors.Gone("too old resource version", status=410, reason="Expired")]],
    )
    informer, recorder, task = await run_informer(api)
    await eventually(lambda: informer.relists == 2 and len(api.watch_calls) >= 2, what="re-list")
    assert sorted(recorder.log[3:]) == [("add", "d", "31"), ("delete", "b", "6"), ("update", "c", "30")]
    assert sorted(informer.keys()) == ["ns/a", "ns/c", "ns/d"]
    assert api.watch_calls[1]["resource_version"] == "40"
    await stop(task)


async def test_cut_watch_resumes_from_last_version_without_relisting() -> None:
    api = FakeApi(
        [ObjectList([], "10")],
        [
            [WatchEvent("ADDED", pod("a", 11)), errors.TransportError("connection reset")],
            [errors.TransportError("connection refused")],  # no progress: backoff, same version
            [WatchEvent("MODIFIED", pod("a", 12))],
        ],
    )
    _informer, recorder, task = await run_informer(api)
    await eventually(lambda: len(api.watch_calls) >= 4, what="reconnects")
    assert [c["resource_version"] for c in api.watch_calls[:4]] == ["10", "11", "11", "12"]
    assert api.list_calls == 1
    assert recorder.log == [("add", "a", "11"), ("update", "a", "12")]
    await stop(task)


async def test_a_watch_that_ends_at_once_without_events_backs_off_instead_of_spinning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # FAST has min_watch_duration=0.0, where every ended watch counts as a normal end; here it is on.
    settings = InformerSettings(
        backoff=RetrySettings(initial_delay=0.02, max_delay=1.0, jitter=0.0), min_watch_duration=5.0
    )
    api = FakeApi(
        [ObjectList([], "10")],
        [[], [], [], [WatchEvent("ADDED", pod("a", 11))]],  # three watches closed at once, then a working one
    )
    informer = Informer(cast(KubeClient, api), PODS, namespace="ns", settings=settings)
    sleeps: list[float] = []
    log_failure = informer._log_failure

    def before_sleep(failure: BaseException, delay: float, failures: int) -> None:
        sleeps.append(delay)
        log_failure(failure, delay, failures)

    monkeypatch.setattr(informer, "_log_failure", before_sleep)
    task = asyncio.create_task(informer.run())
    await eventually(lambda: len(api.watch_calls) >= 5, what="the watch after the working one")
    assert sleeps == pytest.approx([0.02, 0.04, 0.08])
    gaps = [b - a for a, b in itertools.pairwise(api.watch_times)]
    assert gaps[0] >= 0.02 and gaps[1] >= 0.04 and gaps[2] >= 0.08
    # The working watch made progress, so its end resumed at once, without backoff.
    assert len(sleeps) == 3 and gaps[3] < 0.08
    # No re-list: every retry resumed from the same resourceVersion.
    assert api.list_calls == 1
    assert [c["resource_version"] for c in api.watch_calls] == ["10", "10", "10", "10", "11"]
    assert informer.get("a", namespace="ns") is not None
    await stop(task)


async def test_server_errors_before_the_first_list_are_retried() -> None:
    class FlakyList(FakeApi):
        async def list(self, resource: Any, **kwargs: Any) -> ObjectList:
            self.list_calls += 1
            if self.list_calls < 3:
                raise errors.ServerError("etcd unavailable", status=503)
            return ObjectList([pod("a", 1)], "1")

    api = FlakyList([], [])
    informer, _recorder, task = await run_informer(api)
    assert api.list_calls == 3
    assert informer.synced
    await stop(task)


async def test_transform_and_indexers() -> None:
    api = FakeApi(
        [ObjectList([pod("a", 1, owner="u1", role="master"), pod("b", 2, owner="u1"), pod("c", 3, owner="u2")], "3")],
        [[WatchEvent("MODIFIED", pod("b", 4, owner="u2"))]],
    )
    informer, _recorder, task = await run_informer(api, indexers={OWNER_INDEX: by_owner_uid, "role": by_label("role")})
    assert "managedFields" not in informer.get("a", namespace="ns")["metadata"]  # type: ignore[index]
    await eventually(lambda: len(informer.list(OWNER_INDEX, "u2")) == 2, what="re-indexing")
    assert [o["metadata"]["name"] for o in informer.list(OWNER_INDEX, "u1")] == ["a"]
    assert [o["metadata"]["name"] for o in informer.list("role", "ns/master")] == ["a"]
    assert informer.list(OWNER_INDEX, "nobody") == []
    await stop(task)


async def test_resync_redelivers_the_cache_without_api_calls() -> None:
    api = FakeApi([ObjectList([pod("a", 1)], "1")], [])
    settings = InformerSettings(resync_period=0.02, backoff=FAST.backoff)
    _informer, recorder, task = await run_informer(api, settings=settings)
    await eventually(lambda: recorder.log.count(("update", "a", "1")) >= 2, what="resyncs")
    assert api.list_calls == 1
    assert len(api.watch_calls) == 1
    await stop(task)


async def test_a_failing_handler_does_not_stop_the_others() -> None:
    api = FakeApi([ObjectList([pod("a", 1)], "1")], [])
    informer = Informer(cast(KubeClient, api), PODS, settings=FAST)

    def broken(obj: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    seen: list[str] = []
    informer.add_handler(Handler(on_add=broken))
    informer.add_handler(Handler(on_add=lambda o: seen.append(o["metadata"]["name"])))
    task = asyncio.create_task(informer.run())
    async with asyncio.timeout(5):
        await informer.wait_synced()
    assert seen == ["a"]
    await stop(task)


@pytest.mark.parametrize(("time_slice", "others_run_mid_burst"), [(0.0, True), (3600.0, False)])
async def test_a_burst_of_events_leaves_the_rest_of_the_process_a_turn(
    time_slice: float, others_run_mid_burst: bool
) -> None:
    """A watch read hands over a whole burst at once; after each ``time_slice`` of handling the informer lets
    other tasks (the workers, a failover among them) run, instead of making them wait for the whole burst."""
    burst = [WatchEvent("ADDED", pod(f"p{i}", 20 + i)) for i in range(200)]
    api = FakeApi([ObjectList([], "10")], [burst])
    settings = InformerSettings(backoff=FAST.backoff, min_watch_duration=0.0, time_slice=time_slice)
    informer = Informer(cast(KubeClient, api), PODS, namespace="ns", settings=settings)
    recorder = Recorder()
    informer.add_handler(recorder.handler())
    seen_by_another_task: list[int] = []

    def first_event(_: dict[str, Any]) -> None:
        if not seen_by_another_task and informer.get("p1", namespace="ns") is None:
            asyncio.get_running_loop().call_soon(lambda: seen_by_another_task.append(len(recorder.log)))

    informer.add_handler(Handler(on_add=first_event))
    task = asyncio.create_task(informer.run())
    await eventually(lambda: len(recorder.log) == 200 and seen_by_another_task, what="the burst and the other task")
    assert (seen_by_another_task[0] < 200) is others_run_mid_burst
    await stop(task)
