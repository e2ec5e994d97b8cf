"""Throughput, requests and cost of each controller on the real control plane, side by side.

N PyTorchJobs x R replicas (Master + Workers) are submitted at once (32 in flight) to a fresh real cluster
(``bench/realplane.py``: kube-apiserver, etcd, kube-controller-manager, kube-scheduler, simulated nodes) for
each contender in turn (``bench/contenders.py``): kubedl-py, the Training Operator and KubeDL (at their
shipped settings, with their rate limits raised, and tuned: raised and 16 workers), and the bare client,
which creates the same pods and Services itself (the API server's limit). Per contender and run:

- ``exist_seconds``: from the first submit until every pod and Service exists (seen on watches);
- ``settle_seconds``: until every job reports Running;
- ``requests_until_settled``: the controller's requests, from the audit log, by verb;
- ``cpu_seconds`` (from ready until settled) and ``peak_rss_mib`` of the controller process;
- ``cpu_seconds_until_exist`` and ``requests_until_exist``: the same until every pod and Service exists (on 2
  cores the controller's CPU in that window is taken from the API server it waits on);
- with ``--idle-seconds``: its requests during that many seconds once everything settled.

Rounds alternate the contenders (bare, kubedl-py, peers...), so drift of the shared machine spreads over
all of them; the ratios are per round (contender / that round's bare client) and their median.

    .venv/bin/python bench/real_controller.py --jobs 200 [--runs 5] [--shipped-runs 1]
        [--peer-runs R] [--runs-of NAME=R,...] [--contenders bare-client,kubedl-py,...] [--nodes 100]
        [--idle-seconds 60] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_controller import Arrivals, k8s_configuration, same_objects, services_per_job
from bench.contenders import BARE, BARE_MASTER_FIRST, CONTENDERS, Contender, Usage, chosen, job_phase_running
from bench.harness import bounded, environment, metric_sum
from bench.realplane import RealCluster, real_cluster
from harness import peers
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import PODS, SERVICES, Resource

CONCURRENCY = 32
NS = "bench"


class RunningPods:
    """Watches the namespace's pods and notes when ``target`` of them are Running at once (seen on the watch, not
    by polling: a list every few seconds would both load the API server and round the time to its period)."""

    def __init__(
        self, kube: KubeClient, namespace: str, target: int, on_running: Callable[[str], None] | None = None
    ) -> None:
        self.kube, self.namespace, self.target = kube, namespace, target
        #: called with a pod's name the first time the watch shows it Running
        self.on_running = on_running
        self.done: float | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listed = await self.kube.list(PODS, namespace=self.namespace)
        self.task = asyncio.create_task(self._follow(listed.resource_version))

    async def _follow(self, since: str) -> None:
        running: set[str] = set()
        version = since
        while True:
            async with contextlib.aclosing(
                self.kube.watch(PODS, namespace=self.namespace, resource_version=version, timeout_seconds=300)
            ) as events:
                async for event in events:
                    metadata = event.object.get("metadata", {})
                    version = metadata.get("resourceVersion", version)
                    name = metadata.get("name", "")
                    if event.type != "DELETED" and event.object.get("status", {}).get("phase") == "Running":
                        if name not in running and self.on_running is not None:
                            self.on_running(name)
                        running.add(name)
                    else:
                        running.discard(name)
                    if len(running) >= self.target:
                        self.done = time.monotonic()
                        return

    async def wait(self, deadline: float) -> float:
        assert self.task is not None
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            await asyncio.shield(self.task)
        assert self.done is not None
        return self.done

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


async def warm_up(kube: KubeClient, resource: Resource, body: dict[str, Any], namespace: str = NS) -> None:
    """Create and delete one object of the kind about to be timed, before the clock starts.

    On a fresh cluster, the first custom resources created in a namespace made moments ago waited about 2 s
    in kube-apiserver (all 32 in flight; its log then says ``quota admission added evaluator for:
    pytorchjobs...``), while a namespace a few seconds old answered in milliseconds. Which contender met that
    depended on how fast it started, so every contender's namespace and kind are warmed alike, with no
    controller running yet (nothing reconciles the object).
    """
    name = body["metadata"]["name"]
    await kube.create(resource, body, namespace=namespace)
    await kube.delete(resource, name, namespace=namespace)
    deadline = time.monotonic() + 30
    while True:
        try:
            await kube.get(resource, name, namespace=namespace)
        except NotFound:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm-up {resource.kind} {name} was not deleted")
        await asyncio.sleep(0.05)


Made = list[tuple[str, dict[str, Any]]]


def staged(objects: Made) -> tuple[Made, dict[str, Made]]:
    """KubeDL's order: every Service and each job's Master pod first; a job's Worker pods (by its Master's pod
    name) once that Master runs."""
    first: Made = []
    later: dict[str, Made] = {}
    for kind, body in objects:
        name = body["metadata"]["name"]
        job, replica_type, _ = name.rsplit("-", 2)
        if kind == "pods" and replica_type != "master":
            later.setdefault(f"{job}-master-0", []).append((kind, body))
        else:
            first.append((kind, body))
    return first, later


async def bare_run(cluster: RealCluster, jobs: int, replicas: int, *, master_first: bool = False) -> dict[str, Any]:
    """The bare client: kubedl-py's pods and Services made directly, 32 in flight, all at once; with
    ``master_first`` in KubeDL's order (:func:`staged`), the same 32 slots shared by both steps."""
    objects = same_objects(jobs, replicas, NS)
    first, later = staged(objects) if master_first else (objects, {})
    async with KubeClient(kubeconfig=cluster.admin) as admin:
        await create_namespace(admin, NS)
        for kind, body in same_objects(1, 1, NS):
            await warm_up(admin, PODS if kind == "pods" else SERVICES, {**body, "metadata": {"name": "warm-up"}})
        arrivals = Arrivals(admin, NS, jobs * replicas, jobs * services_per_job(replicas))
        await arrivals.start()
        slots = asyncio.Semaphore(CONCURRENCY)
        follow_ups: list[asyncio.Task[None]] = []
        running = RunningPods(
            admin, NS, jobs * replicas, lambda name: follow_ups.extend(made(*item) for item in later.pop(name, []))
        )
        await running.start()
        mark = cluster.audit_mark()
        api = k8s.ApiClient(await k8s_configuration(cluster.user("bare-client")))
        try:
            core = k8s.CoreV1Api(api)

            async def create(kind: str, body: dict[str, Any]) -> None:
                async with slots:
                    if kind == "pods":
                        await core.create_namespaced_pod(NS, body, _preload_content=False)
                    else:
                        await core.create_namespaced_service(NS, body, _preload_content=False)

            def made(kind: str, body: dict[str, Any]) -> asyncio.Task[None]:
                return asyncio.create_task(create(kind, body))

            started = time.monotonic()
            await asyncio.gather(*(create(kind, body) for kind, body in first))
            finished = await arrivals.wait()
            await asyncio.gather(*follow_ups)
            # What the control plane allows (issue 53): the same pods, made as fast as the API server takes them,
            # until every one runs; each controller's all-Running time is a ratio to this.
            try:
                all_running = await running.wait(time.monotonic() + 600 + jobs)
            except TimeoutError:
                raise RuntimeError("bare-client: the pods did not all reach Running") from None
        finally:
            await running.stop()
            await api.close()
    return {
        "exist_seconds": finished - started,
        "all_pods_running_seconds": all_running - started,
        "requests": dict(cluster.requests("bare-client", mark)),
    }


