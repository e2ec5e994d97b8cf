"""The host-port allocator: in range, no double allocation, O(1) bookkeeping, rebuilt from observations."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubedl_py.controllers.ports import HostPortAllocator, PortsExhausted, parse_range, pod_host_ports


def test_reserve_is_random_in_range_and_distinct() -> None:
    allocator = HostPortAllocator(20000, 20099, rng=random.Random(1))
    ports = [allocator.reserve(f"ns/p{i}") for i in range(100)]
    assert sorted(ports) == list(range(20000, 20100))
    assert ports != sorted(ports)
    with pytest.raises(PortsExhausted):
        allocator.reserve("ns/extra")


def test_observed_foreign_pods_block_their_ports() -> None:
    allocator = HostPortAllocator(1000, 1002, rng=random.Random(0))
    allocator.observe_pod("uid-a", "other/a", [1000, 1001])
    assert allocator.reserve("ns/x") == 1002
    with pytest.raises(PortsExhausted):
        allocator.reserve("ns/y")
    allocator.forget_pod("uid-a")
    assert allocator.free_count == 2


def test_reservation_becomes_the_pod_and_the_pod_frees_it() -> None:
    allocator = HostPortAllocator(1000, 1000)
    port = allocator.reserve("ns/p")
    allocator.observe_pod("uid-1", "ns/p", [port])
    assert allocator.is_held(port)
    allocator.forget_pod("uid-1")
    assert not allocator.is_held(port)
    assert allocator.free_count == 1


def test_release_of_a_failed_create() -> None:
    allocator = HostPortAllocator(1000, 1000)
    port = allocator.reserve("ns/p")
    allocator.release("ns/p", port)
    assert allocator.reserve("ns/q") == port


def test_avoid_excludes_the_old_port_on_failover() -> None:
    allocator = HostPortAllocator(1000, 1001, rng=random.Random(3))
    for _ in range(20):
        port = allocator.reserve("ns/p", avoid=[1000])
        assert port == 1001
        allocator.release("ns/p", port)
    with pytest.raises(PortsExhausted):
        HostPortAllocator(1000, 1000).reserve("ns/p", avoid=[1000])


def test_ports_outside_the_range_are_tracked_but_not_handed_out() -> None:
    allocator = HostPortAllocator(1000, 1001)
    allocator.observe_pod("u", "ns/x", [80])
    assert allocator.is_held(80)
    allocator.forget_pod("u")
    assert allocator.free_count == 2


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


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["reserve", "observe", "forget", "release"]), st.integers(0, 30)), max_size=120)
)
def test_no_port_is_ever_held_twice_by_reservations(ops: list[tuple[str, int]]) -> None:
    allocator = HostPortAllocator(100, 119, rng=random.Random(7))
    reserved: dict[str, int] = {}
    observed: dict[str, int] = {}
    for op, n in ops:
        key = f"ns/p{n}"
        if op == "reserve" and key not in reserved and key not in observed:
            try:
                port = allocator.reserve(key)
            except PortsExhausted:
                assert allocator.free_count == 0
                continue
            assert port not in reserved.values() and port not in observed.values()
            reserved[key] = port
        elif op == "observe" and key in reserved:
            port = reserved.pop(key)
            allocator.observe_pod(f"uid{n}", key, [port])
            observed[key] = port
        elif op == "forget" and key in observed:
            allocator.forget_pod(f"uid{n}")
            observed.pop(key)
        elif op == "release" and key in reserved:
            allocator.release(key, reserved.pop(key))
        assert allocator.free_count == 20 - len(reserved) - len(observed)
