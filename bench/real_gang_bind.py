"""Time to bind a gang: a 64-rank PyTorchJob on 100 simulated nodes of a fresh real control plane, with
kube-scheduler's own gang (``scheduling.k8s.io/v1beta1``, chosen because the job sets
``schedulingPolicy.minAvailable``) against the same job without a gang (the stock scheduler binding pods one
by one).

Per trial, from the job's create to the moment all of its pods are bound (``spec.nodeName``), seen from one
watch on the job's pods; then the job is deleted and its pods are waited out. Prints the median, p90 and p99
of each mode with the spread and the ratio of the medians.

    .venv/bin/python bench/real_gang_bind.py [--ranks 64] [--nodes 100] [--trials 10] [--modes native,none]
        [--smoke]

Volcano and scheduler-plugins are not measured here: run beside this benchmark's cluster (no node selector, 100
nodes), Volcano enqueued no group of a 4-rank smoke run within 5 minutes, and the cause was not found
(docs/policies.md says so).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.contenders import KUBEDL_PY, PYTORCHJOBS
from bench.real_recovery import Pods, summary
from bench.realplane import RealCluster, real_cluster
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import AlreadyExists, NotFound

NS = "bench"


def all_bound(seen: dict[str, dict[str, Any]], ranks: int) -> bool:
    return len(seen) == ranks and all((p.get("spec") or {}).get("nodeName") for p in seen.values())


async def measure(cluster: RealCluster, tmp: Path, *, ranks: int, trials: int, mode: str) -> dict[str, Any]:
    seconds: list[float] = []
    async with KubeClient(kubeconfig=cluster.admin) as kube:
        with contextlib.suppress(AlreadyExists):  # the second mode's run
            await create_namespace(kube, NS)
        async with KUBEDL_PY.run(cluster, tmp):
            for trial in range(trials):
                name = f"gang-{mode}-{trial}"
                job = KUBEDL_PY.job(name, NS, ranks)
                if mode == "native":
                    job["spec"]["schedulingPolicy"] = {"minAvailable": ranks}
                pods = Pods(kube, NS, name)
                await pods.start()
                created = time.monotonic()
                await kube.create(PYTORCHJOBS, job, namespace=NS)
                bound = await pods.until(lambda seen: all_bound(seen, ranks), 300)
                seconds.append(bound - created)
                grouped = {bool((p.get("spec") or {}).get("schedulingGroup")) for p in pods.pods.values()}
                assert grouped == {mode == "native"}, f"{mode}: pods in a gang: {grouped}"
                print(f"{mode} trial {trial + 1}/{trials}: {seconds[-1]:.2f}s", file=sys.stderr)
                with contextlib.suppress(NotFound):
                    await kube.delete(PYTORCHJOBS, name, namespace=NS, propagation_policy="Foreground")
                await pods.until(lambda seen: not seen, 300)
                await pods.stop()
    return {**summary(mode, seconds), "ranks": ranks, "nodes": cluster.info["nodes"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--modes", default="native,none")
    parser.add_argument("--smoke", action="store_true", help="4 ranks on 4 nodes, 1 trial")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep the logs here (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.ranks, args.nodes, args.trials = 4, 4, 1
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = args.work_dir or Path(tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        with real_cluster(tmp, nodes=args.nodes) as cluster:
            for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
                results.append(asyncio.run(measure(cluster, tmp, ranks=args.ranks, trials=args.trials, mode=mode)))
                print(json.dumps(results[-1]), flush=True)
    by_mode = {r["mode"]: r for r in results}
    if "native" in by_mode and "none" in by_mode:
        ratio = by_mode["native"]["median_seconds"] / max(by_mode["none"]["median_seconds"], 1e-9)
        print(json.dumps({"native_over_none_median": round(ratio, 2)}))
    print(json.dumps({"runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
