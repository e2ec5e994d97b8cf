"""The SDK's client: submit, inspect, wait for, read the logs of and delete training jobs, from asyncio code.

Why it is the implementation (and :class:`~kubedl_py.sdk.sync.TrainingClient` a thin twin): everything here
is I/O against the API server, and asyncio lets ``wait`` and ``logs(follow=True)`` ride on watches instead
of polling. It talks to the cluster only through :class:`kubedl_py.kube.KubeClient` (raw dicts over HTTP),
turns answers into the pydantic models of :mod:`kubedl_py.api`, and raises only the SDK's errors.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar, overload

from kubedl_py.api import constants as c
from kubedl_py.api.groups import KUBEFLOW
from kubedl_py.api.jobs import Job
from kubedl_py.api.loading import load_jobs_file
from kubedl_py.api.validation import JobValidationError, parse_job, validate_job
from kubedl_py.kube import errors as kerrors
from kubedl_py.kube.claims import RESOURCE_CLAIMS, allocation_results, claim_names, device_statuses
from kubedl_py.kube.client import ClientSettings, KubeClient
from kubedl_py.kube.resources import EVENTS, PODS, SERVICES, Resource
from kubedl_py.sdk.config import LazyKube, ResolvedConfig, resolve_config
from kubedl_py.sdk.errors import (
    AmbiguousJobError,
    JobNotFoundError,
    JobTimeoutError,
    translated,
)
from kubedl_py.sdk.kinds import job_resources, kind_names, parse_kind, resource_for, resource_of_object, to_model
from kubedl_py.sdk.logs import LogFollower, previous_attempts, read_log
from kubedl_py.sdk.pods import (
    check_container,
    check_replica_index,
    container_status,
    owned_by,
    pending_reason,
    pod_order,
    replica_selector,
)
from kubedl_py.sdk.views import (
    DESCRIBE_EVENTS,
    DeviceInfo,
    JobDescription,
    JobEvent,
    JobProgress,
    LogLine,
    PodInfo,
    PreviousAttempt,
    events_of,
    job_state,
    replica_counts,
    true_condition,
)
from kubedl_py.sdk.watching import conditions_wanted, list_watch, settled

__all__ = ["AsyncTrainingClient", "JobSource", "ProgressCallback"]

logger = logging.getLogger(__name__)

JobSource = Job | Mapping[str, Any] | str | os.PathLike[str]
#: a job model of any kind: ``submit`` gives back the same kind it was given
AnyJob = TypeVar("AnyJob", bound=Job)
ProgressCallback = Callable[[JobProgress], None]


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
        self._settings = settings or ClientSettings()
        self._connection = LazyKube(self.config, configuration, self._settings)

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
        await self._connection.close()

    async def _client(self) -> KubeClient:
        return await self._connection.kube()

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
        if isinstance(job, Job):
            errors = validate_job(job, pod_fields=True)
            if errors:
                raise JobValidationError(errors, subject=f"{job.kind} {job.name!r}")
            return await self._create(job, namespace)
        return await self._create(parse_job(job, pod_fields=True), namespace)

    async def _create(self, job: Job, namespace: str | None) -> Job:
        ns = namespace or job.metadata.namespace or self.namespace
        body = job.to_dict()
        body.pop("status", None)
        body["metadata"]["namespace"] = ns
        kube = await self._client()
        with translated():
            created = await kube.create(resource_for(job), body, namespace=ns)
        logger.debug("created %s %s/%s", job.kind, ns, created["metadata"]["name"])
        return to_model(created)

    # ------------------------------------------------------------------------------------ get and list

    async def get(self, name: str, kind: str | None = None, *, namespace: str | None = None) -> Job:
        """One job; with ``kind=None`` either kind. Raises :class:`JobNotFoundError`, :class:`AmbiguousJobError`."""
        return to_model(await self._get_raw(name, kind, namespace or self.namespace))

    async def _resources(self, kind: str | None) -> tuple[list[Resource], set[Resource]]:
        """The API resources ``kind`` may mean (every kind: ``None``), and those of them that were asked for
        by name: one of those the cluster does not serve is an error, not "no jobs". A bare kind means its
        kubeflow.org twin too when the cluster serves that group (discovery, one request); the kind in
        training.kubedl.io is then the one required."""
        canonical, group = parse_kind(kind)
        if group is not None:
            named = job_resources(canonical, group, True)
            return named, set(named)
        resources = job_resources(canonical, None, await self._kubeflow_served())
        required = {r for r in resources if r.group != KUBEFLOW.group} if canonical is not None else set()
        return resources, required

    async def _kubeflow_served(self) -> bool:
        kube = await self._client()
        try:
            with translated():
                found = await kube.request("GET", f"/apis/{KUBEFLOW.group}/{KUBEFLOW.version}")
        except JobNotFoundError:
            return False
        return bool(found.get("resources")) if isinstance(found, Mapping) else False

    async def _get_raw(self, name: str, kind: str | None, namespace: str) -> dict[str, Any]:
        kube = await self._client()
        resources, _ = await self._resources(kind)
        found: list[dict[str, Any]] = []
        errors: list[BaseException] = []

        async def one(resource: Resource) -> None:
            try:
                found.append(await kube.get(resource, name, namespace=namespace))
            except kerrors.NotFound:
                pass
            except (kerrors.KubeError, OSError) as exc:
                errors.append(exc)

        await asyncio.gather(*(one(resource) for resource in resources))
        if errors:
            with translated():
                raise errors[0]
        if not found:
            if kind is not None:
                looked = " or ".join(f"{r.plural}.{r.group}" for r in resources)
                raise JobNotFoundError(
                    f'{parse_kind(kind)[0]} "{name}" not found in namespace "{namespace}" (looked in {looked})',
                    status=404,
                )
            raise JobNotFoundError(
                f'job "{name}" not found in namespace "{namespace}" (looked for {kind_names()})', status=404
            )
        if len(found) > 1:
            kinds_found = ", ".join(sorted(f"{raw['kind']} ({raw.get('apiVersion')})" for raw in found))
            raise AmbiguousJobError(
                f'jobs of several kinds ({kinds_found}) are named "{name}" in "{namespace}"; pass a kind '
                "(with its group when the kinds are the same: pytorchjobs.kubeflow.org)"
            )
        return found[0]

    async def list(
        self, kind: str | None = None, selector: str | None = None, *, namespace: str | None = None
    ) -> list[Job]:
        """Jobs of one kind (or of every kind), optionally filtered by a label selector, sorted by kind and
        name. ``kind`` may name a group too (``pytorchjobs.kubeflow.org``); without one, jobs of the kind in
        both groups are listed. A kind whose CRD the cluster does not serve (an install older than the kind)
        has no jobs, unless it was asked for by name."""
        kube = await self._client()
        resources, required = await self._resources(kind)
        ns = namespace or self.namespace
        jobs: list[Job] = []
        for resource in resources:
            try:
                with translated():
                    listed = await kube.list(resource, namespace=ns, label_selector=selector)
            except JobNotFoundError:
                if resource in required:
                    raise
                continue
            jobs.extend(to_model(item) for item in listed.items)
        return sorted(jobs, key=lambda j: (j.kind, j.api_version != c.API_VERSION, j.name))

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
        resource = resource_of_object(raw)
        kube = await self._client()
        with translated():
            await kube.delete(resource, name, namespace=ns, propagation_policy="Background")
        if wait:
            try:
                await asyncio.wait_for(self._until_gone(resource, name, ns), timeout)
            except TimeoutError:
                job = to_model(raw)
                raise JobTimeoutError(
                    f"timed out after {timeout}s waiting for {job.kind} {ns}/{name} to be deleted",
                    job,
                    job_state(job),
                ) from None
        return to_model(raw)

    async def _until_gone(self, resource: Resource, name: str, namespace: str) -> None:
        async for event in list_watch(
            await self._client(), resource, namespace, self._settings.retry, field_selector=f"metadata.name={name}"
        ):
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
        wanted = conditions_wanted(until)
        ns = namespace or self.namespace
        started = time.monotonic()
        last: list[Job] = []

        async def watch() -> Job:
            raw = await self._get_raw(name, kind, ns)
            resource = resource_of_object(raw)
            async for event in list_watch(
                await self._client(), resource, ns, self._settings.retry, field_selector=f"metadata.name={name}"
            ):
                if event.type == "SYNC":
                    items = event.object["items"]
                    if not items:
                        raise JobNotFoundError(f'{resource.kind} "{name}" was deleted while waiting', status=404)
                    obj = items[0]
                elif event.type == "DELETED":
                    raise JobNotFoundError(f'{resource.kind} "{name}" was deleted while waiting', status=404)
                else:
                    obj = event.object
                job = to_model(obj)
                last[:] = [job]
                if on_progress is not None:
                    on_progress(JobProgress.of(job, started))
                done = settled(job, wanted)
                if done is not None:
                    return done
            raise AssertionError("unreachable: the list-watch never ends")  # pragma: no cover

        try:
            return await asyncio.wait_for(watch(), timeout)
        except TimeoutError:
            job = last[0] if last else None
            state = job_state(job) if job else "unknown"
            counts = "/".join(str(n) for n in replica_counts(job)) if job else "-"
            stuck = await self.why_pending(name, ns, job.metadata.uid) if job else ""
            raise JobTimeoutError(
                f"timed out after {timeout:g}s waiting for {ns}/{name} to be {' or '.join(sorted(wanted))}; "
                f"last state {state}, replicas active/succeeded/failed {counts}{stuck}",
                job,
                state,
            ) from None

    async def why_pending(self, name: str, namespace: str, uid: str | None) -> str:
        """``; pod NAME is Pending: <the scheduler's or kubelet's words>`` for the first of the job's pods that
        has not started, so a wait that ran out says what held the job up; empty when none is (or the pods
        cannot be read)."""
        try:
            kube = await self._client()
            listed = await kube.list(PODS, namespace=namespace, label_selector=f"{c.LABEL_JOB_NAME}={name}")
            pods = owned_by(listed.items, uid)
        except (kerrors.KubeError, OSError):
            return ""
        pending = [p for p in sorted(pods, key=pod_order) if (p.get("status") or {}).get("phase") == "Pending"]
        for pod in pending:
            why = pending_reason(pod)
            if why:
                more = f" (and {len(pending) - 1} more pods Pending)" if len(pending) > 1 else ""
                return f"; pod {pod['metadata']['name']} is Pending: {why}{more}"
        return ""

    # --------------------------------------------------------------------------------------------- logs

    async def logs(
        self,
        name: str,
        replica: str | None = "master",
        index: int | None = None,
        *,
        kind: str | None = None,
        follow: bool = False,
        container: str | None = None,
        namespace: str | None = None,
    ) -> str:
        """The log of one replica (``replica="worker", index=1``; index 0 when not given), or with
        ``replica=None`` of every pod, each line prefixed with ``[pod]``. ``replica="master"`` means the
        Master/Chief (worker 0 when the job has none). With ``follow=True`` it returns when the pods have
        finished."""
        if replica is not None and index is None:
            index = 0  # one replica's log: the first one unless told
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
        An ``index`` beyond the replica type's replicas, or a ``container`` its pods do not have, raises
        ``ValueError`` saying what the job has.
        """
        ns = namespace or self.namespace
        raw = await self._get_raw(name, kind, ns)
        job = to_model(raw)
        want_type, want_index = replica_selector(job, replica, index)
        check_replica_index(job, want_type, want_index)
        if container is not None:
            check_container(job, want_type, container)
        selector = f"{c.LABEL_JOB_NAME}={name}"
        if want_type is not None:
            selector += f",{c.LABEL_REPLICA_TYPE}={want_type.lower()}"
        if want_index is not None:
            selector += f",{c.LABEL_REPLICA_INDEX}={want_index}"
        pick = container or job.framework.container_name
        if not follow:
            kube = await self._client()
            with translated():
                pods = owned_by((await kube.list(PODS, namespace=ns, label_selector=selector)).items, job.metadata.uid)
            if not pods and (want_type is not None or job_state(job) == "Failed"):
                raise JobNotFoundError(_no_pod_message(job, want_type, want_index), status=404)
            for pod in sorted(pods, key=pod_order):
                text = await read_log(kube, pod, ns, pick)
                for text_line in text.splitlines():
                    yield LogLine(pod["metadata"]["name"], text_line)
            return
        single = want_type is not None and want_index is not None
        follower = LogFollower(
            await self._client(),
            self._settings.retry,
            job_resource=resource_for(job),
            name=name,
            namespace=ns,
            selector=selector,
            owner_uid=job.metadata.uid,
            container=pick,
            single=single,
        )
        async with contextlib.aclosing(follower.lines()) as lines:
            async for log_line in lines:
                yield log_line

    async def previous_logs(
        self,
        name: str,
        replica: str | None = None,
        index: int | None = None,
        *,
        kind: str | None = None,
        container: str | None = None,
        namespace: str | None = None,
    ) -> builtins.list[PreviousAttempt]:
        """The last failed run of each rank (or of one replica type, or one replica): the kubelet's previous log
        while the pod lives, else the last lines the controller kept in the job's status when it replaced the
        pod. Empty when no rank has failed (that the status still remembers: its last 10 failures)."""
        ns = namespace or self.namespace
        job = to_model(await self._get_raw(name, kind, ns))
        want_type, want_index = replica_selector(job, replica, index)
        kube = await self._client()
        with translated():
            listed = await kube.list(PODS, namespace=ns, label_selector=f"{c.LABEL_JOB_NAME}={name}")
            pods = owned_by(listed.items, job.metadata.uid)
            return await previous_attempts(
                kube,
                job,
                pods,
                namespace=ns,
                container=container or job.framework.container_name,
                want_type=want_type,
                want_index=want_index,
            )

    # -------------------------------------------------------------------------------------------- watch

    async def watch(
        self,
        kind: str | None = None,
        selector: str | None = None,
        *,
        name: str | None = None,
        namespace: str | None = None,
    ) -> AsyncGenerator[JobEvent, None]:
        """Every job of one kind (or of every kind the cluster serves) as it changes, for ever: first each
        existing job as ``ADDED``, then a :class:`JobEvent` per change, of any kind as it happens.
        ``selector`` filters by labels, ``name`` to one job. After the watch had to list again (the server's
        history expired), the jobs are reported again as ``ADDED``. Stop by leaving the ``async for``
        (or cancelling)."""
        kube = await self._client()
        resources, required = await self._resources(kind)
        ns = namespace or self.namespace
        field_selector = f"metadata.name={name}" if name else None
        queue: asyncio.Queue[JobEvent | BaseException] = asyncio.Queue()

        async def one(resource: Resource) -> None:
            try:
                events = list_watch(
                    kube, resource, ns, self._settings.retry, field_selector=field_selector, label_selector=selector
                )
                async for event in events:
                    if event.type == "SYNC":
                        for item in event.object["items"]:
                            await queue.put(JobEvent("ADDED", to_model(item)))
                    else:
                        await queue.put(JobEvent(event.type, to_model(event.object)))
            except JobNotFoundError as exc:
                # The kind asked for is not served; without a kind, one not served has no jobs.
                if resource in required:
                    await queue.put(exc)
            except Exception as exc:
                await queue.put(exc)

        tasks = [asyncio.create_task(one(r), name=f"watch {r.plural}.{r.group}") for r in resources]
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ----------------------------------------------------------------------------------------- describe

    async def describe(self, name: str, kind: str | None = None, *, namespace: str | None = None) -> JobDescription:
        """The job with its pods (node, phase, host port in host mode), their Services (targetPort) and
        the recent events of the job, its pods and Services."""
        ns = namespace or self.namespace
        job = to_model(await self._get_raw(name, kind, ns))
        kube = await self._client()
        selector = f"{c.LABEL_JOB_NAME}={name}"
        with translated():
            pods, services, events = await asyncio.gather(
                kube.list(PODS, namespace=ns, label_selector=selector),
                kube.list(SERVICES, namespace=ns, label_selector=selector),
                kube.list(EVENTS, namespace=ns),
            )
        by_service = {s["metadata"]["name"]: s for s in owned_by(services.items, job.metadata.uid)}
        infos = []
        for pod in sorted(owned_by(pods.items, job.metadata.uid), key=pod_order):
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            notes = meta.get("annotations") or {}
            service = by_service.get(meta["name"])
            ports = ((service or {}).get("spec") or {}).get("ports") or [{}]
            host_port = notes.get(c.ANNOTATION_HOST_PORT)
            status = container_status(pod, job.framework.container_name)
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
        mine = events_of(job, pods.items, services.items, events.items)
        owned = sorted(owned_by(pods.items, job.metadata.uid), key=pod_order)
        devices, unreadable = await _claimed_devices(kube, ns, owned)
        return JobDescription(
            job=job, pods=infos, events=mine[-DESCRIBE_EVENTS:], devices=devices, devices_unreadable=unreadable
        )


