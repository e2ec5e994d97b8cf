"""The ``kubedl-py`` argument parser: every command, its flags and help, and the handler it runs.

Why apart from the handlers: ``--help`` and a bad flag must answer at once, so building the parser imports
nothing heavy (no controller, no HTTP stack). A command names its handler as (module of this package,
function); :class:`Handler` imports that module only when the command runs. That is also what keeps the
local clusters an extra: only the ``local`` commands import :mod:`kubedl_local`, and where the ``local``
extra is not installed they say how to get it instead of failing on an import.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeAlias, cast

from kubedl_py._version import __version__
from kubedl_py.api.constants import DEFAULT_IMAGE, DEFAULT_NAMESPACE, LOCAL_KUBECONFIG
from kubedl_py.cli.errors import UsageError

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

#: ``--gang-scheduler`` choices: ``kubedl_py.controllers.gang.GANG_SCHEDULERS`` (a test keeps them equal),
#: spelled out here so that building the parser (``--help``, ``manifests``) does not import the controller
GANG_SCHEDULERS: Final = ("volcano", "scheduler-plugins", "kubernetes")
#: ``--gang-scheduler none``: no PodGroup for any job, not even the native one chosen by default
NO_GANG: Final = "none"
#: the top-level modules the extras bring (the local clusters, kubedl_local, and what only they use), each with
#: the extra that installs it
EXTRAS: Final = {"kubedl_local": "local", "celpy": "local"}
#: ``--kueue-workloads`` choices: ``kubedl_py.controllers.kueue.KUEUE_MODES`` (a test keeps them equal)
KUEUE_MODES: Final = ("off", "kubedl", "all")


def _kinds() -> str:
    """The registered kinds (read when the help is printed: a plug-in may have added one)."""
    from kubedl_py.api.kinds import all_kinds

    return ", ".join(plugin.kind for plugin in all_kinds())


class _Kinds:
    """``%(kinds)s`` in a help string: the registered kinds, looked up only when the help is printed."""

    def __str__(self) -> str:
        return _kinds()


def description() -> str:
    return (
        f"Run training jobs ({_kinds()}) on Kubernetes. Start a cluster on this machine with "
        "`kubedl-py local up`, then submit, watch and inspect jobs with the job commands; `manifests` and "
        "`controller` install and run the controller on any cluster."
    )


EPILOG: Final = (
    "exit codes: 0 success, 1 the job failed or the cluster refused, 2 usage or validation error, 3 timeout. "
    "Run `kubedl-py COMMAND --help` for a command's flags."
)


@dataclass(frozen=True)
class Handler:
    """A command's handler, ``kubedl_py.cli.<module>.<function>(args) -> exit code``, imported when it runs."""

    module: str
    function: str

    def __call__(self, args: argparse.Namespace) -> int:
        try:
            loaded = importlib.import_module(f"kubedl_py.cli.{self.module}")
        except ModuleNotFoundError as exc:
            extra = _extra_of(exc.name or "")
            if extra is None:
                raise
            command = " ".join(str(v) for v in (args.command, getattr(args, "local_command", None)) if v)
            raise UsageError(
                f"`kubedl-py {command}` needs the {extra!r} extra, which this installation lacks ({exc.name} is "
                f"missing): pip install 'kubedl-py[{extra}]' (from a checkout of kubedl-py: make venv)"
            ) from exc
        run = cast(Callable[[argparse.Namespace], int], getattr(loaded, self.function))
        return run(args)


def _extra_of(missing: str) -> str | None:
    """The extra that installs the module ``missing`` (or its parent), or None when no extra does."""
    for module, extra in EXTRAS.items():
        if missing == module or missing.startswith(module + "."):
            return extra
    return None


