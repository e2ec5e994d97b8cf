"""``kubedl-py local up``: serve a local cluster (embedded or the real control plane) until told to stop.

Why one runner for both control planes: a user switches between the fast embedded server and the real
Kubernetes components with one flag and gets the same things — nodes (simulated or the host as one process
node), the CRDs, the controller beside the cluster, and a kubeconfig at the same place, written last so its
appearance means "ready". Only the embedded server keeps state across restarts (``--data-dir``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubedl_local.cluster import CONTEXT, LocalCluster
from kubedl_local.node import AgentSettings
from kubedl_local.node.dra import DraDevices
from kubedl_local.pins import KUBERNETES_VERSION
from kubedl_py.kube.client import KubeClient
from kubedl_py.templates.render import DEFAULT_IMAGE

log = logging.getLogger(__name__)

CONTROL_PLANES = ("embedded", "kubernetes")


class ClusterStartError(RuntimeError):
    """The cluster cannot start on this machine for a reason its message names with the fix (a real node
    already running here, a missing tool): ``local up`` prints it in one line instead of a traceback."""


def _user_fixable(exc: BaseException) -> bool:
    from kubedl_local.kubernetes.real_node import NodeBusy, NodeError

    return isinstance(exc, NodeBusy | NodeError)


class UpCluster(Protocol):
    """What ``local up`` needs of a cluster, whichever control plane serves it."""

    @property
    def url(self) -> str: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def controller_client(self) -> KubeClient: ...


@dataclass
class LocalUpOptions:
    kubeconfig: str
    port: int = 0
    nodes: int = 1
    runtime: str = "simulated"
    data_dir: str | None = None
    #: "embedded" (kubedl-py's own API server) or "kubernetes" (the real components, built from Go modules)
    control_plane: str = "embedded"
    #: the real control plane: install the CRDs and the controller's identity from deploy/ (``local up`` does
    #: unless ``--no-controller``); the embedded cluster's CRDs are installed by whoever runs the controller
    install: bool = True
    #: the process/container runtimes' pod network (None: kubedl0 and 10.244.0.0/16)
    bridge: str | None = None
    pod_cidr: str | None = None
    #: also install the kinds in kubeflow.org/v1 (``--kubeflow-api``)
    kubeflow_api: bool = False
    #: resources every node advertises on top of the defaults (``--node-resources nvidia.com/gpu=8,rdma/hca=1``);
    #: on the process node, extended resources among them are pretend devices (kubedl_local/node/devices.py)
    node_resources: dict[str, str] = field(default_factory=dict)
    #: DRA devices every node publishes (``--node-devices gpu=8,nic=8,pcie-roots=4``; real control plane only)
    node_devices: DraDevices | None = None
    #: a node whose kubelet has not reported for this long is NotReady (kube-controller-manager's
    #: ``--node-monitor-grace-period``, 50 s); shorter rehearses ``local node stop`` faster
    node_monitor_grace_period: float = 50.0
    #: runtime "kubelet": images of podman's store to copy into the real node (``--image``), and kube-proxy's mode
    images: tuple[str, ...] = ()
    proxy_mode: str = "iptables"

    def agent_settings(self, **extra: Any) -> AgentSettings:
        """The node agents renew their Leases every quarter of the grace period (10 s at most), as a kubelet
        renews every quarter of its Lease's duration, so a short grace period does not flap healthy nodes."""
        return AgentSettings(lease_renew_interval=min(10.0, self.node_monitor_grace_period / 4), **extra)


def build_cluster(options: LocalUpOptions) -> UpCluster:
    """The cluster ``options`` describe; ValueError (with the fix in its message) for combinations that
    cannot work."""
    if options.control_plane not in CONTROL_PLANES:
        raise ValueError(f"--control-plane {options.control_plane!r}: use one of {', '.join(CONTROL_PLANES)}")
    if options.runtime == "kubelet" and options.control_plane != "kubernetes":
        raise ValueError(
            "--runtime kubelet runs a real node, which joins the real control plane: add --control-plane kubernetes"
        )
    if options.control_plane == "embedded":
        if options.node_devices is not None:
            raise ValueError(
                "--node-devices publishes DRA devices, which the embedded API server does not serve "
                "(no resource.k8s.io): add --control-plane kubernetes"
            )
        return LocalCluster(
            nodes=options.nodes,
            runtime=options.runtime,
            port=options.port,
            data_dir=options.data_dir,
            kubeconfig_path=options.kubeconfig,
            toleration_seconds=300,
            node_monitor_grace_period=options.node_monitor_grace_period,
            agent_settings=options.agent_settings(watch_all_bound_pods=options.runtime == "simulated"),
            defer_kubeconfig=True,
            pod_cidr=options.pod_cidr,
            process_bridge=options.bridge or "kubedl0",
            node_resources=dict(options.node_resources) or None,
        )
    if options.data_dir is not None:
        raise ValueError(
            "--data-dir keeps only the embedded control plane's state; drop it with --control-plane kubernetes"
        )
    from kubedl_local.kubernetes.cluster import KubernetesCluster, KubernetesClusterOptions
    from kubedl_local.kubernetes.controlplane import ControlPlaneOptions
    from kubedl_local.kubernetes.real_node import RealNodeOptions
    from kubedl_py.templates import ManifestOptions

    kubernetes = KubernetesClusterOptions(
        control_plane=ControlPlaneOptions(
            port=options.port, node_monitor_grace_period=options.node_monitor_grace_period
        ),
        agent=options.agent_settings(watch_all_bound_pods=True),
        nodes=options.nodes,
        runtime=options.runtime,
        install=options.install,
        manifests=ManifestOptions(kubeflow_api=options.kubeflow_api),
        node_resources=dict(options.node_resources),
        node_devices=options.node_devices,
    )
    if options.runtime == "kubelet":
        real = RealNodeOptions(images=options.images, proxy_mode=options.proxy_mode, optional_images=(DEFAULT_IMAGE,))
        if options.node_monitor_grace_period < 40:
            # the kubelet renews its Lease every quarter of the Lease's duration (40 s): as the agents do
            real.kubelet_config["nodeLeaseDurationSeconds"] = max(1, int(options.node_monitor_grace_period))
        if options.bridge is not None:
            real.bridge = options.bridge
        if options.pod_cidr is not None:
            real.pod_cidr = options.pod_cidr
        kubernetes.real_node = real
    if options.bridge is not None:
        kubernetes.bridge = options.bridge
    if options.pod_cidr is not None:
        kubernetes.pod_cidr = options.pod_cidr
    return KubernetesCluster(kubernetes)


