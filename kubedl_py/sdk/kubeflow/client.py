"""The Kubeflow training SDK's ``TrainingClient`` (1.9), for kubedl-py's job kinds in either API group.

Why: a user of the Kubeflow SDK switches by changing one import (``from kubedl_py.sdk.kubeflow import
TrainingClient``) and keeps the script: same constructor, methods, arguments, defaults, return shapes and
exception types (``RuntimeError("Failed to get PyTorchJob: ns/name. Error: ...")``, ``TimeoutError``,
``ValueError``), for jobs in ``kubeflow.org/v1`` and in ``training.kubedl.io/v1alpha1`` alike. What differs
is deliberate and listed in docs/kubeflow-sdk.md: jobs are validated locally before they are sent (errors
name the field), ``wait_for_job_conditions`` rides on a watch, and errors always carry their cause.

The client is blocking, as the Kubeflow one is; its requests run on a private event loop
(:mod:`.runner`, :mod:`.connection`) through kubedl-py's own client machinery.
"""

from __future__ import annotations

import logging
import queue
import time
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from kubedl_py.api import constants as kubedl_constants
from kubedl_py.api.groups import GROUPS, KUBEDL, KUBEFLOW, ApiGroup, group_of
from kubedl_py.api.validation import parse_job
from kubedl_py.kube.client import ClientSettings
from kubedl_py.kube.resources import EVENTS, PODS, Resource
from kubedl_py.sdk.config import ResolvedConfig, resolve_config
from kubedl_py.sdk.errors import ConfigurationError
from kubedl_py.sdk.kubeflow import constants, templates
from kubedl_py.sdk.kubeflow.connection import Connection, PodLogError, WatchItem, async_configuration, job_resource
from kubedl_py.sdk.kubeflow.events import events_by_subject
from kubedl_py.sdk.kubeflow.objects import Objects, in_group_layout, serialize
from kubedl_py.sdk.kubeflow.runner import LoopThread