async def controller_run(
    contender: Contender, cluster: RealCluster, tmp: Path, *, jobs: int, replicas: int, idle_seconds: float
) -> dict[str, Any]:
    assert contender.resource is not None
    resource = contender.resource
    services = jobs * contender.services_per_job(replicas)
    async with KubeClient(kubeconfig=cluster.admin) as kube:
        await create_namespace(kube, NS)
        if contender.peer is not None:  # kubedl-py's CRDs are installed with the cluster, the peers' with them
            async with KubeClient(kubeconfig=cluster.admin) as admin:
                await peers.install_peer_crds(admin, contender.peer)
        await warm_up(kube, resource, contender.job("warm-up", NS, replicas))
        async with contender.run(cluster, tmp) as usage:
            arrivals = Arrivals(kube, NS, jobs * replicas, services)
            await arrivals.start()
            running = RunningPods(kube, NS, jobs * replicas)
            await running.start()
            documents = [contender.job(f"job-{j}", NS, replicas) for j in range(jobs)]
            mark = cluster.audit_mark()
            started = time.monotonic()
            await bounded(CONCURRENCY, [kube.create(resource, d, namespace=NS) for d in documents])
            submitted = time.monotonic()
            finished = await arrivals.wait()
            # what the controller used while the objects were being created: its CPU competes with the API server's
            cpu_until_exist = round(usage.cpu_since_start(), 2)
            requests_until_exist = dict(cluster.requests(contender.user, mark))
            reconciles_until_exist = await reconciles(usage)
            deadline = time.monotonic() + 600 + jobs
            while True:
                listed = await kube.list(resource, namespace=NS)
                if sum(1 for job in listed.items if job_phase_running(job)) == jobs:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{contender.name}: the jobs did not all reach Running")
                await asyncio.sleep(0.5)
            settled = time.monotonic()
            figures: dict[str, Any] = {
                "exist_seconds": finished - started,
                "submit_seconds": submitted - started,
                "cpu_seconds_until_exist": cpu_until_exist,
                "requests_until_exist": requests_until_exist,
                **({"reconciles_until_exist": reconciles_until_exist} if reconciles_until_exist is not None else {}),
                "settle_seconds": settled - started,
                "cpu_seconds": round(usage.cpu_since_start(), 2),
                "requests_until_settled": dict(cluster.requests(contender.user, mark)),
            }
            # A job's Running condition does not mean all its pods run (KubeDL sets it once the Master runs,
            # and starts the Workers after that): the idle window and the whole-work figures start only once
            # every pod runs, so no contender's tail of work is counted as idle.
            try:
                all_running = await running.wait(deadline)
            except TimeoutError:
                raise RuntimeError(f"{contender.name}: the pods did not all reach Running") from None
            finally:
                await running.stop()
            figures["all_pods_running_seconds"] = all_running - started
            await asyncio.sleep(2.0)  # the status writes that follow the last pod's start land before counting
            figures["cpu_seconds_all_running"] = round(usage.cpu_since_start(), 2)
            figures["requests_until_all_running"] = dict(cluster.requests(contender.user, mark))
            if idle_seconds:
                idle_mark = cluster.audit_mark()
                await asyncio.sleep(idle_seconds)  # the measurement window itself
                figures["idle_seconds"] = idle_seconds
                figures["idle_requests"] = dict(cluster.requests(contender.user, idle_mark))
            figures["peak_rss_mib"] = round(usage.peak_rss_mib(), 1)
            done = await reconciles(usage)
            if done is not None:
                figures["reconciles"] = done
    return figures


