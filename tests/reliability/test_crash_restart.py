"""kill -9 the controller process again and again during a run; after each restart it converges.

The controller runs as a real process (``kubedl-py controller``) against the embedded cluster, and is
killed with SIGKILL at random moments — mid-creation, mid-status-write, mid-failover — then restarted.
Invariants hold throughout (``invariants.py``), every job succeeds, and pods that survive a crash keep
their host ports (a Service is never re-pointed away from a live pod).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.conftest import Env, Kube, eventually
from tests.reliability.conftest import mixed_jobs, replicas_of
from tests.reliability.invariants import InvariantMonitor
from tests.reliability.test_chaos import states, submit

KILLS = int(os.environ.get("CRASH_KILLS", "20"))
JOBS = int(os.environ.get("CRASH_JOBS", "100"))


async def start_controller(kubeconfig: Path, namespace: str, log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kubedl_py.cli",
            "controller",
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            namespace,
            "--workers",
            "8",
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def test_controller_converges_after_repeated_kill_9(cluster: Env, kube: Kube, tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("CRASH_SEED", "7")))
    jobs = mixed_jobs(JOBS, prefix="crash", run_seconds=4.0)
    monitor = InvariantMonitor(kube, namespace=kube.ns)
    await monitor.start()
    log = tmp_path / "controller.log"
    process = await start_controller(cluster.controller_kubeconfig_path, kube.ns, log)
    submitting = asyncio.create_task(submit(kube, jobs))
    started = time.monotonic()
    try:
        for _ in range(KILLS):
            # A random moment: from before the informers have synced to well into the run.
            await asyncio.sleep(rng.uniform(0.2, 1.5))
            process.send_signal(signal.SIGKILL)
            assert await process.wait() == -signal.SIGKILL
            process = await start_controller(cluster.controller_kubeconfig_path, kube.ns, log)
        await submitting

        async def all_succeeded() -> bool:
            current = await states(kube)
            return len(current) == JOBS and all(state == "Succeeded" for state in current.values())

        await eventually(
            all_succeeded, within=max(180, 2 * JOBS), interval=0.5, what=f"{JOBS} jobs Succeeded after {KILLS} kills"
        )
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 30)
        await monitor.stop()
    elapsed = time.monotonic() - started
    assert monitor.violations == [], monitor.violations
    # A kill may land between a create and its status write, never causing a second pod for a replica.
    assert monitor.created == sum(replicas_of(job) for job in jobs)
    assert "Traceback" not in log.read_text(errors="replace"), "the controller crashed by itself"
    print(f"{JOBS} jobs, {KILLS} kill -9s: converged in {elapsed:.1f}s")
