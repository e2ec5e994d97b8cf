"""Recovery time of a whole-job restart, in place against recreate, on the real control plane.

What a failure costs a training job is the time until every rank runs its program again. This benchmark runs
one host-network PyTorchJob (``--replicas``, default 256, restartScope Job, restartPolicy ExitCode) on
``--nodes`` simulated nodes (default 1,000) of a fresh real cluster (``bench/realplane.py``), kills Worker 0's
program with exit 137 ``--trials`` times (default 20) and measures, per trial, from the kill to the moment
every rank's program runs again:

- ``InPlace``: every pod of the job restarted whole in its place (its barrier's restart count one more than
  before and every main container running), the attempt released;
- ``Recreate``: every pod replaced (new uids) and every main container running.

Both are seen from one watch on the job's pods (no polling). It prints the median, p90 and p99 of each mode
with the spread, the ratio of the medians, and the controller's requests per restart (audit log). The kill is
the simulated runtime's: ``local.kubedl.io/exit-codes`` with 137 at the container's current run and ``-``
(no exit) after it.

    .venv/bin/python bench/real_recovery.py [--replicas 256] [--nodes 1000] [--trials 20] [--modes InPlace,Recreate]
        [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.contenders import KUBEDL_PY, PYTORCHJOBS
from bench.realplane import RealCluster, real_cluster
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_local.node.simulated import EXIT_CODES
from kubedl_py.api import constants as c
from kubedl_py.controllers.failures.whole_in_place import restarts_whole
from kubedl_py.controllers.podstate import in_place_restarts
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import PODS

NS = "bench"
JOB = "recover"


def main_running(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in (s.get("state") or {}) for s in statuses)


class Pods:
    """The job's pods as one watch shows them, with an event set on every change."""

    def __init__(self, kube: KubeClient, namespace: str = NS, job: str = JOB) -> None:
        self.kube = kube
        self.namespace, self.selector = namespace, f"{c.LABEL_JOB_NAME}={job}"
        self.pods: dict[str, dict[str, Any]] = {}
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listed = await self.kube.list(PODS, namespace=self.namespace, label_selector=self.selector)
        self.pods = {pod["metadata"]["name"]: pod for pod in listed.items}
        self._task = asyncio.create_task(self._watch(listed.resource_version))

    async def _watch(self, version: str | None) -> None:
        while True:
            async for event in self.kube.watch(
                PODS, namespace=self.namespace, label_selector=self.selector, resource_version=version
            ):
                pod = event.object
                version = (pod.get("metadata") or {}).get("resourceVersion") or version
                if event.type == "BOOKMARK":
                    continue
                name = pod["metadata"]["name"]
                if event.type == "DELETED":
                    if self.pods.get(name, {}).get("metadata", {}).get("uid") == pod["metadata"].get("uid"):
                        del self.pods[name]
                elif event.type in ("ADDED", "MODIFIED"):
                    self.pods[name] = pod
                self.changed.set()

    async def until(self, done: Any, within: float) -> float:
        deadline = time.monotonic() + within
        while not done(self.pods):
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("timed out")
            try:
                await asyncio.wait_for(self.changed.wait(), timeout=left)
            except TimeoutError:
                continue
        return time.monotonic()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def all_running(seen: dict[str, dict[str, Any]], replicas: int) -> bool:
    """Every pod of the job Running with every main container running."""
    return len(seen) == replicas and all(
        (p.get("status") or {}).get("phase") == "Running" and main_running(p) for p in seen.values()
    )


def snapshot(seen: dict[str, dict[str, Any]]) -> dict[str, tuple[str, int]]:
    return {name: (p["metadata"]["uid"], restarts_whole(p)) for name, p in seen.items()}


def recovered(seen: dict[str, dict[str, Any]], before: dict[str, tuple[str, int]], mode: str) -> bool:
    """Every rank runs its program again: in new pods (Recreate), or in the same pods each restarted whole."""
    if not all_running(seen, len(before)):
        return False
    if mode == "Recreate":
        return all(p["metadata"]["uid"] != before[name][0] for name, p in seen.items())
    return all(
        p["metadata"]["uid"] == before[name][0] and restarts_whole(p) > before[name][1] for name, p in seen.items()
    )


def summary(mode: str, seconds: list[float]) -> dict[str, Any]:
    return {
        "mode": mode,
        "trials": len(seconds),
        "median_seconds": round(statistics.median(seconds), 2),
        "p90_seconds": round(quantile(seconds, 0.9), 2),
        "p99_seconds": round(quantile(seconds, 0.99), 2),
        "min_seconds": round(min(seconds), 2),
        "max_seconds": round(max(seconds), 2),
    }


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def measure(cluster: RealCluster, tmp: Path, *, replicas: int, trials: int, mode: str) -> dict[str, Any]:
    async with KubeClient(kubeconfig=cluster.admin) as kube:
        await create_namespace(kube, NS)
        async with KUBEDL_PY.run(cluster, tmp) as usage:
            job = KUBEDL_PY.job(JOB, NS, replicas, host_network=True, restart_policy="ExitCode")
            job["spec"]["failurePolicy"] = {"restartScope": "Job", "restartMode": mode}
            job["spec"]["backoffLimit"] = trials + 5
            pods = Pods(kube)
            await pods.start()
            await kube.create(PYTORCHJOBS, job, namespace=NS)

            await pods.until(lambda seen: all_running(seen, replicas), 600)
            seconds: list[float] = []
            requests: list[int] = []
            victim = f"{JOB}-worker-0"
            for trial in range(trials):
                before = snapshot(pods.pods)
                run = in_place_restarts(pods.pods[victim])
                codes = ",".join(["-"] * run + ["137", "-"])
                mark = cluster.audit_mark()
                killed = time.monotonic()
                await kube.patch(PODS, victim, {"metadata": {"annotations": {EXIT_CODES: codes}}}, namespace=NS)

                back = await pods.until(lambda seen, before=before: recovered(seen, before, mode), 300)
                seconds.append(back - killed)
                # the controller's writes settle (the release, the status) before they are counted
                await asyncio.sleep(2.0)
                requests.append(cluster.requests(KUBEDL_PY.user, mark)["total"])
                print(
                    f"{mode} trial {trial + 1}/{trials}: {seconds[-1]:.2f}s, {requests[-1]} requests", file=sys.stderr
                )
            await pods.stop()
            return {
                **summary(mode, seconds),
                "replicas": replicas,
                "nodes": cluster.info["nodes"],
                "requests_per_restart_median": statistics.median(requests),
                "cpu_seconds": round(usage.cpu_since_start(), 1),
            }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=256)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--modes", default="InPlace,Recreate")
    parser.add_argument("--smoke", action="store_true", help="8 replicas on 4 nodes, 2 trials")
    args = parser.parse_args(argv)
    if args.smoke:
        args.replicas, args.nodes, args.trials = 8, 4, 2
    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            with real_cluster(tmp, nodes=args.nodes) as cluster:
                results.append(
                    asyncio.run(measure(cluster, tmp, replicas=args.replicas, trials=args.trials, mode=mode))
                )
            print(json.dumps(results[-1]), flush=True)
    by_mode = {r["mode"]: r for r in results}
    if "InPlace" in by_mode and "Recreate" in by_mode:
        ratio = by_mode["Recreate"]["median_seconds"] / max(by_mode["InPlace"]["median_seconds"], 1e-9)
        print(json.dumps({"recreate_over_in_place_median": round(ratio, 2)}))
    print(json.dumps({"runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
