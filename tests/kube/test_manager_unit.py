"""Manager + Controller over a scripted fake API: owner mapping, results, errors, health, graceful stop."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, cast

import aiohttp

from kubedl_py.kube.client import KubeClient, ObjectList
from kubedl_py.kube.informer import Handler, InformerSettings
from kubedl_py.kube.manager import Controller, Manager, ManagerSettings, Result, label_key, owner_key
from kubedl_py.kube.metrics import Metrics
from kubedl_py.kube.resources import PODS, Resource
from kubedl_py.kube.retry import RetrySettings
from kubedl_py.kube.workqueue import BackoffSettings
from tests.kube.support import eventually

JOBS = Resource("training.kubedl.io", "v1alpha1", "pytorchjobs", "PyTorchJob")


def obj(name: str, *, owner: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "resourceVersion": "1", "labels": labels}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "training.kubedl.io/v1alpha1",
                "kind": "PyTorchJob",
                "name": owner,
                "uid": "u",
                "controller": True,
            },
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-the-controller", "uid": "c"},
        ]
    return {"metadata": meta}


class FakeApi:
    metrics = None

    def __init__(self, contents: dict[str, list[dict[str, Any]]]) -> None:
        self.contents = contents
        self.quiet = asyncio.Event()

    async def list(self, resource: Resource, **kwargs: Any) -> ObjectList:
        return ObjectList([dict(o) for o in self.contents[resource.plural]], "1")

    async def watch(self, resource: Resource, **kwargs: Any) -> Any:
        await self.quiet.wait()
        yield  # pragma: no cover


class Reconciles:
    """A reconciler whose answers the test scripts per key."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.times: dict[str, list[float]] = {}
        self.answers: dict[str, list[Result | Exception]] = {}
        self.gate: asyncio.Event | None = None
        #: the keys the gate holds (None: every key)
        self.gated: set[str] | None = None
        self.finished: list[str] = []

    async def reconcile(self, key: str) -> Result | None:
        self.calls.append(key)
        self.times.setdefault(key, []).append(asyncio.get_running_loop().time())
        if self.gate is not None and (self.gated is None or key in self.gated):
            await self.gate.wait()
        answers = self.answers.get(key)
        answer = answers.pop(0) if answers else None
        self.finished.append(key)
        if isinstance(answer, Exception):
            raise answer
        return answer


SETTINGS = ManagerSettings(
    workers=2,
    backoff=BackoffSettings(base_delay=0.01),
    informer=InformerSettings(backoff=RetrySettings(initial_delay=0.001, max_delay=0.01)),
    shutdown_timeout=5.0,
)


def build(api: FakeApi, reconciler: Reconciles, settings: ManagerSettings = SETTINGS) -> Manager:
    manager = Manager(cast(KubeClient, api), settings=settings)
    jobs = manager.informer(JOBS, namespace="ns")
    pods = manager.informer(PODS, namespace="ns", label_selector="training.kubedl.io/job-name")
    controller = manager.add_controller("pytorchjob", reconciler)
    controller.watch(jobs)
    controller.watch(pods, map=owner_key("PyTorchJob"))
    controller.watch(pods, map=label_key("training.kubedl.io/job-name"))
    return manager


async def test_owned_objects_wake_their_owner_once() -> None:
    api = FakeApi(
        {
            "pytorchjobs": [obj("j1"), obj("j2")],
            "pods": [
                obj("j1-master-0", owner="j1"),
                obj("j1-worker-0", owner="j1"),
                obj("orphan", **{"training.kubedl.io/job-name": "j3"}),
            ],
        }
    )
    reconciler = Reconciles()
    manager = build(api, reconciler)
    run = asyncio.create_task(manager.run())
    await eventually(lambda: set(reconciler.finished) == {"ns/j1", "ns/j2", "ns/j3"}, what="reconciles")
    # Initial events all arrive before workers start: each key is reconciled exactly once.
    assert sorted(reconciler.calls) == ["ns/j1", "ns/j2", "ns/j3"]
    assert manager.ready()
    manager.stop()
    async with asyncio.timeout(5):
        await run
    assert not manager.running


