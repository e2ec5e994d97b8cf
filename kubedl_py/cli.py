"""The ``kubedl-py`` command: one argparse tree, each subcommand a small function.

Subcommands are registered by ``_build_parser``; handlers return the process exit code.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

#: ``--gang-scheduler`` choices: ``kubedl_py.controllers.gang.GANG_SCHEDULERS`` (a test keeps them equal),
#: spelled out here so that building the parser (``--help``, ``manifests``) does not import the controller
_GANG_SCHEDULERS = ("volcano", "scheduler-plugins")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubedl-py", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_manifests(sub)
    _add_controller(sub)
    _add_local(sub)
    _add_job_commands(sub)
    return parser


def _add_local(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from kubedl_py.api.constants import LOCAL_KUBECONFIG

    p = sub.add_parser("local", help="a Kubernetes cluster on this machine (embedded, or the real components)")
    local_sub = p.add_subparsers(dest="local_command", required=True)
    up = local_sub.add_parser("up", help="serve a local cluster (and the controller) on 127.0.0.1 until SIGINT/SIGTERM")
    up.add_argument(
        "--control-plane",
        default="embedded",
        choices=["embedded", "kubernetes"],
        help="'embedded': kubedl-py's own API server, starts in well under a second (default); 'kubernetes': "
        "the real kube-apiserver, controller-manager, scheduler and etcd, built from their Go modules on first "
        "use (`make kube-binaries`, minutes) and started in about 10 s",
    )
    up.add_argument(
        "--kubeconfig",
        default=LOCAL_KUBECONFIG,
        help=f"write a kubeconfig (context kubedl-local) here once ready (default {LOCAL_KUBECONFIG}, "
        "where the SDK and CLI look)",
    )
    up.add_argument("--port", type=int, default=0, help="API server port (default 0: any free port)")
    up.add_argument(
        "--nodes", type=int, default=1, help="number of nodes (default 1; the process and container runtimes run 1)"
    )
    up.add_argument(
        "--runtime",
        default="process",
        choices=["process", "container", "simulated"],
        help="how pods run: 'process' runs their commands as local processes (default); 'container' runs the "
        "pods whose images are all in the local podman store in containers (e.g. the controller's Deployment "
        "from `make image`) and the others as processes; 'simulated' only pretends (scale tests)",
    )
    up.add_argument(
        "--bridge",
        default=None,
        help="process/container runtimes: the Linux bridge of pod-network pods (root only; default kubedl0)",
    )
    up.add_argument(
        "--pod-cidr", default=None, help="process/container runtimes: the pod network's CIDR (default 10.244.0.0/16)"
    )
    up.add_argument(
        "--data-dir", default=None, help="keep the embedded cluster's state here across restarts (default: memory)"
    )
    up.add_argument(
        "--no-controller",
        action="store_true",
        help="do not install the CRDs nor run the training-job controller (with --control-plane kubernetes: "
        "nor its ServiceAccount and RBAC, so `kubectl apply -f deploy/kubedl-py.yaml` installs it in-cluster)",
    )
    up.set_defaults(handler=_run_local_up)


def _run_local_up(args: argparse.Namespace) -> int:
    import asyncio
    import os

    from kubedl_py.local import LocalUpOptions, run_local_up

    if args.nodes < 1:
        print("kubedl-py: --nodes must be at least 1", file=sys.stderr)
        return 2
    if args.runtime in ("process", "container") and args.nodes != 1:
        print(
            f"kubedl-py: the {args.runtime} runtime runs exactly 1 node; use --nodes 1 or --runtime simulated",
            file=sys.stderr,
        )
        return 2
    if args.control_plane == "kubernetes" and args.data_dir is not None:
        print(
            "kubedl-py: --data-dir keeps only the embedded cluster's state; drop it or use --control-plane embedded",
            file=sys.stderr,
        )
        return 2
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
    )
    if args.no_controller:
        return asyncio.run(run_local_up(options))

    controller = _EmbeddedController()
    return asyncio.run(run_local_up(options, on_ready=controller.start, on_stop=controller.stop))


class _EmbeddedController:
    """The controller inside ``local up``: install the CRDs, then reconcile over HTTP like anywhere else."""

    def __init__(self) -> None:
        self.manager: Any = None
        self.task: Any = None

    async def start(self, cluster: Any) -> None:
        import asyncio
        import contextlib

        from kubedl_py.api.crd import all_crds
        from kubedl_py.controllers.setup import ControllerOptions, build_manager
        from kubedl_py.kube.client import KubeClient
        from kubedl_py.kube.errors import AlreadyExists
        from kubedl_py.kube.resources import Resource
        from kubedl_py.local import LocalCluster

        if isinstance(cluster, LocalCluster):
            # The real control plane's cluster installs the CRDs as an operator would; the embedded one here.
            crds = Resource(
                "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
            )
            async with KubeClient(configuration=cluster.configuration) as admin:
                for crd in all_crds():
                    with contextlib.suppress(AlreadyExists):  # --data-dir restart: keep the stored CRD
                        await admin.create(crds, crd)
        # On the real control plane: the rendered ServiceAccount's token, so the shipped RBAC applies.
        client = await cluster.controller_client()
        await client.open()
        self.manager = build_manager(client, ControllerOptions())

        async def run() -> None:
            try:
                await self.manager.run()
            finally:
                await client.close()

        self.task = asyncio.create_task(run(), name="embedded-controller")
        logging.getLogger("kubedl_py.cli").info("training-job controller running inside the local cluster")

    async def stop(self) -> None:
        import asyncio
        import contextlib

        if self.task is None:
            return
        self.manager.stop()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), 10)
        except TimeoutError:
            self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task


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
        "--resync-period",
        type=float,
        default=None,
        help="seconds between re-reconciles of every cached job, without API calls (default: never)",
    )
    p.add_argument(
        "--cluster-domain",
        default=None,
        help="cluster DNS domain to append to Service names in TF_CONFIG (default: none; $CUSTOM_CLUSTER_DOMAIN)",
    )
    p.add_argument(
        "--gang-scheduler",
        choices=_GANG_SCHEDULERS,
        default=None,
        help="give every job a PodGroup of this gang scheduler and point its pods at it (default: none)",
    )
    p.add_argument(
        "--gang-scheduler-name",
        default=None,
        help="schedulerName for gang-scheduled pods (default: volcano / scheduler-plugins-scheduler)",
    )
    p.add_argument(
        "--rdma-defaults",
        metavar="FILE",
        default=None,
        help="YAML with the shape of spec.rdma: defaults for jobs that have a spec.rdma block",
    )
    p.set_defaults(handler=_run_controller)


def _controller_options(args: argparse.Namespace) -> Any:
    import os

    from kubedl_py.controllers.ports import parse_range
    from kubedl_py.controllers.setup import ControllerOptions
    from kubedl_py.kube.informer import InformerSettings

    if args.workers < 1:
        raise _UsageError("--workers must be at least 1")
    try:
        port_range = parse_range(args.hostnetwork_port_range)
    except ValueError as exc:
        raise _UsageError(f"--hostnetwork-port-range: {exc}") from None
    if args.resync_period is not None and args.resync_period <= 0:
        raise _UsageError("--resync-period must be positive")
    informer = InformerSettings(resync_period=args.resync_period) if args.resync_period else None
    if args.gang_scheduler_name is not None and not args.gang_scheduler:
        raise _UsageError("--gang-scheduler-name needs --gang-scheduler")
    return ControllerOptions(
        informer=informer,
        namespace=args.namespace or None,
        workers=args.workers,
        metrics_addr=args.metrics_addr,
        leader_elect=args.leader_elect,
        leader_elect_namespace=args.leader_elect_namespace,
        host_port_range=port_range,
        cluster_domain=args.cluster_domain or os.environ.get("CUSTOM_CLUSTER_DOMAIN") or None,
        gang_scheduler=args.gang_scheduler,
        gang_scheduler_name=args.gang_scheduler_name,
        rdma_defaults=_rdma_defaults(args.rdma_defaults) if args.rdma_defaults else None,
    )


def _rdma_defaults(path: str) -> Any:
    """The ``--rdma-defaults`` file as an ``RdmaSpec``; a bad file is a usage error naming the field."""
    from pathlib import Path

    import yaml

    from kubedl_py.api.validation import JobValidationError, parse_rdma

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise _UsageError(f"--rdma-defaults: cannot read {path}: {exc}") from None
    try:
        return parse_rdma(data, source=f"--rdma-defaults {path}")
    except JobValidationError as exc:
        raise _UsageError(str(exc)) from None


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
        choices=_GANG_SCHEDULERS,
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


# ------------------------------------------------------------------------------ job commands (the SDK)
#
# submit / get / describe / logs / wait / delete drive kubedl_py.sdk; exit codes are promises to scripts:
# 0 success, 1 job failed (or the cluster refused), 2 usage or validation error, 3 timeout.

_EXIT_FAILED = 1
_EXIT_USAGE = 2
_EXIT_TIMEOUT = 3


def _cluster_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    common.add_argument("--context", help="kubeconfig context to use (default: the current context)")
    common.add_argument(
        "-n", "--namespace", default=None, help="namespace (default: the context's namespace, else default)"
    )
    return common


def _add_kind(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kind", default=None, help="PyTorchJob or TFJob (default: whichever has the name)")


def _add_job_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = _cluster_options()
    p = sub.add_parser("submit", parents=[common], help="validate and create the jobs of a YAML file")
    p.add_argument("file", metavar="FILE", help="YAML/JSON file with one or more jobs ('-' reads stdin)")
    p.add_argument("--wait", action="store_true", help="wait until the jobs succeed (exit 1 if one fails)")
    p.add_argument("--follow", action="store_true", help="stream the jobs' logs until they finish (implies --wait)")
    p.add_argument(
        "--timeout", type=float, default=None, help="seconds to wait at most for each job, in turn (exit 3 when over)"
    )
    p.set_defaults(handler=_run_submit)

    p = sub.add_parser("get", parents=[common], help="list jobs, or show one")
    p.add_argument("name", metavar="NAME", nargs="?", help="a job name (default: every job in the namespace)")
    p.add_argument("-o", "--output", choices=["wide", "yaml", "json"], default=None, help="output format")
    p.add_argument("--selector", "-l", default=None, help="label selector to filter the list")
    _add_kind(p)
    p.set_defaults(handler=_run_get)

    p = sub.add_parser("describe", parents=[common], help="show a job's conditions, replicas, pods and events")
    p.add_argument("name", metavar="NAME")
    _add_kind(p)
    p.set_defaults(handler=_run_describe)

    p = sub.add_parser("logs", parents=[common], help="print a job's logs (every replica, or one)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--replica", default=None, help="replica type, e.g. master, worker, ps (default: every pod)")
    p.add_argument("--index", type=int, default=None, help="replica index (default 0 with --replica)")
    p.add_argument("-f", "--follow", action="store_true", help="stream until the pods finish")
    p.add_argument("-c", "--container", default=None, help="container (default: the framework's, else the first)")
    _add_kind(p)
    p.set_defaults(handler=_run_logs)

    p = sub.add_parser("wait", parents=[common], help="wait for a job condition, with a live progress line")
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--for",
        dest="condition",
        default="Succeeded",
        help="condition to wait for: Created, Running, Restarting, Succeeded, Failed (default Succeeded)",
    )
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait at most (exit 3 when over)")
    _add_kind(p)
    p.set_defaults(handler=_run_wait)

    p = sub.add_parser("delete", parents=[common], help="delete a job (its pods and Services go with it)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--wait", action="store_true", help="return only once the job is gone")
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait at most with --wait")
    _add_kind(p)
    p.set_defaults(handler=_run_delete)


def _fail(message: str, code: int, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exc()
    print(f"kubedl-py: {message}", file=sys.stderr)
    return code


def _with_client(args: argparse.Namespace, body: Callable[[Any], Awaitable[int]]) -> int:
    """Run ``body(client)`` on an AsyncTrainingClient; turn the SDK's errors into one line and an exit code."""
    import asyncio

    from kubedl_py import sdk

    async def run() -> int:
        async with sdk.AsyncTrainingClient(args.kubeconfig, args.context, args.namespace) as client:
            return await body(client)

    debug = bool(args.debug)
    try:
        return asyncio.run(run())
    except sdk.JobValidationError as exc:
        details = "; ".join(str(error) for error in exc.errors)
        return _fail(f"invalid {exc.subject}: {details}", _EXIT_USAGE, debug)
    except sdk.JobFailedError as exc:
        return _fail(str(exc), _EXIT_FAILED, debug)
    except sdk.JobTimeoutError as exc:
        return _fail(str(exc), _EXIT_TIMEOUT, debug)
    except (sdk.InvalidJobError, sdk.ConfigurationError, sdk.AmbiguousJobError) as exc:
        return _fail(str(exc), _EXIT_USAGE, debug)
    except sdk.TrainingError as exc:
        return _fail(str(exc), _EXIT_FAILED, debug)
    except ValueError as exc:
        return _fail(str(exc), _EXIT_USAGE, debug)


