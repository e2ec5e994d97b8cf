"""``kubedl-py local up``: a cluster on this machine, with the training-job controller running inside.

Why the controller is started here and not by :mod:`kubedl_local`: the embedded cluster and the
controller meet only over HTTP (an import-linter contract), exactly as in production; the command line is
the one place allowed to put them in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import socket
import sys
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from kubedl_local import (
    ClusterStartError,
    LocalCluster,
    LocalUpOptions,
    UpCluster,
    parse_node_devices,
    parse_node_resources,
    run_local_up,
)
from kubedl_py.api.crd import all_crds
from kubedl_py.cli.errors import EXIT_USAGE
from kubedl_py.controllers.setup import ControllerOptions, build_manager, served_resources
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import AlreadyExists
from kubedl_py.kube.manager import Manager
from kubedl_py.kube.resources import Resource

_CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)


def run_local_up_command(args: argparse.Namespace) -> int:
    problem = _check(args) or _port_in_use(args.port) or _kubeconfig_in_use(Path(os.path.expanduser(args.kubeconfig)))
    if problem:
        print(f"kubedl-py: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _serve(args)
    except ClusterStartError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:  # taken between the check and the bind
            print(f"kubedl-py: {_busy(args.port)}", file=sys.stderr)
            return EXIT_USAGE
        raise


def _serve(args: argparse.Namespace) -> int:
    options = LocalUpOptions(
        kubeconfig=os.path.expanduser(args.kubeconfig),
        port=args.port,
        nodes=args.nodes,
        runtime=args.runtime,
        data_dir=args.data_dir,
        control_plane=args.control_plane,
        install=not args.no_controller,
        bridge=args.bridge,
        pod_cidr=args.pod_cidr,
        kubeflow_api=args.kubeflow_api,
        node_resources=parse_node_resources(args.node_resources or ""),
        node_devices=parse_node_devices(args.node_devices) if args.node_devices else None,
        node_monitor_grace_period=args.node_monitor_grace_period,
        images=tuple(args.image),
        proxy_mode=args.proxy_mode,
    )
    if args.no_controller:
        return asyncio.run(run_local_up(options))
    controller = EmbeddedController(kubeflow_api=args.kubeflow_api)
    return asyncio.run(run_local_up(options, on_ready=controller.start, on_stop=controller.stop))


def _check(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags, with the fix, or None."""
    if args.nodes < 1:
        return "--nodes must be at least 1"
    if not args.node_monitor_grace_period >= 2:
        return "--node-monitor-grace-period must be at least 2 seconds (Kubernetes' default is 50)"
    if args.runtime in ("process", "container") and args.nodes != 1:
        return f"the {args.runtime} runtime runs exactly 1 node; use --nodes 1 or --runtime simulated"
    if args.control_plane == "kubernetes" and args.data_dir is not None:
        return "--data-dir keeps only the embedded cluster's state; drop it or use --control-plane embedded"
    try:
        parse_node_resources(args.node_resources or "")
        if args.node_devices:
            parse_node_devices(args.node_devices)
    except ValueError as e:
        return str(e)
    if args.node_devices and args.control_plane != "kubernetes":
        return (
            "--node-devices publishes DRA devices, which the embedded API server does not serve "
            "(no resource.k8s.io): add --control-plane kubernetes"
        )
    if args.runtime == "kubelet" and args.control_plane != "kubernetes":
        return "--runtime kubelet runs a real node, which joins the real control plane: add --control-plane kubernetes"
    if args.runtime != "kubelet" and (args.image or args.proxy_mode != "iptables"):
        return "--image and --proxy-mode are for the real node: add --runtime kubelet --control-plane kubernetes"
    return None


def _busy(port: int) -> str:
    return (
        f"--port {port} is in use on 127.0.0.1 (another cluster, or another program); pick another port, "
        "or --port 0 for any free one"
    )


def _port_in_use(port: int) -> str | None:
    """Whether something listens on 127.0.0.1:``port`` already (port 0: any free port, never in use)."""
    if port == 0:
        return None
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT leftover is no conflict
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            return _busy(port) if exc.errno == errno.EADDRINUSE else f"--port {port}: {exc.strerror}"
    return None


def _kubeconfig_in_use(path: Path) -> str | None:
    """Whether ``path`` is the kubeconfig of a cluster that still answers: overwriting it would cut its
    users off from it. A file whose server does not answer (a cluster that was stopped) is stale: replaced."""
    server = _server_of(path)
    if server is None:
        return None
    parts = urlsplit(server)
    if parts.hostname is None:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=1.0):
            pass
    except OSError:
        return None
    return (
        f"{path} is the kubeconfig of a cluster still running at {server}: stop that cluster first "
        "(Ctrl-C where it runs), or give this one another file with --kubeconfig"
    )


def _server_of(path: Path) -> str | None:
    """The API server address of the kubeconfig's current context (else its first cluster), if readable."""
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(config, dict):
        return None
    clusters = {c.get("name"): c.get("cluster") or {} for c in config.get("clusters") or [] if isinstance(c, dict)}
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or [] if isinstance(c, dict)}
    current = contexts.get(config.get("current-context"))
    cluster = clusters.get(current.get("cluster")) if isinstance(current, dict) else None
    if cluster is None and clusters:
        cluster = next(iter(clusters.values()))
    server = cluster.get("server") if isinstance(cluster, dict) else None
    return str(server) if server else None


class EmbeddedController:
    """The controller inside ``local up``: install the CRDs, then reconcile over HTTP like anywhere else."""

    def __init__(self, *, kubeflow_api: bool = False) -> None:
        self.kubeflow_api = kubeflow_api
        self.manager: Manager | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self, cluster: UpCluster) -> None:
        if isinstance(cluster, LocalCluster):
            # The real control plane's cluster installs the CRDs as an operator would; the embedded one here.
            async with KubeClient(configuration=cluster.configuration) as admin:
                for crd in all_crds(kubeflow=self.kubeflow_api):
                    with contextlib.suppress(AlreadyExists):  # --data-dir restart: keep the stored CRD
                        await admin.create(_CRDS, crd)
        # On the real control plane: the rendered ServiceAccount's token, so the shipped RBAC applies.
        client = await cluster.controller_client()
        await client.open()
        options = ControllerOptions(kubeflow_api=self.kubeflow_api)
        options = replace(options, served=await served_resources(client, options.groups, gang=options.gang))
        manager = self.manager = build_manager(client, options)

        async def run() -> None:
            try:
                await manager.run()
            finally:
                await client.close()

        self.task = asyncio.create_task(run(), name="embedded-controller")
        logging.getLogger("kubedl_py.cli").info("training-job controller running inside the local cluster")

    async def stop(self) -> None:
        if self.task is None or self.manager is None:
            return
        self.manager.stop()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), 10)
        except TimeoutError:
            self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