async def test_errors_back_off_and_requeue_after_waits() -> None:
    api = FakeApi({"pytorchjobs": [obj("broken"), obj("timer")], "pods": []})
    reconciler = Reconciles()
    reconciler.answers["ns/broken"] = [RuntimeError("boom"), RuntimeError("boom"), Result()]
    reconciler.answers["ns/timer"] = [Result(requeue_after=0.05), Result()]
    manager = build(api, reconciler)
    run = asyncio.create_task(manager.run())
    await eventually(
        lambda: reconciler.calls.count("ns/broken") == 3 and reconciler.calls.count("ns/timer") == 2, what="retries"
    )
    controller = manager.controllers[0]
    assert controller.queue.num_requeues("ns/broken") == 0  # forgotten after the success
    # Each retry came after its delay, not at once: errors back off (0.01s, then 0.02s) and
    # requeue_after waits its 0.05s.
    broken, timer = reconciler.times["ns/broken"], reconciler.times["ns/timer"]
    slack = 0.001  # the loop's timers may fire up to its clock resolution early
    assert broken[1] - broken[0] >= 0.01 - slack and broken[2] - broken[1] >= 0.02 - slack
    assert timer[1] - timer[0] >= 0.05 - slack
    m = manager.metrics
    assert m.value("kubedl_reconcile_total", {"controller": "pytorchjob", "result": "error"}) == 2
    assert m.value("kubedl_reconcile_total", {"controller": "pytorchjob", "result": "requeue_after"}) == 1
    manager.stop()
    async with asyncio.timeout(5):
        await run


async def test_stop_lets_in_flight_reconciles_finish() -> None:
    api = FakeApi({"pytorchjobs": [obj("slow")], "pods": []})
    reconciler = Reconciles()
    reconciler.gate = asyncio.Event()
    manager = build(api, reconciler)
    run = asyncio.create_task(manager.run())
    await eventually(lambda: reconciler.calls == ["ns/slow"], what="reconcile start")
    manager.stop()
    controller = manager.controllers[0]
    await eventually(lambda: controller.queue.shutting_down, what="the queue to shut down")
    # Stopped, and the in-flight reconcile is neither cancelled nor abandoned: run() waits for it.
    assert controller.queue.processing == frozenset({"ns/slow"})
    assert not run.done()
    assert reconciler.finished == []
    reconciler.gate.set()
    async with asyncio.timeout(5):
        await run
    assert reconciler.finished == ["ns/slow"]


async def test_health_endpoints() -> None:
    api = FakeApi({"pytorchjobs": [obj("j")], "pods": []})
    reconciler = Reconciles()
    settings = ManagerSettings(metrics_addr="127.0.0.1:0", informer=SETTINGS.informer)
    manager = build(api, reconciler, settings)
    manager.metrics.counter("jobs_created_total", "Jobs seen created.", ["kind"]).labels("PyTorchJob").inc()
    run = asyncio.create_task(manager.run())
    await eventually(lambda: manager.ready() and manager.health is not None, what="ready")
    assert manager.health is not None
    async with aiohttp.ClientSession() as http:
        async with http.get(manager.health.url + "/healthz") as r:
            assert r.status == 200
        async with http.get(manager.health.url + "/readyz") as r:
            assert r.status == 200
            assert "informers-synced ok" in await r.text()
        async with http.get(manager.health.url + "/metrics") as r:
            text = await r.text()
    assert 'kubedl_jobs_created_total{kind="PyTorchJob"} 1.0' in text
    assert "kubedl_reconcile_duration_seconds_bucket" in text
    assert "kubedl_workqueue_depth" in text
    manager.stop()
    async with asyncio.timeout(5):
        await run


