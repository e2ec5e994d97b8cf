"""Kueue, the Kubernetes job-queueing controller, built from its Go module and run beside the real control plane.

Why: Kueue is the quota and queueing layer most users put in front of training operators. It admits a
Kubeflow job by flipping ``spec.runPolicy.suspend`` and evicts it by flipping it back, so whether kubedl-py
works under Kueue is decided by how our controller handles suspend/resume, and only a real Kueue (a peer
under test, not our code) can judge that. It is built by name and pinned version (``kubedl_local/pins.py``)
with :mod:`kubedl_local.kubernetes.programs`, like the control plane; nothing of Kueue is committed.

How it is installed, from the module's own files: its CRDs (``config/components/crd/bases``, with the
conversion webhooks its kustomization patches in), its webhook configurations (``config/components/webhook``)
trimmed to the core objects and the enabled integrations, a ``Configuration`` written here, and the manager
process started with the administrator's kubeconfig.

Webhooks, on a control plane that runs as host processes: Kueue's mutating webhook is what suspends a new
job carrying ``kueue.x-k8s.io/queue-name``, so it must work. Two ways were weighed:

- ``url: https://127.0.0.1:<port>`` with a serving certificate of ours and Kueue's internal certificate
  management off: Kueue (v0.19) then insists on a metrics certificate at the fixed path
  ``/etc/kueue/metrics/certs/tls.crt`` and exits without it; a launcher must not write to /etc.
- a ``service`` reference, as Kueue's own install does, with Kueue's internal certificate management on (it
  issues a certificate for ``kueue-webhook-service.kueue-system.svc`` and injects its CA into the webhook
  configurations and CRDs). The API server does not resolve a Service reference through DNS: it dials the
  Service's ClusterIP, and this control plane's Service range is in 127/8 (``controlplane.py``), which is
  loopback on Linux. So Kueue's webhook server binds exactly that ClusterIP, and the API server reaches it
  with the server name the certificate carries. This is the way taken.

Kueue's rotator keeps the certificate in a Secret and expects the kubelet to mount it where the webhook
server reads it (``webhook.certDir``); with no pod here, :class:`Kueue` does the kubelet's part and copies
the Secret's keys into that directory as they change.

:meth:`Kueue.stop` deletes the webhook configurations before it stops the process: they fail closed, and a
shared cluster must not refuse every Kubeflow job once Kueue is gone.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from kubedl_local.kubernetes.binaries import BuildError
from kubedl_local.kubernetes.controlplane import _free_ports, log_tail, start_process, stop_process
from kubedl_local.kubernetes.programs import GoProgram, ensure_program, module_source
from kubedl_local.pins import KUEUE_VERSION
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import AlreadyExists, KubeError, NotFound
from kubedl_py.kube.resources import NAMESPACES, SECRETS, SERVICES, Resource

log = logging.getLogger(__name__)

KUEUE = GoProgram(
    name="kueue",
    module="sigs.k8s.io/kueue",
    version=f"v{KUEUE_VERSION}",
    commands={"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
    ldflags=f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v{KUEUE_VERSION}",
    # sigs.k8s.io/scheduler-library's pre-release has no record in the checksum database mirrored here
    seed_go_sum=True,
)

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
#: the label that puts a job in a LocalQueue (Kueue's webhook suspends such a job at creation)
QUEUE_LABEL = f"{GROUP}/queue-name"
#: the label that gives a job a WorkloadPriorityClass
PRIORITY_CLASS_LABEL = f"{GROUP}/priority-class"
#: the integrations enabled by default: what kubedl-py serves under ``--kubeflow-api`` and Kueue handles
DEFAULT_INTEGRATIONS = ("kubeflow.org/pytorchjob", "kubeflow.org/tfjob")

NAMESPACE = "kueue-system"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
#: the names Kueue's certificate rotator injects its CA into (``<service base>-<type>-webhook-configuration``)
MUTATING_WEBHOOKS = "kueue-mutating-webhook-configuration"
VALIDATING_WEBHOOKS = "kueue-validating-webhook-configuration"
#: the CRDs whose conversion webhook Kueue's kustomization enables (the rotator waits to inject all of them)
CONVERSION_CRDS = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
FIELD_MANAGER = "kubedl-py-kueue"

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
MUTATING = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False
)
VALIDATING = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False
)
RESOURCE_FLAVORS = Resource(GROUP, VERSION, "resourceflavors", "ResourceFlavor", namespaced=False)
CLUSTER_QUEUES = Resource(GROUP, VERSION, "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = Resource(GROUP, VERSION, "localqueues", "LocalQueue")
WORKLOADS = Resource(GROUP, VERSION, "workloads", "Workload")
WORKLOAD_PRIORITY_CLASSES = Resource(
    GROUP, VERSION, "workloadpriorityclasses", "WorkloadPriorityClass", namespaced=False
)


class KueueError(RuntimeError):
    """Kueue could not be installed or did not become ready; the message names its log."""


@dataclass
class KueueOptions:
    """How Kueue is configured."""

    #: ``integrations.frameworks`` of the Configuration (``kubeflow.org/pytorchjob``, ``pod``, ...)
    integrations: Sequence[str] = DEFAULT_INTEGRATIONS
    #: ``integrations.externalFrameworks``: ``Kind.version.group`` of jobs an external controller queues
    external_frameworks: Sequence[str] = ()
    #: where the configuration, certificates and log live; None: a temporary directory removed on stop
    data_dir: Path | None = None
    #: how long to wait for readiness (certificates issued and injected, webhooks answering)
    start_timeout: float = 120.0
    #: ``featureGates`` of the Configuration
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    #: more top-level Configuration fields (``waitForPodsReady``, ``fairSharing``, ...), merged over ours
    extra_config: Mapping[str, Any] = field(default_factory=dict)
    #: the manager's log verbosity (``--zap-log-level``)
    log_level: str = "info"


class Kueue:
    """Kueue's manager on a cluster; ``async with`` or start()/stop().

    ``kubeconfig`` is an administrator's: Kueue is a peer under test here, not a component whose RBAC is.
    """

    def __init__(self, kubeconfig: Path, options: KueueOptions | None = None, *, binary: Path | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.options = options or KueueOptions()
        self._binary = binary
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._mount: asyncio.Task[None] | None = None
        self._started = False
        self.dir = Path()
        #: the manager's health endpoint (``/healthz``, ``/readyz``)
        self.health_url = ""

    async def __aenter__(self) -> Kueue:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def log_path(self) -> Path:
        return self.dir / "kueue.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.returncode is None else None

    async def start(self) -> None:
        """Install Kueue's CRDs and webhooks, start the manager, return once it admits through its webhooks."""
        binary = self._binary or (await asyncio.to_thread(ensure_program, KUEUE))["kueue"]
        source = await asyncio.to_thread(module_source, KUEUE)
        self._started = True
        try:
            await self._start(binary, source)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, binary: Path, source: Path) -> None:
        started = time.monotonic()
        deadline = started + self.options.start_timeout
        if self.options.data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kubedl-kueue-")
            self.dir = Path(self._tmp.name)
        else:
            self.dir = Path(self.options.data_dir)
            self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "certs").mkdir(exist_ok=True)
        health_port, webhook_port = _free_ports(2)
        self.health_url = f"http://127.0.0.1:{health_port}"
        async with KubeClient(kubeconfig=self.kubeconfig) as kube:
            await _install_crds(kube, crd_documents(source, webhook_port=webhook_port), deadline)
            cluster_ip = await _install_webhook_endpoint(kube, webhook_port)
            for resource, document in webhook_configurations(
                source, self.options.integrations, port=webhook_port
            ).items():
                await kube.patch(
                    resource,
                    document["metadata"]["name"],
                    document,
                    patch_type="apply",
                    field_manager=FIELD_MANAGER,
                    force=True,
                )
            config = configuration(
                self.options,
                health_port=health_port,
                webhook_host=cluster_ip,
                webhook_port=webhook_port,
                cert_dir=self.dir / "certs",
            )
            config_path = self.dir / "config.yaml"
            config_path.write_text(yaml.safe_dump(config, sort_keys=False))
            await self._spawn(binary, config_path)
            self._mount = asyncio.create_task(self._mount_secret(self.dir / "certs"), name="kueue-cert-mount")
            await self._wait_ready(deadline)
            await self._wait_webhooks(kube, deadline)
        log.info(
            "Kueue %s ready in %.1fs (webhooks on %s:%s, log %s)",
            KUEUE.version,
            time.monotonic() - started,
            cluster_ip,
            webhook_port,
            self.log_path,
        )

    async def stop(self) -> None:
        """Remove the webhook configurations (they fail closed), stop the manager, drop the temporary data."""
        if not self._started:
            return
        self._started = False
        with contextlib.suppress(OSError, KubeError):
            async with KubeClient(kubeconfig=self.kubeconfig) as kube:
                for resource, name in ((MUTATING, MUTATING_WEBHOOKS), (VALIDATING, VALIDATING_WEBHOOKS)):
                    with contextlib.suppress(NotFound):
                        await kube.delete(resource, name)
        mount, self._mount = self._mount, None
        if mount is not None:
            mount.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await mount
        process, self._process = self._process, None
        await stop_process(process, f"Kueue (log {self.log_path})", grace=15)
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()
            self._tmp = None

    # ------------------------------------------------------------------------------------------ internals

    async def _spawn(self, binary: Path, config_path: Path) -> None:
        argv = [str(binary), f"--config={config_path}", f"--zap-log-level={self.options.log_level}"]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        self._process = await start_process(argv, self.log_path, env)
        log.debug("started Kueue (pid %s), log %s", self._process.pid, self.log_path)

    async def _mount_secret(self, cert_dir: Path) -> None:
        """The kubelet's part of a Secret volume: keep ``cert_dir`` equal to the rotator's Secret (each key a
        file, replaced atomically), checking often until the first certificate is there, then now and then."""
        written: dict[str, str] = {}
        async with KubeClient(kubeconfig=self.kubeconfig) as kube:
            while True:
                try:
                    secret = await kube.get(SECRETS, WEBHOOK_SECRET, namespace=NAMESPACE)
                except KubeError as exc:
                    log.debug("reading %s/%s: %s", NAMESPACE, WEBHOOK_SECRET, exc)
                    secret = {}
                data: dict[str, str] = secret.get("data") or {}
                for key, value in data.items():
                    if written.get(key) != value:
                        target = cert_dir / key
                        partial = target.with_name(f".{key}.tmp")
                        partial.touch(mode=0o600)
                        partial.write_bytes(base64.b64decode(value))
                        partial.replace(target)
                        written[key] = value
                await asyncio.sleep(5.0 if "tls.crt" in written else 0.2)

    def _failure(self, what: str) -> KueueError:
        return KueueError(f"Kueue {what}; log {self.log_path}:\n{log_tail(self.log_path)}")

    def _check_alive(self) -> None:
        process = self._process
        if process is not None and process.returncode is not None:
            raise self._failure(f"exited with code {process.returncode} while starting")

    async def _wait_ready(self, deadline: float) -> None:
        """``/readyz`` answers 200 once its certificates are issued and injected and the webhook server listens."""
        last = "no answer yet"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                self._check_alive()
                try:
                    async with session.get(f"{self.health_url}/readyz") as response:
                        if response.status == 200:
                            return
                        last = f"{response.status} {(await response.text())[:200]}"
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    last = repr(exc)
                if time.monotonic() > deadline:
                    raise self._failure(f"was not ready within {self.options.start_timeout:g}s ({last})")
                await asyncio.sleep(0.2)

    async def _wait_webhooks(self, kube: KubeClient, deadline: float) -> None:
        """A dry-run create goes through the API server's webhook calls: once one passes, jobs will be seen."""
        probe = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceFlavor",
            "metadata": {"name": "kubedl-py-webhook-probe"},
        }
        path = RESOURCE_FLAVORS.path()
        while True:
            self._check_alive()
            try:
                await kube.request("POST", path, query={"dryRun": "All"}, body=probe)
                return
            except AlreadyExists:
                return
            except KubeError as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise self._failure(
                    f"webhooks did not answer the API server within {self.options.start_timeout:g}s ({last[:300]})"
                )
            await asyncio.sleep(0.2)


