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
    return parser


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
