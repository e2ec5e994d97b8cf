"""Following the logs of a job's pods as they are written, across restarts, until the job is over.

Why a class with a few small tasks: following is several things at once -- the pods appear, restart and
end while being read, the job ends while some pods still run (a parameter server), and the caller wants
one ordered stream of lines that ends by itself. :class:`LogFollower` keeps the shared state (the pods
seen, one stream task per pod, whether the job is over) and a broadcast "something changed" signal; each
task does one thing:

- ``_watch_pods``: a list/watch of the selected pods keeps ``pods`` current and starts a stream per pod.
- ``_watch_job``: a list/watch of the job marks it over once it has finished or was deleted.
- ``_stream``: one pod's log, again after each restart in place, until the pod has ended.
- ``_supervise``: decides when following is done, lets ending streams finish, gives pods still running a
  short drain (:data:`FOLLOW_DRAIN_SECONDS`), then stops the rest.

Lines and failures reach the caller through one queue; a ``None`` on it means "done".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Coroutine, Mapping
from typing import Any, Final

from kubedl_py.api import constants as c
from kubedl_py.api.common import ReplicaFailure
from kubedl_py.api.jobs import Job
from kubedl_py.kube import errors as kerrors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import PODS, Resource
from kubedl_py.kube.retry import RetrySettings
from kubedl_py.sdk.errors import translate, translated
from kubedl_py.sdk.pods import container_of, container_status, owned_by
from kubedl_py.sdk.views import LogLine, PreviousAttempt, is_finished
from kubedl_py.sdk.watching import list_watch

__all__ = ["FOLLOW_DRAIN_SECONDS", "LogFollower", "previous_attempts", "read_log"]

#: how long ``stream_logs(follow=True)`` keeps reading pods still running when their job has finished
FOLLOW_DRAIN_SECONDS: Final = 2.0

_ENDED: Final = ("Succeeded", "Failed")


async def read_log(kube: KubeClient, pod: Mapping[str, Any], namespace: str, container: str) -> str:
    """A pod's log as it is now; empty when the container has not started yet (or the pod is gone)."""
    try:
        return await kube.read_log(pod["metadata"]["name"], namespace=namespace, container=container_of(pod, container))
    except kerrors.BadRequest:  # not started yet (ContainerCreating): nothing to show
        return ""
    except kerrors.NotFound:
        return ""
    except kerrors.KubeError as exc:
        with translated():
            raise exc from None
    raise AssertionError("unreachable")  # pragma: no cover


async def previous_attempts(
    kube: KubeClient,
    job: Job,
    pods: list[dict[str, Any]],
    *,
    namespace: str,
    container: str,
    want_type: str | None,
    want_index: int | None,
) -> list[PreviousAttempt]:
    """The last failed run of each selected rank (``logs --previous``): while its pod lives and its container
    restarted in place, the kubelet's previous log; else the termination message the controller kept in the
    job's status when it replaced the pod (``status.failures``)."""
    latest: dict[tuple[str, int], ReplicaFailure] = {}
    for recorded in (job.status.failures if job.status else None) or []:
        if recorded.replica_type in job.replica_specs and recorded.index is not None:
            latest[(recorded.replica_type, recorded.index)] = recorded  # oldest first: the last one stays
    by_slot: dict[tuple[str, int], dict[str, Any]] = {}
    types = {t.lower(): t for t in job.replica_specs}
    for listed in pods:
        labels = (listed.get("metadata") or {}).get("labels") or {}
        replica_type = types.get(str(labels.get(c.LABEL_REPLICA_TYPE, "")))
        index_text = str(labels.get(c.LABEL_REPLICA_INDEX, ""))
        if replica_type is not None and index_text.isdigit():
            by_slot[(replica_type, int(index_text))] = listed
    order = list(job.replica_specs)

    def rank(slot: tuple[str, int]) -> tuple[bool, int, int]:
        replica_type, index = slot
        return replica_type not in job.framework.master_types, order.index(replica_type), index

    slots = sorted({*latest, *by_slot}, key=rank)
    attempts: list[PreviousAttempt] = []
    for replica_type, index in slots:
        if (want_type is not None and replica_type != want_type) or (want_index is not None and index != want_index):
            continue
        failure = latest.get((replica_type, index))
        pod = by_slot.get((replica_type, index))
        status = container_status(pod, container) if pod is not None else None
        restarts = int((status or {}).get("restartCount") or 0)
        if pod is not None and restarts:
            name = str(pod["metadata"]["name"])
            with contextlib.suppress(kerrors.BadRequest, kerrors.NotFound):
                text = await kube.read_log(
                    name, namespace=namespace, container=container_of(pod, container), previous=True
                )
                same = failure is not None and failure.pod_uid == pod["metadata"].get("uid")
                attempts.append(PreviousAttempt(name, replica_type, index, "kubelet", text, failure if same else None))
                continue
        if failure is not None:
            name = failure.pod or f"{job.name}-{replica_type.lower()}-{index}"
            attempts.append(PreviousAttempt(name, replica_type, index, "status", failure.message or "", failure))
    return attempts


