"""The peer controllers of the benchmark (issue 19), built from their Go modules and run beside the real control plane.

Why: kubedl-py is measured against the controllers it is an alternative to, on the same real Kubernetes control
plane, doing the same work: the Kubeflow Training Operator (``kubeflow.org/v1`` PyTorchJobs) and KubeDL
(``training.kubedl.io/v1alpha1`` PyTorchJobs, the API kubedl-py follows, and the host-network mode it
copies). Both are built by name and pinned version (``kubedl_local/pins.py``) with
:mod:`kubedl_local.kubernetes.programs` into ``~/.cache/kubedl-py``; their CRDs are read from Go's module
cache at run time. Nothing of theirs is committed. Each runs as a subprocess against a kubeconfig, logging into
a file; :func:`peer_kubeconfig` gives each its own client certificate (user ``training-operator`` /
``kubedl``, group ``system:masters``) so the API server's audit log counts each controller's requests by user.
KubeDL's CRDs are in ``training.kubedl.io``, kubedl-py's own group: a KubeDL run needs a cluster without
kubedl-py's CRDs (the benchmark starts one per contender).

Client-side rate limits at shipped settings (read in the module cache; the benchmark also runs each peer with
them raised to match kubedl-py):

- Training Operator v1.9.4 (controller-runtime v0.24.1, client-go v0.36.3). ``ctrl.GetConfigOrDie()`` leaves
  QPS -1, i.e. no client-side limit (controller-runtime ``pkg/client/config/config.go:101-105``), but
  ``cmd/training-operator.v1/main.go:139`` then sets ``cfg.RateLimiter`` to a token bucket of its flags
  ``--kube-api-qps`` (default 20, ``main.go:101``) and ``--kube-api-burst`` (default 30, ``main.go:102``).
  client-go uses a config's ``RateLimiter`` in place of QPS/Burst (``rest/config.go:370``), and every client
  made from that config shares the one bucket: 20 QPS, burst 30 for the whole process. Raising it needs no
  patch: the flags exist (the issue assumed they did not), so :func:`run_peer` passes them. Workers:
  ``--controller-threads`` default 1 (``main.go:100``), the PyTorchJob controller's MaxConcurrentReconciles.
- KubeDL v0.5.0 (controller-runtime v0.10.3, client-go v0.22.6). ``ctrl.GetConfigOrDie()`` sets QPS 20,
  burst 30 when unset (controller-runtime ``pkg/client/config/config.go:85-88``); client-go makes a new token
  bucket for every REST client (``rest/config.go`` RESTClientFor), and controller-runtime v0.10 makes one REST
  client per resource type, for its cache and its client (``pkg/client/client_cache.go:62``,
  ``pkg/cache/internal/informers_map.go:264``): 20 QPS, burst 30 per resource type. KubeDL has no flag for it,
  so it is built with one patch: in a copy of its ``main.go`` (:mod:`kubedl_local.kubernetes.programs`: Go
  refuses to overlay the module cache), ``ctrl.NewManager(ctrl.GetConfigOrDie(),`` becomes
  ``ctrl.NewManager(kubedlPyRateLimits(ctrl.GetConfigOrDie()),``, a function of ours (:data:`KUBEDL_RATE_LIMITS_GO`)
  that sets QPS/Burst from ``KUBEDL_PY_PEER_QPS`` / ``KUBEDL_PY_PEER_BURST`` only when they are set: unset,
  the binary behaves exactly as shipped. (Its discovery client in ``pkg/util/workloadgate`` keeps the shipped
  config; with ``--workloads`` given it is never used.) Workers: ``--max-reconciles`` default 1
  (``main.go:66``).

How each is run (:func:`run_peer`):

- Training Operator: ``--enable-scheme=pytorchjob`` (only the kind compared; default: all six kinds),
  ``--leader-elect=false`` (the default), metrics and health probes on free loopback ports,
  ``--webhook-server-port`` free. Its webhooks: there is no flag to turn them off, and it registers its
  controllers only once its certificate rotator (open-policy-agent/cert-controller) reports ready, which needs
  (1) the Secret ``training-operator-webhook-cert`` to exist in its namespace (``MY_POD_NAMESPACE``, default
  ``kubeflow``; its install makes it empty), (2) the rotator's certificate on disk at the fixed path
  ``/tmp/k8s-webhook-server/serving-certs/tls.crt`` (``pkg/cert/cert.go``; the kubelet mounts the Secret there)
  and (3) the CA injected into the ValidatingWebhookConfiguration ``validator.training-operator.kubeflow.org``,
  which counts as done when that configuration does not exist. So: the namespace and the empty Secret are
  created, the Secret's keys are copied to that directory once the rotator fills it (the kubelet's part, as for
  Kueue), and no webhook configuration is installed: the API server never calls the webhook server, so
  PyTorchJobs are not validated by its webhook (the benchmark's jobs are valid), and nothing else of its
  behaviour changes. Its webhook server reads the same directory (controller-runtime's default,
  ``os.TempDir()``: ``TMPDIR`` is removed from its environment). The directory is fixed, so concurrent runs share
  it: each writes a valid key pair atomically, and as no webhook is called, whose pair it serves does not
  matter. When this process's last Training Operator stops, ``/tmp/k8s-webhook-server`` is removed if this
  process made it. Ready when ``/readyz`` answers (certificates ready, webhook server up) and its PyTorchJob
  controller has started its workers.
- KubeDL: ``--workloads=PyTorchJob`` (default ``auto`` asks discovery for each of its 13 kinds' CRDs, and
  for OpenKruise's), ``--enable-leader-election=false`` (default true), ``--controller-metrics-addr`` on a free
  loopback port and ``--metrics-addr`` on a free port (an int: it binds all interfaces), and one feature gate
  off: ``--feature-gates=JobCoordinator=false``. Shipped on (alpha), the job coordinator crashes the process
  on a PyTorchJob's first update out of its queue: the PyTorchJob controller watches its jobs with
  controller-runtime's plain handler, never the coordinator's that sets a queued job's owner queue, so
  ``coordinator.Dequeue`` calls a nil ``Owner`` (``pkg/jobcoordinator/core/coordinator.go:132``; "invalid
  memory address or nil pointer dereference" once the first pod was created). The other gates stay as
  shipped; DAGScheduling (on) makes Workers wait for the Master to run. KubeDL makes a Service for the Master
  only (``pkg/job_controller/job.go:616``). Nothing it uses is gone from Kubernetes 1.37 (core/v1 pods,
  services, events; no batch/v1beta1 or policy/v1beta1 on this path), and Go 1.26 builds it without any
  dependency bumped. No health endpoint: ready when its PyTorchJob controller has started its workers.

Host-network failover in KubeDL (``tests/peers``): a replaced pod gets a new random host port (20000-30000)
and the reconcile that creates it then re-points the Service's targetPort at it
(``pkg/job_controller/service.go:238-250``; pods are reconciled before Services, ``job.go:310-321``, so the
Service follows the new pod rather than preceding it). Only ``ExitCode`` replicas are replaced (the Master's
default), and only the Master has a Service to re-point.

``python -m harness.peers`` builds both (``make bench`` runs it).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import aiohttp
import yaml

from kubedl_local.kubernetes.binaries import BuildError, Progress, _duration, _stderr
from kubedl_local.kubernetes.cluster import install_crds
from kubedl_local.kubernetes.controlplane import (
    KubernetesControlPlane,
    _free_ports,
    log_tail,
    start_process,
    stop_process,
)
from kubedl_local.kubernetes.programs import (
    BuiltProgram,
    GoProgram,
    SourcePatch,
    ensure_program,
    find_program,
    module_source,
)
from kubedl_local.pins import KUBEDL_VERSION, TRAINING_OPERATOR_VERSION
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import AlreadyExists, KubeError
from kubedl_py.kube.resources import NAMESPACES, SECRETS, Resource

log = logging.getLogger(__name__)

PeerName = Literal["training-operator", "kubedl"]

#: the environment variables the patched KubeDL reads (unset: shipped behaviour)
QPS_ENV: Final = "KUBEDL_PY_PEER_QPS"
BURST_ENV: Final = "KUBEDL_PY_PEER_BURST"

#: Go added to KubeDL's main package at build time (module docstring)
KUBEDL_RATE_LIMITS_GO: Final = """package main