def _resource_name(job: Any) -> str:
    from kubedl_py.api import constants as c

    return f"{str(job.kind).lower()}.{c.GROUP}"


def _read_jobs(path: str) -> list[Any]:
    from kubedl_py.api import load_jobs, load_jobs_file

    if path == "-":
        return list(load_jobs(sys.stdin.read(), source="<stdin>"))
    return list(load_jobs_file(path))


def _run_submit(args: argparse.Namespace) -> int:
    jobs = _read_jobs_or_fail(args)
    if isinstance(jobs, int):
        return jobs
    mismatch = _namespace_mismatch(jobs, args.namespace)
    if mismatch:
        return _fail(mismatch, _EXIT_USAGE, False)

    async def body(client: Any) -> int:
        # A document's own namespace wins (it equals -n, if given); -n (else the context's) fills the gaps.
        created = [await client.submit(job, namespace=job.metadata.namespace or args.namespace) for job in jobs]
        for job in created:
            print(f"{_resource_name(job)}/{job.name} created", flush=True)
        if not (args.wait or args.follow):
            return 0
        # --timeout bounds each job's wait in turn (the jobs run meanwhile: a later one may be done already).
        for job in created:
            if args.follow:
                await _follow_then_wait(client, job, args.timeout)
            else:
                await _wait_with_progress(
                    client, job.name, job.kind, ["Succeeded"], args.timeout, namespace=job.namespace
                )
            print(f"{_resource_name(job)}/{job.name} succeeded", flush=True)
        return 0

    return _with_client(args, body)


