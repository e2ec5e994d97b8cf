"""The bookkeeping of ports reserved while a replica's old pod terminates (``HostNetworkStep.repoint_ahead``).

The end-to-end behaviour (both tiers) is in tests/integration/test_hostnetwork.py; here the cases that are
slow or racy to stage on a cluster: a range with no room, a job scaled down or finished meanwhile, a failed
Service write.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kubedl_py.api import constants as c
from kubedl_py.api import parse_job, with_defaults
from kubedl_py.controllers.hostnetwork import HostNetwork
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.ports import HostPortAllocator

NS = "team"


class FakeServices:
    """The client's Service patches, recorded; ``fail`` makes the next one raise."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, int]] = []
        self.fail = False

    async def patch(self, _resource: Any, name: str, body: dict[str, Any], *, namespace: str) -> dict[str, Any]:
        if self.fail:
            raise ConnectionError("the API server went away")
        self.patches.append((name, body["spec"]["ports"][0]["targetPort"]))
        return {}


class FakeRecorder:
    async def normal(self, *_args: Any) -> None:
        return None

    async def warning(self, *_args: Any) -> None:
        return None


def _service(name: str, target: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"clusterIP": "10.0.0.1", "ports": [{"port": 23456, "targetPort": target}]},
    }


def _seen(workers: int, services: dict[str, int], terminating: tuple[int, ...] = ()) -> Observation:
    container = {"name": "pytorch", "image": "pytorch"}
    worker = {"replicas": workers, "template": {"spec": {"containers": [container]}}}
    raw = {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": {"name": "fo", "namespace": NS, "uid": "u1", "annotations": {c.ANNOTATION_NETWORK_MODE: "host"}},
        "spec": {"pytorchReplicaSpecs": {"Worker": worker}},
    }
    job = with_defaults(parse_job(raw))
    replicas = {("Worker", i): Replica("Worker", i, terminating=i in terminating) for i in range(workers)}
    return Observation(
        raw=raw,
        job=job,
        status={},
        pods=[],
        services={name: _service(name, port) for name, port in services.items()},
        replicas=replicas,
        surplus=[],
        now=datetime.now(UTC),
    )


def _network(low: int, high: int) -> tuple[HostNetwork, FakeServices]:
    services = FakeServices()
    return HostNetwork(HostPortAllocator(low, high), FakeRecorder(), services), services  # type: ignore[arg-type]


async def test_the_port_reserved_while_terminating_is_the_replacements_and_needs_no_second_write() -> None:
    network, client = _network(100, 109)
    network.allocator.observe_pod("old", f"{NS}/fo-worker-0", [100])  # the old pod, before it terminated
    network.allocator.forget_pod("old")
    seen = _seen(1, {"fo-worker-0": 100}, terminating=(0,))
    step = network.step(seen)
    await step.repoint_ahead([seen.replicas[("Worker", 0)]])
    ((name, port),) = client.patches
    assert name == "fo-worker-0" and port != 100 and network.allocator.is_held(port)
    await step.repoint_ahead([seen.replicas[("Worker", 0)]])  # a later reconcile while it still terminates
    assert len(client.patches) == 1

    gone = _seen(1, {"fo-worker-0": port})  # the old pod is gone: the replacement is due
    step = network.step(gone)
    assert await step.reserve([gone.replicas[("Worker", 0)]])
    assert step.ports() == {("Worker", 0): port} and len(client.patches) == 1
    network.allocator.observe_pod("new", f"{NS}/fo-worker-0", [port])  # made: the pod holds it now
    network.allocator.forget_pod("new")
    assert not network.allocator.is_held(port)


async def test_a_range_without_room_keeps_the_ports_reserved_ahead_and_releases_the_rest() -> None:
    network, client = _network(100, 102)
    seen = _seen(2, {"fo-worker-0": 100, "fo-worker-1": 101}, terminating=(0,))
    await network.step(seen).repoint_ahead([seen.replicas[("Worker", 0)]])
    ((_, ahead),) = client.patches
    network.allocator.observe_pod("other", "elsewhere/pod", [p for p in (100, 101, 102) if p != ahead])
    free_before = network.allocator.free_count

    both = _seen(2, {"fo-worker-0": ahead, "fo-worker-1": 101})
    step = network.step(both)
    assert not await step.reserve(list(both.replicas.values()))  # worker 1 finds no port
    assert network.allocator.is_held(ahead) and network.allocator.free_count == free_before
    network.allocator.forget_pod("other")
    step = network.step(both)
    assert await step.reserve(list(both.replicas.values()))
    assert step.ports()[("Worker", 0)] == ahead


async def test_a_failed_service_write_gives_back_the_new_port() -> None:
    network, client = _network(100, 104)
    seen = _seen(1, {"fo-worker-0": 100})
    client.fail = True
    with pytest.raises(ConnectionError):
        await network.step(seen).reserve([seen.replicas[("Worker", 0)]])
    assert network.allocator.free_count == 5


async def test_scaled_down_finished_or_deleted_jobs_give_their_reservations_back() -> None:
    network, _ = _network(100, 109)
    seen = _seen(3, {f"fo-worker-{i}": 100 + i for i in range(3)}, terminating=(0, 1, 2))
    await network.step(seen).repoint_ahead(list(seen.replicas.values()))
    assert network.allocator.free_count == 7

    smaller = _seen(2, {f"fo-worker-{i}": 100 + i for i in range(2)})
    await network.step(smaller).repoint_ahead([])  # worker 2 is no more: its reservation goes
    assert network.allocator.free_count == 8
    network.job_finished(f"{NS}/fo")
    assert network.allocator.free_count == 10

    await network.step(seen).repoint_ahead(list(seen.replicas.values()))
    network.job_gone(f"{NS}/fo")
    assert network.allocator.free_count == 10
