"""Real gang schedulers beside the real control plane: scheduler-plugins' Coscheduling and Volcano's scheduler.

Why: the controller's gang step (``controllers/gang.py``) only makes PodGroups and points pods at them; that a
job then gets all of its pods or none is the scheduler's promise, and only the real scheduler can show it
keeps that promise for the PodGroups we make. Both are built from their published Go modules at the versions
pinned in ``kubedl_local/pins.py`` (built by ``kubedl_local/kubernetes/programs.py``; nothing of theirs is
committed), their CRDs are installed from the module's own files, and they run as subprocesses against a
kubeconfig, logging into a file:

- scheduler-plugins runs as a second scheduler named ``scheduler-plugins-scheduler`` (a kube-scheduler
  profile with the Coscheduling plugin as its queue sort and on every extension point); ready when its
  ``/readyz`` answers, which waits for its informers to sync. Its PodGroup controller runs beside it, as its
  installation has it: Coscheduling re-tries a gang it refused only when a pod is added or a PodGroup changes,
  and the controller's PodGroup status writes are what tell it that another gang has finished;
- Volcano's scheduler runs with the ``enqueue`` and ``allocate`` actions and the ``gang`` plugin, scheduler
  name ``volcano``. vc-controller-manager is not needed for PodGroups made by a controller: the scheduler
  itself creates the ``root`` and ``default`` queues and writes PodGroup phases; the one thing only the
  controller-manager's queue controller would do, setting a queue's ``status.state`` to ``Open`` (the
  ``proportion`` plugin refuses jobs of a queue that is not), is done here through the status subresource.
  Its informers include HyperNodes and Numatopologies, so those CRDs are installed too (without them its
  cache never syncs). Ready when it logs that its cache synced and it starts to schedule.

Leader election is off for both (each test starts its own). ``node_selector`` confines Volcano to some nodes
(its ``--node-selector``): it counts every node it sees into the cluster's capacity when it decides whether
a PodGroup may be enqueued, and a shared test cluster has nodes that are not the test's.

``python -m harness.schedulers`` builds both (``make test`` runs it before pytest).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Final

import aiohttp
import yaml

from kubedl_local.kubernetes.binaries import BuildError, Progress, _duration, _stderr
from kubedl_local.kubernetes.controlplane import log_tail, start_process, stop_process
from kubedl_local.kubernetes.install import FIELD_MANAGER
from kubedl_local.kubernetes.programs import BuiltProgram, GoProgram, ensure_program, find_program, module_source
from kubedl_local.pins import SCHEDULER_PLUGINS_VERSION, VOLCANO_VERSION
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import AlreadyExists, NotFound
from kubedl_py.kube.resources import Resource

log = logging.getLogger(__name__)

CRDS: Final = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)
VOLCANO_QUEUES: Final = Resource("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False)

#: k8s.io modules scheduler-plugins pins at v0.34.7 that the module proxy here lacks (no .mod, no .zip or no
#: checksum-database entry), each replaced by the newest v0.34 patch it serves completely
_PLUGINS_STAND_INS: Final = (
    "cli-runtime",
    "cluster-bootstrap",
    "code-generator",
    "cri-client",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kubectl",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
)

SCHEDULER_PLUGINS: Final = GoProgram(
    name="scheduler-plugins",
    module="sigs.k8s.io/scheduler-plugins",
    version=f"v{SCHEDULER_PLUGINS_VERSION}",
    commands={
        "kube-scheduler": "sigs.k8s.io/scheduler-plugins/cmd/scheduler",
        # its PodGroup controller: writes PodGroup status, whose updates re-queue the gangs Coscheduling refused
        "controller": "sigs.k8s.io/scheduler-plugins/cmd/controller",
    },
    replaces={f"k8s.io/{name}": "v0.34.3" for name in _PLUGINS_STAND_INS},
)
VOLCANO: Final = GoProgram(
    name="volcano",
    module="volcano.sh/volcano",
    version=f"v{VOLCANO_VERSION}",
    commands={"vc-scheduler": "volcano.sh/volcano/cmd/scheduler"},
    # Its go.mod requires volcano.sh/apis v0.0.0 and replaces it with a directory of its repository; the
    # published v1.14.0 is that API as of this release. (Volcano v1.15.x needs volcano.sh/apis v1.15.x,
    # which the proxy mirror lacks, and does not compile against v1.14.0: QueueAllocationGateKey.)
    replaces={"volcano.sh/apis": "v1.14.0"},
)
PROGRAMS: Final[dict[str, GoProgram]] = {"scheduler-plugins": SCHEDULER_PLUGINS, "volcano": VOLCANO}


class SchedulerError(RuntimeError):
    """A scheduler failed to start or to become ready; the message names its log."""


def scheduler_crds(program: GoProgram, files: tuple[str, ...]) -> list[dict[str, Any]]:
    """The CRDs ``files`` (paths inside the module) of ``program``, read from Go's module cache."""
    root = module_source(program)
    documents: list[dict[str, Any]] = []
    for name in files:
        documents += [doc for doc in yaml.safe_load_all((root / name).read_text()) if doc]
    return documents


