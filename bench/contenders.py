"""The controllers the real-plane benchmarks compare, behind one interface.

Every contender reconciles the same PyTorchJobs (Master + Workers, 8 replicas unless told) in its own API
group on a fresh real cluster with the same nodes: kubedl-py as installed (its ServiceAccount, its shipped
defaults), the Kubeflow Training Operator v1.9 and KubeDL v0.5, each built from its published Go module
(``harness/peers.py``), at the settings they ship with, again with their client rate limits raised
(``-raised``), and tuned as a user would tune them (``-tuned``: limits raised and as many concurrent
reconciles as kubedl-py runs, ``ControllerOptions.workers``). ``bare-client`` is not a controller: it
creates the same pods and Services itself, as fast as a client can, and so measures the API server's own
limit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bench_controller import services_per_job
from bench.harness import controller
from bench.realplane import KUBEDL_PY_USER, RealCluster, real_cluster
from harness import peers
from kubedl_py.api import constants as c
from kubedl_py.controllers.setup import ControllerOptions
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import Resource

PYTORCHJOBS = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
#: the raised client rate limits of the peers: high enough never to bind (kubedl-py has no client-side limit at
#: all; its writes are bounded by concurrency, 32 in flight per kind). The Training Operator's flags take whole
#: numbers, so no "-1 = off" for it; the same figure for both.
RAISED_QPS = 1_000_000.0
RAISED_BURST = 1_000_000
#: the peers' concurrent reconciles when tuned: kubedl-py's own default, so every contender runs as many
TUNED_WORKERS = ControllerOptions().workers
TICKS = os.sysconf("SC_CLK_TCK")


class Usage:
    """CPU seconds and peak RSS of one process, from /proc (Go and Python alike)."""

    def __init__(self, pid: int, metrics_url: str | None = None) -> None:
        self.pid = pid
        #: kubedl-py's /metrics server (None for the peers and the bare client)
        self.metrics_url = metrics_url
        self.cpu_at_start = self.cpu_seconds()

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime

    def cpu_since_start(self) -> float:
        return self.cpu_seconds() - self.cpu_at_start

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmHWM in /proc status")


@dataclass(frozen=True)
class Contender:
    name: str
    #: the audit-log user its requests are made as
    user: str
    #: the PyTorchJob resource it reconciles (None: the bare client)
    resource: Resource | None
    #: which peer (None: kubedl-py or the bare client)
    peer: peers.PeerName | None = None
    raised: bool = False
    #: concurrent reconciles (None: as shipped, 1 for both peers)
    workers: int | None = None
    #: needs kubedl-py's CRDs and controller identity installed (a KubeDL cluster must not have them: same group)
    install: bool = True

    def job(
        self,
        name: str,
        namespace: str,
        replicas: int,
        *,
        host_network: bool = False,
        restart_policy: str | None = None,
    ) -> dict[str, Any]:
        if self.peer is not None:
            return peers.peer_pytorchjob(
                self.peer, name, namespace, replicas, host_network=host_network, restart_policy=restart_policy
            )
        template = {"spec": {"containers": [{"name": "pytorch", "image": "busybox", "command": ["train"]}]}}
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if host_network:
            metadata["annotations"] = {c.ANNOTATION_NETWORK_MODE: c.NETWORK_MODE_HOST}
        specs: dict[str, Any] = {"Master": {"replicas": 1, "template": template}}
        if replicas > 1:
            specs["Worker"] = {"replicas": replicas - 1, "template": template}
        if restart_policy is not None:
            for spec in specs.values():
                spec["restartPolicy"] = restart_policy
        return {
            "apiVersion": c.API_VERSION,
            "kind": c.PYTORCH_KIND,
            "metadata": metadata,
            "spec": {"pytorchReplicaSpecs": specs},
        }

    def services_per_job(self, replicas: int) -> int:
        """Services it makes for a job of ``replicas``: the Training Operator one per replica, KubeDL the Master's
        only, kubedl-py those of the replicas peers dial (the Master's)."""
        if self.peer is None:
            return services_per_job(replicas)
        return 1 if self.peer == "kubedl" else replicas

    @contextlib.asynccontextmanager
    async def run(self, cluster: RealCluster, tmp: Path) -> AsyncIterator[Usage]:
        """Start the controller against ``cluster`` (CRDs installed first) and yield its usage meter."""
        if self.peer is None:
            async with controller(cluster.controller, tmp) as process:
                yield Usage(process.pid, str(process))
            return
        async with KubeClient(kubeconfig=cluster.admin) as kube:
            await peers.install_peer_crds(kube, self.peer)
        limits: dict[str, Any] = {"qps": RAISED_QPS, "burst": RAISED_BURST} if self.raised else {}
        if self.workers is not None:
            limits["workers"] = self.workers
        async with contextlib.AsyncExitStack() as stack:
            for attempt in range(3):
                try:
                    process = await stack.enter_async_context(
                        peers.run_peer(
                            self.peer, cluster.user(self.user), tmp, setup_kubeconfig=cluster.admin, **limits
                        )
                    )
                    break
                except peers.PeerError as exc:
                    # A free port picked for it can be taken before it binds (1,000 node agents' connections
                    # use ephemeral ports): the Training Operator then exits "address already in use".
                    if "address already in use" not in str(exc) or attempt == 2:
                        raise
            yield Usage(process.pid)


TRAINING_OPERATOR = peers.PEERS["training-operator"]
KUBEDL = peers.PEERS["kubedl"]
BARE = Contender("bare-client", "bare-client", None)
#: the bare client in KubeDL's order: a job's Workers once its Master runs (issue 53: is a paced burst faster?)
BARE_MASTER_FIRST = Contender("bare-client-master-first", "bare-client", None)
KUBEDL_PY = Contender("kubedl-py", KUBEDL_PY_USER, PYTORCHJOBS)
CONTENDERS: dict[str, Contender] = {
    contender.name: contender
    for contender in (
        BARE,
        BARE_MASTER_FIRST,
        KUBEDL_PY,
        Contender("training-operator", "training-operator", TRAINING_OPERATOR.job, "training-operator"),
        Contender(
            "training-operator-raised", "training-operator", TRAINING_OPERATOR.job, "training-operator", raised=True
        ),
        Contender(
            "training-operator-tuned",
            "training-operator",
            TRAINING_OPERATOR.job,
            "training-operator",
            raised=True,
            workers=TUNED_WORKERS,
        ),
        Contender("kubedl", "kubedl", KUBEDL.job, "kubedl", install=False),
        Contender("kubedl-raised", "kubedl", KUBEDL.job, "kubedl", raised=True, install=False),
        Contender("kubedl-tuned", "kubedl", KUBEDL.job, "kubedl", raised=True, workers=TUNED_WORKERS, install=False),
    )
}


def job_phase_running(job: dict[str, Any]) -> bool:
    """The job reports Running (all three write a ``Running`` condition with status True)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Running" and condition.get("status") == "True":
            return True
    return False


def chosen(spec: str, parser: argparse.ArgumentParser) -> list[Contender]:
    """The contenders a ``--contenders a,b,c`` value names (an unknown name is a usage error naming the known
    ones); builds the peers among them first (cached after the first time)."""
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown:
        parser.error(f"--contenders: unknown {', '.join(unknown)} (known: {', '.join(CONTENDERS)})")
    contenders = [CONTENDERS[name] for name in names]
    if any(contender.peer for contender in contenders):
        peers.ensure_peers()
    return contenders


def each_on_a_fresh_cluster(
    contenders: list[Contender],
    nodes: int,
    measure: Callable[[Contender, RealCluster, Path], Awaitable[dict[str, Any]]],
    *,
    traced: Sequence[str] = (),
) -> dict[str, Any]:
    """``measure`` each contender in turn on a real cluster of its own; the figures by contender name.
    ``traced``: pods/Services whose every request is audited (``real_cluster``)."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for contender in contenders:
            with real_cluster(tmp, nodes=nodes, install=contender.install, traced=traced) as cluster:
                results[contender.name] = asyncio.run(measure(contender, cluster, tmp))
    return results
