"""Throughput of the embedded API server: pod creates per second and list/watch fan-out.

The server runs in its own process (``kubedl-py local up``), the clients in this one, so on a 2-core
machine each side has a core as with a real apiserver. Figures:

- pod creates/s with 32 requests in flight from a kubernetes-asyncio client (the way our controller talks),
  and from a raw aiohttp client (what the server itself sustains without client-side model overhead);
- list latency of 1,000 pods, and watch fan-out: 10 watchers each receiving every event while 1,000 pods
  are created (each pod also produces scheduler and kubelet updates).

    .venv/bin/python bench/bench_apiserver.py [--pods 2000] [--fanout-pods 1000] [--watchers 10] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from kubernetes_asyncio import client

CONCURRENCY = 32


def pod_body(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"bench": "1"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "ports": [{"containerPort": 80}]}]},
    }


def start_server(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    kubeconfig = tmp / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubedl_py.cli",
            "local",
            "up",
            "--kubeconfig",
            str(kubeconfig),
            "--no-controller",
            "--runtime",
            "simulated",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not kubeconfig.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("local up did not start")
        time.sleep(0.05)
    url: str = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return proc, url


async def bounded(n: int, make: Any) -> float:
    """Run ``make(i)`` for i in range(n) with CONCURRENCY in flight; returns the rate per second."""
    it = iter(range(n))

    async def worker() -> None:
        for i in it:
            await make(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return n / (time.perf_counter() - t0)


async def create_namespace(session: aiohttp.ClientSession, url: str, name: str) -> None:
    async with session.post(f"{url}/api/v1/namespaces", json={"metadata": {"name": name}}) as r:
        assert r.status == 201, await r.text()


async def bench_creates(url: str, n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as session:
        await create_namespace(session, url, "bench-raw")
        await create_namespace(session, url, "bench-k8s")

        async def raw(i: int) -> None:
            async with session.post(
                f"{url}/api/v1/namespaces/bench-raw/pods",
                data=orjson.dumps(pod_body(f"p{i}")),
                headers={"Content-Type": "application/json"},
            ) as r:
                await r.read()
                assert r.status == 201

        out["raw_aiohttp_creates_per_s"] = await bounded(n, raw)
    cfg = client.Configuration()
    cfg.host = url
    cfg.connection_pool_maxsize = CONCURRENCY
    async with client.ApiClient(cfg) as api:
        core = client.CoreV1Api(api)

        async def k8s(i: int) -> None:
            await core.create_namespaced_pod("bench-k8s", pod_body(f"p{i}"))

        out["kubernetes_asyncio_creates_per_s"] = await bounded(n, k8s)

        async def k8s_raw(i: int) -> None:
            resp = await core.create_namespaced_pod("bench-k8s", pod_body(f"q{i}"), _preload_content=False)
            await resp.read()
            resp.release()

        out["kubernetes_asyncio_no_model_creates_per_s"] = await bounded(n, k8s_raw)
    return out


async def bench_fanout(url: str, pods: int, watchers: int) -> dict[str, float]:
    out: dict[str, float] = {}
    ns = "bench-fanout"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY + watchers + 4)) as session:
        await create_namespace(session, url, ns)
        async with session.get(f"{url}/api/v1/namespaces/{ns}/pods") as r:
            rv = (await r.json())["metadata"]["resourceVersion"]
        done = [asyncio.Event() for _ in range(watchers)]
        counts = [0] * watchers
        frames = [0] * watchers

        async def watch(k: int) -> None:
            async with session.get(
                f"{url}/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}",
                timeout=aiohttp.ClientTimeout(total=None, sock_read=60),
            ) as r:
                async for line in r.content:
                    frames[k] += 1
                    if line.startswith(b'{"type":"ADDED"'):
                        counts[k] += 1
                        if counts[k] == pods:
                            done[k].set()
                            return

        tasks = [asyncio.create_task(watch(k)) for k in range(watchers)]
        await asyncio.sleep(0.2)
        t0 = time.perf_counter()

        async def create(i: int) -> None:
            async with session.post(
                f"{url}/api/v1/namespaces/{ns}/pods",
                data=orjson.dumps(pod_body(f"f{i}")),
                headers={"Content-Type": "application/json"},
            ) as r:
                await r.read()

        await bounded(pods, create)
        created = time.perf_counter() - t0
        await asyncio.wait_for(asyncio.gather(*(d.wait() for d in done)), 120)
        delivered = time.perf_counter() - t0
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        out["fanout_create_seconds"] = created
        out["fanout_all_watchers_caught_up_seconds"] = delivered
        out["fanout_events_delivered_per_s"] = sum(frames) / delivered
        t0 = time.perf_counter()
        for _ in range(5):
            async with session.get(f"{url}/api/v1/namespaces/{ns}/pods") as r:
                body = await r.read()
        out["list_1000_pods_raw_ms"] = (time.perf_counter() - t0) / 5 * 1000
        out["list_1000_pods_bytes"] = float(len(body))
    cfg = client.Configuration()
    cfg.host = url
    async with client.ApiClient(cfg) as api:
        core = client.CoreV1Api(api)
        t0 = time.perf_counter()
        listed = await core.list_namespaced_pod(ns)
        out["list_1000_pods_kubernetes_asyncio_ms"] = (time.perf_counter() - t0) * 1000
        assert len(listed.items) == pods
    return out


async def run_all(url: str, args: argparse.Namespace) -> dict[str, float]:
    results = await bench_creates(url, args.pods)
    results.update(await bench_fanout(url, args.fanout_pods, args.watchers))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=2000, help="pods per create benchmark (default 2000)")
    parser.add_argument("--fanout-pods", type=int, default=1000, help="pods in the fan-out benchmark (default 1000)")
    parser.add_argument("--watchers", type=int, default=10, help="concurrent watchers (default 10)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for make test")
    args = parser.parse_args(argv)
    if args.smoke:
        args.pods, args.fanout_pods, args.watchers = 50, 50, 2
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp))
        try:
            results = asyncio.run(run_all(url, args))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    print(f"embedded API server on {os.cpu_count()} cores, {CONCURRENCY} requests in flight:")
    for k, v in results.items():
        print(f"  {k:45s} {v:10.1f}")
    print(json.dumps({k: round(v, 1) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