def _namespace_mismatch(jobs: Sequence[Any], namespace: str | None) -> str | None:
    """As kubectl: a document naming another namespace than ``-n`` is refused, not silently sent elsewhere."""
    if not namespace:
        return None
    for job in jobs:
        own = job.metadata.namespace
        if own and own != namespace:
            return (
                f'{job.kind} "{job.name}" is in namespace "{own}" but -n says "{namespace}": '
                f"pass -n {own}, or drop metadata.namespace from the file"
            )
    return None


def _read_jobs_or_fail(args: argparse.Namespace) -> list[Any] | int:
    """The jobs of the file, validated before any cluster is contacted (a bad file is exit 2 even offline)."""
    from kubedl_py.api import JobValidationError

    try:
        return _read_jobs(args.file)
    except JobValidationError as exc:
        details = "; ".join(str(error) for error in exc.errors)
        return _fail(f"invalid {exc.subject}: {details}", _EXIT_USAGE, bool(args.debug))


async def _follow_then_wait(client: Any, job: Any, seconds: float | None) -> None:
    import asyncio
    import time

    from kubedl_py import sdk

    started = time.monotonic()

    async def follow() -> None:
        async for line in client.stream_logs(job.name, kind=job.kind, follow=True, namespace=job.namespace):
            print(line, flush=True)

    try:
        await asyncio.wait_for(follow(), seconds)
    except TimeoutError:
        last = await client.get(job.name, job.kind, namespace=job.namespace)
        raise sdk.JobTimeoutError(
            f"timed out after {seconds:g}s following {job.namespace}/{job.name}; last state {sdk.job_state(last)}",
            last,
            sdk.job_state(last),
        ) from None
    remaining = None if seconds is None else max(seconds - (time.monotonic() - started), 0.1)
    await client.wait(job.name, kind=job.kind, timeout=remaining, namespace=job.namespace)