def write_user_kubeconfig(cluster: UpCluster, path: Path) -> None:
    if isinstance(cluster, LocalCluster):
        cluster.write_kubeconfig()
        return
    from kubedl_local.kubernetes.cluster import KubernetesCluster

    assert isinstance(cluster, KubernetesCluster)
    cluster.write_user_kubeconfig(path)


async def run_local_up(
    options: LocalUpOptions,
    *,
    on_ready: Callable[[UpCluster], Awaitable[None]] | None = None,
    on_stop: Callable[[], Awaitable[None]] | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Serve a local cluster until SIGINT/SIGTERM (or ``stop`` is set); returns the exit code.

    ``on_ready(cluster)`` runs once it serves (``local up`` starts the controller there); ``on_stop()`` runs
    before the cluster stops, so whatever talks to it can finish while it still answers."""
    cluster = build_cluster(options)
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):
            pass
    started = time.monotonic()
    kubeconfig = Path(options.kubeconfig)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(kubeconfig)  # a stale one from an earlier run must not look like "ready"
    written: bytes | None = None
    try:
        try:
            await cluster.start()
        except Exception as exc:
            if _user_fixable(exc):
                raise ClusterStartError(str(exc)) from exc
            raise
        if on_ready is not None:
            await on_ready(cluster)
        # Written last: its appearance means "ready", including what on_ready set up (CRDs, controller).
        write_user_kubeconfig(cluster, kubeconfig)
        written = kubeconfig.read_bytes()  # noqa: ASYNC240 - a small local file, once
        log.info(
            "kubedl-py local cluster (%s control plane) ready at %s in %.2fs; kubeconfig written to %s (context %s)",
            options.control_plane,
            cluster.url,
            time.monotonic() - started,
            kubeconfig,
            CONTEXT,
        )
        print(f"kubedl-py local cluster listening on {cluster.url} (kubeconfig {kubeconfig})", flush=True)
        # The line to paste into another terminal (or eval): every kubectl and kubedl-py there then uses it.
        print(f"export KUBECONFIG={kubeconfig}", flush=True)
        print(kubectl_hint(), flush=True)
        await stop.wait()
        log.info("shutting down the local cluster")
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        try:
            if on_stop is not None:
                await on_stop()
        finally:
            await cluster.stop()
            _forget_kubeconfig(kubeconfig, written)
    return 0


def kubectl_hint() -> str:
    """Which kubectl to use: the one the local extra installs beside this Python (the pinned minor), else how
    to get one (a kubectl of another minor warns about version skew on every call)."""
    beside = Path(sys.executable).with_name("kubectl")
    if beside.is_file() and os.access(beside, os.X_OK):
        return f"kubectl of the pinned release (v{KUBERNETES_VERSION.rsplit('.', 1)[0]}): {beside}"
    return (
        f"no kubectl beside {sys.executable}: `pip install 'kubedl-py[local]'` installs one of the pinned "
        f"release's minor (v{KUBERNETES_VERSION.rsplit('.', 1)[0]}); another minor warns about version skew"
    )


def _forget_kubeconfig(path: Path, written: bytes | None) -> None:
    """Remove the kubeconfig this run wrote, once its cluster is gone: left behind, it would point every
    kubectl and kubedl-py (and the "no cluster configured" hint) at a cluster that no longer answers. A file
    someone changed since (or another cluster's) is left alone."""
    if written is None:
        return
    with contextlib.suppress(OSError):
        if path.read_bytes() == written:
            path.unlink()
            log.info("removed %s: its cluster has stopped", path)
