"""The Python SDK: submit, inspect, wait for, read the logs of and delete training jobs.

Why a layer of its own: the Kubeflow training SDK that ML engineers know polls every 15 seconds, returns
untyped dicts and hides the API server's words behind generic exceptions. This one is typed (it returns the
pydantic models of :mod:`kubedl_py.api`), waits on a watch instead of polling, validates a job locally
before sending it (errors name the field), and maps API errors to a few exceptions that keep the server's
message.

:class:`AsyncTrainingClient` is the implementation; :class:`TrainingClient` is the same API for plain
(synchronous) code. The sync client runs its async twin on a private event loop in a daemon thread, so it
also works where an event loop is already running, as in a Jupyter notebook, where ``asyncio.run`` fails.

It talks to the cluster only through :class:`kubedl_py.kube.KubeClient` (raw dicts over HTTP) and never
imports the controller or the embedded cluster: the SDK works the same against any cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar, cast, overload

from kubedl_py.api import constants as c
from kubedl_py.api.common import JobCondition
from kubedl_py.api.jobs import JOB_MODELS, Job, PyTorchJob, TFJob
from kubedl_py.api.loading import load_jobs_file
from kubedl_py.api.validation import JobValidationError, parse_job, validate_job
from kubedl_py.kube import errors as kerrors
from kubedl_py.kube.client import ClientSettings, KubeClient, WatchEvent, in_cluster_available
from kubedl_py.kube.resources import EVENTS, PODS, SERVICES, Resource
from kubedl_py.kube.retry import backoff_delay, is_retryable

__all__ = [
    "CONDITION_TYPES",
    "AmbiguousJobError",
    "AsyncTrainingClient",
    "ClusterError",
    "ClusterUnreachableError",
    "ConfigurationError",
    "ForbiddenError",
    "InvalidJobError",
    "JobAlreadyExistsError",
    "JobDescription",
    "JobEndedError",
    "JobFailedError",
    "JobNotFoundError",
    "JobProgress",
    "JobTimeoutError",
    "JobValidationError",
    "LogLine",
    "PodInfo",
    "PyTorchJob",
    "ResolvedConfig",
    "TFJob",
    "TrainingClient",
    "TrainingError",
    "job_age",
    "job_state",
    "pytorch_job",
    "replica_counts",
    "resolve_config",
    "tf_job",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
#: a job model of any kind: ``submit`` gives back the same kind it was given
AnyJob = TypeVar("AnyJob", bound=Job)

PYTORCHJOBS: Final = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
TFJOBS: Final = Resource(c.GROUP, c.VERSION, c.TF_PLURAL, c.TF_KIND)
_RESOURCES: Final = {c.PYTORCH_KIND: PYTORCHJOBS, c.TF_KIND: TFJOBS}
_KIND_ALIASES: Final = {
    "pytorchjob": c.PYTORCH_KIND,
    "pytorchjobs": c.PYTORCH_KIND,
    "pytorch": c.PYTORCH_KIND,
    "tfjob": c.TF_KIND,
    "tfjobs": c.TF_KIND,
    "tf": c.TF_KIND,
    "tensorflow": c.TF_KIND,
}

#: the job condition types ``wait`` understands
CONDITION_TYPES: Final = ("Created", "Running", "Restarting", "Succeeded", "Failed")
_FINAL: Final = ("Succeeded", "Failed")
_SERVICE_ACCOUNT_NAMESPACE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
#: a watch that ends sooner than this without a single event failed (back off); one that lasted longer
#: ended normally (resume at once). The Informer's ``min_watch_duration``.
_MIN_WATCH_DURATION: Final = 1.0


# --------------------------------------------------------------------------------------------- errors


class TrainingError(Exception):
    """Root of every error the SDK raises (besides :class:`JobValidationError`, a ``ValueError``)."""


class ConfigurationError(TrainingError):
    """No usable cluster configuration: no kubeconfig, an unknown context, a missing file."""


class AmbiguousJobError(TrainingError):
    """Both a PyTorchJob and a TFJob have this name: pass ``kind=``."""


class ClusterError(TrainingError):
    """The API server refused a request, or could not be reached. ``str()`` is the server's own message."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", causes: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        #: the server's field errors (``kubedl_py.kube.errors.Cause``: ``.field``, ``.message``) on a 422
        self.causes = list(causes)


class JobNotFoundError(ClusterError, LookupError):
    """No such job (or pod) in the namespace (HTTP 404)."""


class JobAlreadyExistsError(ClusterError):
    """The name is taken (HTTP 409 AlreadyExists)."""


class InvalidJobError(ClusterError):
    """The API server rejected the object (HTTP 422); ``causes`` names the fields."""


class ForbiddenError(ClusterError, PermissionError):
    """RBAC said no (HTTP 403)."""


class ClusterUnreachableError(ClusterError, ConnectionError):
    """No HTTP answer: the API server is down, or the kubeconfig points at the wrong place."""


class JobFailedError(TrainingError):
    """The job reached ``Failed``; ``reason`` and ``message`` are those of its Failed condition."""

    def __init__(self, reason: str, message: str, job: Job) -> None:
        self.reason = reason
        self.message = message
        self.job = job
        super().__init__(f"{job.kind} {job.namespace}/{job.name} failed: {reason}: {message}")


class JobEndedError(TrainingError):
    """The job ended in a state the wait did not ask for (it succeeded while ``Failed`` was awaited);
    ``state`` is how it ended."""

    def __init__(self, message: str, job: Job, state: str) -> None:
        super().__init__(message)
        self.job = job
        self.state = state


class JobTimeoutError(TrainingError, TimeoutError):
    """``wait`` ran out of time. ``job`` is the last state seen (``None`` if the job was never seen).

    It is a :class:`TimeoutError`, so ``except TimeoutError`` catches it too.
    """

    def __init__(self, message: str, job: Job | None, state: str) -> None:
        super().__init__(message)
        self.job = job
        self.state = state


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """Turn the machinery's error tree into the SDK's, keeping the server's message."""
    try:
        yield
    except kerrors.KubeError as exc:
        raise _translate(exc) from exc