async def _wait_with_progress(
    client: Any, name: str, kind: str | None, until: list[str], seconds: float | None, *, namespace: str | None = None
) -> Any:
    """``client.wait`` with a live progress line on stderr when it is a terminal."""
    import asyncio
    import contextlib

    live = sys.stderr.isatty()
    latest: list[Any] = []

    def show(progress: Any) -> None:
        latest[:] = [progress]
        if live:
            sys.stderr.write(f"\r\033[K{progress}")
            sys.stderr.flush()

    async def tick() -> None:
        import time

        begun = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            if latest:
                progress = latest[0]
                elapsed = time.monotonic() - begun
                text = str(progress).rsplit("  ", 1)[0]
                sys.stderr.write(f"\r\033[K{text}  {elapsed:.0f}s")
                sys.stderr.flush()

    ticker = asyncio.create_task(tick()) if live else None
    try:
        return await client.wait(name, until, kind=kind, timeout=seconds, namespace=namespace, on_progress=show)
    finally:
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        if live and latest:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _event_age(event: dict[str, Any]) -> str:
    from datetime import UTC, datetime

    from kubedl_py.sdk import event_time

    when = event_time(event)
    try:
        at = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return _age((datetime.now(UTC) - at).total_seconds())


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "<unknown>"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _table(rows: Sequence[Sequence[Any]], indent: str = "") -> str:
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "".join(f"{indent}{line}\n" for line in lines)