__all__ = ["TrainingClient"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: the pod labels each group's jobs are found by: (job name, job role, replica type, replica index)
_POD_LABELS: dict[str, tuple[str, str, str, str]] = {
    KUBEFLOW.name: (
        constants.JOB_NAME_LABEL,
        constants.JOB_ROLE_LABEL,
        constants.REPLICA_TYPE_LABEL,
        constants.REPLICA_INDEX_LABEL,
    ),
    KUBEDL.name: (
        kubedl_constants.LABEL_JOB_NAME,
        kubedl_constants.LABEL_JOB_ROLE,
        kubedl_constants.LABEL_REPLICA_TYPE,
        kubedl_constants.LABEL_REPLICA_INDEX,
    ),
}
#: ``create_job`` arguments allowed besides ``job`` (the Kubeflow SDK 1.9.4's list)
_ALLOWED_WITH_JOB = ("namespace", "pip_index_url", "num_workers", "labels", "annotations", "queue_name")


def _check_kind(job_kind: str) -> None:
    if job_kind not in constants.JOB_PARAMETERS:
        raise ValueError(f"Job kind must be one of these: {constants.JOB_PARAMETERS.keys()}")


def _api_group(name: str | None) -> ApiGroup | None:
    if name is None:
        return None
    for group in GROUPS:
        if name in (group.name, group.group, group.api_version):
            return group
    raise ValueError(
        f"api_group must be 'kubeflow' (kubeflow.org/v1), 'kubedl' (training.kubedl.io) or None, not {name!r}"
    )


def _has_condition(conditions: Iterable[Any], condition_type: str) -> bool:
    return any(c.type == condition_type and c.status == constants.CONDITION_STATUS_TRUE for c in conditions)


class TrainingClient:
    """The Kubeflow training SDK's client, on kubedl-py::

        from kubedl_py.sdk.kubeflow import TrainingClient   # was: from kubeflow.training import TrainingClient

        client = TrainingClient()
        client.create_job(job)
        client.wait_for_job_conditions("mnist")
        logs, _ = client.get_job_logs("mnist")

    ``api_group`` chooses the API group: ``"kubeflow"`` (``kubeflow.org/v1``), ``"kubedl"``
    (``training.kubedl.io/v1alpha1``), or ``None``: ``kubeflow.org`` when the cluster serves the kind there
    (asked once, by API discovery), else ``training.kubedl.io``. A job passed to ``create_job`` or
    ``update_job`` goes to the group of its own ``apiVersion``. Pods are found by the labels of the group
    (``training.kubeflow.org/*`` or ``training.kubedl.io/*``).

    Jobs and pods come back as the Kubeflow SDK's models when ``kubeflow-training`` is installed, else as
    :class:`~kubedl_py.sdk.kubeflow.KubeObject` views read by the same attributes; jobs of either group are
    laid out as in ``kubeflow.org`` (``job.spec.run_policy``).
    """

    def __init__(
        self,
        config_file: str | None = None,
        context: str | None = None,
        client_configuration: Any = None,
        namespace: str | None = None,
        job_kind: str = constants.PYTORCHJOB_KIND,
        *,
        api_group: str | None = None,
        settings: ClientSettings | None = None,
    ) -> None:
        if client_configuration is not None:
            try:
                default_namespace = resolve_config(None, context, namespace).namespace
            except ConfigurationError:
                default_namespace = constants.DEFAULT_NAMESPACE
            config = ResolvedConfig(None, None, namespace or default_namespace)
            configuration = async_configuration(client_configuration)
        else:
            config = resolve_config(config_file, context, namespace)
            configuration = None
        if job_kind not in constants.JOB_PARAMETERS:
            raise ValueError(f"Job kind must be one of these: {list(constants.JOB_PARAMETERS.keys())}")
        self.namespace: str = config.namespace
        self.job_kind: str = job_kind
        self.api_group: ApiGroup | None = _api_group(api_group)
        self._connection = Connection(config, configuration, settings or ClientSettings())
        self._runner = LoopThread("kubedl-py-kubeflow-sdk")
        self._objects = Objects()
        # The Kubeflow client has no close(): its connections go when it is garbage collected, and so do these.
        self._finalizer = weakref.finalize(self, self._runner.close, self._connection.close)

    def close(self) -> None:
        """Close the connections and stop the client's thread (also done when the client is collected)."""
        self._finalizer()

    def __enter__(self) -> TrainingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------- plumbing

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None, what: str) -> T:
        """Run ``coro`` on the client's loop; ``what`` (``"get PyTorchJob: ns/name"``) names it in errors."""
        try:
            return self._runner.run(coro, timeout)
        except TimeoutError:
            raise TimeoutError(f"Timeout to {what}") from None
        except Exception as exc:
            raise RuntimeError(f"Failed to {what}. Error: {exc}") from exc

    def _group(self, kind: str, timeout: float | None = None) -> ApiGroup:
        if self.api_group is not None:
            return self.api_group
        return self._call(self._connection.group(kind, None), timeout, f"discover the API group of {kind}")

    def _job(self, raw: Mapping[str, Any], kind: str, what: str) -> Any:
        try:
            return self._objects.job(raw, constants.JOB_PARAMETERS[kind]["model"])
        except Exception as exc:
            raise RuntimeError(f"Failed to {what}. Error: {exc}") from exc

    def _body(self, job: Any) -> dict[str, Any]:
        try:
            body = serialize(job)
        except TypeError:
            body = None
        if not isinstance(body, dict):
            raise ValueError(f"Job must be one of these types: {constants.JOB_MODELS}, but Job is: {type(job)}")
        return body

    def _send_layout(self, body: dict[str, Any], kind: str) -> tuple[dict[str, Any], ApiGroup]:
        """``body`` in the layout of the group it is for (its apiVersion's, else the client's), validated."""
        group = group_of(body.get("apiVersion"))
        if group is None and not body.get("apiVersion"):
            group = self._group(kind)
            body = {"apiVersion": group.api_version, **body}
        body = in_group_layout(body, group or KUBEDL)
        parse_job(body, pod_fields=True)  # JobValidationError, a ValueError naming each field
        return body, group or KUBEDL

    # ------------------------------------------------------------------------------------ create

    def create_job(  # noqa: PLR0917 - the Kubeflow SDK's positional signature
        self,
        job: Any = None,
        name: str | None = None,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        job_kind: str | None = None,
        base_image: str | None = None,
        train_func: Callable[..., Any] | None = None,
        parameters: dict[str, Any] | None = None,
        num_workers: int | None = 1,
        num_procs_per_worker: int | str | None = None,
        resources_per_worker: Any = None,
        num_chief_replicas: int | None = None,
        num_ps_replicas: int | None = None,
        packages_to_install: list[str] | None = None,
        pip_index_url: str = constants.DEFAULT_PIP_INDEX_URL,
        env_vars: dict[str, str] | list[Any] | None = None,
        queue_name: str | None = None,
        volumes: list[Any] | None = None,
        volume_mounts: list[Any] | None = None,
    ) -> None:
        """Create a job: from ``job`` (a Kubeflow or kubernetes model, a dict, a kubedl-py job or a job this
        client returned), or built from ``train_func`` or ``base_image`` and ``num_workers`` (PyTorchJob,
        TFJob) as the Kubeflow SDK builds it. The job is validated before it is sent (``ValueError`` naming
        the field). ``labels``/``annotations`` are added to a given job too."""
        arguments = dict(locals())
        if job is not None:
            for key, value in arguments.items():
                if key not in ("self", "job", *_ALLOWED_WITH_JOB) and value is not None:
                    raise ValueError(
                        "If `job` is set only `namespace`, `labels`, and `annotations` arguments are allowed. "
                        f"Argument `{key}` must be None."
                    )
        namespace = namespace or self.namespace
        job_kind = job_kind or self.job_kind
        body: dict[str, Any] | None = None
        if job is not None:
            body = self._body(job)
            job_kind = str(body.get("kind"))
        _check_kind(job_kind)
        if len(volumes or []) != len(volume_mounts or []):
            raise ValueError(
                f"Volumes and VolumeMounts must be the same length: {len(volumes or [])} vs. {len(volume_mounts or [])}"
            )
        if job is None and (train_func is not None or base_image is not None):
            body = templates.job_from_function(
                api_version=lambda: self._group(job_kind).api_version,
                name=name,
                namespace=namespace,
                labels=labels,
                annotations=annotations,
                job_kind=job_kind,
                base_image=base_image,
                train_func=train_func,
                parameters=parameters,
                num_workers=num_workers,
                num_procs_per_worker=num_procs_per_worker,
                resources_per_worker=resources_per_worker,
                num_chief_replicas=num_chief_replicas,
                num_ps_replicas=num_ps_replicas,
                packages_to_install=packages_to_install,
                pip_index_url=pip_index_url,
                env_vars=env_vars,
                volumes=volumes,
                volume_mounts=volume_mounts,
            )
        if body is None:
            raise ValueError(f"Job must be one of these types: {constants.JOB_MODELS}, but Job is: {type(job)}")
        metadata = dict(body.get("metadata") or {})
        if job is not None and labels:
            metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
        if job is not None and annotations:
            metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
        if queue_name and queue_name.strip():
            self._check_queue_exists(queue_name, namespace)
            metadata["labels"] = {**(metadata.get("labels") or {}), constants.LOCAL_QUEUE_LABEL: queue_name}
        body = {**body, "metadata": metadata}
        body.pop("status", None)
        body, group = self._send_layout(body, job_kind)
        job_name = metadata.get("name") or metadata.get("generateName")
        resource = job_resource(job_kind, group)
        what = f"create {job_kind}: {namespace}/{job_name}"
        self._call(self._create(resource, body, namespace), None, what)
        logger.debug("%s %s/%s has been created", job_kind, namespace, job_name)

    async def _create(self, resource: Resource, body: dict[str, Any], namespace: str) -> None:
        kube = await self._connection.kube()
        await kube.create(resource, body, namespace=namespace)

    def _check_queue_exists(self, queue_name: str, namespace: str) -> bool | None:
        """Whether Kueue's LocalQueue exists (only warned about when it does not, as the Kubeflow SDK does)."""
        return self._runner.run(self._connection.queue_exists(queue_name, namespace))

    def train(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Not supported: the Kubeflow SDK's LLM fine-tuning (a PVC, its storage initializer and Hugging Face
        trainer images) is no part of kubedl-py."""
        raise NotImplementedError(
            "TrainingClient.train() (LLM fine-tuning with the Kubeflow storage initializer and Hugging Face "
            "trainer) is not supported by kubedl-py: build the PyTorchJob (a Master and Workers running your "
            "trainer) and pass it to create_job()"
        )

    # --------------------------------------------------------------------------------------- read

    def get_job(
        self,
        name: str,
        namespace: str | None = None,
        job_kind: str | None = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> Any:
        """The job (``KubeflowOrgV1PyTorchJob``..., or a view). ``RuntimeError`` when it cannot be read."""
        namespace = namespace or self.namespace
        job_kind = job_kind or self.job_kind
        _check_kind(job_kind)
        what = f"get {job_kind}: {namespace}/{name}"
        raw = self._call(self._get(job_kind, name, namespace), timeout, what)
        return self._job(raw, job_kind, what)

    async def _get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        kube = await self._connection.kube()
        return await kube.get(await self._connection.resource(kind, self.api_group), name, namespace=namespace)

    def list_jobs(
        self,
        namespace: str | None = None,
        job_kind: str | None = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> list[Any]:
        """Every job of the kind in the namespace (an empty list when there is none)."""
        namespace = namespace or self.namespace
        job_kind = job_kind or self.job_kind
        _check_kind(job_kind)
        what = f"list {job_kind}s in namespace: {namespace}"
        raws = self._call(self._list(job_kind, namespace), timeout, what)
        return [self._job(raw, job_kind, what) for raw in raws]

    async def _list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        kube = await self._connection.kube()
        return (await kube.list(await self._connection.resource(kind, self.api_group), namespace=namespace)).items

    def get_job_conditions(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> list[Any]:
        """The job's conditions (``type``, ``status``, ``reason``, ``message``, times), ``[]`` before any."""
        namespace = namespace or self.namespace
        job_kind = job_kind or self.job_kind
        _check_kind(job_kind)
        if job is not None:
            if isinstance(job, Mapping):
                job = self._job(job, job_kind, f"read {job_kind}")
            if getattr(job, "kind", None) not in (job_kind, None) or not hasattr(job, "status"):
                raise ValueError(f"Job must be one of these types: {constants.JOB_MODELS}")
        if job is None:
            if name is None:
                raise ValueError("Job name must be set to configure Job from function or image")
            job = self.get_job(name=name, namespace=namespace, job_kind=job_kind, timeout=timeout)
        if job.status and job.status.conditions:
            return list(job.status.conditions)
        return []

    def is_job_created(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> bool:
        return _has_condition(
            self.get_job_conditions(name, namespace, job_kind, job, timeout), constants.JOB_CONDITION_CREATED
        )

    def is_job_running(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> bool:
        return _has_condition(
            self.get_job_conditions(name, namespace, job_kind, job, timeout), constants.JOB_CONDITION_RUNNING
        )

    def is_job_restarting(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> bool:
        return _has_condition(
            self.get_job_conditions(name, namespace, job_kind, job, timeout), constants.JOB_CONDITION_RESTARTING
        )

    def is_job_succeeded(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> bool:
        return _has_condition(
            self.get_job_conditions(name, namespace, job_kind, job, timeout), constants.JOB_CONDITION_SUCCEEDED
        )

    def is_job_failed(
        self,
        name: str | None = None,
        namespace: str | None = None,
        job_kind: str | None = None,
        job: Any = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> bool:
        return _has_condition(
            self.get_job_conditions(name, namespace, job_kind, job, timeout), constants.JOB_CONDITION_FAILED
        )

    # --------------------------------------------------------------------------------------- wait

    def wait_for_job_conditions(  # noqa: PLR0917 - the Kubeflow SDK's positional signature
        self,
        name: str,
        namespace: str | None = None,
        job_kind: str | None = None,
        expected_conditions: Iterable[str] = frozenset({constants.JOB_CONDITION_SUCCEEDED}),
        wait_timeout: int = 600,
        polling_interval: int = 15,
        callback: Callable[[Any], Any] | None = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> Any:
        """Wait until one of ``expected_conditions`` is True and return the job then.

        As the Kubeflow SDK: ``RuntimeError`` when the job fails (unless ``"Failed"`` is expected) or cannot
        be read, ``TimeoutError`` after ``wait_timeout`` seconds, ``callback(job)`` with every state seen and
        at least every ``polling_interval`` seconds. Unlike it, the job is watched, so a change is seen at
        once rather than at the next poll."""
        namespace = namespace or self.namespace
        job_kind = job_kind or self.job_kind
        expected = {expected_conditions} if isinstance(expected_conditions, str) else set(expected_conditions)
        if not expected.issubset(constants.JOB_CONDITIONS):
            raise ValueError(f"Expected conditions: {expected} must be subset of {constants.JOB_CONDITIONS}")
        _check_kind(job_kind)
        what = f"get {job_kind}: {namespace}/{name}"
        resource = job_resource(job_kind, self._group(job_kind, timeout))
        states: queue.Queue[WatchItem] = queue.Queue()
        watching = self._runner.submit(self._connection.watch_job(resource, name, namespace, states))
        deadline = time.monotonic() + wait_timeout
        poll = max(float(polling_interval), 0.05)
        last: Any = None
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"Timeout waiting for {job_kind}: {namespace}/{name} to reach expected conditions: {expected}"
                    )
                try:
                    kind, payload = states.get(timeout=min(poll, remaining))
                except queue.Empty:
                    if last is None:
                        continue
                    kind, payload = "job", last  # a poll would see the same state: tell the callback again
                if kind == "error":
                    raise RuntimeError(f"Failed to {what}. Error: {payload}") from payload
                if kind == "gone":
                    raise RuntimeError(f'Failed to {what}. Error: {job_kind} "{name}" not found')
                last = payload
                job = self._job(payload, job_kind, what)
                conditions = self.get_job_conditions(job=job, job_kind=job_kind)
                if conditions:
                    logger.debug("%s %s %s", name, conditions[-1].type, conditions[-1].last_transition_time)
                if callback:
                    callback(job)
                if constants.JOB_CONDITION_FAILED not in expected and _has_condition(
                    conditions, constants.JOB_CONDITION_FAILED
                ):
                    raise RuntimeError(
                        f"{job_kind} {namespace}/{name} is Failed. {job_kind} conditions: {job.status.conditions}"
                    )
                if any(_has_condition(conditions, cond) for cond in expected):
                    return job
        finally:
            watching.cancel()

    # --------------------------------------------------------------------------------------- pods

    def _pods(
        self,
        name: str,
        namespace: str,
        *,
        is_master: bool,
        replica_type: str | None,
        replica_index: int | None,
        timeout: float | None,
    ) -> list[dict[str, Any]]:
        if replica_type is not None and not any(replica_type in types for types in constants.REPLICA_TYPES_ACCEPTED):
            raise ValueError(
                f"TFJob replica type must be one of {constants.TFJOB_REPLICA_TYPES}\n"
                f"PyTorchJob replica type must be one of {constants.PYTORCHJOB_REPLICA_TYPES}\n"
                f"XGBoostJob replica type must be one of {constants.XGBOOSTJOB_REPLICA_TYPES}\n"
                f"MPIJob replica type must be one of {constants.MPIJOB_REPLICA_TYPES}\n"
                f"PaddleJob replica type must be one of {constants.PADDLEJOB_REPLICA_TYPES}\n"
                f"JAXJob replica type must be one of {constants.JAXJOB_REPLICA_TYPES}"
            )
        what = f"list pods for Job: {namespace}/{name}"
        group = self._group(self.job_kind, timeout)
        name_label, role_label, type_label, index_label = _POD_LABELS[group.name]
        selector = f"{name_label}={name}"
        if is_master:
            selector += f",{role_label}={constants.JOB_ROLE_MASTER}"
        if replica_type is not None:
            selector += f",{type_label}={replica_type.lower()}"
        if replica_index is not None:
            selector += f",{index_label}={replica_index}"

        async def listed() -> list[dict[str, Any]]:
            kube = await self._connection.kube()
            return (await kube.list(PODS, namespace=namespace, label_selector=selector)).items

        return self._call(listed(), timeout, what)

    def get_job_pods(  # noqa: PLR0917 - the Kubeflow SDK's positional signature
        self,
        name: str,
        namespace: str | None = None,
        is_master: bool = False,
        replica_type: str | None = None,
        replica_index: int | None = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> list[Any]:
        """The job's pods (``V1Pod``, or views: ``pod.metadata.name``, ``pod.status.phase``); ``is_master``
        selects the Master/Chief, ``replica_type`` (lower case: ``"worker"``) and ``replica_index`` narrow."""
        namespace = namespace or self.namespace
        pods = self._pods(
            name,
            namespace,
            is_master=is_master,
            replica_type=replica_type,
            replica_index=replica_index,
            timeout=timeout,
        )
        try:
            return [self._objects.pod(pod) for pod in pods]
        except Exception as exc:
            raise RuntimeError(f"Failed to list pods for Job: {namespace}/{name}. Error: {exc}") from exc

    def get_job_pod_names(  # noqa: PLR0917 - the Kubeflow SDK's positional signature
        self,
        name: str,
        namespace: str | None = None,
        is_master: bool = False,
        replica_type: str | None = None,
        replica_index: int | None = None,
        timeout: int = constants.DEFAULT_TIMEOUT,
    ) -> list[str]:
        namespace = namespace or self.namespace
        pods = self._pods(
            name,
            namespace,
            is_master=is_master,
            replica_type=replica_type,
            replica_index=replica_index,
            timeout=timeout,
        )
        return [str(pod["metadata"]["name"]) for pod in pods]

    def get_job_logs(  # noqa: PLR0917 - the Kubeflow SDK's positional signature
        self,
        name: str,
        namespace: str | None = None,
        job_kind: str | None = None,
        is_master: bool = True,
        replica_type: str | None = None,
        replica_index: int | None = None,
        follow: bool = False,
        timeout: int = constants.DEFAULT_TIMEOUT,
        verbose: bool = False,
    ) -> tuple[dict[str, str], dict[str, list[str]]]:
        """``(logs by pod name, events)`` of the job's pods that have started (by default the master's).

        ``follow`` prints each line as ``[Pod <name>]: <line>`` while it is written, until the pods' containers
        end; ``verbose`` fills the events: ``{"pytorchjob/<name>": [...], "pod/<pod>": [...]}``, each
        ``"<YYYY-mm-dd HH:MM:SS> <message>"``."""
        namespace = namespace or self.namespace
        job_kind = job_kind or self.job_kind
        _check_kind(job_kind)
        pods = self._pods(
            name,
            namespace,
            is_master=is_master,
            replica_type=replica_type,
            replica_index=replica_index,
            timeout=timeout,
        )
        started = [pod for pod in pods if (pod.get("status") or {}).get("phase", "") != constants.POD_PHASE_PENDING]
        container = constants.JOB_PARAMETERS[job_kind]["container"]
        logs: dict[str, str] = {}
        if started:
            reading = (
                self._connection.follow_logs(started, namespace, container)
                if follow
                else self._connection.read_logs(started, namespace, container)
            )
            try:
                logs = self._runner.run(reading, None if follow else timeout)
            except PodLogError as exc:
                raise RuntimeError(str(exc)) from exc.__cause__
            except TimeoutError:
                raise TimeoutError(f"Timeout to read logs for Job: {namespace}/{name}") from None
        events: dict[str, list[str]] = {}
        if verbose:
            events = self._events(name, namespace, job_kind, pods, timeout)
        return logs, events

    def _events(
        self, name: str, namespace: str, job_kind: str, pods: list[dict[str, Any]], timeout: float | None
    ) -> dict[str, list[str]]:
        job = self._call(self._get(job_kind, name, namespace), timeout, f"get {job_kind}: {namespace}/{name}")

        async def listed() -> list[dict[str, Any]]:
            kube = await self._connection.kube()
            return (await kube.list(EVENTS, namespace=namespace)).items

        events = self._call(listed(), timeout, f"list events in namespace: {namespace}")
        return events_by_subject(job, pods, events)

    # ------------------------------------------------------------------------------ update, delete

    def update_job(self, job: Any, name: str, namespace: str | None = None, job_kind: str | None = None) -> None:
        """Update the job with a JSON merge patch of the whole object, as the Kubeflow SDK does (a stale
        ``metadata.resourceVersion`` in it is a conflict: re-read, or clear it)."""
        namespace = namespace or self.namespace
        body = self._body(job)
        job_kind = job_kind or str(body.get("kind") or "") or self.job_kind
        _check_kind(job_kind)
        body, group = self._send_layout(body, job_kind)
        resource = job_resource(job_kind, group)

        async def patched() -> None:
            kube = await self._connection.kube()
            await kube.patch(resource, name, body, namespace=namespace)

        self._call(patched(), None, f"update {job_kind}: {namespace}/{name}")
        logger.debug("%s %s/%s has been updated", job_kind, namespace, name)

    def delete_job(
        self,
        name: str,
        namespace: str | None = None,
        job_kind: str | None = None,
        delete_options: Any = None,
    ) -> None:
        """Delete the job (its pods and Services go with it); ``delete_options`` a ``V1DeleteOptions`` or dict."""
        namespace = namespace or self.namespace
        job_kind = job_kind or self.job_kind
        _check_kind(job_kind)
        options = serialize(delete_options) if delete_options is not None else None

        async def deleted() -> None:
            kube = await self._connection.kube()
            resource = await self._connection.resource(job_kind, self.api_group)
            await kube.request("DELETE", resource.path(namespace=namespace, name=name), body=options)

        self._call(deleted(), None, f"delete {job_kind}: {namespace}/{name}")
        logger.debug("%s %s/%s has been deleted", job_kind, namespace, name)