async def test_two_managers_in_one_process_have_separate_registries() -> None:
    a = Manager(cast(KubeClient, FakeApi({})))
    b = Manager(cast(KubeClient, FakeApi({})))
    a.metrics.counter("jobs_failed_total", "x").inc()
    assert b.metrics.counter("jobs_failed_total", "x") is not a.metrics.counter("jobs_failed_total", "x")
    assert a.metrics.value("kubedl_jobs_failed_total") == 1
    assert b.metrics.value("kubedl_jobs_failed_total") == 0


def watched_pods(**watch: Any) -> tuple[Controller, Handler]:
    """A one-worker controller watching a fake pod informer (owners: PyTorchJobs; urgent: a pod stopping), and the
    handler it registered, to feed events to by hand."""
    handlers: list[Handler] = []

    class Informer:
        def add_handler(self, handler: Handler) -> None:
            handlers.append(handler)

    controller = Controller("c", Reconciles(), workers=1, metrics=Metrics())
    controller.watch(
        cast(Any, Informer()),
        map=owner_key("PyTorchJob"),
        urgent=lambda o: o["metadata"].get("deletionTimestamp") is not None,
        **watch,
    )
    (handler,) = handlers
    return controller, handler


async def test_a_deleted_or_troubled_object_puts_its_owner_first() -> None:
    """``urgent``/``urgent_delete``: the owner of a deleted pod, or of one the predicate flags, jumps the queue;
    ordinary events keep their order."""
    controller, handler = watched_pods(urgent_delete=True)
    assert handler.on_add and handler.on_update and handler.on_delete
    for job in ("a", "b", "c"):
        handler.on_add(obj(f"{job}-worker-0", owner=job))
    handler.on_delete(obj("c-worker-0", owner="c"))
    stopping = obj("b-worker-0", owner="b")
    stopping["metadata"]["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    handler.on_update(obj("b-worker-0", owner="b"), stopping)
    handler.on_update(obj("a-worker-0", owner="a"), obj("a-worker-0", owner="a"))  # not urgent: stays put
    assert [await controller.queue.get() for _ in range(3)] == ["ns/c", "ns/b", "ns/a"]


async def test_ordinary_events_within_the_batch_are_one_reconcile_and_trouble_is_not_batched() -> None:
    """``batch``: the additions and ordinary updates of one owner's objects within it enqueue the owner once, after
    it; an urgent update goes at once."""
    controller, handler = watched_pods(batch=0.05)
    assert handler.on_add and handler.on_update
    for index in range(8):  # a job's eight pods created at once, then each scheduled
        handler.on_add(obj(f"a-worker-{index}", owner="a"))
    for index in range(8):
        handler.on_update(obj(f"a-worker-{index}", owner="a"), obj(f"a-worker-{index}", owner="a"))
    assert len(controller.queue) == 0 and controller.queue.delayed == {"ns/a"}
    stopping = obj("b-worker-0", owner="b")
    stopping["metadata"]["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    handler.on_update(obj("b-worker-0", owner="b"), stopping)
    assert len(controller.queue) == 1  # the troubled job's owner at once
    async with asyncio.timeout(2):
        assert [await controller.queue.get() for _ in range(2)] == ["ns/b", "ns/a"]
    assert len(controller.queue) == 0 and controller.queue.delayed == frozenset()


async def test_a_reconcile_of_an_urgent_key_holds_the_other_writes_of_the_process() -> None:
    """A key from the urgent lane is reconciled inside the manager's write gate (kubedl_py.kube.priority), an
    ordinary one is not; the gate is the client's too, so every write of the process is held by it."""
    api = FakeApi({"pytorchjobs": [obj("running")], "pods": []})
    manager = build(api, Reconciles(), dataclasses.replace(SETTINGS, urgent_write_hold=2.5))
    assert cast(Any, api).write_gate is manager.write_gate and manager.write_gate.max_hold == 2.5
    held: dict[str, int] = {}

    class Records(Reconciles):
        async def reconcile(self, key: str) -> Result | None:
            held[f"{key} #{len(self.calls)}"] = manager.write_gate.held
            return await super().reconcile(key)

    reconciler = Records()
    manager.controllers[0].reconciler = reconciler
    run = asyncio.create_task(manager.run())
    await eventually(lambda: reconciler.finished == ["ns/running"], what="the first, ordinary reconcile")
    manager.controllers[0].queue.add("ns/running", urgent=True)  # its pod was deleted
    await eventually(lambda: len(reconciler.finished) == 2, what="the failover's reconcile")
    assert held == {"ns/running #0": 0, "ns/running #1": 1} and manager.write_gate.held == 0
    manager.stop()
    async with asyncio.timeout(5):
        await run


async def test_a_failover_is_reconciled_while_every_worker_is_busy() -> None:
    """The workers all hold slow reconciles of new jobs; a job that lost a pod is reconciled meanwhile by a worker
    kept for urgent keys, not after one of them finishes."""
    api = FakeApi({"pytorchjobs": [obj("running"), obj("new-1"), obj("new-2"), obj("new-3")], "pods": []})
    reconciler = Reconciles()
    reconciler.gate = asyncio.Event()
    reconciler.gated = {"ns/new-1", "ns/new-2", "ns/new-3"}
    manager = build(api, reconciler, dataclasses.replace(SETTINGS, urgent_workers=1))
    run = asyncio.create_task(manager.run())
    await eventually(lambda: "ns/running" in reconciler.finished, what="the first reconcile of the running job")
    await eventually(lambda: len(reconciler.calls) == 3, what="both ordinary workers busy")
    controller = manager.controllers[0]
    assert len(controller.queue.processing) == 2 and len(controller.queue) == 1  # a new job still waits
    controller.queue.add("ns/running", urgent=True)  # its pod was deleted
    await eventually(lambda: reconciler.finished.count("ns/running") == 2, what="the failover's reconcile")
    assert [key for key in reconciler.finished if key.startswith("ns/new-")] == []
    reconciler.gate.set()
    manager.stop()
    async with asyncio.timeout(5):
        await run


async def test_while_repairing_fewer_ordinary_reconciles_run_and_a_waiting_key_can_still_turn_urgent() -> None:
    """The repair window is open (kubedl_py.kube.priority): one ordinary reconcile at a time. The other workers
    wait for a slot *before* taking a key, so a job still in the queue whose pod is then deleted is reconciled at
    once by the urgent worker, not after a worker that took it as ordinary work gets a slot."""
    api = FakeApi({"pytorchjobs": [obj("running"), obj("new-1"), obj("new-2"), obj("new-3")], "pods": []})
    reconciler = Reconciles()
    reconciler.gate = asyncio.Event()
    reconciler.gated = {"ns/new-1"}
    settings = dataclasses.replace(SETTINGS, workers=3, urgent_workers=1, repair_workers=1, repair_window=60.0)
    manager = build(api, reconciler, settings)
    controller = manager.controllers[0]
    assert controller.ordinary is not None
    manager.write_gate.repaired()  # another job was just repaired
    run = asyncio.create_task(manager.run())
    await eventually(lambda: reconciler.calls == ["ns/running", "ns/new-1"], what="new-1's slow reconcile")
    assert controller.ordinary.running >= 1 and len(controller.queue) == 2  # new-2 and new-3 still queued
    controller.queue.add("ns/new-3", urgent=True)  # its pod was deleted
    await eventually(lambda: "ns/new-3" in reconciler.finished, what="new-3's urgent reconcile")
    assert "ns/new-2" not in reconciler.calls  # one ordinary reconcile at a time: new-1 still holds the slot
    reconciler.gate.set()
    await eventually(lambda: "ns/new-2" in reconciler.finished, what="new-2 once new-1 is done")
    manager.stop()
    async with asyncio.timeout(5):
        await run
