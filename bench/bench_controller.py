"""Controller throughput against the API limit, and writes while idle.

N PyTorchJobs x R replicas are submitted at once to an embedded cluster (simulated kubelet, 10 nodes). The
figure is the time until all N*R pods and N*R Services exist, divided by the time a bare kubernetes-asyncio
client takes to create the same pods and Services with the same concurrency on a fresh cluster of the same
size. The bare client skips deserialising answers (``_preload_content=False``), the fastest way to use
that library, so the ratio is against the strongest baseline. Then, with every job settled (Running), the
controller resyncs every 5 s and we count the writes it makes during the idle window.

    .venv/bin/python bench/bench_controller.py [--jobs 200] [--replicas 8] [--idle-seconds 60] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    bounded,
    controller,
    controller_writes,
    create_namespace,
    environment,
    install_crds,
    local_cluster,
)
from kubedl_py.api import PyTorchJob, parse_job, with_defaults
from kubedl_py.api import constants as c
from kubedl_py.controllers.pods import addressing_for, build_pod, build_service
from kubedl_py.controllers.rendezvous import service_slots
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import PODS, SERVICES, Resource

CONCURRENCY = 32
# Reconciles in flight; their writes share the per-kind cap of 32 (WRITE_CONCURRENCY), the same as
# the bare client's, so the comparison is at equal concurrency.
WORKERS = 16
PYTORCHJOBS = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)


def job_document(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "busybox", "command": ["train"]}]}}
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": {"name": name, "namespace": namespace, "uid": "bench"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": replicas - 1, "template": template},
            }
        },
    }


def same_objects(jobs: int, replicas: int, namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """The pods and Services the controller would make, without owner references (no job exists)."""
    objects: list[tuple[str, dict[str, Any]]] = []
    for j in range(jobs):
        job = parse_job(job_document(f"job-{j}", namespace, replicas))
        assert isinstance(job, PyTorchJob)
        job = with_defaults(job)
        addressing = addressing_for(job)
        dialed = service_slots(job)  # the Services kubedl-py makes: the dialed replicas' (the Master's)
        for rtype, spec in job.replica_specs.items():
            for index in range(spec.replicas or 0):
                made = [("services", build_service(job, rtype, index, addressing))] if (rtype, index) in dialed else []
                for kind, body in [*made, ("pods", build_pod(job, rtype, index, addressing))]:
                    body["metadata"].pop("ownerReferences")
                    objects.append((kind, body))
    return objects


def services_per_job(replicas: int) -> int:
    """The Services kubedl-py makes for one benchmark job of ``replicas`` (docs/controller.md, "Services")."""
    return sum(1 for kind, _ in same_objects(1, replicas, "any") if kind == "services")


class Arrivals:
    """Counts ADDED events of pods and Services in a namespace; notes when each count reaches a target."""

    def __init__(self, kube: KubeClient, namespace: str, target: int, services: int | None = None) -> None:
        self.kube, self.namespace = kube, namespace
        self.targets = {PODS.plural: target, SERVICES.plural: target if services is None else services}
        self.done: dict[str, float] = {}
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for resource in (PODS, SERVICES):
            listed = await self.kube.list(resource, namespace=self.namespace)
            self.tasks.append(asyncio.create_task(self._count(resource, listed.resource_version)))

    async def _count(self, resource: Resource, since: str) -> None:
        seen: set[str] = set()
        version = since
        target = self.targets[resource.plural]
        while len(seen) < target:
            async with contextlib.aclosing(
                self.kube.watch(resource, namespace=self.namespace, resource_version=version, timeout_seconds=300)
            ) as events:
                async for event in events:
                    version = event.object.get("metadata", {}).get("resourceVersion", version)
                    if event.type == "ADDED":
                        seen.add(event.object["metadata"]["name"])
                        if len(seen) >= target:
                            break
        self.done[resource.plural] = time.monotonic()

    async def wait(self) -> float:
        await asyncio.gather(*self.tasks)
        return max(self.done.values())


async def k8s_configuration(kubeconfig: Path) -> k8s.Configuration:
    """kubernetes-asyncio's own configuration of ``kubeconfig`` (the bare client is kubernetes-asyncio itself)."""
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return configuration


