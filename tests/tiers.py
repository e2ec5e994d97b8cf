"""The two control-plane tiers every suite runs on, and the session-long real one.

- ``embedded``: kubedl-py's own API server (``kubedl_local``), started per test: milliseconds.
- ``kubernetes``: the real kube-apiserver, kube-controller-manager and kube-scheduler of the pinned release
  (``kubedl_local.kubernetes``), started once per test session in a background thread with its own event
  loop. Tests talk to it over HTTPS from their own loop, exactly as any client would, and isolate themselves
  by namespace.

``KUBEDL_TEST_TIERS=embedded`` (or ``kubernetes``) narrows a local run to one tier; ``make test`` and CI run
both. A tier that is not selected skips its tests with a reason; a selected tier that cannot start fails.

- ``node`` (opt-in, never in the default selection): the real control plane with a real node on this machine
  (containerd, kubelet, kube-proxy, CNI, CoreDNS: ``kubedl_local.kubernetes.real_node``), root only. One real
  node per machine, so its suites (``tests/node``) run one cluster at a time, each waiting for the machine's
  node lock. ``make test-node`` (``KUBEDL_TEST_TIERS=node``) runs it; CI does, after ``make test``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

EMBEDDED = "embedded"
KUBERNETES = "kubernetes"
TIERS = (EMBEDDED, KUBERNETES)
NODE = "node"
#: tiers that run only when named in KUBEDL_TEST_TIERS
OPT_IN_TIERS = (NODE,)


def selected_tiers() -> tuple[str, ...]:
    raw = os.environ.get("KUBEDL_TEST_TIERS", ",".join(TIERS))
    chosen = tuple(tier.strip() for tier in raw.split(",") if tier.strip())
    unknown = [tier for tier in chosen if tier not in TIERS + OPT_IN_TIERS]
    if unknown:
        raise pytest.UsageError(f"KUBEDL_TEST_TIERS: unknown tier(s) {unknown}; use {', '.join(TIERS + OPT_IN_TIERS)}")
    return chosen


def require_tier(tier: str) -> None:
    if tier not in selected_tiers():
        pytest.skip(f"the {tier} tier is not selected (KUBEDL_TEST_TIERS={os.environ.get('KUBEDL_TEST_TIERS')})")


class LoopThread:
    """An event loop running forever in a daemon thread: home of session-long clusters.

    pytest-asyncio gives every test its own loop; a cluster that outlives tests cannot live on one of those.
    """

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the thread's loop and wait for its result (from synchronous code)."""
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the thread's loop and await its result from another loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.loop.close()


def on_loop(loop: LoopThread, func: Callable[[], Awaitable[T]]) -> T:
    async def call() -> T:
        return await func()

    return loop.run(call())
