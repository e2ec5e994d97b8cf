"""The SDK's own list/watch loop (behind ``wait``, ``delete(wait=True)`` and following logs): what it retries,
how it backs off, when it gives up, and that only the SDK's exceptions come out of it.

First against a scripted fake API (each failure exact), then against the embedded cluster's fault injection.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from kubedl_py.kube import errors
from kubedl_py.kube.client import ClientSettings, ObjectList, WatchEvent
from kubedl_py.kube.retry import RetrySettings
from kubedl_py.sdk import (
    AsyncTrainingClient,
    ClusterError,
    ClusterUnreachableError,
    ForbiddenError,
    job_state,
)
from tests.integration.conftest import Env, RunningController
from tests.sdk.helpers import running_forever, succeeding

RETRY = RetrySettings(attempts=4, initial_delay=0.01, max_delay=0.05, jitter=0.0, deadline=30.0)


def job(rv: int, condition: str | None = None) -> dict[str, Any]:
    body = succeeding("j").to_dict()
    body["metadata"].update(namespace="default", uid="u-1", resourceVersion=str(rv))
    if condition:
        body["status"] = {"conditions": [{"type": condition, "status": "True"}]}
    return body


Step = WatchEvent | BaseException


class FakeApi:
    """``get``/``list`` answer the job; each ``watch`` plays the next script (no script: a quiet watch)."""

    def __init__(self, *watches: list[Step]) -> None:
        self.watches = list(watches)
        self.watch_times: list[float] = []
        self.list_calls = 0

    async def get(self, resource: Any, name: str, **kwargs: Any) -> dict[str, Any]:
        if resource.kind != "PyTorchJob":
            raise errors.NotFound(f'{resource.plural} "{name}" not found', status=404)
        return job(1)

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        raise errors.NotFound(f"{path} not found (kubeflow.org is not served)", status=404)

    async def list(self, resource: Any, **kwargs: Any) -> ObjectList:
        self.list_calls += 1
        return ObjectList([job(1)], str(self.list_calls))

    async def watch(self, resource: Any, **kwargs: Any) -> AsyncGenerator[WatchEvent, None]:
        self.watch_times.append(asyncio.get_running_loop().time())
        if len(self.watch_times) > 50:
            raise AssertionError("the watch is being reopened in a busy loop")
        await asyncio.sleep(0)
        if not self.watches:
            await asyncio.Event().wait()
        for step in self.watches.pop(0):
            if isinstance(step, BaseException):
                raise step
            yield step

    async def close(self) -> None:
        pass


def sdk_client(api: FakeApi) -> AsyncTrainingClient:
    client = AsyncTrainingClient(configuration=object(), settings=ClientSettings(retry=RETRY))
    client._connection._kube = api  # type: ignore[assignment]
    return client


def unavailable() -> errors.ServerError:
    return errors.ServerError("the server is currently unable to handle the request", status=503)


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


async def test_a_retryable_watch_error_is_retried_after_a_backoff() -> None:
    api = FakeApi(
        [unavailable()], [errors.TransportError("connection refused")], [WatchEvent("MODIFIED", job(2, "Succeeded"))]
    )
    done = await sdk_client(api).wait("j", timeout=5)
    assert job_state(done) == "Succeeded"
    assert len(api.watch_times) == 3
    assert gaps(api.watch_times)[0] >= 0.01 and gaps(api.watch_times)[1] >= 0.02


async def test_a_watch_that_ends_at_once_without_events_backs_off() -> None:
    api = FakeApi([], [], [WatchEvent("MODIFIED", job(2, "Succeeded"))])
    done = await sdk_client(api).wait("j", timeout=5)
    assert job_state(done) == "Succeeded"
    assert len(api.watch_times) == 3, "reopened after a backoff, not in a loop"
    assert gaps(api.watch_times)[0] >= 0.01 and gaps(api.watch_times)[1] >= 0.02
    assert api.list_calls == 1, "resumed from the same resourceVersion"


async def test_a_watch_that_delivered_events_resumes_at_once() -> None:
    api = FakeApi(
        [WatchEvent("MODIFIED", job(2, "Running")), errors.TransportError("connection reset")],
        [WatchEvent("MODIFIED", job(3, "Succeeded"))],
    )
    assert job_state(await sdk_client(api).wait("j", timeout=5)) == "Succeeded"
    assert len(api.watch_times) == 2 and gaps(api.watch_times)[0] < 0.01


async def test_gone_lists_again() -> None:
    api = FakeApi([errors.Gone("too old resource version", status=410)], [WatchEvent("MODIFIED", job(5, "Succeeded"))])
    assert job_state(await sdk_client(api).wait("j", timeout=5)) == "Succeeded"
    assert api.list_calls == 2


async def test_a_persistent_server_error_gives_up_as_a_cluster_error() -> None:
    api = FakeApi(*([unavailable()] for _ in range(10)))
    with pytest.raises(ClusterError) as info:
        await sdk_client(api).wait("j", timeout=5)
    assert not isinstance(info.value, errors.KubeError)
    assert info.value.status == 503
    assert "failed 4 times in a row" in str(info.value) and "unable to handle the request" in str(info.value)
    assert len(api.watch_times) == RETRY.attempts


async def test_watches_that_keep_ending_at_once_give_up() -> None:
    api = FakeApi(*([] for _ in range(10)))
    with pytest.raises(ClusterUnreachableError, match="ended at once without events"):
        await sdk_client(api).wait("j", timeout=5)
    assert len(api.watch_times) == RETRY.attempts


async def test_a_client_error_on_the_watch_is_raised_at_once_as_the_sdks() -> None:
    forbidden = errors.Forbidden('pytorchjobs is forbidden: User "x" cannot watch', status=403, reason="Forbidden")
    api = FakeApi([forbidden])
    with pytest.raises(ForbiddenError, match="cannot watch") as info:
        await sdk_client(api).wait("j", timeout=5)
    assert info.value.__cause__ is forbidden
    assert len(api.watch_times) == 1


# ------------------------------------------------------------------------------- the embedded cluster


async def test_wait_survives_a_503_on_its_watch(cluster: Env, controller: RunningController) -> None:
    settings = ClientSettings(user_agent="sdk-watch-test", retry=RETRY)
    async with AsyncTrainingClient(kubeconfig=cluster.kubeconfig_path, settings=settings) as client:
        await client.submit(succeeding("flaky"))
        cluster.faults.fail(503, verb="watch", resource="pytorchjobs", times=1)
        done = await client.wait("flaky", timeout=30)
    assert job_state(done) == "Succeeded"
    refused = cluster.request_log.find(verb="watch", resource="pytorchjobs", status=503)
    assert [r.user_agent for r in refused] == ["sdk-watch-test"], "the SDK's watch got the 503 and retried it"


async def test_wait_survives_watches_cut_at_once(cluster: Env, controller: RunningController) -> None:
    settings = ClientSettings(user_agent="sdk-watch-test", retry=RETRY)
    async with AsyncTrainingClient(kubeconfig=cluster.kubeconfig_path, settings=settings) as client:
        await client.submit(succeeding("cut"))
        rule = cluster.faults.cut_watches(0.0, resource="pytorchjobs", times=2)
        done = await client.wait("cut", timeout=30)
    assert job_state(done) == "Succeeded"
    assert rule.hits == 2


async def test_a_forbidden_watch_is_an_sdk_error(cluster: Env, controller: RunningController) -> None:
    async with AsyncTrainingClient(kubeconfig=cluster.kubeconfig_path) as client:
        await client.submit(running_forever("denied"))
        cluster.faults.fail(403, verb="watch", resource="pytorchjobs")
        with pytest.raises(ForbiddenError) as info:
            await client.wait("denied", timeout=10)
    assert info.value.status == 403
    assert not isinstance(info.value, errors.KubeError)


async def test_a_watch_failing_with_503_for_good_is_one_cluster_error(
    cluster: Env, controller: RunningController
) -> None:
    settings = ClientSettings(retry=RETRY)
    async with AsyncTrainingClient(kubeconfig=cluster.kubeconfig_path, settings=settings) as client:
        await client.submit(running_forever("down"))
        cluster.faults.fail(503, verb="watch", resource="pytorchjobs")
        with pytest.raises(ClusterError, match="failed 4 times in a row") as info:
            await client.wait("down", timeout=10)
    assert info.value.status == 503
