"""Work queue semantics: de-duplication, one worker per key, backoff, delayed adds, shutdown."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from kubedl_py.kube.metrics import Metrics
from kubedl_py.kube.workqueue import BackoffSettings, ExponentialBackoff, ShutDown, WorkQueue, namespace_of


async def take(queue: WorkQueue[str]) -> str:
    async with asyncio.timeout(2.0):
        return await queue.get()


async def test_adds_of_a_waiting_key_collapse_into_one() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for _ in range(5):
        queue.add("ns/a")
    queue.add("ns/b")
    assert len(queue) == 2
    assert [await take(queue), await take(queue)] == ["ns/a", "ns/b"]
    assert len(queue) == 0


async def test_key_added_while_processing_is_requeued_only_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("ns/a")
    key = await take(queue)
    queue.add("ns/a")
    queue.add("ns/a")
    # Not handed out again while the first worker holds it...
    assert len(queue) == 0
    assert queue.processing == {"ns/a"}
    queue.done(key)
    # ...but not lost either: exactly once more.
    assert len(queue) == 1
    assert await take(queue) == "ns/a"
    queue.done("ns/a")
    assert len(queue) == 0


async def test_concurrent_workers_never_hold_the_same_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    holding: set[str] = set()
    overlaps: list[str] = []
    processed: list[str] = []

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            if key in holding:
                overlaps.append(key)
            holding.add(key)
            await asyncio.sleep(0)  # give other workers a chance to race
            # Events keep arriving for the key being processed.
            queue.add(key)
            await asyncio.sleep(0)
            holding.discard(key)
            processed.append(key)
            queue.done(key)
            if len(processed) >= 200:
                queue.shutdown()

    for i in range(10):
        queue.add(f"ns/{i % 3}")
    async with asyncio.timeout(5):
        await asyncio.gather(*(worker() for _ in range(8)))
    assert overlaps == []
    assert set(processed) == {"ns/0", "ns/1", "ns/2"}


def test_backoff_doubles_per_failure_up_to_the_cap_and_forget_resets() -> None:
    backoff: ExponentialBackoff[str] = ExponentialBackoff(BackoffSettings(base_delay=0.005, max_delay=1.0))
    delays = [backoff.when("a") for _ in range(10)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == 1.0
    assert all(b >= a for a, b in itertools.pairwise(delays))
    # Keys back off independently.
    assert backoff.when("b") == 0.005
    assert backoff.failures("a") == 10
    backoff.forget("a")
    assert backoff.failures("a") == 0
    assert backoff.when("a") == 0.005


def test_backoff_survives_huge_failure_counts() -> None:
    backoff: ExponentialBackoff[str] = ExponentialBackoff(BackoffSettings(base_delay=1.0, max_delay=60.0))
    for _ in range(2000):
        delay = backoff.when("a")
    assert delay == 60.0


async def test_add_rate_limited_delays_by_the_backoff() -> None:
    queue: WorkQueue[str] = WorkQueue(backoff=ExponentialBackoff(BackoffSettings(base_delay=0.02)))
    loop = asyncio.get_running_loop()
    queue.add_rate_limited("ns/a")
    first_due = queue.due("ns/a")
    assert first_due is not None
    assert len(queue) == 0
    assert await take(queue) == "ns/a"
    assert loop.time() >= first_due
    queue.done("ns/a")
    queue.add_rate_limited("ns/a")
    second_due = queue.due("ns/a")
    assert second_due is not None
    assert queue.num_requeues("ns/a") == 2
    assert second_due - loop.time() > 0.02  # the second failure waits about twice as long
    queue.forget("ns/a")
    assert queue.num_requeues("ns/a") == 0
    queue.shutdown()


async def test_add_after_hands_keys_out_in_due_order() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("late", 0.15)
    queue.add_after("early", 0.05)
    queue.add_after("middle", 0.1)
    assert len(queue) == 0
    assert queue.delayed == {"late", "early", "middle"}
    order = [await take(queue) for _ in range(3)]
    assert order == ["early", "middle", "late"]


async def test_add_after_earliest_wins() -> None:
    queue: WorkQueue[str] = WorkQueue()
    loop = asyncio.get_running_loop()
    queue.add_after("a", 30)
    queue.add_after("a", 0.05)  # sooner: replaces the 30 s timer
    due = queue.due("a")
    assert due is not None and due - loop.time() < 1
    queue.add_after("a", 60)  # later: ignored
    assert queue.due("a") == due
    assert await take(queue) == "a"
    assert queue.delayed == frozenset()


async def test_add_after_zero_is_an_add() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 0)
    assert len(queue) == 1


async def test_shutdown_wakes_idle_workers_and_drops_pending_and_delayed() -> None:
    queue: WorkQueue[str] = WorkQueue()
    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.shutdown()
    with pytest.raises(ShutDown):
        await waiting
    queue2: WorkQueue[str] = WorkQueue()
    queue2.add("a")
    queue2.add_after("b", 0.01)
    queue2.shutdown()
    assert len(queue2) == 0
    assert queue2.delayed == frozenset()
    queue2.add("c")  # ignored once shut down
    with pytest.raises(ShutDown):
        await queue2.get()


async def test_shutdown_with_drain_hands_out_what_was_queued() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    queue.shutdown(drain=True)
    assert [await take(queue), await take(queue)] == ["a", "b"]
    with pytest.raises(ShutDown):
        await queue.get()


async def test_in_flight_key_finishes_after_shutdown() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    key = await take(queue)
    queue.shutdown()
    idle = asyncio.create_task(queue.wait_idle())
    await asyncio.sleep(0)
    assert not idle.done()
    queue.add(key)  # an event during shutdown does not resurrect the key
    queue.done(key)
    async with asyncio.timeout(1):
        await idle
    assert len(queue) == 0


async def test_cancelled_getter_does_not_strand_a_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs: `second` must get the key
    async with asyncio.timeout(1):
        assert await second == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_depth_gauge_follows_the_queue() -> None:
    metrics = Metrics()
    queue: WorkQueue[str] = WorkQueue(name="jobs", metrics=metrics)
    queue.add("a")
    queue.add("b")
    assert metrics.value("kubedl_workqueue_depth", {"queue": "jobs"}) == 2
    await take(queue)
    assert metrics.value("kubedl_workqueue_depth", {"queue": "jobs"}) == 1
    assert metrics.value("kubedl_workqueue_adds_total", {"queue": "jobs"}) == 2


async def test_the_wait_of_each_key_is_recorded_by_lane() -> None:
    """How long keys waited for a worker, urgent ones apart: an operator sees whether failovers queue."""
    metrics = Metrics()
    queue: WorkQueue[str] = WorkQueue(name="jobs", metrics=metrics)
    queue.add("ns/new")
    queue.add("ns/lost-a-pod")
    queue.add("ns/lost-a-pod", urgent=True)  # moved up: counted in the urgent lane
    assert [await take(queue), await take(queue)] == ["ns/lost-a-pod", "ns/new"]

    def waits(lane: str) -> float | None:
        return metrics.value("kubedl_workqueue_queue_duration_seconds_count", {"queue": "jobs", "lane": lane})

    assert waits("urgent") == 1 and waits("ordinary") == 1
    queue.done("ns/new")
    queue.add("ns/new")  # a key added again is a new wait
    await take(queue)
    assert waits("ordinary") == 2


async def test_an_urgent_key_goes_to_the_front_even_if_it_already_waits() -> None:
    """A job that lost a running pod is reconciled before the jobs queued ahead of it (new work); urgent keys
    among themselves keep their order (the first failover first)."""
    queue: WorkQueue[str] = WorkQueue()
    for name in ("a", "b", "c"):
        queue.add(f"ns/{name}")
    queue.add("ns/d", urgent=True)  # new and urgent: ahead of a, b, c
    queue.add("ns/c", urgent=True)  # already waiting at the back: moved up behind d, not duplicated
    queue.add("ns/d", urgent=True)  # already lined up as urgent: stays where it is
    assert len(queue) == 4
    assert [await take(queue) for _ in range(4)] == ["ns/d", "ns/c", "ns/a", "ns/b"]


async def test_a_worker_for_urgent_keys_takes_them_while_the_others_are_busy() -> None:
    """Every ordinary worker holds a key; a failover's key does not wait for one of them to finish, and the
    urgent-only worker never takes ordinary work."""
    queue: WorkQueue[str] = WorkQueue()
    urgent_worker = asyncio.create_task(queue.get(urgent_only=True))
    queue.add("ns/new-job")
    assert await take(queue) == "ns/new-job"  # an ordinary worker got it, not the urgent one
    queue.add("ns/another-new-job")
    assert not urgent_worker.done()
    queue.add("ns/failover", urgent=True)
    async with asyncio.timeout(2.0):
        assert await urgent_worker == "ns/failover"
    assert queue.processing == {"ns/new-job", "ns/failover"}
    assert len(queue) == 1  # the ordinary key still waits for an ordinary worker


async def test_an_urgent_key_wakes_an_ordinary_worker_first() -> None:
    """An idle ordinary worker takes an urgent key: the urgent-only ones stay free for the next failover."""
    queue: WorkQueue[str] = WorkQueue()
    urgent_worker = asyncio.create_task(queue.get(urgent_only=True))
    ordinary_worker = asyncio.create_task(queue.get())
    await asyncio.sleep(0)  # both wait now
    queue.add("ns/failover", urgent=True)
    async with asyncio.timeout(2.0):
        assert await ordinary_worker == "ns/failover"
    assert not urgent_worker.done()
    queue.shutdown()
    with pytest.raises(ShutDown):
        await urgent_worker


async def test_an_urgent_add_during_processing_requeues_at_the_front_when_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("ns/busy")
    busy = await take(queue)
    queue.add("ns/other")
    queue.add("ns/busy", urgent=True)
    assert len(queue) == 1  # still one worker per key
    queue.done(busy)
    assert [await take(queue), await take(queue)] == ["ns/busy", "ns/other"]


async def test_add_soon_gathers_what_comes_meanwhile_and_never_delays_a_waiting_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_soon("a", 0.05)
    queue.add_soon("a", 0.05)  # within the window: the same single add
    assert len(queue) == 0 and queue.delayed == {"a"}
    assert await take(queue) == "a"
    queue.add_soon("a", 30)  # being processed: comes back after it, within 30 s
    assert queue.delayed == {"a"}
    queue.done("a")
    queue.add("b")
    queue.add_soon("b", 30)  # already waiting to be handed out: nothing to add, and it is not held back
    assert queue.delayed == {"a"} and await take(queue) == "b"


async def test_one_tenants_burst_does_not_hold_back_another_tenants_key() -> None:
    """300 keys of namespace a, then one of b: b's is handed out second, not 301st; each tenant keeps its own
    order; a queue without a tenant function is one first-come-first-served line."""
    fair: WorkQueue[str] = WorkQueue(tenant=namespace_of)
    for i in range(300):
        fair.add(f"a/job-{i}")
    fair.add("b/job")
    fair.add("c/job")
    taken = [await fair.get() for _ in range(6)]
    assert taken == ["a/job-0", "b/job", "c/job", "a/job-1", "a/job-2", "a/job-3"]
    fair.add("b/again")
    assert [await fair.get() for _ in range(2)] == ["a/job-4", "b/again"]  # after a's turn, already lined up
    assert len(fair) == 300 - 5
    fair.add("b/moved")
    fair.add("b/moved", urgent=True)  # moved up from its tenant's line to the urgent lane
    assert await fair.get() == "b/moved"
    plain: WorkQueue[str] = WorkQueue()
    for key in ("a/1", "a/2", "b/1"):
        plain.add(key)
    assert [await plain.get() for _ in range(3)] == ["a/1", "a/2", "b/1"]
