"""Host-network failover on the real control plane: kubedl-py and KubeDL, idle and under load.

One host-network PyTorchJob (Master + W workers, restartPolicy ExitCode) runs on a fresh real cluster; its
Master pod is deleted F times (KubeDL makes a Service for the Master only, so the Master is what both can be
timed on). Timed from the delete request until a pod of the same name with a new uid exists and
its Service targets the new pod's host port, both seen on watches (``bench_failover.Timeline``). With
``--background-jobs N`` the same happens while N other 8-replica jobs are being created (8 in flight).
Each failover is also split in two: the old pod's graceful deletion (delete request until its DELETED
event: the node agent and the API server, the same work whichever controller runs) and the controller's
part (that event until the new pod and the re-pointed Service are both seen).

A controller that never re-points the Service is reported as such: the time until the new pod exists, and
how many failovers left the Service pointing at a port the new pod does not listen on.

    .venv/bin/python bench/real_failover.py [--contenders kubedl-py,kubedl] [--failovers 100]
        [--background-jobs 0] [--urgent-write-hold S] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_failover import Timeline
from bench.contenders import Contender, chosen, each_on_a_fresh_cluster
from bench.harness import bounded, environment, metric_sum, percentile
from bench.realplane import WRITE_VERBS, RealCluster, completed, received
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import PODS

NS = "failover"
#: the pod deleted in every failover, and its Service
MASTER = "fo-master-0"


def host_port(pod: dict[str, Any]) -> int | None:
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                return int(port["hostPort"])
    return None


def audit_split(events: list[dict[str, Any]], controller: str) -> dict[str, list[float]]:
    """Each failover's controller part as kube-apiserver's audit log tells it (every request on the Master pod
    and Service, any user, in the order received; ``controller`` is the controller's user). A failover starts
    with the benchmark's delete (the first delete after the controller created the pod again); the pod is
    gone when the last delete before the controller's create completes (the node agent's, or the benchmark's
    own when the pod was not yet on a node). Writes before that (a Service re-pointed while the old pod was
    terminating) are off the failover's critical path and not counted. Per failover:

    - ``reaction``: gone until the controller's first write after it is received: the watch event's way to
      the controller, its queue and its reconcile, and the request's way out;
    - ``repair``: that write received until the last of the failover's writes after the pod was gone (the
      pod create, and the Service re-point if it was not done before) is answered.

    Both on kube-apiserver's clock, so neither includes the benchmark's own watch delay."""
    reaction: list[float] = []
    repair: list[float] = []
    gone: float | None = None
    writes: list[dict[str, Any]] = []
    created = False

    def close() -> None:
        if gone is not None and writes:
            reaction.append(received(writes[0]) - gone)
            repair.append(max(completed(w) for w in writes) - received(writes[0]))

    for event in events:
        verb = event.get("verb")
        ours = event.get("user", {}).get("username") == controller
        if verb == "delete" and not ours:
            if created:  # the controller answered the previous deletion with a new pod: a new failover begins
                close()
                created = False
            if event.get("responseStatus", {}).get("code", 200) < 300:
                gone, writes = completed(event), []  # what the controller wrote before is off the critical path
        elif ours and verb in WRITE_VERBS and gone is not None:
            writes.append(event)
            created = created or (verb == "create" and event.get("objectRef", {}).get("resource") == "pods")
    if created:
        close()
    return {"reaction": reaction, "repair": repair}


async def urgent_waits(url: str) -> dict[str, Any]:
    """From kubedl-py's queue-wait histogram: how many urgent keys (jobs that lost a pod) a worker took, and
    how many of them had waited longer than 100 ms and 250 ms; from its write-gate histogram, how many writes
    waited for those reconciles (``--urgent-write-hold``), for how long in all, and how many over 250 ms."""
    name = "kubedl_workqueue_queue_duration_seconds_bucket"
    total = await metric_sum(url, "kubedl_workqueue_queue_duration_seconds_count", lane="urgent")
    within = {bound: await metric_sum(url, name, lane="urgent", le=bound) for bound in ("0.1", "0.25")}
    held = await metric_sum(url, "kubedl_write_gate_wait_seconds_count")
    held_briefly = await metric_sum(url, "kubedl_write_gate_wait_seconds_bucket", le="0.25")
    return {
        "urgent_keys": int(total),
        "urgent_waited_over_100ms": int(total - within["0.1"]),
        "urgent_waited_over_250ms": int(total - within["0.25"]),
        "writes_held": int(held),
        "writes_held_s": round(await metric_sum(url, "kubedl_write_gate_wait_seconds_sum"), 1),
        "writes_held_over_250ms": int(held - held_briefly),
    }


async def measure(
    contender: Contender, kube: KubeClient, *, failovers: int, workers: int, background_jobs: int
) -> dict[str, Any]:
    assert contender.resource is not None
    resource = contender.resource
    timeline = Timeline(kube, NS, names=[MASTER])
    await timeline.start()
    # ExitCode: the policy under which both replace a deleted pod (it ends Failed, 143, as it terminates)
    job = contender.job("fo", NS, workers + 1, host_network=True, restart_policy="ExitCode")
    await kube.create(resource, job, namespace=NS)
    # The Master: KubeDL gives only the Master a Service, so it is the replica both can be timed on.
    names = [MASTER]
    await timeline.until(lambda: all(n in timeline.pods and n in timeline.target for n in names), within=120)
    load: asyncio.Task[None] | None = None
    if background_jobs:
        documents = [contender.job(f"load-{i}", NS, 8) for i in range(background_jobs)]
        load = asyncio.create_task(bounded(8, [kube.create(resource, d, namespace=NS) for d in documents]))
    new_pod: list[float] = []
    complete: list[float] = []
    # the two shares of each failover: the old pod's graceful deletion (node agent + API server, the same
    # for every contender) and the controller's part, from the old pod's DELETED event to pod and Service
    deletion: list[float] = []
    controller: list[float] = []
    stale = 0
    out_of_order = 0
    # the slowest failover, whole: when it came (seconds after the first delete) and its two shares
    slowest: dict[str, float | int | None] = {}
    first = time.monotonic()
    for n in range(failovers):
        name = names[n % len(names)]
        old_uid = timeline.pods[name]
        started = time.monotonic()
        await kube.delete(PODS, name, namespace=NS)
        await timeline.until(lambda name=name, old_uid=old_uid: timeline.pods.get(name) not in (None, old_uid), 120)
        new_uid = timeline.pods[name]
        created = timeline.pod_added[(name, new_uid)]
        gone = timeline.pod_gone.get((name, old_uid))  # None: the watch restarted over the event, no split
        new_pod.append(created - started)
        if gone is not None:
            deletion.append(gone - started)
        pod = await kube.get(PODS, name, namespace=NS)
        port = host_port(pod)

        def pointed(name: str = name, port: int | None = port) -> bool:
            return port is not None and timeline.target.get(name) == port

        try:
            await timeline.until(pointed, within=10.0)
        except TimeoutError:
            stale += 1  # the Service still targets the old pod's port: peers cannot reach the new one
            if gone is not None:
                controller.append(created - gone)
            continue
        repointed = timeline.target_changed[(name, timeline.target[name])]
        out_of_order += repointed > created
        complete.append(max(repointed, created) - started)
        if gone is not None:
            controller.append(max(repointed, created) - gone)
        if complete[-1] >= float(slowest.get("ms") or 0) / 1000:
            slowest = {
                "failover": n,
                "at_s": round(started - first, 1),
                "ms": round(complete[-1] * 1000, 1),
                "deletion_ms": None if gone is None else round((gone - started) * 1000, 1),
                "controller_ms": None if gone is None else round((max(repointed, created) - gone) * 1000, 1),
            }
    if load is not None:
        await load
    await timeline.stop()
    figures: dict[str, Any] = {
        "failovers": failovers,
        "background_jobs": background_jobs,
        "new_pod_p50_ms": round(percentile(new_pod, 50) * 1000, 1),
        "new_pod_p99_ms": round(percentile(new_pod, 99) * 1000, 1),
        "service_left_stale": stale,
        "split_failovers": len(deletion),
    }
    if deletion:
        figures.update(
            {
                "deletion_p50_ms": round(percentile(deletion, 50) * 1000, 1),
                "deletion_p99_ms": round(percentile(deletion, 99) * 1000, 1),
                "controller_p50_ms": round(percentile(controller, 50) * 1000, 1),
                "controller_p99_ms": round(percentile(controller, 99) * 1000, 1),
            }
        )
    if complete:
        figures.update(
            {
                "p50_ms": round(percentile(complete, 50) * 1000, 1),
                "p99_ms": round(percentile(complete, 99) * 1000, 1),
                "max_ms": round(max(complete) * 1000, 1),
                "slowest": slowest,
                "pod_created_before_service_repointed": out_of_order,
            }
        )
    return figures


async def run(contender: Contender, cluster: RealCluster, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    async with KubeClient(kubeconfig=cluster.admin) as kube:
        await create_namespace(kube, NS)
        async with contender.run(cluster, tmp) as usage:
            mark = cluster.audit_mark()
            figures = await measure(
                contender, kube, failovers=args.failovers, workers=args.workers, background_jobs=args.background_jobs
            )
            if usage.metrics_url is not None:  # kubedl-py: how long its urgent keys (the failovers) waited
                figures.update(await urgent_waits(usage.metrics_url))
    # how long the controller's writes took inside kube-apiserver meanwhile, and how much of it was APF queueing
    split = audit_split(cluster.traced(MASTER, mark), contender.user)
    if split["reaction"]:
        figures.update(
            {
                "audited_failovers": len(split["reaction"]),
                "reaction_p50_ms": round(percentile(split["reaction"], 50) * 1000, 1),
                "reaction_p99_ms": round(percentile(split["reaction"], 99) * 1000, 1),
                "repair_p50_ms": round(percentile(split["repair"], 50) * 1000, 1),
                "repair_p99_ms": round(percentile(split["repair"], 99) * 1000, 1),
            }
        )
    if args.background_jobs:  # what the failovers cost the burst: the controller's creates of its pods
        burst = cluster.creates_span(contender.user, "pods", "load-", mark)
        if burst is not None:
            figures["burst_pods_created_s"] = round(burst, 1)
    writes = cluster.write_latencies(contender.user, mark)
    if writes:
        took = [t for t, _ in writes]
        figures.update(
            {
                "writes": len(writes),
                "write_p50_ms": round(percentile(took, 50) * 1000, 1),
                "write_p99_ms": round(percentile(took, 99) * 1000, 1),
                "write_max_ms": round(max(took) * 1000, 1),
                "apf_queued_max_ms": round(max(q for _, q in writes) * 1000, 1),
            }
        )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contenders", default="kubedl-py,kubedl")
    parser.add_argument("--failovers", type=int, default=100)
    parser.add_argument("--workers", type=int, default=7)
    parser.add_argument("--background-jobs", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument(
        "--urgent-write-hold",
        type=float,
        default=None,
        help="kubedl-py's --urgent-write-hold (default: its shipped one; 0: the A/B without the write gate)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for make test")
    args = parser.parse_args(argv)
    if args.urgent_write_hold is not None:  # read by bench.harness.controller when it starts kubedl-py
        extra = os.environ.get("BENCH_CONTROLLER_ARGS", "")  # kept: e.g. a --workers of the caller's
        os.environ["BENCH_CONTROLLER_ARGS"] = f"{extra} --urgent-write-hold {args.urgent_write_hold}".strip()
    if args.smoke:
        args.failovers, args.workers, args.nodes = 3, 2, 4
        args.background_jobs = min(args.background_jobs, 3)
    contenders = chosen(args.contenders, parser)
    names = [contender.name for contender in contenders]
    results: dict[str, Any] = {"control_plane": "kubernetes", "background_jobs": args.background_jobs}
    results.update(
        each_on_a_fresh_cluster(
            contenders, args.nodes, lambda contender, cluster, tmp: run(contender, cluster, tmp, args), traced=[MASTER]
        )
    )
    results.update(environment())
    load = f" while {args.background_jobs} jobs are created" if args.background_jobs else ""
    print(f"host-network failover on the real control plane, {args.failovers} pod deletions{load}:")
    for name in names:
        figures = results[name]
        line = f"  {name:20s} new pod p50 {figures['new_pod_p50_ms']} ms, p99 {figures['new_pod_p99_ms']} ms"
        if "p99_ms" in figures:
            line += f"; with the Service re-pointed p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms"
        line += f"; Service left stale {figures['service_left_stale']} times"
        if "deletion_p50_ms" in figures:
            line += (
                f"\n  {'':20s} of which the old pod's deletion p50 {figures['deletion_p50_ms']} ms, p99"
                f" {figures['deletion_p99_ms']} ms; the controller's part p50 {figures['controller_p50_ms']} ms,"
                f" p99 {figures['controller_p99_ms']} ms"
            )
        if "reaction_p50_ms" in figures:
            line += (
                f"\n  {'':20s} in kube-apiserver's audit log: pod gone -> the controller's first write received p50"
                f" {figures['reaction_p50_ms']} ms, p99 {figures['reaction_p99_ms']} ms; its writes p50"
                f" {figures['repair_p50_ms']} ms, p99 {figures['repair_p99_ms']} ms"
            )
        if "urgent_keys" in figures:
            line += (
                f"\n  {'':20s} urgent keys taken by its workers {figures['urgent_keys']}, waited > 100 ms"
                f" {figures['urgent_waited_over_100ms']}, > 250 ms {figures['urgent_waited_over_250ms']}"
            )
        if "writes_held" in figures:
            line += (
                f"\n  {'':20s} writes held for them {figures['writes_held']} ({figures['writes_held_s']} s in all),"
                f" > 250 ms {figures['writes_held_over_250ms']}"
            )
        if "burst_pods_created_s" in figures:
            line += f"\n  {'':20s} the burst's pods created in {figures['burst_pods_created_s']} s"
        if "writes" in figures:
            line += (
                f"\n  {'':20s} its {figures['writes']} writes in kube-apiserver p50 {figures['write_p50_ms']} ms,"
                f" p99 {figures['write_p99_ms']} ms, max {figures['write_max_ms']} ms (APF queueing at most"
                f" {figures['apf_queued_max_ms']} ms)"
            )
        print(line)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
