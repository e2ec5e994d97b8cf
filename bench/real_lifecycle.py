"""One job's latency and one job's cost in requests, per controller, on the real control plane.

- Submit -> all pods Running: one PyTorchJob of 64 replicas on an idle fresh cluster, from the create request
  until all 64 pods report phase Running (the simulated kubelets start them once kube-scheduler binds them),
  p50/p99 over R runs; each job is deleted (foreground) and gone before the next.
- Requests per job lifecycle: J jobs of 8 replicas whose containers exit 0 after 2 s are submitted, run,
  succeed and are deleted; every request the controller made from the first submit until the last pod and
  Service are gone (plus 3 s for trailing work) is counted from the audit log, divided by J.

    .venv/bin/python bench/real_lifecycle.py [--contenders kubedl-py,training-operator,kubedl] [--runs 20]
        [--replicas 64] [--lifecycle-jobs 20] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.contenders import Contender, chosen, each_on_a_fresh_cluster
from bench.harness import bounded, environment, percentile
from bench.real_controller import warm_up
from bench.realplane import RealCluster
from harness import peers
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import PODS, SERVICES

NS = "life"
RUN_TO_SUCCESS = {"local.kubedl.io/exit-code": "0", "local.kubedl.io/run-seconds": "2"}


def with_pod_annotations(job: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    for spec in job["spec"].get("pytorchReplicaSpecs", {}).values():
        spec["template"].setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
    return job


def has_condition(job: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in (job.get("status") or {}).get("conditions") or []
    )


async def until(probe: Any, within: float, interval: float = 0.05) -> None:
    deadline = time.monotonic() + within
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        await asyncio.sleep(interval)


async def running_pods(kube: KubeClient, want: int, started: float) -> float:
    """Watch the namespace's pods until ``want`` are Running; the time that happened."""
    listed = await kube.list(PODS, namespace=NS)
    running = {p["metadata"]["name"] for p in listed.items if p.get("status", {}).get("phase") == "Running"}
    version = listed.resource_version
    while len(running) < want:
        async with contextlib.aclosing(
            kube.watch(PODS, namespace=NS, resource_version=version, timeout_seconds=120)
        ) as events:
            async for event in events:
                version = event.object.get("metadata", {}).get("resourceVersion", version)
                name = event.object["metadata"]["name"]
                if event.type != "DELETED" and event.object.get("status", {}).get("phase") == "Running":
                    running.add(name)
                else:
                    running.discard(name)
                if len(running) >= want:
                    break
        if time.monotonic() - started > 300:
            raise TimeoutError("the pods did not all reach Running")
    return time.monotonic()


async def empty(kube: KubeClient) -> bool:
    pods = await kube.list(PODS, namespace=NS)
    services = await kube.list(SERVICES, namespace=NS)
    return not pods.items and not services.items


async def submit_to_running(contender: Contender, kube: KubeClient, runs: int, replicas: int) -> list[float]:
    assert contender.resource is not None
    latencies = []
    for run in range(runs):
        name = f"lat-{run}"
        started = time.monotonic()
        watcher = asyncio.create_task(running_pods(kube, replicas, started))  # lists, then watches: misses none
        await kube.create(contender.resource, contender.job(name, NS, replicas), namespace=NS)
        latencies.append(await watcher - started)
        await kube.delete(contender.resource, name, namespace=NS, propagation_policy="Foreground")

        async def gone(name: str = name) -> bool:
            try:
                await kube.get(contender.resource, name, namespace=NS)  # type: ignore[arg-type]
            except NotFound:
                return await empty(kube)
            return False

        await until(gone, within=300, interval=0.2)
    return latencies


async def requests_per_lifecycle(contender: Contender, cluster: RealCluster, kube: KubeClient, jobs: int) -> Any:
    assert contender.resource is not None
    resource = contender.resource
    documents = [with_pod_annotations(contender.job(f"life-{j}", NS, 8), RUN_TO_SUCCESS) for j in range(jobs)]
    mark = cluster.audit_mark()
    await bounded(8, [kube.create(resource, d, namespace=NS) for d in documents])

    async def succeeded() -> bool:
        listed = await kube.list(resource, namespace=NS)
        return sum(1 for job in listed.items if has_condition(job, "Succeeded")) == jobs

    await until(succeeded, within=600, interval=0.5)
    await bounded(8, [kube.delete(resource, d["metadata"]["name"], namespace=NS) for d in documents])

    async def all_gone() -> bool:
        return not (await kube.list(resource, namespace=NS)).items and await empty(kube)

    await until(all_gone, within=600, interval=0.5)
    await asyncio.sleep(3.0)  # trailing work of the controller lands in the count
    counts = cluster.requests(contender.user, mark)
    return {
        "jobs": jobs,
        "replicas": 8,
        "requests_per_job": round(counts["total"] / jobs, 1),
        "writes_per_job": round(counts["writes"] / jobs, 1),
        "by_verb": {verb: count for verb, count in counts.items() if verb not in ("total", "writes")},
    }


async def run(contender: Contender, cluster: RealCluster, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    async with KubeClient(kubeconfig=cluster.admin) as kube:
        await create_namespace(kube, NS)
        assert contender.resource is not None
        if contender.peer is not None:
            await peers.install_peer_crds(kube, contender.peer)
        # the first custom resources in a fresh namespace wait ~2 s in kube-apiserver (real_controller.warm_up)
        await warm_up(kube, contender.resource, contender.job("warm-up", NS, 1), NS)
        async with contender.run(cluster, tmp):
            latencies = await submit_to_running(contender, kube, args.runs, args.replicas)
            lifecycle = await requests_per_lifecycle(contender, cluster, kube, args.lifecycle_jobs)
    return {
        "submit_to_all_running": {
            "replicas": args.replicas,
            "runs": args.runs,
            "p50_ms": round(percentile(latencies, 50) * 1000, 1),
            "p99_ms": round(percentile(latencies, 99) * 1000, 1),
            "max_ms": round(max(latencies) * 1000, 1),
        },
        "lifecycle": lifecycle,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contenders", default="kubedl-py,training-operator,kubedl")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--lifecycle-jobs", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for make test")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.replicas, args.lifecycle_jobs, args.nodes = 2, 4, 2, 4
    contenders = chosen(args.contenders, parser)
    names = [contender.name for contender in contenders]
    results: dict[str, Any] = {"control_plane": "kubernetes"}
    results.update(
        each_on_a_fresh_cluster(
            contenders, args.nodes, lambda contender, cluster, tmp: run(contender, cluster, tmp, args)
        )
    )
    results.update(environment())
    for name in names:
        lat, life = results[name]["submit_to_all_running"], results[name]["lifecycle"]
        print(
            f"  {name:26s} submit -> all {lat['replicas']} pods Running p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms;"
            f" requests per 8-replica job's life {life['requests_per_job']} ({life['writes_per_job']} writes)"
        )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