// Added by kubedl-py at build time to a copy of this package (nothing of the module is changed): a benchmark
// raises this controller's client-side rate limit, which it has no flag for. With neither KUBEDL_PY_PEER_QPS
// nor KUBEDL_PY_PEER_BURST set, the configuration is returned exactly as the controller made it.

import (
\t"fmt"
\t"os"
\t"strconv"

\t"k8s.io/client-go/rest"
)

func kubedlPyRateLimits(cfg *rest.Config) *rest.Config {
\tqpsValue, qpsSet := os.LookupEnv("KUBEDL_PY_PEER_QPS")
\tburstValue, burstSet := os.LookupEnv("KUBEDL_PY_PEER_BURST")
\tif qpsSet {
\t\tqps, err := strconv.ParseFloat(qpsValue, 32)
\t\tif err != nil {
\t\t\tfmt.Fprintf(os.Stderr, "kubedl-py: KUBEDL_PY_PEER_QPS=%q is not a number: %v\\n", qpsValue, err)
\t\t\tos.Exit(2)
\t\t}
\t\tcfg.QPS = float32(qps)
\t}
\tif burstSet {
\t\tburst, err := strconv.Atoi(burstValue)
\t\tif err != nil {
\t\t\tfmt.Fprintf(os.Stderr, "kubedl-py: KUBEDL_PY_PEER_BURST=%q is not an integer: %v\\n", burstValue, err)
\t\t\tos.Exit(2)
\t\t}
\t\tcfg.Burst = burst
\t}
\tif qpsSet || burstSet {
\t\tfmt.Fprintf(os.Stderr, "kubedl-py: client rate limit set to QPS %v, burst %d\\n", cfg.QPS, cfg.Burst)
\t}
\treturn cfg
}
"""

TRAINING_OPERATOR: Final = GoProgram(
    name="training-operator",
    module="github.com/kubeflow/training-operator",
    version=f"v{TRAINING_OPERATOR_VERSION}",
    commands={"training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1"},
)
KUBEDL: Final = GoProgram(
    name="kubedl",
    module="github.com/alibaba/kubedl",
    version=f"v{KUBEDL_VERSION}",
    commands={"kubedl": "github.com/alibaba/kubedl"},
    patches=(
        SourcePatch(
            "main.go",
            "ctrl.NewManager(ctrl.GetConfigOrDie(),",
            "ctrl.NewManager(kubedlPyRateLimits(ctrl.GetConfigOrDie()),",
        ),
    ),
    extra_files={"kubedl_py_rate_limits.go": KUBEDL_RATE_LIMITS_GO},
)

#: the annotation that puts a KubeDL job's pods on the host network
HOST_NETWORK_ANNOTATION: Final = "kubedl.io/network-mode"
#: the container and port both peers look for in a PyTorch replica (KubeDL makes no Service without the port)
CONTAINER: Final = "pytorch"
PORT_NAME: Final = "pytorchjob-port"
PORT: Final = 23456


@dataclass(frozen=True)
class Peer:
    """One peer controller: how it is built, which job kind it serves, and its shipped settings."""

    name: PeerName
    program: GoProgram
    command: str
    #: its PyTorchJob resource
    job: Resource
    #: the CRD files installed, as paths inside the module
    crd_files: tuple[str, ...]
    #: the common name of its client certificate: the user its requests carry in the audit log
    user: str
    #: the labels it puts on a job's pods and Services
    job_name_label: str
    replica_type_label: str
    replica_index_label: str
    #: client-side rate limit and reconcile workers at shipped settings (module docstring)
    shipped_qps: float
    shipped_burst: int
    shipped_workers: int
    #: how the shipped rate limit applies: one bucket for the process, or one per resource type
    rate_limit_scope: str
    #: the log line saying its PyTorchJob controller has started its workers
    ready_line: re.Pattern[str] = field(repr=False)

    def pod_selector(self, job_name: str) -> str:
        """The label selector of the pods and Services of job ``job_name``."""
        return f"{self.job_name_label}={job_name}"


PEERS: Final[dict[PeerName, Peer]] = {
    "training-operator": Peer(
        name="training-operator",
        program=TRAINING_OPERATOR,
        command="training-operator",
        job=Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
        crd_files=("manifests/base/crds/kubeflow.org_pytorchjobs.yaml",),
        user="training-operator",
        job_name_label="training.kubeflow.org/job-name",
        replica_type_label="training.kubeflow.org/replica-type",
        replica_index_label="training.kubeflow.org/replica-index",
        shipped_qps=20.0,
        shipped_burst=30,
        shipped_workers=1,
        rate_limit_scope="one token bucket shared by all its clients",
        ready_line=re.compile(r"Starting workers.*\"controller\": \"pytorchjob-controller\""),
    ),
    "kubedl": Peer(
        name="kubedl",
        program=KUBEDL,
        command="kubedl",
        job=Resource("training.kubedl.io", "v1alpha1", "pytorchjobs", "PyTorchJob"),
        crd_files=("config/crd/bases/training.kubedl.io_pytorchjobs.yaml",),
        user="kubedl",
        job_name_label="job-name",
        replica_type_label="replica-type",
        replica_index_label="replica-index",
        shipped_qps=20.0,
        shipped_burst=30,
        shipped_workers=1,
        rate_limit_scope="one token bucket per resource type and client (controller-runtime v0.10)",
        ready_line=re.compile(r"controller\.PytorchController.*\"msg\":\"Starting workers\""),
    ),
}

#: the Training Operator's namespace (``MY_POD_NAMESPACE``), webhook Secret and the fixed directory its
#: certificate rotator waits for (``pkg/cert/cert.go``) and its webhook server reads (``os.TempDir()``)
TRAINING_OPERATOR_NAMESPACE: Final = "kubeflow"
TRAINING_OPERATOR_SECRET: Final = "training-operator-webhook-cert"
TRAINING_OPERATOR_CERT_DIR: Final = Path("/tmp/k8s-webhook-server/serving-certs")


class _SharedDirectory:
    """The Training Operator's fixed certificate directory, made by the first of this process's Training
    Operators and removed (with the parent this process made, ``/tmp/k8s-webhook-server``) when the last one
    stops, so no run leaves it behind. One that existed before is left alone."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.users = 0
        self.made = False

    def claim(self) -> None:
        if self.users == 0:
            self.made = not self.top.exists()
        self.users += 1

    def release(self) -> None:
        self.users -= 1
        if self.users == 0 and self.made:
            shutil.rmtree(self.top, ignore_errors=True)
            self.made = False