# ------------------------------------------------------------------------------------ manifests


def crd_documents(source: Path, *, webhook_port: int) -> list[dict[str, Any]]:
    """Kueue's CRDs from the module, with the conversion webhook its own install patches into some of them."""
    documents = []
    for path in sorted((source / "config" / "components" / "crd" / "bases").glob("*.yaml")):
        crd: dict[str, Any] = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["plural"] in CONVERSION_CRDS:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"service": _service_ref("/convert", webhook_port)},
                    "conversionReviewVersions": ["v1"],
                },
            }
        documents.append(crd)
    if not documents:
        raise KueueError(f"no CRDs under {source}/config/components/crd/bases")
    return documents


def webhook_configurations(source: Path, integrations: Iterable[str], *, port: int) -> dict[Resource, dict[str, Any]]:
    """Kueue's mutating and validating webhook configurations, keeping the hooks of its own objects and of
    the enabled integrations (a hook of a disabled one has no handler behind it and would refuse those kinds),
    each pointing at :data:`WEBHOOK_SERVICE`. Job hooks skip kube-system and Kueue's namespace, as upstream."""
    path = source / "config" / "components" / "webhook" / "manifests.yaml"
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    wanted = [_integration_path(name) for name in integrations]
    system = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE]}
        ]
    }
    result: dict[Resource, dict[str, Any]] = {}
    for document in documents:
        resource, name = (
            (MUTATING, MUTATING_WEBHOOKS)
            if document["kind"] == "MutatingWebhookConfiguration"
            else (VALIDATING, VALIDATING_WEBHOOKS)
        )
        hooks = []
        for hook in document["webhooks"]:
            hook_path = hook["clientConfig"]["service"]["path"]
            own = f"-{GROUP.replace('.', '-')}-" in hook_path
            if not own and not any(pattern.search(hook_path) for pattern in wanted):
                continue
            kept = copy.deepcopy(hook)
            kept["clientConfig"] = {"service": _service_ref(hook_path, port)}
            if not own:
                kept["namespaceSelector"] = copy.deepcopy(system)
            hooks.append(kept)
        result[resource] = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": document["kind"],
            "metadata": {"name": name},
            "webhooks": hooks,
        }
    return result


