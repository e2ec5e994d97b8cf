"""Latency and cost of one job's life, and the controller's memory at scale.

- Submit-to-running: one PyTorchJob of 64 replicas on an idle cluster, from the create request until the
  job's Running condition, p50/p99 over 20 runs (each job deleted before the next).
- Writes per lifecycle: an R-replica job that runs, succeeds and is cleaned up (ttlSecondsAfterFinished=0),
  counted by the controller's own request counter; target <= pods + Services + 4 status writes.
- Memory: the controller's RSS with 1,250 jobs x 8 replicas (10,000 pods, 10,000 Services) cached;
  target <= 250 MiB.

    .venv/bin/python bench/bench_lifecycle.py [--runs 20] [--replicas 64] [--memory-jobs 1250] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    ControllerProcess,
    bounded,
    controller,
    controller_writes,
    create_namespace,
    environment,
    install_crds,
    local_cluster,
    metric_sum,
    percentile,
)
from kubedl_py.api import constants as c
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import Resource

PYTORCHJOBS = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
NS = "life"


def job(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    annotations = spec.pop("pod_annotations", None)
    template: dict[str, Any] = {"spec": {"containers": [{"name": "pytorch", "image": "busybox", "command": ["t"]}]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    specs: dict[str, Any] = {"Master": {"replicas": 1, "template": template}}
    if replicas > 1:
        specs["Worker"] = {"replicas": replicas - 1, "template": template}
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": {"name": name, "namespace": NS},
        "spec": {"pytorchReplicaSpecs": specs, **spec},
    }


async def state(kube: KubeClient, name: str) -> str | None:
    try:
        obj = await kube.get(PYTORCHJOBS, name, namespace=NS)
    except NotFound:
        return None
    conditions = (obj.get("status") or {}).get("conditions") or []
    return str(conditions[-1]["type"]) if conditions else ""


async def until(probe: Any, within: float = 120, interval: float = 0.01) -> None:
    deadline = time.monotonic() + within
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        await asyncio.sleep(interval)


async def submit_to_running(kube: KubeClient, runs: int, replicas: int) -> list[float]:
    latencies = []
    for run in range(runs):
        name = f"lat-{run}"
        started = time.monotonic()
        await kube.create(PYTORCHJOBS, job(name, replicas), namespace=NS)

        async def running(name: str = name) -> bool:
            return await state(kube, name) == "Running"

        await until(running)
        latencies.append(time.monotonic() - started)
        await kube.delete(PYTORCHJOBS, name, namespace=NS, propagation_policy="Foreground")

        async def gone(name: str = name) -> bool:
            return await state(kube, name) is None

        await until(gone, interval=0.05)
    return latencies


async def writes_per_lifecycle(
    kube: KubeClient, metrics: ControllerProcess, replicas: int, policy: str
) -> dict[str, float]:
    name = f"once-{policy.lower()}"
    before = await controller_writes(metrics)
    status_before = await metric_sum(metrics, "kubedl_api_requests_total", verb="patch_status")
    body = job(
        name,
        replicas,
        cleanPodPolicy=policy,
        ttlSecondsAfterFinished=0,
        pod_annotations={"local.kubedl.io/exit-code": "0", "local.kubedl.io/run-seconds": "1"},
    )
    await kube.create(PYTORCHJOBS, body, namespace=NS)

    async def gone() -> bool:
        return await state(kube, name) is None

    await until(gone, interval=0.05)
    await asyncio.sleep(1.0)  # let any trailing reconcile land before counting
    writes = await controller_writes(metrics) - before
    status = await metric_sum(metrics, "kubedl_api_requests_total", verb="patch_status") - status_before
    return {"writes": writes, "status_writes": status, "budget": 2 * replicas + 4}


async def memory(kube: KubeClient, metrics: ControllerProcess, jobs: int, replicas: int) -> dict[str, float]:
    idle_rss = metrics.rss_mib()
    await bounded(32, [kube.create(PYTORCHJOBS, job(f"mem-{j}", replicas), namespace=NS) for j in range(jobs)])

    async def settled() -> bool:
        listed = await kube.list(PYTORCHJOBS, namespace=NS)
        running = sum(
            1
            for item in listed.items
            if item["metadata"]["name"].startswith("mem-")
            and ((item.get("status") or {}).get("conditions") or [{}])[-1].get("type") == "Running"
        )
        return running == jobs

    started = time.monotonic()
    await until(settled, within=900, interval=1.0)
    return {
        "jobs": jobs,
        "pods": jobs * replicas,
        "rss_mib_idle": round(idle_rss, 1),
        "rss_mib": round(metrics.rss_mib(), 1),
        "settle_seconds": round(time.monotonic() - started, 1),
    }


async def run(kubeconfig: Path, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with KubeClient(kubeconfig=kubeconfig) as kube:
        await install_crds(kube)
        await create_namespace(kube, NS)
        async with controller(kubeconfig, tmp, namespace=NS, workers=16) as metrics:
            latencies = await submit_to_running(kube, args.runs, args.replicas)
            results["submit_to_running"] = {
                "replicas": args.replicas,
                "runs": args.runs,
                "p50_ms": round(percentile(latencies, 50) * 1000, 1),
                "p99_ms": round(percentile(latencies, 99) * 1000, 1),
            }
            results["writes_per_lifecycle"] = {
                "replicas": args.lifecycle_replicas,
                "cleanPodPolicy=None": await writes_per_lifecycle(kube, metrics, args.lifecycle_replicas, "None"),
                "cleanPodPolicy=All": await writes_per_lifecycle(kube, metrics, args.lifecycle_replicas, "All"),
            }
            results["memory"] = await memory(kube, metrics, args.memory_jobs, 8)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--lifecycle-replicas", type=int, default=8)
    parser.add_argument("--memory-jobs", type=int, default=1250)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for make test")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.replicas, args.lifecycle_replicas, args.memory_jobs = 2, 4, 2, 5
    with tempfile.TemporaryDirectory() as tmp_name, local_cluster(Path(tmp_name), nodes=10) as kubeconfig:
        results = asyncio.run(run(kubeconfig, Path(tmp_name), args))
    results.update(environment())
    lat, life, mem = results["submit_to_running"], results["writes_per_lifecycle"], results["memory"]
    print(
        f"submit -> Running, one {lat['replicas']}-replica job, {lat['runs']} runs: "
        f"p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms"
    )
    for policy in ("cleanPodPolicy=None", "cleanPodPolicy=All"):
        figures = life[policy]
        print(
            f"writes for one {life['replicas']}-replica job's life ({policy}): {figures['writes']:.0f} "
            f"({figures['status_writes']:.0f} status), budget pods+Services+4 = {figures['budget']}"
        )
    print(
        f"controller RSS with {mem['jobs']} jobs / {mem['pods']} pods cached: {mem['rss_mib']} MiB "
        f"(idle {mem['rss_mib_idle']} MiB)"
    )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
