"""``kubedl-py local up``: a cluster on this machine, with the training-job controller running inside.

Why the controller is started here and not by :mod:`kubedl_py.local`: the embedded cluster and the
controller meet only over HTTP (an import-linter contract), exactly as in production; the command line is
the one place allowed to put them in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys

from kubedl_py.api.crd import all_crds
from kubedl_py.cli.errors import EXIT_USAGE
from kubedl_py.controllers.setup import ControllerOptions, build_manager
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import AlreadyExists
from kubedl_py.kube.manager import Manager
from kubedl_py.kube.resources import Resource
from kubedl_py.local import LocalCluster, LocalUpOptions, UpCluster, run_local_up

_CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)


def run_local_up_command(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem:
        print(f"kubedl-py: {problem}", file=sys.stderr)
        return EXIT_USAGE
    options = LocalUpOptions(
        kubeconfig=os.path.expanduser(args.kubeconfig),
        port=args.port,
        nodes=args.nodes,
        runtime=args.runtime,
        data_dir=args.data_dir,
        control_plane=args.control_plane,
    )
    if args.no_controller:
        return asyncio.run(run_local_up(options))
    controller = EmbeddedController()
    return asyncio.run(run_local_up(options, on_ready=controller.start, on_stop=controller.stop))


def _check(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags, with the fix, or None."""
    if args.nodes < 1:
        return "--nodes must be at least 1"
    if args.runtime == "process" and args.nodes != 1:
        return "the process runtime runs exactly 1 node; use --nodes 1 or --runtime simulated"
    if args.control_plane == "kubernetes" and args.data_dir is not None:
        return "--data-dir keeps only the embedded cluster's state; drop it or use --control-plane embedded"
    return None


class EmbeddedController:
    """The controller inside ``local up``: install the CRDs, then reconcile over HTTP like anywhere else."""

    def __init__(self) -> None:
        self.manager: Manager | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self, cluster: UpCluster) -> None:
        if isinstance(cluster, LocalCluster):
            # The real control plane's cluster installs the CRDs as an operator would; the embedded one here.
            async with KubeClient(configuration=cluster.configuration) as admin:
                for crd in all_crds():
                    with contextlib.suppress(AlreadyExists):  # --data-dir restart: keep the stored CRD
                        await admin.create(_CRDS, crd)
        # On the real control plane: the rendered ServiceAccount's token, so the shipped RBAC applies.
        client = await cluster.controller_client()
        await client.open()
        manager = self.manager = build_manager(client, ControllerOptions())

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