async def install_scheduler_crds(kube: KubeClient, crds: list[dict[str, Any]], *, within: float = 60.0) -> None:
    """Server-side apply the CRDs and wait until each kind is served (in its scope)."""
    for crd in crds:
        await kube.patch(
            CRDS, crd["metadata"]["name"], crd, patch_type="apply", field_manager=FIELD_MANAGER, force=True
        )
    deadline = time.monotonic() + within
    for crd in crds:
        spec = crd["spec"]
        served = next(v["name"] for v in spec["versions"] if v.get("served"))
        resource = Resource(
            spec["group"], served, spec["names"]["plural"], spec["names"]["kind"], spec["scope"] == "Namespaced"
        )
        while True:
            try:
                await kube.list(resource, namespace="default" if resource.namespaced else None)
                break
            except NotFound:
                if time.monotonic() > deadline:
                    raise SchedulerError(f"the API server did not serve {resource} within {within:g}s") from None
                await asyncio.sleep(0.05)


class GangSchedulerProcess:
    """One gang scheduler subprocess: ``async with`` it, or :meth:`start` / :meth:`stop`."""

    program: ClassVar[GoProgram]
    command: ClassVar[str]
    #: the ``schedulerName`` its pods carry
    scheduler_name: ClassVar[str]
    crd_files: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        kubeconfig: Path,
        work_dir: Path,
        *,
        node_selector: Mapping[str, str] | None = None,
        start_timeout: float = 120.0,
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.dir = Path(work_dir)
        self.node_selector = dict(node_selector or {})
        self.start_timeout = start_timeout
        self.log_path = self.dir / f"{self.program.name}.log"
        self.process: asyncio.subprocess.Process | None = None
        #: (name, process) of what runs beside the scheduler (:meth:`start_companions`), stopped before it
        self.companions: list[tuple[str, asyncio.subprocess.Process]] = []

    async def __aenter__(self) -> GangSchedulerProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Build (once), install the CRDs, write the configuration, start, and wait until it schedules."""
        built = await asyncio.to_thread(ensure_program, self.program)
        crds = await asyncio.to_thread(scheduler_crds, self.program, self.crd_files)
        self.dir.mkdir(parents=True, exist_ok=True)
        async with KubeClient(kubeconfig=self.kubeconfig) as kube:
            await install_scheduler_crds(kube, crds)
            await self.prepare(kube)
        self.process = await start_process(self.arguments(built), self.log_path, self.environment())
        started = time.monotonic()
        try:
            await self._wait_ready()
            await self.start_companions(built)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "%s@%s ready in %.1fs (scheduler name %s, log %s)",
            self.program.module,
            self.program.version,
            time.monotonic() - started,
            self.scheduler_name,
            self.log_path,
        )

    async def stop(self, grace: float = 10.0) -> None:
        for name, companion in reversed(self.companions):
            await stop_process(companion, f"{name} of {self.program.name}", grace)
        self.companions = []
        process, self.process = self.process, None
        await stop_process(process, f"{self.program.name} (log {self.log_path})", grace)

    # ------------------------------------------------------------------------------------ per scheduler

    def arguments(self, built: BuiltProgram) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    async def prepare(self, kube: KubeClient) -> None:
        """Objects the scheduler needs before it starts (none by default)."""

    async def start_companions(self, built: BuiltProgram) -> None:
        """Start what the scheduler relies on beside it, once it is ready (nothing by default); append each to
        :attr:`companions`."""

    async def ready(self) -> bool:
        raise NotImplementedError

    async def _wait_ready(self) -> None:
        await _wait_started(self.process, self.ready, self.program.name, self.log_path, self.start_timeout)


async def _wait_started(
    process: asyncio.subprocess.Process | None,
    ready: Callable[[], Awaitable[bool]],
    name: str,
    log_path: Path,
    within: float,
) -> None:
    """Until ``ready()``; a process that exits first, or ``within`` seconds passed, raises with its log's tail."""
    deadline = time.monotonic() + within
    while True:
        if process is not None and process.returncode is not None:
            raise SchedulerError(
                f"{name} exited with code {process.returncode} while starting; log {log_path}:\n{log_tail(log_path)}"
            )
        if await ready():
            return
        if time.monotonic() > deadline:
            raise SchedulerError(f"{name} was not ready within {within:g}s; log {log_path}:\n{log_tail(log_path)}")
        await asyncio.sleep(0.2)


