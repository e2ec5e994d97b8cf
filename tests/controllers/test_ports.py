"""The host-port allocator: in range, no double allocation, O(1) bookkeeping, rebuilt from observations."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubedl_py.controllers.hostnetwork.ports import HostPortAllocator, parse_range, pod_host_ports


def test_reserve_is_random_in_range_and_spreads_over_the_range_first() -> None:
    allocator = HostPortAllocator(20000, 20099, rng=random.Random(1))
    ports = [allocator.reserve(f"ns/p{i}") for i in range(100)]
    assert sorted(ports) == list(range(20000, 20100))  # each port once before any twice
    assert ports != sorted(ports)
    # The range is not exhausted: a port is unique per node, so the 101st pod gets a port used once.
    extra = allocator.reserve("ns/extra")
    assert allocator.use(extra) == 2 and allocator.least_use == 1


def test_bound_pods_hold_their_ports_and_unbound_foreign_pods_hold_nothing() -> None:
    allocator = HostPortAllocator(1000, 1002, rng=random.Random(0))
    allocator.observe_pod("uid-a", "other/a", [1000, 1001], holds=True)  # bound: its node has them
    assert allocator.reserve("ns/x") == 1002
    # A foreign pod that is not bound (say, Pending forever with thousands of ports) holds nothing anywhere.
    allocator.observe_pod("uid-b", "attacker/b", range(1000, 1003), holds=False)
    assert [allocator.use(p) for p in (1000, 1001, 1002)] == [1, 1, 1]
    allocator.forget_pod("uid-a")
    assert allocator.use(1000) == allocator.use(1001) == 0


def test_a_pod_bound_later_then_holds_its_ports() -> None:
    allocator = HostPortAllocator(1000, 1001)
    allocator.observe_pod("u", "other/a", [1000], holds=False)
    assert allocator.use(1000) == 0
    allocator.observe_pod("u", "other/a", [1000], holds=True)
    assert allocator.use(1000) == 1
    allocator.observe_pod("u", "other/a", [1000], holds=False)
    assert allocator.use(1000) == 0


def test_reservation_becomes_the_pod_and_the_pod_frees_it() -> None:
    allocator = HostPortAllocator(1000, 1000)
    port = allocator.reserve("ns/p")
    allocator.observe_pod("uid-1", "ns/p", [port])
    assert allocator.use(port) == 1  # the pod replaced the reservation: counted once
    allocator.forget_pod("uid-1")
    assert allocator.use(port) == 0


def test_release_of_a_failed_create() -> None:
    allocator = HostPortAllocator(1000, 1001, rng=random.Random(2))
    port = allocator.reserve("ns/p")
    allocator.release("ns/p", port)
    allocator.release("ns/p", port)  # twice: no effect
    assert allocator.use(port) == 0


def test_avoid_is_a_preference_and_reuse_comes_before_the_avoided() -> None:
    allocator = HostPortAllocator(1000, 1002, rng=random.Random(3))
    for _ in range(20):
        port = allocator.reserve("ns/p", avoid=[1000], reuse=[1001])
        assert port == 1002  # neither avoided nor the old one while another is left
        allocator.release("ns/p", port)
    port = allocator.reserve("ns/p", avoid=[1000, 1002], reuse=[1001])
    assert port == 1001  # the old port before an avoided one
    allocator.release("ns/p", port)
    # Everything avoided: a port is still given (the scheduler finds a node where it is free), a bad one last.
    assert allocator.reserve("ns/q", avoid=[1000, 1001, 1002]) in (1000, 1001, 1002)
    for _ in range(10):
        port = allocator.reserve("ns/r", avoid=[1000, 1001], reuse=[1002], bad=[1000, 1002])
        assert port == 1001
        allocator.release("ns/r", port)


def test_a_less_used_port_the_job_avoids_comes_before_a_more_used_one() -> None:
    """A full range: 10 ports on 5 nodes, every slot taken but one, port 1006 on one node, while the job holds
    1006 on another. More used ports may be held on every node: the one free slot must be offered, avoided or
    not (an adversary's finding: a pod stayed Unschedulable for minutes, offered only full ports)."""
    allocator = HostPortAllocator(1000, 1009, rng=random.Random(5))
    for port in range(1000, 1010):
        for node in range(5 if port != 1006 else 4):
            allocator.observe_pod(f"uid-{port}-{node}", f"ns/p{port}-{node}", [port])
    for _ in range(20):
        port = allocator.reserve("ns/job-worker-4", avoid=[1006, 1001])
        assert port == 1006
        allocator.release("ns/job-worker-4", port)
    # A bad port (no node could take the pod with it) still waits for every other, whatever its use.
    assert allocator.reserve("ns/job-worker-4", avoid=[1006], bad=[1006]) != 1006


def test_least_used_ports_first() -> None:
    allocator = HostPortAllocator(1000, 1003, rng=random.Random(4))
    for uid, port in enumerate((1000, 1000, 1001, 1002, 1002, 1002)):
        allocator.observe_pod(f"u{uid}", f"ns/p{uid}", [port])
    assert allocator.reserve("ns/new") == 1003
    assert allocator.reserve("ns/new2") in (1001, 1003)


def test_ports_outside_the_range_are_counted_but_not_handed_out() -> None:
    allocator = HostPortAllocator(1000, 1001)
    allocator.observe_pod("u", "ns/x", [80])
    assert allocator.use(80) == 1
    allocator.forget_pod("u")
    assert allocator.use(80) == 0
    assert {allocator.reserve(f"ns/{i}") for i in range(2)} == {1000, 1001}


def test_parse_range() -> None:
    assert parse_range("20000-30000") == (20000, 30000)
    for bad in ("x", "5-1", "0-10", "1-70000"):
        with pytest.raises(ValueError, match="port range"):
            parse_range(bad)


def test_pod_host_ports() -> None:
    pod = {
        "spec": {
            "hostNetwork": True,
            "containers": [{"ports": [{"containerPort": 5}, {"containerPort": 6, "hostPort": 6}]}],
        }
    }
    assert pod_host_ports(pod) == [5, 6]
    assert pod_host_ports({"spec": {"containers": [{"ports": [{"containerPort": 5}]}]}}) == []


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["reserve", "observe", "bind", "unbind", "forget", "release"]), st.integers(0, 30)),
        max_size=150,
    )
)
def test_use_counts_every_holder_exactly_and_reserve_takes_a_least_used_port(ops: list[tuple[str, int]]) -> None:
    """The buckets agree with a plain count of holders after any sequence of events, and a new port is always
    one of least use (when nothing is avoided)."""
    allocator = HostPortAllocator(100, 109, rng=random.Random(7))
    reserved: dict[str, int] = {}
    pods: dict[str, tuple[int, bool]] = {}  # uid -> (port, holds)
    for op, n in ops:
        key, uid = f"ns/p{n}", f"uid{n}"
        if op == "reserve" and key not in reserved and uid not in pods:
            least = min(allocator.use(p) for p in range(100, 110))
            port = allocator.reserve(key)
            assert allocator.use(port) == least + 1
            reserved[key] = port
        elif op == "observe" and key in reserved:
            port = reserved.pop(key)
            allocator.observe_pod(uid, key, [port])
            pods[uid] = (port, True)
        elif op in ("bind", "unbind") and uid in pods:
            port, _ = pods[uid]
            allocator.observe_pod(uid, key, [port], holds=op == "bind")
            pods[uid] = (port, op == "bind")
        elif op == "forget" and uid in pods:
            allocator.forget_pod(uid)
            pods.pop(uid)
        elif op == "release" and key in reserved:
            allocator.release(key, reserved.pop(key))
        expected = Counter([*reserved.values(), *(port for port, holds in pods.values() if holds)])
        assert {p: allocator.use(p) for p in range(100, 110)} == {p: expected.get(p, 0) for p in range(100, 110)}
        assert allocator.least_use == min(expected.get(p, 0) for p in range(100, 110))
