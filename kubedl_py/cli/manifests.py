"""``kubedl-py manifests``: the install manifests (CRDs, RBAC, Deployment) as YAML on stdout."""

from __future__ import annotations

import argparse
import sys

from kubedl_py.templates import ManifestOptions, render_manifests


def run_manifests(args: argparse.Namespace) -> int:
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