@dataclass(frozen=True)
class ChooseCommand:
    """The handler of a command group run without its command: its usage and commands, on stderr, exit 2."""

    parser: argparse.ArgumentParser
    name: str

    def __call__(self, args: argparse.Namespace) -> int:
        actions = [a for a in self.parser._actions if isinstance(a, argparse._SubParsersAction)]
        choices = [f"  {c.dest:<10}{c.help or ''}" for a in actions for c in a._choices_actions]
        sys.stderr.write(self.parser.format_usage())
        sys.stderr.write(f"kubedl-py {self.name}: choose a command:\n" + "\n".join(choices) + "\n")
        return 2


class _TopParser(argparse.ArgumentParser):
    """The top-level parser: its description names the registered kinds, whose plug-ins (pydantic models) are
    imported only when the help is printed, not for every command (tests/sdk/test_cli_startup.py)."""

    def format_help(self) -> str:
        self.description = description()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = _TopParser(prog="kubedl-py", epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"kubedl-py {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=argparse.ArgumentParser)
    _add_manifests(sub)
    _add_controller(sub)
    _add_local(sub)
    _add_job_commands(sub)
    return parser


def _add_local(sub: Subcommands) -> None:
    p = sub.add_parser("local", help="a Kubernetes cluster on this machine (embedded, or the real components)")
    local_sub = p.add_subparsers(dest="local_command", metavar="COMMAND", title="commands")
    # `kubedl-py local` alone: say which commands there are (argparse would name its internal "local_command").
    p.set_defaults(handler=ChooseCommand(p, "local"))
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
        choices=["process", "container", "simulated", "kubelet"],
        help="how pods run: 'process' runs their commands as local processes (default); 'container' runs the "
        "pods whose images are all in the local podman store in containers (e.g. the controller's Deployment "
        "from `make image`) and the others as processes; 'simulated' only pretends (scale tests); 'kubelet' "
        "(with --control-plane kubernetes, as root) a real node: containerd, kubelet, kube-proxy, CNI and "
        "CoreDNS, built from their Go modules on first use (`make node-binaries`, minutes); further --nodes "
        "are simulated",
    )
    up.add_argument(
        "--node-resources",
        default=None,
        metavar="NAME=AMOUNT,...",
        help="resources every node advertises on top of the defaults, e.g. nvidia.com/gpu=8,rdma/hca=1; on the "
        "process/container node extended resources are pretend devices: pods that ask for them run on the CPU and "
        "are told so (docs/local-cluster.md, GPUs and other devices). GPUs of this machine are found without it",
    )
    up.add_argument(
        "--node-devices",
        default=None,
        metavar="gpu=N,nic=N,pcie-roots=N",
        help="with --control-plane kubernetes: the node agents act as a DRA driver and every node publishes N "
        "pretend GPUs and RDMA NICs over PCIe roots in ResourceSlices (DeviceClasses gpu.nvidia.com and dranet, "
        "also serving nvidia.com/gpu and rdma/hca); jobs ask for them with spec.rdma.dra (docs/rdma.md)",
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
        "--image",
        action="append",
        default=[],
        metavar="NAME",
        help="--runtime kubelet: copy this image of podman's store into the node (repeatable; kubedl-py:<version> "
        "is copied whenever `make image` built it); no registry is reached",
    )
    up.add_argument(
        "--proxy-mode",
        default="iptables",
        choices=["iptables", "nftables"],
        help="--runtime kubelet: kube-proxy's mode (default iptables)",
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
    up.add_argument(
        "--kubeflow-api",
        action="store_true",
        help="also install the kinds in kubeflow.org/v1 (the Training Operator's layout) and reconcile them",
    )
    up.add_argument(
        "--node-monitor-grace-period",
        type=float,
        default=50.0,
        metavar="SECONDS",
        help="a node that has not reported for this long is NotReady (Kubernetes' default 50; shorter rehearses"
        " `local node stop` faster)",
    )
    up.set_defaults(handler=Handler("local", "run_local_up_command"))
    _add_local_node(local_sub)


def _add_local_node(local_sub: Subcommands) -> None:
    node = local_sub.add_parser(
        "node", help="stop, start or remove a node of a running `local up` cluster, as a crashed machine would"
    )
    actions = node.add_subparsers(dest="node_command", required=True)
    for action, text in (
        ("stop", "freeze the node's agent: no heartbeats, no pod updates (a crashed or partitioned machine)"),
        ("start", "resume a stopped node: it reports again and Kubernetes lifts its taints"),
        ("remove", "stop the node for good and delete its Node object (its pods are then garbage-collected)"),
    ):
        p = actions.add_parser(action, help=text)
        p.add_argument("name", help="the node (`kubectl get nodes`)")
        p.add_argument(
            "--kubeconfig",
            default=None,
            help=f"the local cluster's kubeconfig (default: $KUBECONFIG, else {LOCAL_KUBECONFIG})",
        )
        p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the agent (default 30)")
        p.set_defaults(handler=Handler("nodes", "run_local_node"))


def _add_controller(sub: Subcommands) -> None:
    p = sub.add_parser("controller", help="run the training-job controller against a cluster")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    p.add_argument("--context", help="kubeconfig context to use")
    p.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=None,
        metavar="NS[,NS...]",
        help="watch only these namespaces (repeat it or separate with commas; default: all)",
    )
    p.add_argument("--workers", type=int, default=16, help="concurrent reconciles per job kind (default 16)")
    p.add_argument(
        "--write-concurrency",
        type=int,
        default=32,
        metavar="N",
        help="pod/Service writes in flight per job kind (default 32)",
    )
    p.add_argument(
        "--urgent-write-hold",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="while a job that lost a pod is reconciled, other writes wait up to this long (default 1; 0: never)",
    )
    p.add_argument(
        "--repair-window",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="after a running job is repaired (a lost pod replaced), new jobs are reconciled by at most"
        " --repair-workers workers per kind for this long (default 5; 0: never)",
    )
    p.add_argument(
        "--repair-workers",
        type=int,
        default=2,
        metavar="N",
        help="reconciles of new and changed jobs at once per kind during the repair window (default 2)",
    )
    p.add_argument(
        "--pod-event-batch",
        type=float,
        default=0.05,
        metavar="SECONDS",
        help="a pod added or changed (not failed, stopping or deleted) reconciles its job within this long, so"
        " the events of a job's pods meanwhile are one reconcile (default 0.05; 0: each at once)",
    )
    p.add_argument(
        "--metrics-addr",
        default=None,
        help="HOST:PORT for /metrics (and /healthz, /readyz unless --health-addr is given or it is secure)",
    )
    p.add_argument(
        "--metrics-secure",
        action="store_true",
        help="serve /metrics over HTTPS, only to callers the API server authenticates and authorizes to get it"
        " (TokenReview and SubjectAccessReview; the install manifests turn it on)",
    )
    p.add_argument(
        "--metrics-cert-dir",
        metavar="DIR",
        default=None,
        help="tls.crt and tls.key of the HTTPS metrics endpoint (default: a self-signed certificate made at start)",
    )
    p.add_argument("--health-addr", default=None, help="HOST:PORT for /healthz and /readyz alone, plain HTTP")
    p.add_argument("--leader-elect", action="store_true", help="act only while holding the leader Lease")
    p.add_argument(
        "--leader-elect-namespace",
        default="kubedl-system",
        help="namespace of the leader Lease (default kubedl-system)",
    )
    p.add_argument(
        "--hostnetwork-port-range",
        default="20000-30000",
        help="host ports for host-network pods, LOW-HIGH, both inclusive (default 20000-30000); unique per"
        " node, not per cluster: a small range serves any number of nodes",
    )
    p.add_argument(
        "--host-port-retry-after",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="a host-network pod Pending this long because no node has its host port free gets another port"
        " (default 15; doubled each time for the same replica, up to 300)",
    )
    p.add_argument(
        "--max-host-ports-per-pod",
        type=int,
        default=8,
        metavar="N",
        help="host ports one pod may hold, the framework's included; jobs asking more fail InvalidSpec"
        " (default 8; render the manifests' admission policy with the same value)",
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
        choices=(*GANG_SCHEDULERS, NO_GANG),
        default=None,
        help=(
            "give every job a PodGroup of this gang scheduler and point its pods at it (kubernetes: kube-scheduler's "
            "own, scheduling.k8s.io/v1beta1); none: no gang at all (default: the native gang for the jobs that set "
            "schedulingPolicy.minAvailable, where the API server serves scheduling.k8s.io/v1beta1 PodGroups)"
        ),
    )
    p.add_argument(
        "--gang-scheduler-name",
        default=None,
        help="schedulerName for gang-scheduled pods (default: volcano / scheduler-plugins-scheduler / the template's)",
    )
    p.add_argument(
        "--rdma-defaults",
        metavar="FILE",
        default=None,
        help="YAML with the shape of spec.rdma: defaults for jobs that have a spec.rdma block",
    )
    p.add_argument(
        "--kubeflow-api",
        action="store_true",
        help="also reconcile the kinds in kubeflow.org/v1 whose CRDs are installed (`manifests --kubeflow-api`)",
    )
    p.add_argument(
        "--node-lost-timeout",
        type=int,
        default=60,
        metavar="SECONDS",
        help="a job's pod on a node not Ready this long is deleted (grace 0) and replaced; default of"
        " failurePolicy.nodeLostTimeoutSeconds (default 60)",
    )
    p.add_argument(
        "--infrastructure-backoff-limit",
        type=int,
        default=100,
        metavar="N",
        help="default of failurePolicy.infrastructureBackoffLimit: restarts caused by the cluster that fail a"
        " job (default 100)",
    )
    p.add_argument(
        "--agent-image",
        default=None,
        metavar="IMAGE",
        help="image of the in-place restart agent added to the pods of jobs restarted whole in place"
        " (failurePolicy.restartScope Job; docs/policies.md); default: $KUBEDL_AGENT_IMAGE, else kubedl-py:<version>",
    )
    p.add_argument(
        "--kueue-workloads",
        choices=KUEUE_MODES,
        default="kubedl",
        help="make and obey a Kueue Workload for jobs labelled kueue.x-k8s.io/queue-name: kubedl = training.kubedl.io "
        "jobs (kubeflow.org ones left to Kueue's own integration), all = both groups (Kueue's kubeflow.org "
        "integrations disabled), off = none (default: kubedl; docs/kueue.md)",
    )
    p.set_defaults(handler=Handler("controller", "run_controller"))