def _translate(exc: kerrors.KubeError, context: str = "") -> ClusterError:
    """The SDK's exception for a machinery error; ``context`` (what was being done) prefixes the message."""
    prefix = f"{context}: " if context else ""
    if isinstance(exc, kerrors.ApiError):
        error = _from_api_error(exc)
        if prefix:
            error = type(error)(prefix + error.message, status=error.status, reason=error.reason, causes=error.causes)
        return error
    return ClusterUnreachableError(f"{prefix}cannot reach the API server: {exc}")


def _from_api_error(exc: kerrors.ApiError) -> ClusterError:
    cls: type[ClusterError] = ClusterError
    if isinstance(exc, kerrors.NotFound):
        cls = JobNotFoundError
    elif isinstance(exc, kerrors.AlreadyExists):
        cls = JobAlreadyExistsError
    elif isinstance(exc, kerrors.Invalid):
        cls = InvalidJobError
    elif isinstance(exc, kerrors.Forbidden | kerrors.Unauthorized):
        cls = ForbiddenError
    return cls(exc.message, status=exc.status, reason=exc.reason, causes=exc.causes)


# ------------------------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class ResolvedConfig:
    """Where the client connects: kubeconfig path(s) and context, or in-cluster; and the namespace."""

    kubeconfig: str | None
    context: str | None
    namespace: str
    in_cluster: bool = False


def local_kubeconfig_path() -> Path:
    """Where ``kubedl-py local up`` writes its kubeconfig by default (see ``constants.LOCAL_KUBECONFIG``)."""
    return Path(os.path.expanduser(c.LOCAL_KUBECONFIG))


