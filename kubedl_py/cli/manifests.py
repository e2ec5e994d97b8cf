"""``kubedl-py manifests``: the install manifests (CRDs, RBAC, Deployment) as YAML on stdout; with
``--watch-namespace`` a namespaced install (docs/install.md). The Helm chart (charts/kubedl-py) is generated
from the same templates.

The ``--image`` is checked here: an invalid reference would otherwise surface only as a Deployment whose
pod cannot pull, long after ``kubectl apply`` said everything was created.
"""

from __future__ import annotations

import argparse
import sys

from kubedl_py.api.images import image_reference_problem
from kubedl_py.cli.errors import UsageError
from kubedl_py.templates import ManifestOptions, render_manifests
from kubedl_py.templates.render import DEFAULT_IMAGE, InvalidOptions


def run_manifests(args: argparse.Namespace) -> int:
    problem = image_reference_problem(args.image)
    if problem is not None:
        raise UsageError(
            f"--image {args.image!r} {problem}: give an image reference, e.g. {DEFAULT_IMAGE} or "
            f"registry.example.com/ml/{DEFAULT_IMAGE}"
        )
    if args.max_host_ports_per_pod < 1:
        raise UsageError(f"--max-host-ports-per-pod must be at least 1, not {args.max_host_ports_per_pod}")
    options = ManifestOptions(
        image=args.image,
        namespace=args.namespace,
        crds_only=args.crds_only,
        watch_namespaces=tuple(dict.fromkeys(n.strip() for v in args.watch_namespace or [] for n in v.split(","))),
        gang_scheduler=args.gang_scheduler,
        kubeflow_api=args.kubeflow_api,
        max_host_ports_per_pod=args.max_host_ports_per_pod,
        service_monitor=args.service_monitor,
    )
    try:
        text = render_manifests(options)
    except InvalidOptions as exc:
        raise UsageError(str(exc)) from None
    sys.stdout.write(text)
    return 0