class _Changes:
    """A broadcast "something changed" signal: waiters wake on the next :meth:`notify`."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


class LogFollower:
    """The lines of the pods matching ``selector`` (of job ``name``), as they come, until the pods are done.

    ``single``: one replica is followed, so following ends when its pod ends even if the job goes on.
    """

    def __init__(
        self,
        kube: KubeClient,
        retry: RetrySettings,
        *,
        job_resource: Resource,
        name: str,
        namespace: str,
        selector: str,
        container: str,
        single: bool,
        owner_uid: str | None = None,
    ) -> None:
        self._kube = kube
        self._retry = retry
        self._job_resource = job_resource
        self._name = name
        self._namespace = namespace
        self._selector = selector
        self._owner_uid = owner_uid
        self._container = container
        self._single = single
        self._queue: asyncio.Queue[LogLine | BaseException | None] = asyncio.Queue()
        self._changes = _Changes()
        self._pods: dict[str, dict[str, Any]] = {}
        self._streams: dict[str, asyncio.Task[None]] = {}
        self._job_over = False
        self._synced = False  # the pods have been listed: until then "no pod" means "not known yet"

    async def lines(self) -> AsyncGenerator[LogLine, None]:
        """Every line, in arrival order; raises the first failure (as the SDK's error)."""
        tasks = [
            asyncio.create_task(self._guarded(self._watch_pods())),
            asyncio.create_task(self._guarded(self._watch_job())),
            asyncio.create_task(self._supervisor()),
        ]
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
            while not self._queue.empty():  # lines that arrived while the streams were being wound down
                item = self._queue.get_nowait()
                if isinstance(item, LogLine):
                    yield item
        finally:
            for task in [*tasks, *self._streams.values()]:
                task.cancel()
            await asyncio.gather(*tasks, *self._streams.values(), return_exceptions=True)

    async def _stream(self, pod_name: str, uid: str) -> None:
        streamed = -1
        try:
            while True:
                pod = self._pods.get(pod_name)
                if pod is None or pod["metadata"].get("uid") != uid:
                    return
                status = container_status(pod, self._container)
                state = (status or {}).get("state") or {}
                restarts = int((status or {}).get("restartCount") or 0)
                if ("running" in state or "terminated" in state) and restarts > streamed:
                    streamed = restarts
                    await self._copy(pod)
                    continue
                if _phase(pod) in _ENDED:
                    return
                await self._changes.wait()
        finally:
            self._changes.notify()

    async def _copy(self, pod: Mapping[str, Any]) -> None:
        """One run of the pod's container, line by line, into the queue (a log not there yet is skipped)."""
        pod_name = str(pod["metadata"]["name"])
        with contextlib.suppress(kerrors.BadRequest, kerrors.NotFound, kerrors.TransportError):
            stream = self._kube.stream_log(
                pod_name, namespace=self._namespace, container=container_of(pod, self._container)
            )
            async with contextlib.aclosing(stream) as lines:
                async for text in lines:
                    await self._queue.put(LogLine(pod_name, text))

    async def _watch_pods(self) -> None:
        async for event in list_watch(self._kube, PODS, self._namespace, self._retry, label_selector=self._selector):
            pods = self._pods
            if event.type == "SYNC":
                self._synced = True
                pods.clear()
                pods.update({p["metadata"]["name"]: p for p in owned_by(event.object["items"], self._owner_uid)})
            elif not owned_by([event.object], self._owner_uid):
                continue  # a pod of another job of the same name (another kind's)
            elif event.type == "DELETED":
                gone = event.object["metadata"]["name"]
                if (pods.get(gone) or {}).get("metadata", {}).get("uid") == event.object["metadata"].get("uid"):
                    pods.pop(gone, None)
            else:
                pods[event.object["metadata"]["name"]] = event.object
            for pod_name, pod in pods.items():
                uid = str(pod["metadata"].get("uid"))
                if uid not in self._streams:
                    self._streams[uid] = asyncio.create_task(self._stream(pod_name, uid), name=f"log {pod_name}")
            self._changes.notify()

    async def _watch_job(self) -> None:
        async for event in list_watch(
            self._kube,
            self._job_resource,
            self._namespace,
            self._retry,
            field_selector=f"metadata.name={self._name}",
        ):
            if event.type == "SYNC":
                items = event.object["items"]
                over = not items or is_finished(items[0])
            else:
                over = event.type == "DELETED" or is_finished(event.object)
            if over:
                self._job_over = True
                self._changes.notify()
                return

    async def _supervise(self) -> None:
        while True:
            live = [p for p in self._pods.values() if _phase(p) not in _ENDED]
            if self._synced and (self._job_over or (self._single and self._pods and not live)):
                # Finished pods' streams end by themselves once their last line is out. Pods still
                # running when the job ended (a TF worker finishing after worker 0, a PS) get a short
                # drain: what they wrote until now is still on its way through the API server.
                ending = [
                    task
                    for uid, task in self._streams.items()
                    if any(p["metadata"].get("uid") == uid and p not in live for p in self._pods.values())
                ]
                if ending:
                    await asyncio.wait(ending)
                running = [task for task in self._streams.values() if not task.done()]
                if running:
                    await asyncio.wait(running, timeout=FOLLOW_DRAIN_SECONDS)
                for task in self._streams.values():
                    task.cancel()
                return
            await self._changes.wait()

    async def _guarded(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a task; its failure goes to the caller through the queue (as the SDK's error)."""
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except kerrors.KubeError as exc:  # a log stream's failure: the SDK's error, not the machinery's
            error = translate(exc)
            error.__cause__ = exc
            await self._queue.put(error)
        except BaseException as exc:
            await self._queue.put(exc)

    async def _supervisor(self) -> None:
        await self._guarded(self._supervise())
        await self._queue.put(None)
