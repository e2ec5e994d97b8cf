"""``kubedl-py controller``: run the training-job controller (every registered kind) against a cluster until
SIGTERM/SIGINT.

Why the flags are checked here, before anything connects: a bad port range or RDMA defaults file is a usage
error (exit 2) naming the flag, not a crash of a controller that already started.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
from pathlib import Path

import yaml

from kubedl_py.api.common import RdmaSpec
from kubedl_py.api.images import image_reference_problem
from kubedl_py.api.validation import JobValidationError, parse_rdma
from kubedl_py.cli.errors import UsageError
from kubedl_py.controllers.hostnetwork.ports import parse_range
from kubedl_py.controllers.restart_agent import DEFAULT_AGENT_IMAGE
from kubedl_py.controllers.setup import ControllerOptions, build_manager, discovered
from kubedl_py.controllers.setup import run_controller as serve_controller
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.health import parse_addr
from kubedl_py.kube.informer import InformerSettings
from kubedl_py.kube.leader import LeadershipLost
from kubedl_py.kube.tls import CERT_FILE, KEY_FILE

#: what a namespace name may be (RFC 1123 label)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def controller_options(args: argparse.Namespace) -> ControllerOptions:
    """The controller's options from the flags; :class:`UsageError` naming the flag for a bad one."""
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if args.write_concurrency < 1:
        raise UsageError(f"--write-concurrency must be at least 1, not {args.write_concurrency}")
    try:
        port_range = parse_range(args.hostnetwork_port_range)
    except ValueError as exc:
        raise UsageError(f"--hostnetwork-port-range: {exc}") from None
    if not args.urgent_write_hold >= 0:  # also refuses nan
        raise UsageError(f"--urgent-write-hold must be 0 (never hold) or more seconds, not {args.urgent_write_hold}")
    if not args.repair_window >= 0:
        raise UsageError(f"--repair-window must be 0 (never) or more seconds, not {args.repair_window}")
    if not args.pod_event_batch >= 0:
        raise UsageError(f"--pod-event-batch must be 0 (at once) or more seconds, not {args.pod_event_batch}")
    if not args.host_port_retry_after > 0:
        raise UsageError(f"--host-port-retry-after must be more than 0 seconds, not {args.host_port_retry_after}")
    if args.max_host_ports_per_pod < 1:
        raise UsageError(f"--max-host-ports-per-pod must be at least 1, not {args.max_host_ports_per_pod}")
    if args.repair_workers < 1:
        raise UsageError(f"--repair-workers must be at least 1, not {args.repair_workers}")
    if args.resync_period is not None and args.resync_period <= 0:
        raise UsageError("--resync-period must be positive")
    informer = InformerSettings(resync_period=args.resync_period) if args.resync_period else None
    if args.gang_scheduler_name is not None and args.gang_scheduler in (None, "none"):
        raise UsageError("--gang-scheduler-name needs --gang-scheduler volcano, scheduler-plugins or kubernetes")
    if args.node_lost_timeout < 0:
        raise UsageError(f"--node-lost-timeout must be 0 (at once) or more seconds, not {args.node_lost_timeout}")
    if args.infrastructure_backoff_limit < 0:
        raise UsageError(f"--infrastructure-backoff-limit must be 0 or more, not {args.infrastructure_backoff_limit}")
    _check_endpoints(args)
    agent_image = args.agent_image or os.environ.get("KUBEDL_AGENT_IMAGE") or DEFAULT_AGENT_IMAGE
    problem = image_reference_problem(agent_image)
    if problem is not None:
        raise UsageError(f"--agent-image {agent_image!r} {problem}")
    return ControllerOptions(
        informer=informer,
        namespaces=namespaces(args.namespace),
        workers=args.workers,
        urgent_write_hold=args.urgent_write_hold,
        repair_window=args.repair_window,
        repair_workers=args.repair_workers,
        pod_event_batch=args.pod_event_batch,
        write_concurrency=args.write_concurrency,
        metrics_addr=args.metrics_addr,
        metrics_secure=args.metrics_secure,
        metrics_cert_dir=args.metrics_cert_dir,
        health_addr=args.health_addr,
        leader_elect=args.leader_elect,
        leader_elect_namespace=args.leader_elect_namespace,
        host_port_range=port_range,
        host_port_retry_after=args.host_port_retry_after,
        max_host_ports_per_pod=args.max_host_ports_per_pod,
        cluster_domain=args.cluster_domain or os.environ.get("CUSTOM_CLUSTER_DOMAIN") or None,
        gang_scheduler=args.gang_scheduler,
        gang_scheduler_name=args.gang_scheduler_name,
        rdma_defaults=rdma_defaults(args.rdma_defaults) if args.rdma_defaults else None,
        kubeflow_api=args.kubeflow_api,
        node_lost_timeout=args.node_lost_timeout,
        infrastructure_backoff_limit=args.infrastructure_backoff_limit,
        kueue_workloads=args.kueue_workloads,
        agent_image=agent_image,
    )