def _add_manifests(sub: Subcommands) -> None:
    p = sub.add_parser("manifests", help="print the install manifests (CRDs, RBAC, Deployment) as YAML")
    p.add_argument("--image", default=DEFAULT_IMAGE, help=f"controller image (default {DEFAULT_IMAGE})")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"controller namespace (default {DEFAULT_NAMESPACE})")
    p.add_argument("--crds-only", action="store_true", help="print only the CustomResourceDefinitions")
    p.add_argument(
        "--max-host-ports-per-pod",
        type=int,
        default=8,
        metavar="N",
        help="host ports one pod may hold: the admission policy refuses jobs asking more, and the controller"
        " gets the same flag (default 8)",
    )
    p.add_argument(
        "--watch-namespace",
        action="append",
        metavar="NS[,NS...]",
        default=None,
        help="a namespaced install: reconcile the jobs of these namespaces only, with a Role in each instead of a"
        " ClusterRole (repeat it or separate with commas; default: every namespace)",
    )
    p.add_argument(
        "--service-monitor",
        action="store_true",
        help="also a Prometheus Operator ServiceMonitor for the HTTPS metrics endpoint",
    )
    p.add_argument(
        "--gang-scheduler",
        choices=(*GANG_SCHEDULERS, NO_GANG),
        default=None,
        help=(
            "grant access to this gang scheduler's PodGroups and pass the flag to the controller (default: the "
            "rights of the native gang, scheduling.k8s.io Workloads and PodGroups; none: no gang rights at all)"
        ),
    )
    p.add_argument(
        "--kubeflow-api",
        action="store_true",
        help="also the kinds in kubeflow.org/v1 (CRDs in the Training Operator's layout, RBAC, controller flag); "
        "not on a cluster where the Training Operator runs: it owns those CRDs",
    )
    p.set_defaults(handler=Handler("manifests", "run_manifests"))


