"""Fixtures for the process-runtime tests: real processes, sockets and namespaces, always cleaned up."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from kubedl_local.node.process import PodNetwork, ProcessRuntime

requires_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, bind mounts)")


async def wait_until(
    cond: Callable[[], bool | Awaitable[bool]], *, deadline_s: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``cond`` until true or fail after ``deadline_s`` seconds (no fixed sleeps in tests)."""
    deadline = time.monotonic() + deadline_s
    while True:
        result = cond()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {deadline_s}s waiting for {what}")
        await asyncio.sleep(0.02)


def pid_gone(pid: int) -> bool:
    """True when ``pid`` has exited (a zombie waiting for a non-reaping init counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def random_cluster_ip() -> str:
    # Random within 127.1.0.0/16 so concurrent test runs on this shared machine do not collide.
    return f"127.1.{random.randint(1, 254)}.{random.randint(1, 254)}"


def _children() -> set[int]:
    kids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            kids |= {int(p) for p in (task / "children").read_text().split()}
    return {k for k in kids if not pid_gone(k)}


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    """Fail a test that leaves processes, pod network namespaces or test bridges behind."""
    before = _children()
    yield
    deadline = time.monotonic() + 5
    while (left := _children() - before) and time.monotonic() < deadline:
        time.sleep(0.02)  # children are reaped by asyncio's watcher thread, a moment after they exit
    assert not left, f"test left child processes behind: {sorted(left)}"
    stale = [p.name for p in Path("/run/netns").glob("kdt*")] if Path("/run/netns").is_dir() else []
    stale += [p.name for p in Path("/sys/class/net").glob("kdt*")]
    assert not stale, f"test left network namespaces/links behind: {stale}"


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[ProcessRuntime]:
    rt = ProcessRuntime(tmp_path / "state")
    await rt.start()
    try:
        yield rt
    finally:
        await rt.close(grace_seconds=1)


@pytest.fixture
async def pod_network() -> AsyncIterator[PodNetwork]:
    if os.geteuid() != 0:
        pytest.skip("pod-network mode needs root")
    # Unique bridge and subnet per test: other engineers' clusters may run on this machine meanwhile.
    tag = random.randint(0, 0xFFFF)
    net = PodNetwork(bridge=f"kdt{tag:04x}", cidr=f"10.250.{random.randint(0, 255)}.0/24")
    await net.start()
    try:
        yield net
    finally:
        await net.close()