def _run_get(args: argparse.Namespace) -> int:
    import json

    import yaml

    from kubedl_py import sdk

    async def body(client: Any) -> int:
        if args.name:
            jobs = [await client.get(args.name, args.kind)]
        else:
            jobs = await client.list(args.kind, args.selector)
        if args.output in ("json", "yaml"):
            dicts = [job.to_dict() for job in jobs]
            doc: Any = dicts[0] if args.name else {"apiVersion": "v1", "kind": "List", "items": dicts}
            if args.output == "json":
                sys.stdout.write(json.dumps(doc, indent=2) + "\n")
            else:
                sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
            return 0
        if not jobs:
            print(f"No jobs found in namespace {client.namespace}.", file=sys.stderr)
            return 0
        header = ["NAME", "KIND", "STATE", "REPLICAS", "AGE"]
        if args.output == "wide":
            header += ["NETWORK", "REASON", "MESSAGE"]
        rows: list[list[Any]] = [header]
        for job in jobs:
            counts = "/".join(str(n) for n in sdk.replica_counts(job))
            row = [job.name, job.kind, sdk.job_state(job), counts, _age(sdk.job_age(job))]
            if args.output == "wide":
                last = next((cond for cond in reversed((job.status.conditions if job.status else None) or [])), None)
                row += [
                    "host" if job.host_network else "pod",
                    (last.reason if last else None) or "",
                    (last.message if last else None) or "",
                ]
            rows.append(row)
        sys.stdout.write(_table(rows))
        return 0

    return _with_client(args, body)


