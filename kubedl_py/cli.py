"""The ``kubedl-py`` command: one argparse tree, each subcommand a small function.

Subcommands are registered by ``_build_parser``; handlers return the process exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubedl-py", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_manifests(sub)
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
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