async def bare_client(kubeconfig: Path, jobs: int, replicas: int) -> float:
    async with KubeClient(kubeconfig=kubeconfig) as kube:
        await create_namespace(kube, "bare")
        arrivals = Arrivals(kube, "bare", jobs * replicas, jobs * services_per_job(replicas))
        await arrivals.start()
        objects = same_objects(jobs, replicas, "bare")
        api = k8s.ApiClient(await k8s_configuration(kubeconfig))
        try:
            core = k8s.CoreV1Api(api)

            async def create(kind: str, body: dict[str, Any]) -> None:
                if kind == "pods":
                    await core.create_namespaced_pod("bare", body, _preload_content=False)
                else:
                    await core.create_namespaced_service("bare", body, _preload_content=False)

            started = time.monotonic()
            await bounded(CONCURRENCY, [create(kind, body) for kind, body in objects])
            finished = await arrivals.wait()
        finally:
            await api.close()
    return finished - started


async def with_controller(
    kubeconfig: Path, tmp: Path, jobs: int, replicas: int, idle_seconds: float
) -> dict[str, float]:
    async with KubeClient(kubeconfig=kubeconfig) as kube:
        await install_crds(kube)
        await create_namespace(kube, "ctl")
        async with controller(
            kubeconfig, tmp, namespace="ctl", workers=WORKERS, extra=["--resync-period", "5"]
        ) as metrics_url:
            arrivals = Arrivals(kube, "ctl", jobs * replicas, jobs * services_per_job(replicas))
            await arrivals.start()
            documents = [job_document(f"job-{j}", "ctl", replicas) for j in range(jobs)]
            for document in documents:
                del document["metadata"]["uid"]
            started = time.monotonic()
            await bounded(CONCURRENCY, [kube.create(PYTORCHJOBS, d, namespace="ctl") for d in documents])
            submitted = time.monotonic()
            finished = await arrivals.wait()

            async def all_running() -> bool:
                listed = await kube.list(PYTORCHJOBS, namespace="ctl")
                states = [(job.get("status") or {}).get("conditions", [{}])[-1].get("type") for job in listed.items]
                return states.count("Running") == jobs

            deadline = time.monotonic() + 300
            while not await all_running():
                if time.monotonic() > deadline:
                    raise RuntimeError("jobs did not all reach Running")
                await asyncio.sleep(0.5)
            settled = time.monotonic()
            writes_before = await controller_writes(metrics_url)
            await asyncio.sleep(idle_seconds)  # the measurement window itself
            writes_after = await controller_writes(metrics_url)
    return {
        "controller_seconds": finished - started,
        "submit_seconds": submitted - started,
        "settle_seconds": settled - started,
        "writes_total": writes_before,
        "idle_writes": writes_after - writes_before,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for make test")
    args = parser.parse_args(argv)
    if args.smoke:
        args.jobs, args.replicas, args.idle_seconds = 5, 4, 1.0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with local_cluster(tmp) as kubeconfig:
            bare = asyncio.run(bare_client(kubeconfig, args.jobs, args.replicas))
        with local_cluster(tmp) as kubeconfig:
            ours = asyncio.run(with_controller(kubeconfig, tmp, args.jobs, args.replicas, args.idle_seconds))
    objects = args.jobs * args.replicas
    services = args.jobs * services_per_job(args.replicas)
    results = {
        "jobs": args.jobs,
        "replicas": args.replicas,
        "bare_client_seconds": round(bare, 2),
        "controller_seconds": round(ours["controller_seconds"], 2),
        "ratio_controller_to_bare": round(ours["controller_seconds"] / bare, 2),
        "controller_objects_per_second": round((objects + services) / ours["controller_seconds"], 1),
        "bare_objects_per_second": round((objects + services) / bare, 1),
        "settle_seconds": round(ours["settle_seconds"], 2),
        "controller_writes_until_settled": ours["writes_total"],
        "idle_seconds": args.idle_seconds,
        "idle_writes": ours["idle_writes"],
        **environment(),
    }
    print(
        f"{args.jobs} PyTorchJobs x {args.replicas} replicas ({objects} pods + {services} Services), "
        f"{CONCURRENCY} in flight:"
    )
    print(f"  bare kubernetes-asyncio client     {bare:8.2f} s")
    print(f"  through the controller             {ours['controller_seconds']:8.2f} s")
    print(f"  ratio (target <= 1.5)              {results['ratio_controller_to_bare']:8.2f}")
    print(f"  writes during {args.idle_seconds:.0f} s of idle resyncs   {ours['idle_writes']:8.0f}  (target 0)")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
