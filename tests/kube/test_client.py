"""KubeClient against the embedded API server over real HTTP: CRUD, pages, patches, errors, retries, watch."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from kubedl_py.kube import errors, transport
from kubedl_py.kube.client import CONFIGMAPS, PODS, ClientSettings, KubeClient, WatchEvent, in_cluster_available
from kubedl_py.kube.retry import RetrySettings


def configmap(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]},
    }


async def test_kubeconfig_path_and_context(cluster: Any) -> None:
    async with KubeClient(kubeconfig=cluster.kubeconfig_path) as kube:
        assert kube.host.rstrip("/") == str(cluster.url).rstrip("/")
        listed = await kube.list(CONFIGMAPS, namespace="default")
        assert listed.resource_version


async def test_create_get_replace_patch_delete(kube: KubeClient, namespace: str) -> None:
    created = await kube.create(CONFIGMAPS, configmap("a", app="x"), namespace=namespace)
    assert created["metadata"]["uid"]
    with pytest.raises(errors.AlreadyExists):
        await kube.create(CONFIGMAPS, configmap("a"), namespace=namespace)
    got = await kube.get(CONFIGMAPS, "a", namespace=namespace)
    assert got["data"] == {"k": "v"}

    # Optimistic concurrency: a replace with a stale resourceVersion is a Conflict.
    fresh = dict(got, data={"k": "v2"})
    replaced = await kube.replace(CONFIGMAPS, fresh, namespace=namespace)
    assert replaced["data"] == {"k": "v2"}
    with pytest.raises(errors.Conflict):
        await kube.replace(CONFIGMAPS, dict(got, data={"k": "stale"}), namespace=namespace)

    merged = await kube.patch(CONFIGMAPS, "a", {"metadata": {"labels": {"extra": "1"}}}, namespace=namespace)
    assert merged["metadata"]["labels"] == {"app": "x", "extra": "1"}
    jsonp = await kube.patch(
        CONFIGMAPS, "a", [{"op": "replace", "path": "/data/k", "value": "v3"}], namespace=namespace, patch_type="json"
    )
    assert jsonp["data"] == {"k": "v3"}

    with pytest.raises(errors.Conflict):
        await kube.delete(CONFIGMAPS, "a", namespace=namespace, uid="not-the-uid")
    await kube.delete(CONFIGMAPS, "a", namespace=namespace, uid=created["metadata"]["uid"])
    with pytest.raises(errors.NotFound) as caught:
        await kube.get(CONFIGMAPS, "a", namespace=namespace)
    assert '"a"' in caught.value.message  # the server's message is kept


async def test_list_reads_every_page(kube: KubeClient, namespace: str) -> None:
    for i in range(8):
        await kube.create(CONFIGMAPS, configmap(f"cm-{i}", batch="b" if i % 2 else "a"), namespace=namespace)
    listed = await kube.list(CONFIGMAPS, namespace=namespace)  # page size 3 in the fixture
    assert sorted(o["metadata"]["name"] for o in listed.items) == [f"cm-{i}" for i in range(8)]
    assert all(o["kind"] == "ConfigMap" and o["apiVersion"] == "v1" for o in listed.items)
    selected = await kube.list(CONFIGMAPS, namespace=namespace, label_selector="batch=b")
    assert len(selected.items) == 4
    await kube.delete_collection(CONFIGMAPS, namespace=namespace, label_selector="batch=a")
    left = await kube.list(CONFIGMAPS, namespace=namespace)
    assert sorted(o["metadata"]["name"] for o in left.items) == ["cm-1", "cm-3", "cm-5", "cm-7"]


async def test_status_subresource(kube: KubeClient, namespace: str) -> None:
    await kube.create(PODS, pod("p"), namespace=namespace)
    patched = await kube.patch_status(
        PODS, "p", {"status": {"conditions": [{"type": "Custom", "status": "True"}]}}, namespace=namespace
    )
    assert {"type": "Custom", "status": "True"}.items() <= patched["status"]["conditions"][0].items()


async def test_invalid_object_names_the_field(kube: KubeClient, namespace: str) -> None:
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"}, "spec": {"containers": []}}
    with pytest.raises(errors.Invalid) as caught:
        await kube.create(PODS, bad, namespace=namespace)
    assert caught.value.status == 422


async def test_server_errors_are_retried_and_counted(cluster: Any, kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIGMAPS, configmap("a"), namespace=namespace)
    cluster.faults.fail(503, verb="get", resource="configmaps", times=2)
    got = await kube.get(CONFIGMAPS, "a", namespace=namespace)
    assert got["metadata"]["name"] == "a"
    assert kube.retry.retries == 2
    assert kube.metrics is not None
    assert kube.metrics.value("kubedl_api_errors_total", {"verb": "get", "resource": "configmaps", "code": "503"}) == 2


async def test_client_errors_are_not_retried(cluster: Any, kube: KubeClient, namespace: str) -> None:
    cluster.faults.fail(403, verb="list", resource="configmaps", times=1)
    with pytest.raises(errors.Forbidden):
        await kube.list(CONFIGMAPS, namespace=namespace)
    assert kube.retry.retries == 0


async def test_too_many_requests_carries_retry_after(cluster: Any, namespace: str) -> None:
    cluster.faults.fail(429, verb="get", resource="configmaps", retry_after=7)
    settings = ClientSettings(retry=RetrySettings(attempts=1))
    async with KubeClient(configuration=cluster.configuration, settings=settings) as kube:
        with pytest.raises(errors.TooManyRequests) as caught:
            await kube.get(CONFIGMAPS, "a", namespace=namespace)
    assert caught.value.retry_after == 7


async def test_watch_streams_events_and_ends_at_the_server_timeout(kube: KubeClient, namespace: str) -> None:
    start = await kube.list(CONFIGMAPS, namespace=namespace)
    seen: list[WatchEvent] = []
    events = kube.watch(CONFIGMAPS, namespace=namespace, resource_version=start.resource_version, timeout_seconds=1)

    async def consume() -> None:
        async with contextlib.aclosing(events):
            async for event in events:
                seen.append(event)

    consumer = asyncio.create_task(consume())
    await kube.create(CONFIGMAPS, configmap("w"), namespace=namespace)
    await kube.patch(CONFIGMAPS, "w", {"data": {"k": "2"}}, namespace=namespace)
    await kube.delete(CONFIGMAPS, "w", namespace=namespace)
    async with asyncio.timeout(5):
        await consumer  # ends by itself: timeoutSeconds=1
    kinds = [(e.type, e.object["metadata"]["name"]) for e in seen if e.type != "BOOKMARK"]
    assert kinds == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


async def test_watch_from_an_expired_version_raises_gone(cluster: Any, kube: KubeClient, namespace: str) -> None:
    start = await kube.list(CONFIGMAPS, namespace=namespace)
    cluster.faults.expire_watches(resource="configmaps", times=1)
    events = kube.watch(CONFIGMAPS, namespace=namespace, resource_version=start.resource_version, timeout_seconds=5)
    with pytest.raises(errors.Gone):
        async with contextlib.aclosing(events):
            async for _ in events:
                pass


async def test_transport_error_when_nothing_listens() -> None:
    from kubernetes_asyncio.client import Configuration

    configuration = Configuration(host="http://127.0.0.1:9")  # discard port: connection refused
    settings = ClientSettings(retry=RetrySettings(attempts=2, initial_delay=0.01))
    async with KubeClient(configuration=configuration, settings=settings) as kube:
        with pytest.raises(errors.TransportError):
            await kube.get(CONFIGMAPS, "x", namespace="default")
        assert kube.retry.retries == 1


def test_in_cluster_available_needs_the_service_host_and_a_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    monkeypatch.setattr(transport, "SERVICE_ACCOUNT_TOKEN", str(token))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert not in_cluster_available()  # no token mounted
    token.write_text("t")
    assert in_cluster_available()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert not in_cluster_available()


async def test_the_environment_proxy_is_honoured_and_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP(S)_PROXY still routes requests after the client stopped consulting the environment per request
    (it is read once, at open), and NO_PROXY still bypasses it."""
    from aiohttp import web
    from kubernetes_asyncio.client import Configuration

    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(str(request.url))
        return web.json_response({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "via-proxy"}})

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        # The API server's address is one nothing listens on: only the proxy can answer.
        configuration = Configuration(host="http://api.invalid:6443")
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with KubeClient(configuration=configuration) as kube:
            got = await kube.get(CONFIGMAPS, "x", namespace="default")
        assert got["metadata"]["name"] == "via-proxy"
        assert seen == ["http://api.invalid:6443/api/v1/namespaces/default/configmaps/x"]

        monkeypatch.setenv("NO_PROXY", "api.invalid")
        settings = ClientSettings(retry=RetrySettings(attempts=1))
        async with KubeClient(configuration=configuration, settings=settings) as kube:
            with pytest.raises(errors.TransportError):
                await kube.get(CONFIGMAPS, "x", namespace="default")
        assert len(seen) == 1
    finally:
        await runner.cleanup()