_CERT_DIR: Final = _SharedDirectory(TRAINING_OPERATOR_CERT_DIR.parent)


class PeerError(RuntimeError):
    """A peer failed to start or to become ready; the message carries its log's tail."""


def get_peer(peer: PeerName | Peer) -> Peer:
    if isinstance(peer, Peer):
        return peer
    try:
        return PEERS[peer]
    except KeyError:
        raise ValueError(f"unknown peer {peer!r} (known: {', '.join(PEERS)})") from None


# ------------------------------------------------------------------------------------------------ building


def ensure_peers(progress: Progress | None = None) -> dict[PeerName, BuiltProgram]:
    """Build (or find) every peer, saying how long each took (minutes cold; a lock serialises Go builds)."""
    say = progress or _stderr
    built: dict[PeerName, BuiltProgram] = {}
    for name, peer in PEERS.items():
        started = time.monotonic()
        cached = find_program(peer.program) is not None
        built[name] = ensure_program(peer.program, progress=say)
        how = "cached" if cached else f"built in {_duration(time.monotonic() - started)}"
        say(f"{peer.program.module}@{peer.program.version}: {built[name][peer.command]} ({how})")
    return built


def peer_crds(peer: PeerName | Peer) -> list[dict[str, Any]]:
    """The peer's CRDs, read from its module in Go's module cache (downloaded if needed)."""
    chosen = get_peer(peer)
    root = module_source(chosen.program)
    documents: list[dict[str, Any]] = []
    for name in chosen.crd_files:
        for document in yaml.safe_load_all((root / name).read_text()):
            if document:
                document.pop("status", None)
                documents.append(document)
    return documents


