"""Host-network mode at scale on the real control plane: 20,000 pods on 1,000 nodes, with the default port
range and with a range of 100 ports.

Why: host ports only need to be unique per node (kube-scheduler's NodePorts filter keeps two pods declaring one
port off a node), so the number of host-network pods is bounded by the range *per node*, not per cluster. This
benchmark reaches the scale and checks it from the pods themselves, not from the controller's memory:

- every pod Running, bound to a node (a node holds at most as many host-network pods as the range has ports, so
  ``jobs x replicas`` must fit ``nodes x ports``);
- no two pods on one node declaring the same host port (over all ports each pod declares);
- every Service's targetPort equal to its live pod's host port;

and reports the time from the first submit until every pod runs, the controller's CPU seconds and peak RSS,
and its requests per job (audit log), for each range, on a fresh cluster each (``bench/realplane.py``; the
scheduler's client rate limit is kube-scheduler's default unless ``--scheduler-qps`` raises it).

    .venv/bin/python bench/real_hostnet_scale.py [--jobs 2500] [--replicas 8] [--nodes 1000]
        [--ranges 20000-30000,20000-20099] [--scheduler-qps N] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.contenders import KUBEDL_PY, PYTORCHJOBS
from bench.harness import bounded
from bench.realplane import RealCluster, real_cluster
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_py.api import constants as c
from kubedl_py.controllers.hostnetwork.ports import pod_host_ports
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import PODS, SERVICES

CONCURRENCY = 32
NS = "bench"


def check(pods: list[dict[str, Any]], services: list[dict[str, Any]]) -> dict[str, Any]:
    """The invariants, from the objects: collisions per node, Services not pointing at their pod."""
    by_node: dict[str, Counter[int]] = defaultdict(Counter)
    unbound = 0
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            unbound += 1
            continue
        by_node[node].update(set(pod_host_ports(pod)))
    collisions = sum(count - 1 for ports in by_node.values() for count in ports.values() if count > 1)
    port_of = {
        pod["metadata"]["name"]: int(pod["metadata"]["annotations"][c.ANNOTATION_HOST_PORT])
        for pod in pods
        if not pod["metadata"].get("deletionTimestamp")
    }
    misdirected = sum(
        1
        for service in services
        if port_of.get(service["metadata"]["name"]) != service["spec"]["ports"][0].get("targetPort")
    )
    return {
        "pods": len(pods),
        "unbound": unbound,
        "nodes_used": len(by_node),
        "port_collisions_on_a_node": collisions,
        "services_not_on_their_pod": misdirected,
        # how many pods share one port cluster-wide: above 1, ports are unique per node only
        "most_pods_per_port": max(Counter(port_of.values()).values(), default=0),
    }


async def measure(cluster: RealCluster, tmp: Path, *, jobs: int, replicas: int, port_range: str) -> dict[str, Any]:
    total = jobs * replicas
    os.environ["BENCH_CONTROLLER_ARGS"] = f"--hostnetwork-port-range {port_range}"
    async with KubeClient(kubeconfig=cluster.admin) as kube:
        await create_namespace(kube, NS)
        async with KUBEDL_PY.run(cluster, tmp) as usage:
            documents = [KUBEDL_PY.job(f"job-{j}", NS, replicas, host_network=True) for j in range(jobs)]
            mark = cluster.audit_mark()
            started = time.monotonic()
            await bounded(CONCURRENCY, [kube.create(PYTORCHJOBS, d, namespace=NS) for d in documents])
            submitted = time.monotonic()
            deadline = started + 1800 + jobs
            running, told = 0, started
            while True:
                listed = await kube.list(PODS, namespace=NS, label_selector=c.LABEL_JOB_NAME)
                running = sum(1 for pod in listed.items if (pod.get("status") or {}).get("phase") == "Running")
                if running == total:
                    break
                now = time.monotonic()
                if now > deadline:
                    raise RuntimeError(f"only {running} of {total} pods Running after {now - started:.0f}s")
                if now - told > 30:
                    told = now
                    print(f"{port_range}: {running}/{total} pods Running after {now - started:.0f}s", file=sys.stderr)
                # a list of 20,000 pods is itself work for the API server the controller shares: not too often
                await asyncio.sleep(2.0 if total <= 2000 else 10.0)
            all_running = time.monotonic()
            # the Services follow their pods (a re-point is one patch): give the last ones a moment to settle
            for _ in range(30):
                services = (await kube.list(SERVICES, namespace=NS, label_selector=c.LABEL_JOB_NAME)).items
                invariants = check(listed.items, services)
                if invariants["services_not_on_their_pod"] == 0:
                    break
                await asyncio.sleep(1.0)
            requests = cluster.requests(KUBEDL_PY.user, mark)
            return {
                "port_range": port_range,
                "jobs": jobs,
                "pods": total,
                "nodes": cluster.info["nodes"],
                "submit_seconds": round(submitted - started, 1),
                "all_running_seconds": round(all_running - started, 1),
                "cpu_seconds": round(usage.cpu_since_start(), 1),
                "peak_rss_mib": round(usage.peak_rss_mib(), 1),
                "requests": dict(requests),
                "requests_per_job": round(requests["total"] / jobs, 2),
                **invariants,
            }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2500)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--ranges", default="20000-30000,20000-20099")
    parser.add_argument("--smoke", action="store_true", help="20 jobs on 10 nodes, ranges of 10,001 and 40 ports")
    parser.add_argument("--scheduler-qps", type=int, default=None, help="kube-scheduler's client QPS (default 50)")
    args = parser.parse_args(argv)
    if args.smoke:
        # 160 pods on 10 nodes: a range of 40 ports leaves room (a node takes as many host-network pods as ports)
        args.jobs, args.nodes, args.ranges = 20, 10, "20000-30000,20000-20039"
    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for port_range in args.ranges.split(","):
            with real_cluster(tmp, nodes=args.nodes, scheduler_qps=args.scheduler_qps) as cluster:
                results.append(
                    asyncio.run(
                        measure(cluster, tmp, jobs=args.jobs, replicas=args.replicas, port_range=port_range.strip())
                    )
                )
            print(json.dumps(results[-1]), flush=True)
    broken = [r for r in results if r["port_collisions_on_a_node"] or r["services_not_on_their_pod"] or r["unbound"]]
    print(json.dumps({"runs": results}))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