class SchedulerPlugins(GangSchedulerProcess):
    """scheduler-plugins' kube-scheduler as a second scheduler with the Coscheduling plugin."""

    program = SCHEDULER_PLUGINS
    command = "kube-scheduler"
    scheduler_name = "scheduler-plugins-scheduler"
    #: ElasticQuotas too: its controller watches them (without the CRD its manager does not start)
    crd_files = (
        "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml",
        "config/crd/bases/scheduling.x-k8s.io_elasticquotas.yaml",
    )
    #: how long a gang's first pods wait at Permit for the rest before the group is rejected and retried
    permit_waiting_seconds = 10
    #: how long a refused pod may wait in the unschedulable queue before it is re-tried anyway (``arguments``)
    unschedulable_flush_seconds = 30
    #: what its controller logs once its PodGroup informers have synced and it reconciles
    CONTROLLER_READY: ClassVar[tuple[str, str]] = ("Starting workers", "podgroup")

    def __init__(self, kubeconfig: Path, work_dir: Path, **options: Any) -> None:
        super().__init__(kubeconfig, work_dir, **options)
        self.port = _free_port()
        self.controller_log = self.dir / f"{self.program.name}-controller.log"

    async def start_companions(self, built: BuiltProgram) -> None:
        """Its PodGroup controller, as scheduler-plugins installs it beside the scheduler. Coscheduling re-tries
        a gang it refused only on a new pod or a PodGroup change (its ``EventsToRegister``), not when other pods
        end; the controller's status writes (a finished gang's PodGroup turns Finished) are that change.
        Without it a refused gang waits for the scheduler's flush of unschedulable pods (5 minutes by default,
        :attr:`unschedulable_flush_seconds` here)."""
        argv = [
            str(built["controller"]),
            f"--metricsAddr=127.0.0.1:{_free_port()}",
            f"--probeAddr=127.0.0.1:{_free_port()}",
            "--enableLeaderElection=false",
        ]
        environment = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        process = await start_process(argv, self.controller_log, environment)
        self.companions.append(("controller", process))
        name = f"{self.program.name}'s controller"
        await _wait_started(process, self._controller_ready, name, self.controller_log, self.start_timeout)

    async def _controller_ready(self) -> bool:
        try:
            lines = self.controller_log.read_text(errors="replace").splitlines()
        except OSError:
            return False
        return any(all(part in line for part in self.CONTROLLER_READY) for line in lines)

    def configuration(self) -> dict[str, Any]:
        return {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "profiles": [
                {
                    "schedulerName": self.scheduler_name,
                    "plugins": {
                        # Coscheduling orders the queue (a gang's pods together) and adds PreFilter, PostFilter,
                        # Permit and Reserve to the default plugins.
                        "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                        "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
                    },
                    "pluginConfig": [
                        {"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": self.permit_waiting_seconds}}
                    ],
                }
            ],
        }

    def arguments(self, built: BuiltProgram) -> list[str]:
        config = self.dir / "scheduler-plugins.yaml"
        config.write_text(yaml.safe_dump(self.configuration(), sort_keys=False))
        return [
            str(built[self.command]),
            f"--config={config}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.dir / 'certs'}",
            "--profiling=false",
            # Refused pods wait at most this long for an event that re-tries them (default 5 minutes). The
            # controller's PodGroup status writes are that event when a gang finishes, but kubedl-py deletes a
            # finished job's PodGroup and can do so before the controller's last write lands (its write then
            # fails, no update is seen); on a busy cluster any new pod is such an event too, on a test's
            # quiet one nothing else is. Deprecated flag, still served by kube-scheduler 1.34.
            f"--pod-max-in-unschedulable-pods-duration={self.unschedulable_flush_seconds}s",
        ]

    async def ready(self) -> bool:
        # /readyz includes the check that its informers (PodGroups among them) have synced.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # its serving certificate is self-signed at start
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
                session.get(f"https://127.0.0.1:{self.port}/readyz", ssl=context) as response,
            ):
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False


