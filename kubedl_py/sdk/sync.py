"""The blocking twin of :class:`~kubedl_py.sdk.client.AsyncTrainingClient`, for scripts and notebooks."""

from __future__ import annotations

import asyncio
import builtins
import os
import threading
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar, cast, overload

from kubedl_py.api.jobs import Job
from kubedl_py.kube.client import ClientSettings
from kubedl_py.sdk.client import AnyJob, AsyncTrainingClient, JobSource, ProgressCallback
from kubedl_py.sdk.config import ResolvedConfig
from kubedl_py.sdk.views import JobDescription, JobEvent, LogLine, PreviousAttempt

T = TypeVar("T")


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
        index: int | None = None,
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

    def watch(
        self,
        kind: str | None = None,
        selector: str | None = None,
        *,
        name: str | None = None,
        namespace: str | None = None,
    ) -> Iterator[JobEvent]:
        """See :meth:`AsyncTrainingClient.watch`; a plain iterator that never ends by itself (``break`` out)."""
        stream = self._async.watch(kind, selector, name=name, namespace=namespace)
        try:
            while True:
                yield self._run(_anext(stream))
        finally:
            if not self._loop.is_closed():
                self._run(stream.aclose())

    def describe(self, name: str, kind: str | None = None, *, namespace: str | None = None) -> JobDescription:
        """See :meth:`AsyncTrainingClient.describe`."""
        return self._run(self._async.describe(name, kind, namespace=namespace))

    def previous_logs(
        self,
        name: str,
        replica: str | None = None,
        index: int | None = None,
        *,
        kind: str | None = None,
        container: str | None = None,
        namespace: str | None = None,
    ) -> builtins.list[PreviousAttempt]:
        """See :meth:`AsyncTrainingClient.previous_logs`."""
        return self._run(
            self._async.previous_logs(name, replica, index, kind=kind, container=container, namespace=namespace)
        )


async def _anext(stream: AsyncIterator[T]) -> T:
    return await stream.__anext__()
