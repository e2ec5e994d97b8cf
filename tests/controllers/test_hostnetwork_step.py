"""The bookkeeping of ports reserved while a replica's old pod terminates (``HostNetworkSession.replacing``).

The end-to-end behaviour (both tiers) is in tests/integration/test_hostnetwork.py; here the cases that are
slow or racy to stage on a cluster: a range with no room, a job scaled down or finished meanwhile, a failed
Service write, a pod the scheduler cannot place for its port.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kubedl_py.api import constants as c
from kubedl_py.api import parse_job, with_defaults
from kubedl_py.controllers.hostnetwork.feature import NODE_PORTS_REASON, PORT_RETRY_AFTER, HostNetwork
from kubedl_py.controllers.hostnetwork.ports import HostPortAllocator
from kubedl_py.controllers.kinds import controller_for
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.plan import Plan, make_plan

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


def _pod(index: int, port: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"fo-worker-{index}", "namespace": NS, "annotations": {c.ANNOTATION_HOST_PORT: str(port)}},
        "spec": {"hostNetwork": True, "containers": [{"name": "pytorch", "ports": [{"hostPort": port}]}]},
        "status": {"phase": "Running"},
    }


def _seen(
    workers: int, services: dict[str, int], terminating: tuple[int, ...] = (), pods: dict[int, int] | None = None
) -> Observation:
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
    for index, port in (pods or {}).items():
        replicas[("Worker", index)].pod = _pod(index, port)
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


def _plan(seen: Observation) -> Plan:
    return make_plan(seen, controller_for(seen.job.kind))


def _network(low: int, high: int) -> tuple[HostNetwork, FakeServices]:
    services = FakeServices()
    return HostNetwork(HostPortAllocator(low, high), FakeRecorder(), services), services  # type: ignore[arg-type]


def _used(network: HostNetwork) -> int:
    """Ports in use, counted with multiplicity (a port held on two nodes counts twice)."""
    allocator = network.allocator
    return sum(allocator.use(port) for port in range(allocator.low, allocator.high + 1))


async def test_the_port_reserved_while_terminating_is_the_replacements_and_needs_no_second_write() -> None:
    network, client = _network(100, 109)
    network.allocator.observe_pod("old", f"{NS}/fo-worker-0", [100])  # the old pod, before it terminated
    network.allocator.forget_pod("old")
    seen = _seen(1, {"fo-worker-0": 100}, terminating=(0,))
    step = network.begin(_plan(seen))
    await step.replacing(_plan(seen), [seen.replicas[("Worker", 0)]])
    ((name, port),) = client.patches
    assert name == "fo-worker-0" and port != 100 and network.allocator.use(port) == 1
    await step.replacing(_plan(seen), [seen.replicas[("Worker", 0)]])  # a later reconcile while it still terminates
    assert len(client.patches) == 1

    gone = _seen(1, {"fo-worker-0": port})  # the old pod is gone: the replacement is due
    step = network.begin(_plan(gone))
    await step.reserve(_plan(gone), [gone.replicas[("Worker", 0)]])
    assert step.ports(_plan(gone)) == {("Worker", 0): port} and len(client.patches) == 1
    network.allocator.observe_pod("new", f"{NS}/fo-worker-0", [port])  # made: the pod holds it now
    assert network.allocator.use(port) == 1
    network.allocator.forget_pod("new")
    assert network.allocator.use(port) == 0


async def test_a_full_range_gives_the_replacement_its_own_old_port_without_a_write() -> None:
    """Every port of the range is the job's: the replacement takes its old port back instead of waiting
    (ports are unique per node; the scheduler keeps it off a node where the old pod still holds it)."""
    network, client = _network(100, 102)
    for index, port in enumerate((100, 101, 102)):
        network.allocator.observe_pod(f"uid{index}", f"{NS}/fo-worker-{index}", [port])
    seen = _seen(3, {f"fo-worker-{i}": 100 + i for i in range(3)}, terminating=(0,), pods={1: 101, 2: 102})
    await network.begin(_plan(seen)).replacing(_plan(seen), [seen.replicas[("Worker", 0)]])
    assert client.patches == []  # the Service already points at the port the replacement gets
    network.allocator.forget_pod("uid0")  # the old pod is gone

    gone = _seen(3, {f"fo-worker-{i}": 100 + i for i in range(3)}, pods={1: 101, 2: 102})
    step = network.begin(_plan(gone))
    await step.reserve(_plan(gone), [gone.replicas[("Worker", 0)]])
    assert step.ports(_plan(gone))[("Worker", 0)] == 100 and client.patches == []


async def test_replicas_of_one_job_get_distinct_ports_while_the_range_has_room() -> None:
    network, _ = _network(100, 107)
    network.allocator.observe_pod("far", "other/pod", [100, 101, 102, 103])  # used on another node
    seen = _seen(6, {})
    step = network.begin(_plan(seen))
    await step.reserve(_plan(seen), list(seen.replicas.values()))
    ports = list(step.ports(_plan(seen)).values())
    assert len(set(ports)) == 6  # so replicas may share a node
    assert {104, 105, 106, 107} <= set(ports)  # the unused ports first


async def test_a_pod_no_node_can_take_for_its_port_gets_another_after_the_wait() -> None:
    network, client = _network(100, 104)
    seen = _seen(1, {"fo-worker-0": 100}, pods={0: 100})
    pod = seen.replicas[("Worker", 0)].pod
    assert pod is not None
    since = seen.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    message = f"0/3 nodes are available: 3 node(s) {NODE_PORTS_REASON}. preemption: 0/3 nodes are available."
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": since,
            }
        ],
    }
    step = network.begin(_plan(seen))
    assert step.unplaceable(_plan(seen)) == []  # not waited long enough: a requeue for when it will have
    assert seen.requeue_after is not None and 0 < seen.requeue_after <= PORT_RETRY_AFTER

    later = replace(seen, now=seen.now + timedelta(seconds=PORT_RETRY_AFTER + 1), requeue_after=None)
    step = network.begin(_plan(later))
    (due,) = step.unplaceable(_plan(later))
    assert due.index == 0 and step.notes and step.notes[0][0] == "HostPortReassigned"
    due.pod, due.terminating = None, True  # the reconcile deletes the unbound pod
    await step.replacing(_plan(later), [due])
    ((_, port),) = client.patches
    assert port != 100  # not the port no node had free
    # The next time it waits twice as long.
    assert network.kept(f"{NS}/fo").unplaceable[("Worker", 0)].changes == 1


async def test_a_failed_service_write_gives_back_the_new_port() -> None:
    network, client = _network(100, 104)
    seen = _seen(1, {"fo-worker-0": 100})
    client.fail = True
    with pytest.raises(ConnectionError):
        await network.begin(_plan(seen)).reserve(_plan(seen), [seen.replicas[("Worker", 0)]])
    assert _used(network) == 0


async def test_scaled_down_finished_or_deleted_jobs_give_their_reservations_back() -> None:
    network, _ = _network(100, 109)
    seen = _seen(3, {f"fo-worker-{i}": 100 + i for i in range(3)}, terminating=(0, 1, 2))
    await network.begin(_plan(seen)).replacing(_plan(seen), list(seen.replicas.values()))
    assert _used(network) == 3

    smaller = _seen(2, {f"fo-worker-{i}": 100 + i for i in range(2)})
    await network.begin(_plan(smaller)).replacing(_plan(smaller), [])  # worker 2 is no more: its reservation goes
    assert _used(network) == 2
    network.job_finished(f"{NS}/fo")
    assert _used(network) == 0

    await network.begin(_plan(seen)).replacing(_plan(seen), list(seen.replicas.values()))
    network.forget(f"{NS}/fo")
    assert _used(network) == 0
