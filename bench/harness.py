"""Shared pieces of the benchmarks: an embedded cluster and a controller, each in its own process.

On a 2-core machine the API server and the controller then each get a core, as they would in a real
cluster, and the process that measures stays out of both.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp

from kubedl_py.api.crd import all_crds
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import NAMESPACES, Resource

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
KUBEDL_PY = [sys.executable, "-m", "kubedl_py.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def local_cluster(tmp: Path, *, nodes: int = 10, extra: list[str] | None = None) -> Iterator[Path]:
    """``kubedl-py local up --no-controller`` in a subprocess; yields its kubeconfig once it serves."""
    kubeconfig = tmp / f"cluster-{time.monotonic_ns()}.kubeconfig"
    log = open(tmp / "cluster.log", "ab")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen(
        [
            *KUBEDL_PY,
            "local",
            "up",
            "--kubeconfig",
            str(kubeconfig),
            "--nodes",
            str(nodes),
            "--no-controller",
            "--runtime",
            "simulated",
            *(extra or []),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not kubeconfig.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"local cluster did not start; see {tmp / 'cluster.log'}")
            time.sleep(0.05)
        yield kubeconfig
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class ControllerProcess(str):
    """The metrics URL of a controller subprocess (a str, for the callers that only need that), and its pid."""

    pid: int

    def rss_mib(self) -> float:
        """Resident memory of the controller process now, from /proc."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS in /proc status")


@contextlib.asynccontextmanager
async def controller(
    kubeconfig: Path,
    tmp: Path,
    *,
    namespace: str | None = None,
    workers: int | None = None,
    extra: list[str] | None = None,
) -> AsyncIterator[ControllerProcess]:
    """``kubedl-py controller`` in a subprocess; yields its metrics URL once /readyz answers 200."""
    port = free_port()
    args = [*KUBEDL_PY, "controller", "--kubeconfig", str(kubeconfig)]
    if workers is not None:  # None: the shipped default
        args += ["--workers", str(workers)]
    args += ["--metrics-addr", f"127.0.0.1:{port}", *(extra or [])]
    # more flags for every controller a benchmark starts: an A/B of a setting (e.g. --urgent-write-hold 0)
    args += shlex.split(os.environ.get("BENCH_CONTROLLER_ARGS", ""))
    if namespace:
        args += ["--namespace", namespace]
    profile = os.environ.get("BENCH_PROFILE")
    if profile:  # sample the controller with py-spy (collapsed stacks, one file per controller process)
        out = f"{profile}.{time.monotonic_ns()}.txt"
        spy = str(Path(sys.executable).with_name("py-spy"))
        args = [spy, "record", "--format", "raw", "--rate", "200", "--nonblocking", "-o", out, "--", *args]
    log = (tmp / "controller.log").open("ab")
    proc = await asyncio.create_subprocess_exec(*args, stdout=log, stderr=subprocess.STDOUT)
    url = ControllerProcess(f"http://127.0.0.1:{port}")
    url.pid = proc.pid
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{url}/readyz") as response:
                        if response.status == 200:
                            break
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"controller did not become ready; see {tmp / 'controller.log'}")
                await asyncio.sleep(0.05)
        yield url
    finally:
        if proc.returncode is None:
            # py-spy writes its profile on SIGINT (and stops the controller)
            proc.send_signal(signal.SIGINT if profile else signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout=20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


async def metric_sum(url: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` on a /metrics page whose labels include ``labels``."""
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        text = await response.text()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{key}="{val}"' in head for key, val in labels.items()):
            total += float(value)
    return total


async def controller_writes(url: str) -> float:
    """API writes the controller has made so far (its own request counter)."""
    total = 0.0
    for verb in ("create", "patch", "patch_status", "replace", "replace_status", "delete", "delete_collection"):
        total += await metric_sum(url, "kubedl_api_requests_total", verb=verb)
    return total


async def install_crds(kube: KubeClient) -> None:
    for crd in all_crds():
        await kube.create(CRDS, crd)
    for crd in all_crds():
        plural = crd["spec"]["names"]["plural"]
        resource = Resource(crd["spec"]["group"], "v1alpha1", plural, crd["spec"]["names"]["kind"])
        deadline = time.monotonic() + 30
        while True:
            try:
                await kube.list(resource, namespace="default")
                break
            except NotFound:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)


async def create_namespace(kube: KubeClient, name: str) -> None:
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


async def bounded(concurrency: int, calls: list[Any]) -> None:
    """Run the coroutines with at most ``concurrency`` in flight."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(call: Any) -> None:
        async with semaphore:
            await call

    await asyncio.gather(*(one(call) for call in calls))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def environment() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