def _cluster_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    common.add_argument("--context", help="kubeconfig context to use (default: the current context)")
    common.add_argument(
        "-n", "--namespace", default=None, help="namespace (default: the context's namespace, else default)"
    )
    return common


def _add_kind(p: argparse.ArgumentParser) -> None:
    action = p.add_argument(
        "--kind",
        default=None,
        help="%(kinds)s, or a plural or short name (default: whichever kind has the name)",
    )
    action.kinds = _Kinds()  # type: ignore[attr-defined]  # argparse expands %(name)s from the action's attributes


def _add_job_commands(sub: Subcommands) -> None:
    common = _cluster_options()
    p = sub.add_parser("submit", parents=[common], help="validate and create the jobs of a YAML file")
    p.add_argument("file", metavar="FILE", nargs="?", help="YAML/JSON file with one or more jobs ('-' reads stdin)")
    p.add_argument("-f", "--filename", metavar="FILE", help="the same file, given as kubectl's -f (one or the other)")
    p.add_argument("--wait", action="store_true", help="wait until the jobs succeed (exit 1 if one fails)")
    p.add_argument("--follow", action="store_true", help="stream the jobs' logs until they finish (implies --wait)")
    p.add_argument(
        "--timeout", type=float, default=None, help="seconds to wait at most for each job, in turn (exit 3 when over)"
    )
    p.set_defaults(handler=Handler("jobs", "run_submit"))

    p = sub.add_parser("get", parents=[common], help="list jobs, or show one")
    p.add_argument("name", metavar="NAME", nargs="?", help="a job name (default: every job in the namespace)")
    p.add_argument("-o", "--output", choices=["wide", "yaml", "json"], default=None, help="output format")
    p.add_argument("--selector", "-l", default=None, help="label selector to filter the list")
    p.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="after the table, print a row for every change until Ctrl-C (not with -o yaml|json)",
    )
    _add_kind(p)
    p.set_defaults(handler=Handler("jobs", "run_get"))

    p = sub.add_parser("describe", parents=[common], help="show a job's conditions, replicas, pods and events")
    p.add_argument("name", metavar="NAME")
    _add_kind(p)
    p.set_defaults(handler=Handler("jobs", "run_describe"))

    p = sub.add_parser("logs", parents=[common], help="print a job's logs (every replica, or one)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--replica", default=None, help="replica type, e.g. master, worker, ps (default: every pod)")
    p.add_argument("--index", type=int, default=None, help="replica index (default 0 with --replica)")
    p.add_argument("-f", "--follow", action="store_true", help="stream until the pods finish")
    p.add_argument(
        "-p",
        "--previous",
        action="store_true",
        help="the last failed run of each rank: its previous log, or the last lines kept in the job's status",
    )
    p.add_argument("-c", "--container", default=None, help="container (default: the framework's, else the first)")
    _add_kind(p)
    p.set_defaults(handler=Handler("jobs", "run_logs"))

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
    p.set_defaults(handler=Handler("jobs", "run_wait"))

    p = sub.add_parser("delete", parents=[common], help="delete jobs (their pods and Services go with them)")
    p.add_argument("name", metavar="NAME", nargs="+", help="one or more jobs, as kubectl delete takes them")
    p.add_argument("--wait", action="store_true", help="return only once the jobs are gone")
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait at most with --wait")
    _add_kind(p)
    p.set_defaults(handler=Handler("jobs", "run_delete"))