async def install_peer_crds(kube: KubeClient, peer: PeerName | Peer, *, within: float = 60.0) -> None:
    """Server-side apply the peer's CRDs (from its module) and wait until the API server serves them."""
    crds = await asyncio.to_thread(peer_crds, peer)
    await install_crds(kube, crds, within=within)


def peer_kubeconfig(control_plane: KubernetesControlPlane, peer: PeerName | Peer) -> Path:
    """A client-certificate kubeconfig for the peer's own user (``system:masters``: it is a peer under test, not
    a component whose RBAC is), so the audit log tells its requests apart."""
    chosen = get_peer(peer)
    return control_plane.user_kubeconfig(chosen.name, common_name=chosen.user, groups=["system:masters"])


# ------------------------------------------------------------------------------------------------ jobs


def peer_pytorchjob(
    peer: PeerName | Peer,
    name: str,
    namespace: str,
    replicas: int,
    *,
    host_network: bool = False,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    """A PyTorchJob of the peer's API: Master 1 and Worker ``replicas - 1``, image busybox running ``train`` (the
    simulated nodes only pretend to run it). ``host_network`` (KubeDL only) sets ``kubedl.io/network-mode: host``.

    ``restart_policy`` of every replica (None: the peer's default; the Training Operator's is OnFailure,
    KubeDL's OnFailure for Workers and ExitCode for the Master). Only ``ExitCode`` makes either peer replace a
    deleted pod: the pod ends Failed with exit code 143 while it terminates, which both count as a retryable
    failure under ExitCode and as the job's failure under OnFailure (a kubelet restarts OnFailure containers
    in place; a deleted pod is not restarted by anyone)."""
    chosen = get_peer(peer)
    if replicas < 1:
        raise ValueError(f"a PyTorchJob needs at least its Master (replicas={replicas})")
    if host_network and chosen.name != "kubedl":
        raise ValueError(f"{chosen.name} has no host-network mode")

    def replica_spec(count: int) -> dict[str, Any]:
        container = {
            "name": CONTAINER,
            "image": "busybox",
            "command": ["train"],
            "ports": [{"name": PORT_NAME, "containerPort": PORT}],
        }
        spec: dict[str, Any] = {"replicas": count, "template": {"spec": {"containers": [container]}}}
        if restart_policy is not None:
            spec["restartPolicy"] = restart_policy
        return spec

    specs = {"Master": replica_spec(1)}
    if replicas > 1:
        specs["Worker"] = replica_spec(replicas - 1)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if host_network:
        metadata["annotations"] = {HOST_NETWORK_ANNOTATION: "host"}
    return {
        "apiVersion": chosen.job.api_version,
        "kind": chosen.job.kind,
        "metadata": metadata,
        "spec": {"pytorchReplicaSpecs": specs},
    }


def job_condition(job: dict[str, Any], kind: str) -> bool:
    """Whether the job's status has condition ``kind`` (``Running``, ``Succeeded``...) with status True."""
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


# ------------------------------------------------------------------------------------------------ running


@dataclass
class PeerProcess:
    """A running peer: its process, log and the settings it was started with."""

    peer: Peer
    process: asyncio.subprocess.Process
    log_path: Path
    argv: list[str]
    #: the environment variables set for it (besides the inherited ones)
    environment: dict[str, str]
    #: the effective client-side rate limit and reconcile workers of this run
    qps: float
    burst: int
    workers: int

    @property
    def name(self) -> PeerName:
        return self.peer.name

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.returncode is None


@contextlib.asynccontextmanager
async def run_peer(
    peer: PeerName | Peer,
    kubeconfig: Path,
    log_dir: Path,
    *,
    qps: float | None = None,
    burst: int | None = None,
    workers: int | None = None,
    setup_kubeconfig: Path | None = None,
    start_timeout: float = 120.0,
) -> AsyncIterator[PeerProcess]:
    """Run the peer (built first if needed) against ``kubeconfig`` until the block ends; yields once it reconciles.

    Its CRDs must be installed first (:func:`install_peer_crds`). ``qps``/``burst`` raise its client-side rate
    limit (None: as shipped; the Training Operator's flags take whole numbers, and a QPS <= 0 means no limit for
    KubeDL only); ``workers`` sets its concurrent reconciles (None: as shipped, 1 for both).
    ``setup_kubeconfig`` is the identity that does the platform's part (the Training Operator's namespace,
    empty webhook Secret and the copy of its keys to disk); default ``kubeconfig``. The log is
    ``log_dir/<peer>.log`` (appended to).
    """
    chosen = get_peer(peer)
    built = await asyncio.to_thread(ensure_program, chosen.program)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{chosen.name}.log"
    deadline = time.monotonic() + start_timeout
    metrics_port, health_port, extra_port = _free_ports(3)
    environment = {"KUBECONFIG": str(kubeconfig)}
    mirror: asyncio.Task[None] | None = None
    claimed = False
    if chosen.name == "training-operator":
        argv = [
            str(built[chosen.command]),
            "--enable-scheme=pytorchjob",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            f"--webhook-server-port={extra_port}",
        ]
        if qps is not None:
            if qps <= 0 or not float(qps).is_integer():
                raise ValueError(f"the Training Operator's --kube-api-qps takes a positive whole number, not {qps}")
            argv.append(f"--kube-api-qps={int(qps)}")
        if burst is not None:
            argv.append(f"--kube-api-burst={burst}")
        if workers is not None:
            argv.append(f"--controller-threads={workers}")
        environment["MY_POD_NAMESPACE"] = TRAINING_OPERATOR_NAMESPACE
        async with KubeClient(kubeconfig=setup_kubeconfig or kubeconfig) as kube:
            await _prepare_training_operator(kube)
        _CERT_DIR.claim()
        claimed = True
        mirror = asyncio.create_task(
            _mirror_secret(setup_kubeconfig or kubeconfig, TRAINING_OPERATOR_CERT_DIR),
            name="training-operator-cert-mount",
        )
        health_url: str | None = f"http://127.0.0.1:{health_port}/readyz"
    else:
        argv = [
            str(built[chosen.command]),
            "--workloads=PyTorchJob",
            # As shipped (alpha, on) it crashes KubeDL on every job's first update out of its queue (module docstring).
            "--feature-gates=JobCoordinator=false",
            "--enable-leader-election=false",
            f"--controller-metrics-addr=127.0.0.1:{metrics_port}",
            f"--metrics-addr={extra_port}",
        ]
        if workers is not None:
            argv.append(f"--max-reconciles={workers}")
        if qps is not None:
            environment[QPS_ENV] = repr(float(qps))
        if burst is not None:
            environment[BURST_ENV] = str(int(burst))
        health_url = None
    process: asyncio.subprocess.Process | None = None
    try:
        offset = log_path.stat().st_size if log_path.exists() else 0
        process = await _spawn(argv, environment, log_path)
        running = PeerProcess(
            peer=chosen,
            process=process,
            log_path=log_path,
            argv=argv,
            environment=environment,
            qps=chosen.shipped_qps if qps is None else float(qps),
            burst=chosen.shipped_burst if burst is None else int(burst),
            workers=chosen.shipped_workers if workers is None else workers,
        )
        started = time.monotonic()
        await _wait_ready(running, offset, health_url, deadline, mirror)
        log.info(
            "%s@%s ready in %.1fs (pid %s, log %s)",
            chosen.program.module,
            chosen.program.version,
            time.monotonic() - started,
            process.pid,
            log_path,
        )
        yield running
    finally:
        if mirror is not None:
            mirror.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await mirror
        await stop_process(process, f"{chosen.name} (log {log_path})", grace=15)
        if claimed:
            _CERT_DIR.release()


#: what would change a peer's behaviour from outside: its namespace, workload and rate-limit switches, and
#: TMPDIR (the Training Operator's webhook server reads its certificate under it)
_NOT_INHERITED: Final = frozenset(
    {"KUBEFLOW_NAMESPACE", "WORKLOADS_ENABLE", "KUBEDL_CI", "MY_POD_NAMESPACE", "TMPDIR", QPS_ENV, BURST_ENV}
)


async def _spawn(argv: list[str], environment: dict[str, str], log_path: Path) -> asyncio.subprocess.Process:
    inherited = {key: value for key, value in os.environ.items() if key not in _NOT_INHERITED}
    header = f"# kubedl-py: {' '.join(argv)} ({', '.join(f'{k}={v}' for k, v in environment.items())})\n"
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(log_fd, header.encode())
    finally:
        os.close(log_fd)
    return await start_process(argv, log_path, {**inherited, **environment})


async def _wait_ready(
    running: PeerProcess,
    offset: int,
    health_url: str | None,
    deadline: float,
    mirror: asyncio.Task[None] | None,
) -> None:
    """Until its PyTorchJob controller has started its workers (and ``health_url`` answers 200, when given)."""
    name = running.peer.name

    def failure(what: str) -> PeerError:
        return PeerError(f"{name} {what}; log {running.log_path}:\n{log_tail(running.log_path)}")

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while True:
            if running.process.returncode is not None:
                raise failure(f"exited with code {running.process.returncode} while starting")
            if mirror is not None and mirror.done() and not mirror.cancelled() and mirror.exception() is not None:
                raise failure(f"could not copy its webhook certificate: {mirror.exception()!r}")
            if _logged(running.log_path, offset, running.peer.ready_line) and await _answers(session, health_url):
                return
            if time.monotonic() > deadline:
                raise failure("did not start its PyTorchJob controller in time")
            await asyncio.sleep(0.1)


def _logged(path: Path, offset: int, pattern: re.Pattern[str]) -> bool:
    try:
        with open(path, errors="replace") as handle:
            handle.seek(offset)
            return pattern.search(handle.read()) is not None
    except OSError:
        return False


async def _answers(session: aiohttp.ClientSession, url: str | None) -> bool:
    if url is None:
        return True
    try:
        async with session.get(url) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def _prepare_training_operator(kube: KubeClient) -> None:
    """What its install creates before it starts: its namespace and the empty Secret its rotator fills."""
    with contextlib.suppress(AlreadyExists):
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TRAINING_OPERATOR_NAMESPACE}}
        )
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": TRAINING_OPERATOR_SECRET, "namespace": TRAINING_OPERATOR_NAMESPACE},
    }
    with contextlib.suppress(AlreadyExists):
        await kube.create(SECRETS, secret, namespace=TRAINING_OPERATOR_NAMESPACE)


