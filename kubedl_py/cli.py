"""The ``kubedl-py`` command: one argparse tree, each subcommand a small function.

Subcommands are registered by ``_build_parser``; handlers return the process exit code.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubedl-py", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_manifests(sub)
    _add_controller(sub)
    _add_local(sub)
    return parser


def _add_local(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("local", help="the embedded Kubernetes cluster")
    local_sub = p.add_subparsers(dest="local_command", required=True)
    up = local_sub.add_parser("up", help="serve an embedded cluster on 127.0.0.1 until SIGINT/SIGTERM")
    up.add_argument("--kubeconfig", required=True, help="write a kubeconfig (context kubedl-local) here once ready")
    up.add_argument("--port", type=int, default=0, help="port to listen on (default 0: any free port)")
    up.add_argument("--nodes", type=int, default=1, help="number of nodes (default 1)")
    up.add_argument("--runtime", default="simulated", choices=["simulated"], help="how pods run (default simulated)")
    up.add_argument("--data-dir", default=None, help="keep cluster state here across restarts (default: memory)")
    up.add_argument("--no-controller", action="store_true", help="do not run the training-job controller")
    up.set_defaults(handler=_run_local_up)


def _run_local_up(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from kubedl_py.local import LocalUpOptions, run_local_up

    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.nodes < 1:
        print("kubedl-py: --nodes must be at least 1", file=sys.stderr)
        return 2
    options = LocalUpOptions(kubeconfig=args.kubeconfig, port=args.port, nodes=args.nodes, runtime=args.runtime,
                             data_dir=args.data_dir)
    return asyncio.run(run_local_up(options))


def _add_controller(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("controller", help="run the PyTorchJob/TFJob controller against a cluster")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    p.add_argument("--context", help="kubeconfig context to use")
    p.add_argument("-n", "--namespace", default=None, help="watch only this namespace (default: all)")
    p.add_argument("--workers", type=int, default=4, help="concurrent reconciles per job kind (default 4)")
    p.add_argument("--metrics-addr", default=None, help="HOST:PORT for /metrics, /healthz, /readyz")
    p.add_argument("--leader-elect", action="store_true", help="act only while holding the leader Lease")
    p.add_argument(
        "--leader-elect-namespace",
        default="kubedl-system",
        help="namespace of the leader Lease (default kubedl-system)",
    )
    p.add_argument(
        "--hostnetwork-port-range",
        default="20000-30000",
        help="host ports for host-network pods, LOW-HIGH, both inclusive (default 20000-30000)",
    )
    p.add_argument(
        "--cluster-domain",
        default=None,
        help="cluster DNS domain to append to Service names in TF_CONFIG (default: none; $CUSTOM_CLUSTER_DOMAIN)",
    )
    p.set_defaults(handler=_run_controller)


def _controller_options(args: argparse.Namespace) -> Any:
    import os

    from kubedl_py.controllers.ports import parse_range
    from kubedl_py.controllers.setup import ControllerOptions

    if args.workers < 1:
        raise _UsageError("--workers must be at least 1")
    try:
        port_range = parse_range(args.hostnetwork_port_range)
    except ValueError as exc:
        raise _UsageError(f"--hostnetwork-port-range: {exc}") from None
    return ControllerOptions(
        namespace=args.namespace or None,
        workers=args.workers,
        metrics_addr=args.metrics_addr,
        leader_elect=args.leader_elect,
        leader_elect_namespace=args.leader_elect_namespace,
        host_port_range=port_range,
        cluster_domain=args.cluster_domain or os.environ.get("CUSTOM_CLUSTER_DOMAIN") or None,
    )


def _run_controller(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from kubedl_py.controllers.setup import build_manager, run_controller
    from kubedl_py.kube.client import KubeClient
    from kubedl_py.kube.leader import LeadershipLost

    options = _controller_options(args)

    async def serve() -> int:
        async with KubeClient(kubeconfig=args.kubeconfig, context=args.context) as client:
            manager = build_manager(client, options)
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, manager.stop)
            try:
                await run_controller(client, options, manager=manager)
            except LeadershipLost as exc:
                logging.getLogger("kubedl_py").error("%s; exiting so a fresh process can compete again", exc)
                return 1
        return 0

    return asyncio.run(serve())


class _UsageError(Exception):
    """Bad command-line input: one line on stderr, exit code 2."""


def _add_manifests(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from kubedl_py.templates.render import DEFAULT_IMAGE, DEFAULT_NAMESPACE

    p = sub.add_parser("manifests", help="print the install manifests (CRDs, RBAC, Deployment) as YAML")
    p.add_argument("--image", default=DEFAULT_IMAGE, help=f"controller image (default {DEFAULT_IMAGE})")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"controller namespace (default {DEFAULT_NAMESPACE})")
    p.add_argument("--crds-only", action="store_true", help="print only the CustomResourceDefinitions")
    p.add_argument(
        "--gang-scheduler",
        choices=["volcano", "scheduler-plugins"],
        default=None,
        help="also grant access to this gang scheduler's PodGroups and pass the flag to the controller",
    )
    p.set_defaults(handler=_run_manifests)


def _run_manifests(args: argparse.Namespace) -> int:
    from kubedl_py.templates import ManifestOptions, render_manifests

    extra = (f"--gang-scheduler={args.gang_scheduler}",) if args.gang_scheduler else ()
    options = ManifestOptions(
        image=args.image,
        namespace=args.namespace,
        crds_only=args.crds_only,
        controller_args=extra,
        gang_scheduler=args.gang_scheduler,
    )
    sys.stdout.write(render_manifests(options))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        result: int = handler(args)
    except _UsageError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return result


if __name__ == "__main__":
    sys.exit(main())
