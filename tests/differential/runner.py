"""Runs the selected cases on both control planes, several at a time, on one event loop of its own.

Why a runner instead of running each case inside its test: most of a case's time is waiting (kubectl
starting, the real server's controllers acting), so running a few cases at once makes the suite several
times faster; pytest still reports one test per case, each waiting for its own case's outcome. Cases are
isolated by namespace (a fresh one per case and control plane); the embedded cluster is shared by the
whole run, as the real one is by the whole session.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.differential.harness import CASES, Case, Outcome, Plane, Tier
from tests.tiers import KUBERNETES, LoopThread

#: how long a new namespace may take to get what its controllers publish into it: the default ServiceAccount
#: (the real server refuses pods before) and the ``kube-root-ca.crt`` ConfigMap (cases that list ConfigMaps
#: would otherwise see it appear halfway through)
_NAMESPACE_READY = 30.0


class Runner:
    def __init__(self, loop: LoopThread, planes: dict[str, Plane], scratch: Path, concurrency: int) -> None:
        self.loop = loop
        self.planes = planes
        self.scratch = scratch
        self.concurrency = concurrency
        self.futures: dict[str, concurrent.futures.Future[Outcome]] = {}
        self.started = 0.0
        self.finished = 0.0

    def start(self, names: list[str]) -> None:
        self.started = time.monotonic()
        semaphore = self.loop.run(_semaphore(self.concurrency))
        shared = [n for n in names if not CASES[n].exclusive]
        for name in shared:
            self.futures[name] = asyncio.run_coroutine_threadsafe(self._run(CASES[name], semaphore), self.loop.loop)
        # Exclusive cases change what every client sees (they compact history): one at a time, after the rest.
        before = [self.futures[n] for n in shared]
        alone = asyncio.run_coroutine_threadsafe(_semaphore(1), self.loop.loop).result()
        for name in names:
            if CASES[name].exclusive:
                self.futures[name] = asyncio.run_coroutine_threadsafe(
                    self._after(before, CASES[name], alone), self.loop.loop
                )

    async def _after(
        self, others: list[concurrent.futures.Future[Outcome]], case: Case, alone: asyncio.Semaphore
    ) -> Outcome:
        await asyncio.gather(*(asyncio.wrap_future(f) for f in others), return_exceptions=True)
        return await self._run(case, alone)

    def result(self, name: str, timeout: float) -> Outcome:
        outcome = self.futures[name].result(timeout)
        self.finished = max(self.finished, time.monotonic())
        return outcome

    @property
    def seconds(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    async def _run(self, case: Case, semaphore: asyncio.Semaphore) -> Outcome:
        async with semaphore:
            started = time.monotonic()
            real, embedded = self.planes[KUBERNETES], self.planes["embedded"]
            tiers = await asyncio.gather(self._tier(real, case), self._tier(embedded, case))
            errors: dict[str, str] = {}
            try:
                await asyncio.gather(*(self._steps(case, t, errors) for t in tiers))
            finally:
                await asyncio.gather(*(self._cleanup(t) for t in tiers), return_exceptions=True)
            return Outcome(case.name, tiers[0].log, tiers[1].log, time.monotonic() - started, errors)

    async def _tier(self, plane: Plane, case: Case) -> Tier:
        ns = f"d{uuid.uuid4().hex[:8]}-{case.name[:30].strip('-')}".rstrip("-")
        path = self.scratch / plane.tier / f"{ns}.kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        config = yaml.safe_load(yaml.safe_dump(plane.kubeconfig))
        for context in config["contexts"]:
            context["context"]["namespace"] = ns
        path.write_text(yaml.safe_dump(config))
        tier = Tier(plane, ns, path)
        await create_namespace(tier, ns)
        return tier

    @staticmethod
    async def _steps(case: Case, tier: Tier, errors: dict[str, str]) -> None:
        try:
            await asyncio.wait_for(case.func(tier), case.timeout)
        except Exception as e:  # the case's own failure is part of what is compared
            what = "timed out" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
            tier.log.append({"error": tier.norm.text(what)})
            errors[tier.tier] = "".join(traceback.format_exception(e))

    @staticmethod
    async def _cleanup(tier: Tier) -> None:
        for path in tier.cluster_objects:
            with contextlib.suppress(Exception):
                await tier.quiet("DELETE", path)
        for ns in [tier.ns, *tier.extra_namespaces]:
            with contextlib.suppress(Exception):
                await tier.quiet("DELETE", f"/api/v1/namespaces/{ns}")
        for node in tier.extra_nodes:
            if tier.plane.remove_node is not None:
                with contextlib.suppress(Exception):
                    await tier.plane.remove_node(node)


async def _semaphore(n: int) -> asyncio.Semaphore:
    return asyncio.Semaphore(n)


async def create_namespace(tier: Tier, name: str, labels: dict[str, str] | None = None) -> Any:
    """Create a namespace (unrecorded) and wait until it has its default ServiceAccount and root CA ConfigMap."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if labels:
        body["metadata"]["labels"] = labels
    reply = await tier.quiet("POST", "/api/v1/namespaces", body)
    if reply.status != 201:
        raise RuntimeError(f"namespace {name}: {reply.status} {reply.body}")
    deadline = time.monotonic() + _NAMESPACE_READY
    for what in ("serviceaccounts/default", "configmaps/kube-root-ca.crt"):
        while (await tier.quiet("GET", f"/api/v1/namespaces/{name}/{what}")).status != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"namespace {name} got no {what} within {_NAMESPACE_READY:.0f} s")
            await asyncio.sleep(0.05)
    return reply.body
