"""Host-network failover latency: pod deleted -> Service re-pointed and replacement pod created.

One host-network PyTorchJob (Master + W workers) runs on an embedded cluster; we delete a worker pod F
times (round robin) and time, from the delete request, until (a) the worker's Service has a new targetPort
and (b) a pod of the same name with a new uid exists — both seen on watches. Every failover is also
checked for the promised order: the Service is re-pointed before the replacement pod is created.

With ``--background-jobs N`` the same is measured while N other jobs are being created (load).

    .venv/bin/python bench/bench_failover.py [--failovers 100] [--workers 7] [--background-jobs 0] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    bounded,
    controller,
    create_namespace,
    environment,
    install_crds,
    local_cluster,
    percentile,
)
from kubedl_py.api import constants as c
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import PODS, SERVICES, Resource

PYTORCHJOBS = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
NS = "failover"


def job(name: str, workers: int, *, every_service: bool = False) -> dict[str, Any]:
    """A host-network PyTorchJob; ``every_service``: a Service for every Worker too (``kubedl.io/replica-services:
    all``), so that each Worker's failover re-points one (by default only the Master, the one dialed, has one)."""
    template = {"spec": {"containers": [{"name": "pytorch", "image": "busybox", "command": ["train"]}]}}
    annotations = {c.ANNOTATION_NETWORK_MODE: c.NETWORK_MODE_HOST}
    if every_service:
        annotations[c.ANNOTATION_REPLICA_SERVICES] = c.REPLICA_SERVICES_ALL
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": workers, "template": template},
            }
        },
    }