def resolve_config(
    kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None, namespace: str | None = None
) -> ResolvedConfig:
    """Find the cluster as kubectl does: ``kubeconfig``, else ``$KUBECONFIG`` (a path list), else
    ``~/.kube/config``, else the in-cluster service account. The namespace is ``namespace``, else the
    context's namespace, else ``default``. Raises :class:`ConfigurationError` saying what to do."""
    explicit = kubeconfig is not None
    paths = os.fspath(kubeconfig) if kubeconfig is not None else os.environ.get("KUBECONFIG") or "~/.kube/config"
    candidates = [os.path.expanduser(p) for p in paths.split(os.pathsep) if p]
    existing = [p for p in candidates if os.path.isfile(p)]
    if explicit and len(existing) < len(candidates):
        missing = next(p for p in candidates if p not in existing)
        raise ConfigurationError(f"kubeconfig {missing} does not exist")
    if not existing:
        if in_cluster_available():
            ns = namespace
            if ns is None:
                with contextlib.suppress(OSError):
                    ns = Path(_SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or None
            return ResolvedConfig(None, None, ns or "default", in_cluster=True)
        raise ConfigurationError(_no_cluster_message(candidates))
    from kubernetes_asyncio.config import kube_config

    joined = os.pathsep.join(existing)
    try:
        contexts, current = kube_config.list_kube_config_contexts(joined)
    except Exception as exc:  # the loader raises a zoo (ConfigException, KeyError, YAML errors)
        raise ConfigurationError(f"cannot read kubeconfig {joined}: {exc}") from exc
    chosen: Mapping[str, Any] | None = current
    if context is not None:
        chosen = next((ctx for ctx in contexts if ctx.get("name") == context), None)
        if chosen is None:
            names = ", ".join(str(ctx.get("name")) for ctx in contexts) or "none"
            raise ConfigurationError(f"context {context!r} not found in {joined} (contexts: {names})")
    if chosen is None:
        raise ConfigurationError(f"kubeconfig {joined} has no current-context: pass --context (or context=)")
    ns = namespace or (chosen.get("context") or {}).get("namespace") or "default"
    return ResolvedConfig(joined, str(chosen.get("name")) if context else None, str(ns))


def _no_cluster_message(looked: Sequence[str]) -> str:
    local = local_kubeconfig_path()
    where = " or ".join(looked) or "~/.kube/config"
    if local.is_file():
        return (
            f"no cluster configured (no kubeconfig at {where}); a `kubedl-py local up` cluster wrote {local}: "
            f"use --kubeconfig {local} or `export KUBECONFIG={local}`"
        )
    return (
        f"no cluster configured (no kubeconfig at {where}, not in a pod); pass --kubeconfig, set KUBECONFIG, "
        f"or start an embedded cluster with `kubedl-py local up --kubeconfig {local}`"
    )


# ------------------------------------------------------------------------------------ job helpers


def _kind(kind: str | None) -> str | None:
    if kind is None:
        return None
    canonical = _KIND_ALIASES.get(kind.lower().split(".")[0])
    if canonical is None:
        raise ValueError(f"unknown job kind {kind!r}: use PyTorchJob or TFJob")
    return canonical


def _model(obj: Mapping[str, Any]) -> Job:
    """A job from the server's answer (already validated when created; status may be anything)."""
    model = JOB_MODELS[str(obj.get("kind"))]
    return model.model_validate(dict(obj))


def _conditions(job: Job) -> list[JobCondition]:
    return list((job.status.conditions if job.status else None) or [])


def _true(job: Job, kind: str) -> JobCondition | None:
    return next((cond for cond in _conditions(job) if cond.type == kind and cond.status == "True"), None)


def job_state(job: Job) -> str:
    """The current state: the last condition that is True (as ``kubectl get`` shows it), else ``Pending``."""
    for cond in reversed(_conditions(job)):
        if cond.status == "True":
            return cond.type
    return "Pending"


def replica_counts(job: Job) -> tuple[int, int, int]:
    """Pods (active, succeeded, failed), summed over the replica types."""
    statuses = (job.status.replica_statuses if job.status else None) or {}
    return (
        sum(s.active or 0 for s in statuses.values()),
        sum(s.succeeded or 0 for s in statuses.values()),
        sum(s.failed or 0 for s in statuses.values()),
    )


def job_age(job: Job, now: datetime | None = None) -> float | None:
    """Seconds since the job was created, when the server said."""
    created = job.metadata.creation_timestamp
    if not created:
        return None
    try:
        when = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(((now or datetime.now(UTC)) - when).total_seconds(), 0.0)


@dataclass(frozen=True)
class JobProgress:
    """One observation of a job during :meth:`AsyncTrainingClient.wait`."""

    job: Job
    state: str
    active: int
    succeeded: int
    failed: int
    elapsed: float

    @classmethod
    def of(cls, job: Job, started: float) -> JobProgress:
        active, succeeded, failed = replica_counts(job)
        return cls(job, job_state(job), active, succeeded, failed, time.monotonic() - started)

    def __str__(self) -> str:
        return (
            f"{self.job.name}: {self.state}  replicas {self.active} active / {self.succeeded} succeeded / "
            f"{self.failed} failed  {self.elapsed:.0f}s"
        )


@dataclass(frozen=True)
class LogLine:
    """One line of a container's log; ``str()`` prefixes it with ``[pod]``."""

    pod: str
    text: str

    def __str__(self) -> str:
        return f"[{self.pod}] {self.text}"


@dataclass(frozen=True)
class PodInfo:
    """A pod of a job as ``describe`` shows it."""

    name: str
    replica_type: str
    index: int
    node: str
    phase: str
    restarts: int
    host_port: int | None
    service: str | None
    target_port: int | str | None


@dataclass(frozen=True)
class JobDescription:
    """Everything ``describe`` shows: the job, its pods and Services, and recent events (oldest first)."""

    job: Job
    pods: list[PodInfo] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ builders


def _resources(resources: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{"cpu": 2, "nvidia.com/gpu": 1}`` means requests = limits; ``{"requests": .., "limits": ..}`` as is."""
    if not resources:
        return None
    if set(resources) <= {"requests", "limits"}:
        return {k: {name: str(v) for name, v in dict(q).items()} for k, q in resources.items()}
    quantities = {name: str(value) for name, value in resources.items()}
    return {"requests": dict(quantities), "limits": dict(quantities)}


def _container(
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    args: Sequence[str] | None,
    env: Mapping[str, str] | None,
    resources: Mapping[str, Any] | None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "command": [command] if isinstance(command, str) else list(command),
    }
    if args:
        container["args"] = list(args)
    if env:
        container["env"] = [{"name": k, "value": str(v)} for k, v in env.items()]
    limits = _resources(resources)
    if limits:
        container["resources"] = limits
    return container


def _replica(
    replicas: int, container: dict[str, Any], restart_policy: str | None, pod_annotations: Mapping[str, str] | None
) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"containers": [dict(container)]}}
    if pod_annotations:
        template["metadata"] = {"annotations": dict(pod_annotations)}
    spec: dict[str, Any] = {"replicas": replicas, "template": template}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return spec


def _metadata(
    name: str,
    namespace: str | None,
    labels: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None,
    host_network: bool,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    notes = dict(annotations or {})
    if host_network:
        notes[c.ANNOTATION_NETWORK_MODE] = c.NETWORK_MODE_HOST
    if notes:
        meta["annotations"] = notes
    return meta


def _run_policy(
    backoff_limit: int | None, active_deadline_seconds: int | None, clean_pod_policy: str | None
) -> dict[str, Any]:
    policy: dict[str, Any] = {}
    if backoff_limit is not None:
        policy["backoffLimit"] = backoff_limit
    if active_deadline_seconds is not None:
        policy["activeDeadlineSeconds"] = active_deadline_seconds
    if clean_pod_policy is not None:
        policy["cleanPodPolicy"] = clean_pod_policy
    return policy


def pytorch_job(
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    workers: int = 0,
    nproc_per_node: int | str | None = None,
    resources: Mapping[str, Any] | None = None,
    host_network: bool = False,
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    namespace: str | None = None,
    restart_policy: str | None = None,
    backoff_limit: int | None = None,
    active_deadline_seconds: int | None = None,
    clean_pod_policy: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
) -> PyTorchJob:
    """A PyTorchJob of one Master and ``workers`` Workers running ``command`` in ``image``.

    ``resources`` applies to every replica (``{"cpu": 4, "memory": "16Gi", "nvidia.com/gpu": 1}`` sets
    requests = limits); ``host_network=True`` adds ``kubedl.io/network-mode: host``. The result is
    validated: a bad argument raises :class:`JobValidationError` naming the field.
    """
    container = _container(c.PYTORCH_CONTAINER, image, command, args=args, env=env, resources=resources)
    specs = {"Master": _replica(1, container, restart_policy, pod_annotations)}
    if workers:
        specs["Worker"] = _replica(workers, container, restart_policy, pod_annotations)
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if nproc_per_node is not None:
        spec["nprocPerNode"] = nproc_per_node
    spec.update(_run_policy(backoff_limit, active_deadline_seconds, clean_pod_policy))
    body = {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": _metadata(name, namespace, labels, annotations, host_network),
        "spec": spec,
    }
    job = parse_job(body, source=f"PyTorchJob {name!r}")
    assert isinstance(job, PyTorchJob)
    return job


def tf_job(
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    workers: int = 1,
    ps: int = 0,
    chief: bool = False,
    evaluator: bool = False,
    resources: Mapping[str, Any] | None = None,
    host_network: bool = False,
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    namespace: str | None = None,
    restart_policy: str | None = None,
    success_policy: str | None = None,
    backoff_limit: int | None = None,
    active_deadline_seconds: int | None = None,
    clean_pod_policy: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
) -> TFJob:
    """A TFJob of ``workers`` Workers, ``ps`` parameter servers, and optionally a Chief and an Evaluator.

    Same conventions as :func:`pytorch_job`; the container is named ``tensorflow``.
    """
    container = _container(c.TF_CONTAINER, image, command, args=args, env=env, resources=resources)
    specs: dict[str, Any] = {}
    if chief:
        specs["Chief"] = _replica(1, container, restart_policy, pod_annotations)
    if ps:
        specs["PS"] = _replica(ps, container, restart_policy, pod_annotations)
    if workers:
        specs["Worker"] = _replica(workers, container, restart_policy, pod_annotations)
    if evaluator:
        specs["Evaluator"] = _replica(1, container, restart_policy, pod_annotations)
    spec: dict[str, Any] = {"tfReplicaSpecs": specs}
    if success_policy is not None:
        spec["successPolicy"] = success_policy
    spec.update(_run_policy(backoff_limit, active_deadline_seconds, clean_pod_policy))
    body = {
        "apiVersion": c.API_VERSION,
        "kind": c.TF_KIND,
        "metadata": _metadata(name, namespace, labels, annotations, host_network),
        "spec": spec,
    }
    job = parse_job(body, source=f"TFJob {name!r}")
    assert isinstance(job, TFJob)
    return job


# -------------------------------------------------------------------------------------- async client

JobSource = Job | Mapping[str, Any] | str | os.PathLike[str]
ProgressCallback = Callable[[JobProgress], None]


#: how long ``stream_logs(follow=True)`` keeps reading pods still running when their job has finished
FOLLOW_DRAIN_SECONDS = 2.0


class _Changes:
    """A broadcast "something changed" signal: waiters wake on the next :meth:`notify`."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class AsyncTrainingClient:
    """Training jobs on one cluster, from asyncio code::

        async with AsyncTrainingClient() as client:
            job = await client.submit(pytorch_job("mnist", "pytorch/pytorch:2.3.0", ["python", "train.py"]))
            await client.wait("mnist", timeout=600)

    ``kubeconfig``/``context``/``namespace`` work as for kubectl (see :func:`resolve_config`); inside a
    pod with no kubeconfig the service account is used. The connection opens on first use, inside the
    running event loop; close it with ``async with`` or :meth:`close`.
    """

    def __init__(
        self,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        namespace: str | None = None,
        *,
        configuration: Any = None,
        settings: ClientSettings | None = None,
    ) -> None:
        if configuration is not None:
            self.config = ResolvedConfig(None, None, namespace or "default")
        else:
            self.config = resolve_config(kubeconfig, context, namespace)
        self._configuration = configuration
        self._settings = settings or ClientSettings()
        self._kube: KubeClient | None = None
        self._lock: asyncio.Lock | None = None

    @property
    def namespace(self) -> str:
        """The namespace used when a call or a job does not name one."""
        return self.config.namespace

    async def __aenter__(self) -> AsyncTrainingClient:
        await self._client()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool (a later call opens a new one)."""
        if self._kube is not None:
            kube, self._kube = self._kube, None
            await kube.close()

    async def _client(self) -> KubeClient:
        if self._kube is not None:
            return self._kube
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._kube is None:
                kube = KubeClient(
                    kubeconfig=self.config.kubeconfig,
                    context=self.config.context,
                    configuration=self._configuration,
                    in_cluster=self.config.in_cluster or None,
                    settings=self._settings,
                )
                try:
                    await kube.open()
                except Exception as exc:
                    raise ConfigurationError(f"cannot load the cluster configuration: {exc}") from exc
                self._kube = kube
        return self._kube

    # ------------------------------------------------------------------------------------------ submit

    @overload
    async def submit(self, job: AnyJob, *, namespace: str | None = None) -> AnyJob: ...
    @overload
    async def submit(self, job: Mapping[str, Any], *, namespace: str | None = None) -> Job: ...
    @overload
    async def submit(self, job: str | os.PathLike[str], *, namespace: str | None = None) -> list[Job]: ...

    async def submit(self, job: JobSource, *, namespace: str | None = None) -> Job | list[Job]:
        """Validate locally, then create: a model or a dict gives the created job (with its uid); a path
        to a YAML file (one or more documents) gives the list of created jobs. Every document is
        validated before the first is sent. Raises :class:`JobValidationError` (local, names the field),
        :class:`JobAlreadyExistsError`, :class:`InvalidJobError`, :class:`ForbiddenError`."""
        if isinstance(job, str | os.PathLike):
            jobs = load_jobs_file(os.fspath(job))
            return [await self._create(one, namespace) for one in jobs]
        if isinstance(job, PyTorchJob | TFJob):
            errors = validate_job(job)
            if errors:
                raise JobValidationError(errors, subject=f"{job.kind} {job.name!r}")
            return await self._create(job, namespace)
        return await self._create(parse_job(job), namespace)

    async def _create(self, job: Job, namespace: str | None) -> Job:
        ns = namespace or job.metadata.namespace or self.namespace
        body = job.to_dict()
        body.pop("status", None)
        body["metadata"]["namespace"] = ns
        kube = await self._client()
        with _translated():
            created = await kube.create(_RESOURCES[job.kind], body, namespace=ns)
        logger.debug("created %s %s/%s", job.kind, ns, created["metadata"]["name"])
        return _model(created)

    # ------------------------------------------------------------------------------------ get and list

    async def get(self, name: str, kind: str | None = None, *, namespace: str | None = None) -> Job:
        """One job; with ``kind=None`` either kind. Raises :class:`JobNotFoundError`, :class:`AmbiguousJobError`."""
        return _model(await self._get_raw(name, kind, namespace or self.namespace))

    async def _get_raw(self, name: str, kind: str | None, namespace: str) -> dict[str, Any]:
        kube = await self._client()
        canonical = _kind(kind)
        kinds = [canonical] if canonical else list(_RESOURCES)
        found: list[dict[str, Any]] = []
        errors: list[BaseException] = []

        async def one(k: str) -> None:
            try:
                found.append(await kube.get(_RESOURCES[k], name, namespace=namespace))
            except kerrors.NotFound:
                pass
            except (kerrors.KubeError, OSError) as exc:
                errors.append(exc)

        await asyncio.gather(*(one(k) for k in kinds))
        if errors:
            with _translated():
                raise errors[0]
        if not found:
            what = canonical or "PyTorchJob or TFJob"
            raise JobNotFoundError(f'{what} "{name}" not found in namespace "{namespace}"', status=404)
        if len(found) > 1:
            raise AmbiguousJobError(f'both a PyTorchJob and a TFJob are named "{name}" in "{namespace}"; pass a kind')
        return found[0]

    async def list(
        self, kind: str | None = None, selector: str | None = None, *, namespace: str | None = None
    ) -> list[Job]:
        """Jobs of one kind (or both), optionally filtered by a label selector, sorted by kind and name."""
        kube = await self._client()
        canonical = _kind(kind)
        kinds = [canonical] if canonical else list(_RESOURCES)
        ns = namespace or self.namespace
        jobs: list[Job] = []
        for k in kinds:
            with _translated():
                listed = await kube.list(_RESOURCES[k], namespace=ns, label_selector=selector)
            jobs.extend(_model(item) for item in listed.items)
        return sorted(jobs, key=lambda j: (j.kind, j.name))

    # ------------------------------------------------------------------------------------------- delete

    async def delete(
        self,
        name: str,
        kind: str | None = None,
        *,
        wait: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - the documented API; asyncio.wait_for inside
        namespace: str | None = None,
    ) -> Job:
        """Delete a job (its pods and Services go with it: they are owned by it). With ``wait=True``, return
        only once the job object is gone (its pods then follow). Returns the job as it was."""
        ns = namespace or self.namespace
        raw = await self._get_raw(name, kind, ns)
        resource = _RESOURCES[str(raw["kind"])]
        kube = await self._client()
        with _translated():
            await kube.delete(resource, name, namespace=ns, propagation_policy="Background")
        if wait:
            try:
                await asyncio.wait_for(self._until_gone(resource, name, ns), timeout)
            except TimeoutError:
                job = _model(raw)
                raise JobTimeoutError(
                    f"timed out after {timeout}s waiting for {job.kind} {ns}/{name} to be deleted",
                    job,
                    job_state(job),
                ) from None
        return _model(raw)

    async def _until_gone(self, resource: Resource, name: str, namespace: str) -> None:
        async for event in self._list_watch(resource, namespace, field_selector=f"metadata.name={name}"):
            if event.type == "DELETED" or (event.type == "SYNC" and not event.object["items"]):
                return

    # --------------------------------------------------------------------------------------------- wait

    async def wait(
        self,
        name: str,
        until: Iterable[str] = ("Succeeded",),
        *,
        kind: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the documented API; asyncio.wait_for inside
        namespace: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Job:
        """Wait, on a watch, until one of the ``until`` conditions is True, and return the job then.

        A job that fails first raises :class:`JobFailedError` (unless ``"Failed"`` is in ``until``); a job
        that succeeds satisfies an ``until`` of Created/Running (it went through them) but raises
        :class:`JobEndedError` when ``"Failed"`` was awaited. ``timeout`` (seconds, ``None``
        for ever) raises :class:`JobTimeoutError` carrying the last state seen. ``on_progress`` is called
        with a :class:`JobProgress` on every change. A deleted job raises :class:`JobNotFoundError`.
        """
        wanted = _conditions_wanted(until)
        ns = namespace or self.namespace
        started = time.monotonic()
        last: list[Job] = []

        async def watch() -> Job:
            raw = await self._get_raw(name, kind, ns)
            resource = _RESOURCES[str(raw["kind"])]
            async for event in self._list_watch(resource, ns, field_selector=f"metadata.name={name}"):
                if event.type == "SYNC":
                    items = event.object["items"]
                    if not items:
                        raise JobNotFoundError(f'{resource.kind} "{name}" was deleted while waiting', status=404)
                    obj = items[0]
                elif event.type == "DELETED":
                    raise JobNotFoundError(f'{resource.kind} "{name}" was deleted while waiting', status=404)
                else:
                    obj = event.object
                job = _model(obj)
                last[:] = [job]
                if on_progress is not None:
                    on_progress(JobProgress.of(job, started))
                done = _settled(job, wanted)
                if done is not None:
                    return done
            raise AssertionError("unreachable: the list-watch never ends")  # pragma: no cover

        try:
            return await asyncio.wait_for(watch(), timeout)
        except TimeoutError:
            job = last[0] if last else None
            state = job_state(job) if job else "unknown"
            counts = "/".join(str(n) for n in replica_counts(job)) if job else "-"
            raise JobTimeoutError(
                f"timed out after {timeout:g}s waiting for {ns}/{name} to be {' or '.join(sorted(wanted))}; "
                f"last state {state}, replicas active/succeeded/failed {counts}",
                job,
                state,
            ) from None

    async def _list_watch(
        self,
        resource: Resource,
        namespace: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> AsyncGenerator[WatchEvent, None]:
        """List, then watch from the list's resourceVersion, for ever: a ``SYNC`` event carries every listed
        object (``object["items"]``), then the watch's events follow.

        A watch that ends (the server's timeout) or breaks after delivering events or lasting a while resumes
        at once from the last resourceVersion seen; a 410 (history expired) lists again. A watch that fails
        at once, with a retryable error (5xx, 429, no answer: :func:`kubedl_py.kube.retry.is_retryable`) or
        by ending without a single event (a failing server or proxy, not a timeout: reopening it at once
        would spin), is retried with the backoff of the client's ``settings.retry``, and given up after its
        ``attempts`` failures in a row or its ``deadline``. Every error that escapes is one of the SDK's
        (:class:`ClusterError` and subclasses), never the machinery's."""
        kube = await self._client()
        retry = self._settings.retry
        what = f"watch of {resource} in {namespace}"
        version: str | None = None
        failures = 0
        failing_since = 0.0
        while True:
            fresh_list = version is None
            if version is None:
                with _translated():  # a list is retried inside the client already
                    listed = await kube.list(
                        resource, namespace=namespace, field_selector=field_selector, label_selector=label_selector
                    )
                version = listed.resource_version
                yield WatchEvent("SYNC", {"items": listed.items})
            started = time.monotonic()
            progressed = False
            failure: kerrors.KubeError
            try:
                async with contextlib.aclosing(
                    kube.watch(
                        resource,
                        namespace=namespace,
                        field_selector=field_selector,
                        label_selector=label_selector,
                        resource_version=version,
                    )
                ) as stream:
                    async for event in stream:
                        progressed = True
                        version = (event.object.get("metadata") or {}).get("resourceVersion") or version
                        if event.type != "BOOKMARK":
                            yield event
            except kerrors.Gone as exc:
                logger.debug("%s: resourceVersion %s expired; listing again", what, version)
                version = None
                if progressed or not fresh_list:
                    failures = 0
                    continue
                failure = exc  # the list's own resourceVersion expired at once: back off before listing again
            except kerrors.KubeError as exc:
                if not is_retryable(exc):
                    raise _translate(exc, what) from exc
                if progressed or time.monotonic() - started >= _MIN_WATCH_DURATION:
                    logger.debug("%s broke after %.1fs (%s); resuming", what, time.monotonic() - started, exc)
                    failures = 0
                    continue
                failure = exc
            else:
                if progressed or time.monotonic() - started >= _MIN_WATCH_DURATION:
                    failures = 0
                    continue
                failure = kerrors.TransportError(f"{what} ended at once without events")
            if failures == 0:
                failing_since = time.monotonic()
            failures += 1
            if failures >= retry.attempts or time.monotonic() - failing_since >= retry.deadline:
                raise _translate(failure, f"{what} failed {failures} times in a row") from failure
            delay = backoff_delay(retry, failures, failure)
            logger.info("%s failed (%s); retrying in %.2fs (failure %d)", what, failure, delay, failures)
            await asyncio.sleep(delay)

    # --------------------------------------------------------------------------------------------- logs

    async def logs(
        self,
        name: str,
        replica: str | None = "master",
        index: int | None = 0,
        *,
        kind: str | None = None,
        follow: bool = False,
        container: str | None = None,
        namespace: str | None = None,
    ) -> str:
        """The log of one replica (``replica="worker", index=1``), or with ``replica=None`` of every pod,
        each line prefixed with ``[pod]``. ``replica="master"`` means the Master/Chief (worker 0 when the
        job has none). With ``follow=True`` it returns when the pods have finished."""
        lines = [
            line.text if replica is not None else str(line)
            async for line in self.stream_logs(
                name, replica, index, kind=kind, follow=follow, container=container, namespace=namespace
            )
        ]
        return "".join(f"{line}\n" for line in lines)

    async def stream_logs(
        self,
        name: str,
        replica: str | None = None,
        index: int | None = None,
        *,
        kind: str | None = None,
        follow: bool = False,
        container: str | None = None,
        namespace: str | None = None,
    ) -> AsyncGenerator[LogLine, None]:
        """Log lines as they come, of every pod (``replica=None``), one replica type, or one replica.

        With ``follow=True`` it streams until the selected pods have finished: for one replica, when its
        pod ends; for several, when the job has finished (pods still running then, such as parameter
        servers, are cut off) or was deleted. A container restarted in place is followed into its new run.
        """
        ns = namespace or self.namespace
        raw = await self._get_raw(name, kind, ns)
        job = _model(raw)
        want_type, want_index = _replica_selector(job, replica, index)
        selector = f"{c.LABEL_JOB_NAME}={name}"
        if want_type is not None:
            selector += f",{c.LABEL_REPLICA_TYPE}={want_type.lower()}"
        if want_index is not None:
            selector += f",{c.LABEL_REPLICA_INDEX}={want_index}"
        pick = container or job.framework.container_name
        if not follow:
            kube = await self._client()
            with _translated():
                pods = (await kube.list(PODS, namespace=ns, label_selector=selector)).items
            if not pods and want_type is not None:
                where = f"{want_type.lower()}-{want_index}" if want_index is not None else want_type.lower()
                raise JobNotFoundError(f'job "{name}" has no pod {name}-{where} (yet)', status=404)
            for pod in sorted(pods, key=_pod_order):
                text = await self._read_log(pod, ns, pick)
                for text_line in text.splitlines():
                    yield LogLine(pod["metadata"]["name"], text_line)
            return
        single = want_type is not None and want_index is not None
        async for log_line in self._follow(_RESOURCES[job.kind], name, ns, selector, pick, single=single):
            yield log_line

    async def _read_log(self, pod: Mapping[str, Any], namespace: str, container: str) -> str:
        kube = await self._client()
        try:
            return await kube.read_log(
                pod["metadata"]["name"], namespace=namespace, container=_container_of(pod, container)
            )
        except kerrors.BadRequest:  # not started yet (ContainerCreating): nothing to show
            return ""
        except kerrors.NotFound:
            return ""
        except kerrors.KubeError as exc:
            with _translated():
                raise exc from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _follow(
        self, resource: Resource, name: str, namespace: str, selector: str, container: str, *, single: bool
    ) -> AsyncGenerator[LogLine, None]:
        kube = await self._client()
        queue: asyncio.Queue[LogLine | BaseException | None] = asyncio.Queue()
        changes = _Changes()
        pods: dict[str, dict[str, Any]] = {}
        streams: dict[str, asyncio.Task[None]] = {}
        job_over = False
        synced: list[bool] = []  # the pods have been listed: until then "no pod" means "not known yet"

        def phase(pod: Mapping[str, Any]) -> str:
            return str((pod.get("status") or {}).get("phase") or "")

        async def stream(pod_name: str, uid: str) -> None:
            streamed = -1
            try:
                while True:
                    pod = pods.get(pod_name)
                    if pod is None or pod["metadata"].get("uid") != uid:
                        return
                    status = _container_status(pod, container)
                    state = (status or {}).get("state") or {}
                    restarts = int((status or {}).get("restartCount") or 0)
                    if ("running" in state or "terminated" in state) and restarts > streamed:
                        streamed = restarts
                        with contextlib.suppress(kerrors.BadRequest, kerrors.NotFound, kerrors.TransportError):
                            async with contextlib.aclosing(
                                kube.stream_log(pod_name, namespace=namespace, container=_container_of(pod, container))
                            ) as lines:
                                async for text in lines:
                                    await queue.put(LogLine(pod_name, text))
                        continue
                    if phase(pod) in ("Succeeded", "Failed"):
                        return
                    await changes.wait()
            finally:
                changes.notify()

        async def watch_pods() -> None:
            async for event in self._list_watch(PODS, namespace, label_selector=selector):
                if event.type == "SYNC":
                    synced.append(True)
                    pods.clear()
                    pods.update({p["metadata"]["name"]: p for p in event.object["items"]})
                elif event.type == "DELETED":
                    gone = event.object["metadata"]["name"]
                    if (pods.get(gone) or {}).get("metadata", {}).get("uid") == event.object["metadata"].get("uid"):
                        pods.pop(gone, None)
                else:
                    pods[event.object["metadata"]["name"]] = event.object
                for pod_name, pod in pods.items():
                    uid = str(pod["metadata"].get("uid"))
                    if uid not in streams:
                        streams[uid] = asyncio.create_task(stream(pod_name, uid), name=f"log {pod_name}")
                changes.notify()

        async def watch_job() -> None:
            nonlocal job_over
            async for event in self._list_watch(resource, namespace, field_selector=f"metadata.name={name}"):
                if event.type == "SYNC":
                    items = event.object["items"]
                    over = not items or _is_finished(items[0])
                else:
                    over = event.type == "DELETED" or _is_finished(event.object)
                if over:
                    job_over = True
                    changes.notify()
                    return

        async def supervise() -> None:
            while True:
                live = [p for p in pods.values() if phase(p) not in ("Succeeded", "Failed")]
                if synced and (job_over or (single and pods and not live)):
                    # Finished pods' streams end by themselves once their last line is out. Pods still
                    # running when the job ended (a TF worker finishing after worker 0, a PS) get a short
                    # drain: what they wrote until now is still on its way through the API server.
                    ending = [
                        task
                        for uid, task in streams.items()
                        if any(p["metadata"].get("uid") == uid and p not in live for p in pods.values())
                    ]
                    if ending:
                        await asyncio.wait(ending)
                    running = [task for task in streams.values() if not task.done()]
                    if running:
                        await asyncio.wait(running, timeout=FOLLOW_DRAIN_SECONDS)
                    for task in streams.values():
                        task.cancel()
                    return
                await changes.wait()

        async def run(coro: Coroutine[Any, Any, None]) -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except kerrors.KubeError as exc:  # a log stream's failure: the SDK's error, not the machinery's
                error = _translate(exc)
                error.__cause__ = exc
                await queue.put(error)
            except BaseException as exc:
                await queue.put(exc)

        async def supervisor() -> None:
            await run(supervise())
            await queue.put(None)

        tasks = [
            asyncio.create_task(run(watch_pods())),
            asyncio.create_task(run(watch_job())),
            asyncio.create_task(supervisor()),
        ]
        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
            while not queue.empty():  # lines that arrived while the streams were being wound down
                item = queue.get_nowait()
                if isinstance(item, LogLine):
                    yield item
        finally:
            for task in [*tasks, *streams.values()]:
                task.cancel()
            await asyncio.gather(*tasks, *streams.values(), return_exceptions=True)

    # ----------------------------------------------------------------------------------------- describe

    async def describe(self, name: str, kind: str | None = None, *, namespace: str | None = None) -> JobDescription:
        """The job with its pods (node, phase, host port in host mode), their Services (targetPort) and
        the recent events of the job, its pods and Services."""
        ns = namespace or self.namespace
        job = _model(await self._get_raw(name, kind, ns))
        kube = await self._client()
        selector = f"{c.LABEL_JOB_NAME}={name}"
        with _translated():
            pods, services, events = await asyncio.gather(
                kube.list(PODS, namespace=ns, label_selector=selector),
                kube.list(SERVICES, namespace=ns, label_selector=selector),
                kube.list(EVENTS, namespace=ns),
            )
        by_service = {s["metadata"]["name"]: s for s in services.items}
        infos = []
        for pod in sorted(pods.items, key=_pod_order):
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            notes = meta.get("annotations") or {}
            service = by_service.get(meta["name"])
            ports = ((service or {}).get("spec") or {}).get("ports") or [{}]
            host_port = notes.get(c.ANNOTATION_HOST_PORT)
            status = _container_status(pod, job.framework.container_name)
            infos.append(
                PodInfo(
                    name=meta["name"],
                    replica_type=str(labels.get(c.LABEL_REPLICA_TYPE, "")),
                    index=int(labels.get(c.LABEL_REPLICA_INDEX, "0") or 0),
                    node=str((pod.get("spec") or {}).get("nodeName") or ""),
                    phase=str((pod.get("status") or {}).get("phase") or "Pending"),
                    restarts=int((status or {}).get("restartCount") or 0),
                    host_port=int(host_port) if host_port and str(host_port).isdigit() else None,
                    service=meta["name"] if service else None,
                    target_port=ports[0].get("targetPort") if service else None,
                )
            )
        mine = _events_of(job, pods.items, services.items, events.items)
        return JobDescription(job=job, pods=infos, events=mine[-DESCRIBE_EVENTS:])


#: how many events ``describe`` shows (the newest)
DESCRIBE_EVENTS = 20


def event_time(event: Mapping[str, Any]) -> str:
    """When an event last happened (RFC 3339): ``lastTimestamp``, else ``eventTime``, else creation."""
    meta = event.get("metadata") or {}
    return str(event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp") or "")


def _events_of(
    job: Job, pods: list[dict[str, Any]], services: list[dict[str, Any]], events: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The events of this job (by uid), of its pods and Services, and of its earlier pods (replaced in a
    failover: same names, newer than the job) — never those of a previous job of the same name. Oldest
    first."""
    uids = {job.metadata.uid} | {str(o["metadata"].get("uid")) for o in [*pods, *services]}
    created = job.metadata.creation_timestamp or ""
    replica_names = {o["metadata"]["name"] for o in [*pods, *services]}
    prefix = f"{job.name}-"
    mine = []
    for event in events:
        involved = event.get("involvedObject") or {}
        if involved.get("uid") in uids or (
            involved.get("kind") in ("Pod", "Service")
            and (involved.get("name") in replica_names or str(involved.get("name", "")).startswith(prefix))
            and _timestamp_key(event_time(event)) >= _timestamp_key(created)
        ):
            mine.append(event)
    mine.sort(key=lambda e: _timestamp_key(event_time(e)))
    return mine


def _timestamp_key(value: str) -> str:
    """RFC 3339 times compare as strings once they have the same precision (``Z`` vs ``.000000Z``)."""
    return value.replace("Z", "").ljust(26, "0") if value else ""


def _conditions_wanted(until: Iterable[str]) -> set[str]:
    if isinstance(until, str):
        until = [until]
    by_lower = {t.lower(): t for t in CONDITION_TYPES}
    wanted = set()
    for cond in until:
        canonical = by_lower.get(cond.lower())
        if canonical is None:
            raise ValueError(f"unknown condition {cond!r}: use one of {', '.join(CONDITION_TYPES)}")
        wanted.add(canonical)
    if not wanted:
        raise ValueError("wait needs at least one condition")
    return wanted


def _settled(job: Job, wanted: set[str]) -> Job | None:
    """The job when the wait is over, ``None`` to keep waiting; raises when it ended otherwise than asked.

    A job that succeeded satisfies a wait for ``Created``/``Running``/``Restarting`` (it went through them),
    but not a wait for ``Failed``: that raises :class:`JobEndedError` saying what happened."""
    if any(_true(job, kind) for kind in wanted):
        return job
    failed = _true(job, "Failed")
    if failed is not None:
        raise JobFailedError(failed.reason or "Failed", failed.message or "", job)
    succeeded = _true(job, "Succeeded")
    if succeeded is not None:
        if "Failed" in wanted:
            raise JobEndedError(
                f"{job.kind} {job.namespace}/{job.name} succeeded ({succeeded.message or succeeded.reason}); "
                "it will not become Failed",
                job,
                "Succeeded",
            )
        return job
    return None


def _is_finished(obj: Mapping[str, Any]) -> bool:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") in _FINAL and cond.get("status") == "True":
            return True
    return False


def _replica_selector(job: Job, replica: str | None, index: int | None) -> tuple[str | None, int | None]:
    """(replica type, index) to select pods by; ``None`` means any."""
    if replica is None:
        return None, index
    types = list(job.replica_specs)
    if replica.lower() == "master":
        head = next((t for t in ("Master", "Chief") if t in types), None)
        if head is not None:
            return head, 0
        return "Worker", 0 if index is None else index
    match = next((t for t in types if t.lower() == replica.lower()), None)
    if match is None:
        raise ValueError(f'job "{job.name}" has no replica type {replica!r}; it has {", ".join(types)}')
    return match, index


def _pod_order(pod: Mapping[str, Any]) -> tuple[int, str, int]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    role = 0 if labels.get(c.LABEL_JOB_ROLE) == "master" else 1
    index = str(labels.get(c.LABEL_REPLICA_INDEX, "0"))
    return role, str(labels.get(c.LABEL_REPLICA_TYPE, "")), int(index) if index.isdigit() else 0


def _container_of(pod: Mapping[str, Any], preferred: str) -> str:
    """The container to read: ``preferred`` (the framework's) when the pod has it, else the first."""
    names = [str(ct.get("name")) for ct in (pod.get("spec") or {}).get("containers") or []]
    return preferred if preferred in names or not names else names[0]


def _container_status(pod: Mapping[str, Any], preferred: str) -> dict[str, Any] | None:
    wanted = _container_of(pod, preferred)
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == wanted:
            found: dict[str, Any] = status
            return found
    return None


# --------------------------------------------------------------------------------------- sync client


class TrainingClient:
    """The same API as :class:`AsyncTrainingClient`, for ordinary (blocking) code and notebooks::

        with TrainingClient() as client:
            client.submit(pytorch_job("mnist", "pytorch/pytorch:2.3.0", ["python", "train.py"], workers=2))
            client.wait("mnist", timeout=600)
            print(client.logs("mnist"))

    Why a thread: each client owns an event loop running in a daemon thread and hands every call to it.
    That works whether or not the caller already runs a loop (Jupyter does, so ``asyncio.run`` would
    fail there), and the connection pool lives as long as the client. ``on_progress`` callbacks run in
    that thread. Close the client (``with`` or :meth:`close`) to stop the thread.
    """

    def __init__(
        self,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        namespace: str | None = None,
        *,
        configuration: Any = None,
        settings: ClientSettings | None = None,
    ) -> None:
        self._async = AsyncTrainingClient(
            kubeconfig, context, namespace, configuration=configuration, settings=settings
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kubedl-py-sdk", daemon=True)
        self._thread.start()

    @property
    def namespace(self) -> str:
        return self._async.namespace

    @property
    def config(self) -> ResolvedConfig:
        return self._async.config

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("the TrainingClient is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def __enter__(self) -> TrainingClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection and stop the client's thread."""
        if self._loop.is_closed():
            return
        self._run(self._async.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @overload
    def submit(self, job: AnyJob, *, namespace: str | None = None) -> AnyJob: ...
    @overload
    def submit(self, job: Mapping[str, Any], *, namespace: str | None = None) -> Job: ...
    @overload
    def submit(self, job: str | os.PathLike[str], *, namespace: str | None = None) -> list[Job]: ...

    def submit(self, job: JobSource, *, namespace: str | None = None) -> Job | list[Job]:
        """See :meth:`AsyncTrainingClient.submit`."""
        submitted = cast("Job | list[Job]", self._run(self._async.submit(job, namespace=namespace)))
        return submitted

    def get(self, name: str, kind: str | None = None, *, namespace: str | None = None) -> Job:
        """See :meth:`AsyncTrainingClient.get`."""
        return self._run(self._async.get(name, kind, namespace=namespace))

    def list(self, kind: str | None = None, selector: str | None = None, *, namespace: str | None = None) -> list[Job]:
        """See :meth:`AsyncTrainingClient.list`."""
        return self._run(self._async.list(kind, selector, namespace=namespace))

    def delete(
        self,
        name: str,
        kind: str | None = None,
        *,
        wait: bool = False,
        timeout: float | None = None,
        namespace: str | None = None,
    ) -> Job:
        """See :meth:`AsyncTrainingClient.delete`."""
        return self._run(self._async.delete(name, kind, wait=wait, timeout=timeout, namespace=namespace))

    def wait(
        self,
        name: str,
        until: Iterable[str] = ("Succeeded",),
        *,
        kind: str | None = None,
        timeout: float | None = None,
        namespace: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Job:
        """See :meth:`AsyncTrainingClient.wait`."""
        return self._run(
            self._async.wait(name, until, kind=kind, timeout=timeout, namespace=namespace, on_progress=on_progress)
        )

    def logs(
        self,
        name: str,
        replica: str | None = "master",
        index: int | None = 0,
        *,
        kind: str | None = None,
        follow: bool = False,
        container: str | None = None,
        namespace: str | None = None,
    ) -> str:
        """See :meth:`AsyncTrainingClient.logs`."""
        return self._run(
            self._async.logs(name, replica, index, kind=kind, follow=follow, container=container, namespace=namespace)
        )

    def stream_logs(
        self,
        name: str,
        replica: str | None = None,
        index: int | None = None,
        *,
        kind: str | None = None,
        follow: bool = False,
        container: str | None = None,
        namespace: str | None = None,
    ) -> Iterator[LogLine]:
        """See :meth:`AsyncTrainingClient.stream_logs`; a plain iterator, lines arrive as they are written."""
        stream = self._async.stream_logs(
            name, replica, index, kind=kind, follow=follow, container=container, namespace=namespace
        )
        try:
            while True:
                try:
                    yield self._run(_anext(stream))
                except StopAsyncIteration:
                    return
        finally:
            if not self._loop.is_closed():
                self._run(stream.aclose())

    def describe(self, name: str, kind: str | None = None, *, namespace: str | None = None) -> JobDescription:
        """See :meth:`AsyncTrainingClient.describe`."""
        return self._run(self._async.describe(name, kind, namespace=namespace))


async def _anext(stream: AsyncIterator[LogLine]) -> LogLine:
    return await stream.__anext__()