async def _claimed_devices(
    kube: KubeClient, ns: str, pods: list[dict[str, Any]]
) -> tuple[list[DeviceInfo], str | None]:
    """The devices of the pods' DRA claims (no request at all for pods without claims)."""
    wanted = [(pod["metadata"]["name"], name) for pod in pods for name in claim_names(pod)]
    if not wanted:
        return [], None
    got = await asyncio.gather(
        *(kube.get(RESOURCE_CLAIMS, name, namespace=ns) for _, name in wanted), return_exceptions=True
    )
    devices: list[DeviceInfo] = []
    for (pod, name), claim in zip(wanted, got, strict=True):
        if isinstance(claim, kerrors.Forbidden):
            return devices, f"cannot read the pods' ResourceClaims: {claim}"
        if isinstance(claim, kerrors.NotFound):
            continue  # the pod is going, and its generated claim with it
        if isinstance(claim, BaseException):
            raise claim
        reported = device_statuses(claim)
        for r in allocation_results(claim):
            key = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            entry = reported.get(key)
            ready = None
            if entry is not None:
                ready = any(
                    x.get("type") == "Ready" and x.get("status") == "True" for x in entry.get("conditions") or []
                )
            interface = ((entry or {}).get("networkData") or {}).get("interfaceName")
            devices.append(DeviceInfo(pod, name, str(r.get("request")), *key, ready=ready, interface=interface))
    return devices, None


def _no_pod_message(job: Job, want_type: str | None, want_index: int | None) -> str:
    """Why there is no pod to read: not made yet, or (a failed job) deleted for good, with what remains."""
    where = ""
    if want_type is not None:
        where = f"{want_type.lower()}-{want_index}" if want_index is not None else want_type.lower()
    missing = f'job "{job.name}" has no pod {job.name}-{where}' if where else f'job "{job.name}" has no pods'
    state = job_state(job)
    if state not in ("Failed", "Succeeded"):
        return f"{missing} (yet)"
    finished = true_condition(job, state)
    why = f" ({finished.reason}: {finished.message})" if finished is not None and finished.reason else ""
    failures = (job.status.failures if job.status else None) or []
    hint = (
        f"; `kubedl-py logs {job.name} --previous` shows the last lines of its failed ranks"
        if failures
        else "; no failure was recorded"
    )
    return f"{missing}: the job has {state}{why} and its pods were deleted{hint}"
