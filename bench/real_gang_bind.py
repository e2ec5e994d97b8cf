"""Time to bind a gang: a 64-rank PyTorchJob on 100 simulated nodes of a fresh real control plane, with
kube-scheduler's own gang (``scheduling.k8s.io/v1beta1``, chosen because the job sets
``schedulingPolicy.minAvailable``) against the same job without a gang (the stock scheduler binding pods one
by one).

Per trial, from the job's create to the moment all of its pods are bound (``spec.nodeName``), seen from one
watch on the job's pods; then the job is deleted and its pods are waited out. Prints the median, p90 and p99
of each mode with the spread and the ratio of the medians.

    .venv/bin/python bench/real_gang_bind.py [--ranks 64] [--nodes 100] [--trials 10] [--modes native,none]
        [--smoke]

``--modes volcano,scheduler-plugins`` measures the other two backends the same way: the real scheduler (built
from its Go module, ``harness/schedulers.py``) started against the cluster, the controller's ClusterRole as
``manifests --gang-scheduler <mode>`` renders it, the controller run with ``--gang-scheduler <mode>``, and the
job's ``minAvailable`` set to all its ranks.
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
from bench.harness import controller
from bench.real_recovery import Pods, summary
from bench.realplane import RealCluster, real_cluster
from harness.schedulers import SCHEDULERS
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_local.kubernetes.install import apply, manifest_documents
from kubedl_py.controllers.gang_schedulers import PLUGINS_GROUP_LABEL, VOLCANO_GROUP_ANNOTATION
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import AlreadyExists, NotFound
from kubedl_py.templates import ManifestOptions

NS = "bench"


def in_gang(pod: dict[str, Any], mode: str) -> bool:
    """Whether the pod is in its job's gang: the native group named in its spec, or another backend's
    scheduler and PodGroup (Volcano's group annotation, scheduler-plugins' group label)."""
    spec = pod.get("spec") or {}
    if mode in SCHEDULERS:
        meta = pod.get("metadata") or {}
        named = VOLCANO_GROUP_ANNOTATION in (meta.get("annotations") or {}) or PLUGINS_GROUP_LABEL in (
            meta.get("labels") or {}
        )
        return named and spec.get("schedulerName") == SCHEDULERS[mode].scheduler_name
    return bool(spec.get("schedulingGroup"))


def all_bound(seen: dict[str, dict[str, Any]], ranks: int) -> bool:
    return len(seen) == ranks and all((p.get("spec") or {}).get("nodeName") for p in seen.values())


async def measure(cluster: RealCluster, tmp: Path, *, ranks: int, trials: int, mode: str) -> dict[str, Any]:
    seconds: list[float] = []
    async with KubeClient(kubeconfig=cluster.admin) as kube:
        with contextlib.suppress(AlreadyExists):  # the second mode's run
            await create_namespace(kube, NS)
        async with contextlib.AsyncExitStack() as stack:
            # the controller's ClusterRole as rendered for the backend (the default one for native and none)
            rendered = ManifestOptions(gang_scheduler=mode) if mode in SCHEDULERS else ManifestOptions()
            await apply(kube, manifest_documents(rendered, kinds=("ClusterRole",)))
            if mode in SCHEDULERS:
                await stack.enter_async_context(SCHEDULERS[mode](cluster.admin, tmp / mode))
                await stack.enter_async_context(controller(cluster.controller, tmp, extra=["--gang-scheduler", mode]))
            else:
                await stack.enter_async_context(KUBEDL_PY.run(cluster, tmp))
            for trial in range(trials):
                name = f"gang-{mode}-{trial}"
                job = KUBEDL_PY.job(name, NS, ranks)
                for spec in job["spec"]["pytorchReplicaSpecs"].values():
                    # as a training rank does (Volcano's allocate skips pods that request nothing)
                    container = spec["template"]["spec"]["containers"][0]
                    container["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
                if mode != "none":
                    job["spec"]["schedulingPolicy"] = {"minAvailable": ranks}
                pods = Pods(kube, NS, name)
                await pods.start()
                created = time.monotonic()
                await kube.create(PYTORCHJOBS, job, namespace=NS)
                bound = await pods.until(lambda seen: all_bound(seen, ranks), 300)
                seconds.append(bound - created)
                grouped = {in_gang(p, mode) for p in pods.pods.values()}
                assert grouped == {mode != "none"}, f"{mode}: pods in a gang: {grouped}"
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
    for other in SCHEDULERS:
        if other in by_mode and "none" in by_mode:
            ratio = by_mode[other]["median_seconds"] / max(by_mode["none"]["median_seconds"], 1e-9)
            print(json.dumps({f"{other}_over_none_median": round(ratio, 2)}))
    print(json.dumps({"runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