async def reconciles(usage: Usage) -> int | None:
    """kubedl-py's reconciles of jobs so far, from its /metrics (None for the peers: they are not counted)."""
    if usage.metrics_url is None:
        return None
    return int(await metric_sum(usage.metrics_url, "kubedl_reconcile_total"))


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    bare = [run["exist_seconds"] for run in runs.get(BARE.name, [])]
    bare_running = [
        run["all_pods_running_seconds"] for run in runs.get(BARE.name, []) if "all_pods_running_seconds" in run
    ]
    for name, results in runs.items():
        times = [run["exist_seconds"] for run in results]
        if not times:
            continue  # chosen but given no round (e.g. the peers at shipped limits with --shipped-runs 0)
        entry: dict[str, Any] = {
            "runs": len(times),
            "exist_seconds_median": round(statistics.median(times), 2),
            "exist_seconds_min": round(min(times), 2),
            "exist_seconds_max": round(max(times), 2),
        }
        if bare and name != BARE.name:
            ratios = [t / b for t, b in zip(times, bare, strict=False)]
            entry["ratio_to_bare_median"] = round(statistics.median(ratios), 2)
            entry["ratio_to_bare_min"] = round(min(ratios), 2)
            entry["ratio_to_bare_max"] = round(max(ratios), 2)
        running = [run["all_pods_running_seconds"] for run in results if "all_pods_running_seconds" in run]
        if bare_running and running and name != BARE.name:
            ratios = [t / b for t, b in zip(running, bare_running, strict=False)]
            entry["running_ratio_to_bare_median"] = round(statistics.median(ratios), 2)
            entry["running_ratio_to_bare_min"] = round(min(ratios), 2)
            entry["running_ratio_to_bare_max"] = round(max(ratios), 2)
        for key in (
            "settle_seconds",
            "cpu_seconds",
            "cpu_seconds_until_exist",
            "peak_rss_mib",
            "all_pods_running_seconds",
            "cpu_seconds_all_running",
        ):
            values = [run[key] for run in results if key in run]
            if values:
                entry[f"{key}_median"] = round(statistics.median(values), 2)
        for key in ("requests_until_exist", "requests_until_settled", "requests_until_all_running"):
            requests = [run[key]["total"] for run in results if key in run]
            if requests:
                entry[f"{key}_median"] = statistics.median(requests)
        idle = [run["idle_requests"] for run in results if "idle_requests" in run]
        if idle:
            entry["idle_requests"] = idle[0].get("total", 0)
            entry["idle_writes"] = idle[0].get("writes", 0)
        summary[name] = entry
    return summary