async def _mirror_secret(kubeconfig: Path, directory: Path) -> None:
    """The kubelet's part of the Training Operator's Secret volume: once its rotator has filled the Secret, write
    ``tls.key`` and ``tls.crt`` into ``directory`` (each atomically). Once is enough: the certificate it issues
    lasts years, and no webhook configuration sends it requests."""
    async with KubeClient(kubeconfig=kubeconfig) as kube:
        while True:
            try:
                secret = await kube.get(SECRETS, TRAINING_OPERATOR_SECRET, namespace=TRAINING_OPERATOR_NAMESPACE)
            except KubeError as exc:
                log.debug("reading the Training Operator's webhook Secret: %s", exc)
                secret = {}
            data: dict[str, str] = secret.get("data") or {}
            if "tls.crt" in data and "tls.key" in data:
                break
            await asyncio.sleep(0.1)
    await asyncio.to_thread(
        _write_keys, directory, {key: base64.b64decode(data[key]) for key in ("tls.key", "tls.crt")}
    )


def _write_keys(directory: Path, keys: dict[str, bytes]) -> None:
    """Write each key file atomically, in order (the key first: the rotator waits for tls.crt, then the webhook
    server reads both)."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in keys.items():
        partial = directory / f".{key}.{os.getpid()}.tmp"
        partial.touch(mode=0o600)
        partial.write_bytes(value)
        partial.replace(directory / key)


def main() -> int:
    try:
        ensure_peers()
    except BuildError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