class Timeline:
    """Watches pods and Services of the namespace and timestamps what the benchmark waits for.

    ``names``: watch only the pods and Services of those names (a field selector each). With hundreds of other
    jobs starting in the namespace, a watch of everything would make the benchmark's own process parse every
    one of their events, and the timed objects' events would queue behind them in its stream: the timing
    would include the benchmark's own lag. A peer of the failed-over replica watches nothing but its Service.
    """

    def __init__(self, kube: KubeClient, namespace: str = NS, names: Sequence[str] | None = None) -> None:
        self.kube, self.namespace = kube, namespace
        self.selectors: list[str | None] = [f"metadata.name={name}" for name in names] if names else [None]
        self.pods: dict[str, str] = {}  # name -> uid of the newest pod seen
        self.pod_added: dict[tuple[str, str], float] = {}  # (name, uid) -> time
        self.pod_gone: dict[tuple[str, str], float] = {}  # (name, uid) -> time its DELETED event arrived
        self.target: dict[str, int] = {}  # service name -> targetPort
        self.target_changed: dict[tuple[str, int], float] = {}  # (service, port) -> time first seen
        self.changed = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for resource in (PODS, SERVICES):
            for selector in self.selectors:
                listed = await self.kube.list(resource, namespace=self.namespace, field_selector=selector)
                for obj in listed.items:
                    self._record(resource, "ADDED", obj)
                self.tasks.append(asyncio.create_task(self._watch(resource, listed.resource_version, selector)))

    def _record(self, resource: Resource, kind: str, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        meta = obj["metadata"]
        if resource is PODS and kind in ("ADDED", "MODIFIED") and not meta.get("deletionTimestamp"):
            self.pod_added.setdefault((meta["name"], meta["uid"]), now)
            self.pods[meta["name"]] = meta["uid"]
        elif resource is PODS and kind == "DELETED":
            self.pod_gone.setdefault((meta["name"], meta["uid"]), now)
        elif resource is SERVICES and kind in ("ADDED", "MODIFIED"):
            port = obj["spec"]["ports"][0]["targetPort"]
            if isinstance(port, int):
                self.target[meta["name"]] = port
                self.target_changed.setdefault((meta["name"], port), now)
        self.changed.set()

    async def _watch(self, resource: Resource, version: str, selector: str | None) -> None:
        while True:
            async with contextlib.aclosing(
                self.kube.watch(
                    resource,
                    namespace=self.namespace,
                    field_selector=selector,
                    resource_version=version,
                    timeout_seconds=300,
                )
            ) as events:
                async for event in events:
                    version = event.object.get("metadata", {}).get("resourceVersion", version)
                    self._record(resource, event.type, event.object)

    async def until(self, predicate: Any, within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        while not predicate():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("failover did not complete")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def run(kubeconfig: Path, tmp: Path, failovers: int, workers: int, background_jobs: int) -> dict[str, Any]:
    async with KubeClient(kubeconfig=kubeconfig) as kube:
        await install_crds(kube)
        await create_namespace(kube, NS)
        async with controller(kubeconfig, tmp, namespace=NS):
            timeline = Timeline(kube)
            await timeline.start()
            await kube.create(PYTORCHJOBS, job("fo", workers, every_service=True), namespace=NS)
            names = [f"fo-worker-{i}" for i in range(workers)]
            await timeline.until(lambda: all(n in timeline.pods and n in timeline.target for n in names), within=60)
            load: asyncio.Task[None] | None = None
            if background_jobs:
                load = asyncio.create_task(
                    bounded(
                        8, [kube.create(PYTORCHJOBS, job(f"load-{i}", 7), namespace=NS) for i in range(background_jobs)]
                    )
                )
            latencies: list[float] = []
            repoint: list[float] = []
            out_of_order = 0
            # the slowest failover: when it came (seconds after the first delete), how long, its re-point
            slowest: dict[str, float | int] = {}
            first = time.monotonic()
            for n in range(failovers):
                name = names[n % workers]
                old_uid, old_port = timeline.pods[name], timeline.target[name]
                started = time.monotonic()
                await kube.delete(PODS, name, namespace=NS)
                await timeline.until(
                    lambda name=name, old_uid=old_uid, old_port=old_port: (
                        timeline.pods.get(name) not in (None, old_uid) and timeline.target.get(name) != old_port
                    )
                )
                new_uid, new_port = timeline.pods[name], timeline.target[name]
                pointed = timeline.target_changed[(name, new_port)]
                created = timeline.pod_added[(name, new_uid)]
                out_of_order += pointed > created
                repoint.append(pointed - started)
                latencies.append(max(pointed, created) - started)
                if latencies[-1] >= float(slowest.get("ms", 0)) / 1000:
                    slowest = {
                        "failover": n,
                        "at_s": round(started - first, 1),
                        "ms": round(latencies[-1] * 1000, 1),
                        "repoint_ms": round((pointed - started) * 1000, 1),
                    }
            if load is not None:
                await load
            await timeline.stop()
    return {
        "failovers": failovers,
        "background_jobs": background_jobs,
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "max_ms": round(max(latencies) * 1000, 1),
        "slowest": slowest,
        "repoint_p50_ms": round(percentile(repoint, 50) * 1000, 1),
        "pod_created_before_service_repointed": out_of_order,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--failovers", type=int, default=100)
    parser.add_argument("--workers", type=int, default=7)
    parser.add_argument("--background-jobs", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for make test")
    args = parser.parse_args(argv)
    if args.smoke:
        args.failovers, args.workers = 5, 2
    with tempfile.TemporaryDirectory() as tmp_name, local_cluster(Path(tmp_name), nodes=4) as kubeconfig:
        results = asyncio.run(run(kubeconfig, Path(tmp_name), args.failovers, args.workers, args.background_jobs))
    results.update(environment())
    load = f" while {args.background_jobs} jobs are created" if args.background_jobs else ""
    print(f"host-network failover, {args.failovers} pod deletions{load}:")
    print(f"  delete -> Service re-pointed and new pod created: p50 {results['p50_ms']} ms, p99 {results['p99_ms']} ms")
    print(
        f"  (target p99 <= 1000 ms); pods created before their Service was re-pointed: "
        f"{results['pod_created_before_service_repointed']}"
    )
    print(json.dumps(results))
    return 0 if results["pod_created_before_service_repointed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
