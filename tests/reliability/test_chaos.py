"""The controller keeps its promises while the API server misbehaves.

10% of writes fail with 500, 5% with 409, 2% with 429 + Retry-After; every watch is cut after a few
seconds and 1% of watch resumptions are answered 410. A batch of mixed jobs (PyTorch and TF, half in
host-network mode) must all succeed, with the invariants of ``invariants.py`` holding throughout and
nothing left behind after cleanup. The size fits CI; ``make soak`` runs it bigger (CHAOS_JOBS).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from kubedl_local.faults import FaultRule
from kubedl_py.api import constants as c
from kubedl_py.kube.resources import PODS, SERVICES
from tests.integration.conftest import (
    PYTORCHJOBS,
    TFJOBS,
    Env,
    Kube,
    RunningController,
    eventually,
    fast_options,
)
from tests.reliability.conftest import mixed_jobs, replicas_of
from tests.reliability.invariants import InvariantMonitor

JOBS = int(os.environ.get("CHAOS_JOBS", "100"))
WRITES = ("create", "update", "patch", "delete")


def add_chaos(cluster: Env) -> None:
    for verb in WRITES:
        cluster.faults.fail(500, verb=verb, probability=0.10)
        cluster.faults.fail(409, verb=verb, probability=0.05)
        cluster.faults.fail(429, verb=verb, probability=0.02, retry_after=1)
    cluster.faults.cut_watches(3.0)
    cluster.faults.add(FaultRule(action="expire-watch", probability=0.01))


async def submit(kube: Kube, jobs: list[dict[str, Any]]) -> None:
    semaphore = asyncio.Semaphore(16)

    async def one(job: dict[str, Any]) -> None:
        async with semaphore:
            resource = PYTORCHJOBS if job["kind"] == c.PYTORCH_KIND else TFJOBS
            await kube.create(resource, job, namespace=kube.ns)

    await asyncio.gather(*(one(job) for job in jobs))


async def states(kube: Kube) -> dict[str, str]:
    result: dict[str, str] = {}
    for resource in (PYTORCHJOBS, TFJOBS):
        for job in (await kube.list(resource, namespace=kube.ns)).items:
            conditions = (job.get("status") or {}).get("conditions") or []
            result[job["metadata"]["name"]] = conditions[-1]["type"] if conditions else ""
    return result


async def test_all_jobs_succeed_under_api_chaos(cluster: Env, kube: Kube) -> None:
    jobs = mixed_jobs(JOBS, prefix="chaos")
    await submit(kube, jobs)
    monitor = InvariantMonitor(kube, namespace=kube.ns)
    await monitor.start()
    add_chaos(cluster)
    running = RunningController(cluster, fast_options(namespace=kube.ns, workers=8))
    started = time.monotonic()
    await running.start()
    try:

        async def all_succeeded() -> bool:
            current = await states(kube)
            return len(current) == JOBS and all(state == "Succeeded" for state in current.values())

        await eventually(
            all_succeeded, within=max(240, 2 * JOBS), interval=0.5, what=f"{JOBS} jobs Succeeded under chaos"
        )
        elapsed = time.monotonic() - started
        injected = sum(rule.hits for rule in cluster.faults.rules)
        assert injected > 50, f"only {injected} faults fired: the test did not test chaos"

        # cleanPodPolicy All: once finished, nothing of the jobs may remain.
        async def cleaned() -> bool:
            pods = await kube.list(PODS, namespace=kube.ns, label_selector=c.LABEL_JOB_NAME)
            services = await kube.list(SERVICES, namespace=kube.ns, label_selector=c.LABEL_JOB_NAME)
            return not pods.items and not services.items

        await eventually(cleaned, within=120, interval=0.5, what="pods and Services cleaned up")
    finally:
        cluster.faults.clear()
        await running.stop()
        await monitor.stop()
    assert monitor.violations == []
    # No pod failed, so no pod may have been made twice: exactly one creation per replica.
    assert monitor.created == sum(replicas_of(job) for job in jobs)
    print(f"{JOBS} jobs under chaos: {elapsed:.1f}s, {injected} faults injected")