def rounds_of(spec: str, parser: argparse.ArgumentParser) -> dict[str, int]:
    """``--runs-of a=1,b=3`` as {name: rounds}; a bad entry is a usage error naming it."""
    wanted: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        name, _, count = entry.partition("=")
        if name not in CONTENDERS or not count.isdigit():
            parser.error(f"--runs-of: {entry!r} is not NAME=ROUNDS with NAME one of {', '.join(CONTENDERS)}")
        wanted[name] = int(count)
    return wanted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5, help="rounds for the bare client, kubedl-py and raised peers")
    parser.add_argument("--peer-runs", type=int, default=None, help="rounds for raised peers (default: --runs)")
    parser.add_argument("--shipped-runs", type=int, default=1, help="rounds for peers at shipped rate limits")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--nodes", type=int, default=0, help="simulated nodes (default: 1 per 16 pods, 10..1000)")
    parser.add_argument("--idle-seconds", type=float, default=0.0, help="idle window after the first round")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for make test")
    parser.add_argument(
        "--scheduler-qps",
        type=int,
        default=None,
        help="kube-scheduler's client QPS (default 50, which binds ~50 pods/s: raise it so that time-to-Running "
        "measures the controllers)",
    )
    parser.add_argument(
        "--runs-of",
        default="",
        help="rounds for named contenders, overriding the above (NAME=R,...: a slow peer given fewer rounds)",
    )
    args = parser.parse_args(argv)
    runs_of = rounds_of(args.runs_of, parser)
    if args.smoke:
        args.jobs, args.replicas, args.runs, args.shipped_runs, args.peer_runs, args.idle_seconds = 3, 4, 1, 1, 1, 2.0
    names = [contender.name for contender in chosen(args.contenders, parser)]
    nodes = args.nodes or max(10, min(1000, args.jobs * args.replicas // 16))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        peer_runs = args.runs if args.peer_runs is None else args.peer_runs
        for round_ in range(max(args.runs, args.shipped_runs, peer_runs, *runs_of.values())):
            for name in names:
                contender = CONTENDERS[name]
                wanted = args.runs
                if contender.peer:
                    wanted = peer_runs if contender.raised else args.shipped_runs
                wanted = runs_of.get(name, wanted)
                if round_ >= wanted:
                    continue
                idle = args.idle_seconds if round_ == 0 else 0.0  # once per contender is enough: idle is idle
                with real_cluster(
                    tmp, nodes=nodes, install=contender.install, scheduler_qps=args.scheduler_qps
                ) as cluster:
                    if contender.resource is None:
                        master_first = contender is BARE_MASTER_FIRST
                        result = asyncio.run(bare_run(cluster, args.jobs, args.replicas, master_first=master_first))
                    else:
                        result = asyncio.run(
                            controller_run(
                                contender, cluster, tmp, jobs=args.jobs, replicas=args.replicas, idle_seconds=idle
                            )
                        )
                runs[name].append(result)
                print(f"  round {round_ + 1} {name:26s} {result['exist_seconds']:8.2f} s", flush=True)
    summary = summarise(runs)
    objects = args.jobs * args.replicas
    print(
        f"{args.jobs} PyTorchJobs x {args.replicas} replicas ({objects} pods + Services), "
        f"real control plane, {nodes} nodes:"
    )
    for name, entry in summary.items():
        ratio = f"  x{entry['ratio_to_bare_median']} bare" if "ratio_to_bare_median" in entry else ""
        print(
            f"  {name:26s} median {entry['exist_seconds_median']:8.2f} s "
            f"(min {entry['exist_seconds_min']}, max {entry['exist_seconds_max']}, {entry['runs']} runs){ratio}"
        )
        if "all_pods_running_seconds_median" in entry:
            running_ratio = ""
            if "running_ratio_to_bare_median" in entry:
                running_ratio = (
                    f"  x{entry['running_ratio_to_bare_median']} bare "
                    f"({entry['running_ratio_to_bare_min']}-{entry['running_ratio_to_bare_max']})"
                )
            print(f"  {'':26s} every pod Running {entry['all_pods_running_seconds_median']:8.2f} s{running_ratio}")
    results = {
        "control_plane": "kubernetes",
        "jobs": args.jobs,
        "replicas": args.replicas,
        "nodes": nodes,
        "summary": summary,
        "runs": runs,
        **environment(),
    }
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