def namespaces(given: list[str] | None) -> tuple[str, ...]:
    """``--namespace`` values (repeated, or comma-separated) as namespace names; a name that cannot be a
    namespace is a usage error naming it."""
    names = [part.strip() for value in given or [] for part in value.split(",")]
    for name in names:
        if not _DNS_LABEL.fullmatch(name):
            raise UsageError(
                f"--namespace {name!r} is not a namespace name: lower-case letters, digits and '-', at most 63,"
                " starting and ending with a letter or digit (e.g. --namespace team-a,team-b)"
            )
    return tuple(dict.fromkeys(names))


def _check_endpoints(args: argparse.Namespace) -> None:
    """The metrics and probe addresses and the certificate directory, before anything listens."""
    ports = {}
    for flag, value in (("--metrics-addr", args.metrics_addr), ("--health-addr", args.health_addr)):
        if value is not None:
            try:
                ports[flag] = parse_addr(value)[1]
            except ValueError as exc:
                raise UsageError(f"{flag}: {exc} (e.g. 0.0.0.0:8443)") from None
    if len(ports) == 2 and len(set(ports.values())) == 1 and 0 not in ports.values():
        raise UsageError(f"--health-addr and --metrics-addr need different ports, not both {args.health_addr}")
    if args.metrics_secure and not args.metrics_addr:
        raise UsageError("--metrics-secure needs --metrics-addr (e.g. --metrics-addr=0.0.0.0:8443)")
    if args.metrics_cert_dir is None:
        return
    if not args.metrics_secure:
        raise UsageError("--metrics-cert-dir needs --metrics-secure (the certificate is for the HTTPS endpoint)")
    for name in (CERT_FILE, KEY_FILE):
        if not (Path(args.metrics_cert_dir) / name).is_file():
            where = args.metrics_cert_dir
            raise UsageError(f"--metrics-cert-dir {where}: no {name} there (it needs {CERT_FILE} and {KEY_FILE})")


def rdma_defaults(path: str) -> RdmaSpec:
    """The ``--rdma-defaults`` file as an ``RdmaSpec``; a bad file is a usage error naming the field."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"--rdma-defaults: cannot read {path}: {exc}") from None
    try:
        return parse_rdma(data, source=f"--rdma-defaults {path}")
    except JobValidationError as exc:
        raise UsageError(str(exc)) from None


def run_controller(args: argparse.Namespace) -> int:
    options = controller_options(args)

    async def serve() -> int:
        async with KubeClient(kubeconfig=args.kubeconfig, context=args.context) as client:
            # What is installed decides what is watched (kubeflow.org kinds, the PodGroups): discovered here,
            # before the manager is built.
            found = await discovered(client, options)
            manager = build_manager(client, found)
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, manager.stop)
            try:
                await serve_controller(client, found, manager=manager)
            except LeadershipLost as exc:
                logging.getLogger("kubedl_py").error("%s; exiting so a fresh process can compete again", exc)
                return 1
        return 0

    return asyncio.run(serve())