def _run_describe(args: argparse.Namespace) -> int:
    from kubedl_py import sdk

    async def body(client: Any) -> int:
        described = await client.describe(args.name, args.kind)
        sys.stdout.write(_format_description(described, sdk))
        return 0

    return _with_client(args, body)


def _format_description(described: Any, sdk: Any) -> str:
    job = described.job
    status = job.status
    out = [
        f"Name:         {job.name}\n",
        f"Namespace:    {job.namespace}\n",
        f"Kind:         {job.kind}\n",
        f"UID:          {job.metadata.uid or ''}\n",
        f"Network:      {'host' if job.host_network else 'pod'}\n",
        f"Created:      {job.metadata.creation_timestamp or ''} ({_age(sdk.job_age(job))} ago)\n",
        f"State:        {sdk.job_state(job)}\n",
    ]
    if status and status.start_time:
        out.append(f"Start Time:   {status.start_time.isoformat()}\n")
    if status and status.completion_time:
        out.append(f"Completed:    {status.completion_time.isoformat()}\n")
    conditions = (status.conditions if status else None) or []
    out.append("Conditions:\n")
    if conditions:
        rows: list[list[Any]] = [["TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"]]
        for cond in conditions:
            when = cond.last_transition_time.isoformat() if cond.last_transition_time else ""
            rows.append([cond.type, cond.status, cond.reason or "", when, cond.message or ""])
        out.append(_table(rows, "  "))
    else:
        out.append("  <none>\n")
    out.append("Replica Statuses:\n")
    replicas = (status.replica_statuses if status else None) or {}
    if replicas:
        rows = [["TYPE", "ACTIVE", "SUCCEEDED", "FAILED", "RESTARTS"]]
        for kind, rs in replicas.items():
            rows.append([kind, rs.active or 0, rs.succeeded or 0, rs.failed or 0, rs.restarts or 0])
        out.append(_table(rows, "  "))
    else:
        out.append("  <none>\n")
    out.append("Pods:\n")
    if described.pods:
        rows = [["NAME", "NODE", "PHASE", "RESTARTS", "HOST PORT", "SERVICE", "TARGET PORT"]]
        for pod in described.pods:
            host_port = pod.host_port if pod.host_port is not None else ("-" if not job.host_network else "?")
            target = pod.target_port if pod.target_port is not None else "-"
            rows.append([pod.name, pod.node or "-", pod.phase, pod.restarts, host_port, pod.service or "-", target])
        out.append(_table(rows, "  "))
    else:
        out.append("  <none>\n")
    out.append("Events:\n")
    if described.events:
        rows = [["AGE", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"]]
        for event in described.events:
            involved = event.get("involvedObject") or {}
            rows.append(
                [
                    _event_age(event),
                    event.get("type", ""),
                    event.get("reason", ""),
                    f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
                    event.get("count", 1),
                    str(event.get("message", "")).strip(),
                ]
            )
        out.append(_table(rows, "  "))
    else:
        out.append("  <none>\n")
    return "".join(out)


def _run_logs(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        index = args.index if args.index is not None or args.replica is None else 0
        async for line in client.stream_logs(
            args.name, args.replica, index, kind=args.kind, follow=args.follow, container=args.container
        ):
            print(line.text if args.replica is not None else line, flush=True)
        return 0

    return _with_client(args, body)


def _run_wait(args: argparse.Namespace) -> int:
    condition = str(args.condition).split("=", 1)[-1]

    async def body(client: Any) -> int:
        job = await _wait_with_progress(client, args.name, args.kind, [condition], args.timeout)
        print(f"{_resource_name(job)}/{job.name} condition met ({condition})", flush=True)
        return 0

    return _with_client(args, body)


def _run_delete(args: argparse.Namespace) -> int:
    async def body(client: Any) -> int:
        job = await client.delete(args.name, args.kind, wait=args.wait, timeout=args.timeout)
        print(f'{_resource_name(job)} "{job.name}" deleted', flush=True)
        return 0

    return _with_client(args, body)


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