class Volcano(GangSchedulerProcess):
    """Volcano's scheduler (vc-scheduler) with the gang plugin; no vc-controller-manager (module docstring)."""

    program = VOLCANO
    command = "vc-scheduler"
    scheduler_name = "volcano"
    crd_files = (
        "config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml",
        "config/crd/volcano/bases/scheduling.volcano.sh_queues.yaml",
        "config/crd/volcano/bases/topology.volcano.sh_hypernodes.yaml",
        "config/crd/volcano/bases/nodeinfo.volcano.sh_numatopologies.yaml",
    )
    #: what it logs once its cache has synced, right before its first scheduling cycle
    READY_LINE: ClassVar[str] = "Scheduler completes Initialization and start to run"
    #: the queues it schedules from (it would create them itself, without a state)
    QUEUES: ClassVar[tuple[str, ...]] = ("root", "default")

    def __init__(self, kubeconfig: Path, work_dir: Path, *, schedule_period: float = 0.5, **options: Any) -> None:
        super().__init__(kubeconfig, work_dir, **options)
        self.schedule_period = schedule_period
        self.healthz_port, self.metrics_port = _free_port(), _free_port()

    @staticmethod
    def configuration() -> str:
        conf = {
            # Volcano's default actions: allocate skips pods without requests (BestEffort), backfill places them
            "actions": "enqueue, allocate, backfill",
            "tiers": [
                {"plugins": [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]},
                {
                    "plugins": [
                        # 1.0: a PodGroup is enqueued only when its minResources fit the idle capacity as it is
                        {"name": "overcommit", "arguments": {"overcommit-factor": 1.0}},
                        {"name": "predicates"},
                        {"name": "proportion"},
                        {"name": "nodeorder"},
                    ]
                },
            ],
        }
        return yaml.safe_dump(conf, sort_keys=False)

    def arguments(self, built: BuiltProgram) -> list[str]:
        # A directory of its own: vc-scheduler watches the configuration's directory and reloads on every write
        # there, so its own log beside it made it reload once per line it logged, for ever (2 million reloads
        # in 5 minutes, the scheduling cycles starved: no group was ever enqueued).
        config = self.dir / "conf" / "volcano-scheduler.conf"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(self.configuration())
        return [
            str(built[self.command]),
            f"--kubeconfig={self.kubeconfig}",
            f"--scheduler-conf={config}",
            f"--scheduler-name={self.scheduler_name}",
            "--disable-default-scheduler-config=true",  # a bad configuration fails instead of being replaced
            "--leader-elect=false",
            f"--schedule-period={self.schedule_period:g}s",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{self.healthz_port}",
            f"--listen-address=127.0.0.1:{self.metrics_port}",
            "--cache-dumper=false",
            *(f"--node-selector={key}:{value}" for key, value in self.node_selector.items()),
            "--logtostderr=true",
            "--v=2",  # the readiness line is logged at level 2
        ]

    def environment(self) -> dict[str, str]:
        # Its log-level control socket, in /tmp/klog-socks unless told: one per scheduler, in its own directory.
        return {**os.environ, "DEBUG_SOCKET_DIR": str(self.dir / "sockets")}

    async def prepare(self, kube: KubeClient) -> None:
        for name in self.QUEUES:
            body = {
                "apiVersion": VOLCANO_QUEUES.api_version,
                "kind": VOLCANO_QUEUES.kind,
                "metadata": {"name": name},
                "spec": {"weight": 1, "reclaimable": name != "root"},
            }
            with contextlib.suppress(AlreadyExists):
                await kube.create(VOLCANO_QUEUES, body)
            await kube.patch_status(VOLCANO_QUEUES, name, {"status": {"state": "Open"}})

    async def ready(self) -> bool:
        try:
            return self.READY_LINE in self.log_path.read_text(errors="replace")
        except OSError:
            return False


SCHEDULERS: Final[dict[str, type[GangSchedulerProcess]]] = {"scheduler-plugins": SchedulerPlugins, "volcano": Volcano}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build_all(progress: Progress | None = None) -> dict[str, BuiltProgram]:
    """Build (or find) every pinned gang scheduler, saying how long each took."""
    say = progress or _stderr
    built: dict[str, BuiltProgram] = {}
    for name, program in PROGRAMS.items():
        started = time.monotonic()
        cached = find_program(program) is not None
        built[name] = ensure_program(program, progress=say)
        how = "cached" if cached else f"built in {_duration(time.monotonic() - started)}"
        say(f"{program.module}@{program.version}: {built[name][next(iter(program.commands))]} ({how})")
    return built


def main() -> int:
    try:
        build_all()
    except BuildError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