def configuration(
    options: KueueOptions,
    *,
    health_port: int,
    webhook_host: str,
    webhook_port: int,
    cert_dir: Path,
) -> dict[str, Any]:
    """Kueue's ``Configuration`` (config.kueue.x-k8s.io/v1beta2): one replica, no leader election, everything
    on loopback, internal certificate management on (see the module docstring)."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": webhook_host, "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        "integrations": {"frameworks": list(options.integrations)},
    }
    if options.external_frameworks:
        config["integrations"]["externalFrameworks"] = list(options.external_frameworks)
    # The visibility server (on-demand pending-workload API) authenticates its callers by delegation, which
    # Kueue only configures from inside a pod (in-cluster config); outside one it exits the whole manager.
    config["featureGates"] = {"VisibilityOnDemand": False, **options.feature_gates}
    config.update(copy.deepcopy(dict(options.extra_config)))
    return config


def _service_ref(path: str, port: int) -> dict[str, Any]:
    return {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE, "path": path, "port": port}


def _integration_path(name: str) -> re.Pattern[str]:
    """The webhook path of an integration: ``kubeflow.org/pytorchjob`` -> ``/mutate-kubeflow-org-v1-pytorchjob``,
    ``pod`` -> ``/mutate--v1-pod``, ``batch/job`` -> ``/mutate-batch-v1-job``."""
    group, _, kind = name.rpartition("/")
    return re.compile(rf"^/(mutate|validate)-{re.escape(group.replace('.', '-'))}-v[0-9a-z]+-{re.escape(kind)}$")


async def _install_crds(kube: KubeClient, documents: list[dict[str, Any]], deadline: float) -> None:
    for crd in documents:
        await kube.patch(
            CRDS, crd["metadata"]["name"], crd, patch_type="apply", field_manager=FIELD_MANAGER, force=True
        )
    for crd in documents:
        names = crd["spec"]["names"]
        stored = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        resource = Resource(crd["spec"]["group"], stored, names["plural"], names["kind"])
        while True:
            try:
                await kube.list(resource, namespace="default" if crd["spec"]["scope"] == "Namespaced" else None)
                break
            except NotFound:
                if time.monotonic() > deadline:
                    raise KueueError(f"the API server does not serve {resource} after its CRD was applied") from None
                await asyncio.sleep(0.05)


async def _install_webhook_endpoint(kube: KubeClient, port: int) -> str:
    """Kueue's namespace, the Secret its rotator keeps the certificate in, and the webhook Service; returns
    the Service's ClusterIP (which Kueue's webhook server then binds: the API server dials it directly)."""
    with contextlib.suppress(AlreadyExists):
        await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    with contextlib.suppress(AlreadyExists):
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE}}
        await kube.create(SECRETS, secret, namespace=NAMESPACE)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE},
        "spec": {"type": "ClusterIP", "ports": [{"name": "webhook", "port": port, "targetPort": port}]},
    }
    applied = await kube.patch(
        SERVICES,
        WEBHOOK_SERVICE,
        service,
        namespace=NAMESPACE,
        patch_type="apply",
        field_manager=FIELD_MANAGER,
        force=True,
    )
    cluster_ip = str(applied["spec"].get("clusterIP") or "")
    if not cluster_ip.startswith("127."):
        raise KueueError(
            f"the webhook Service got ClusterIP {cluster_ip!r}: the API server (a host process) reaches a Service "
            "webhook only when the Service range is on loopback, as the local control plane's is"
        )
    return cluster_ip


# ------------------------------------------------------------------------------------ build entry point


def main() -> int:
    """``python -m harness.kueue``: build (or find) the pinned Kueue; print where it is."""
    try:
        built = ensure_program(KUEUE)
    except BuildError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return 1
    print(f"kubedl-py: Kueue {KUEUE.version} in {built['kueue'].parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
