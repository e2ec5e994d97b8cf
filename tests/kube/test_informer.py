"""Informer against the embedded API server: list+watch, scoping, cut watches, 410 re-list with missed deletes."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kubedl_py.kube.client import CONFIGMAPS, NAMESPACES, KubeClient
from kubedl_py.kube.informer import Handler, Informer, InformerSettings
from kubedl_py.kube.retry import RetrySettings
from tests.kube.support import eventually

SETTINGS = InformerSettings(backoff=RetrySettings(initial_delay=0.01, max_delay=0.1, jitter=0.01))


def configmap(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def handler(self) -> Handler:
        return Handler(
            on_add=lambda o: self.events.append(("add", o["metadata"]["name"])),
            on_update=lambda old, new: self.events.append(("update", new["metadata"]["name"])),
            on_delete=lambda o: self.events.append(("delete", o["metadata"]["name"])),
        )


@contextlib.asynccontextmanager
async def running(informer: Informer) -> Any:
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            await informer.wait_synced()
        yield informer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_list_then_watch_scoped_by_label(kube: KubeClient, namespace: str) -> None:
    await kube.create(CONFIGMAPS, configmap("before", owned="yes"), namespace=namespace)
    await kube.create(CONFIGMAPS, configmap("foreign"), namespace=namespace)
    informer = Informer(kube, CONFIGMAPS, namespace=namespace, label_selector="owned=yes", settings=SETTINGS)
    log = Log()
    informer.add_handler(log.handler())
    async with running(informer):
        assert informer.keys() == [f"{namespace}/before"]
        await kube.create(CONFIGMAPS, configmap("after", owned="yes"), namespace=namespace)
        await kube.patch(CONFIGMAPS, "before", {"data": {"k": "2"}}, namespace=namespace)
        await kube.delete(CONFIGMAPS, "before", namespace=namespace)
        await kube.create(CONFIGMAPS, configmap("foreign-2"), namespace=namespace)
        await eventually(lambda: ("delete", "before") in log.events, what="delete event")
        assert log.events == [("add", "before"), ("add", "after"), ("update", "before"), ("delete", "before")]
        assert informer.keys() == [f"{namespace}/after"]
        assert informer.get("after", namespace=namespace)["kind"] == "ConfigMap"  # type: ignore[index]
        assert informer.relists == 1


async def test_reconnects_after_a_cut_watch_without_relisting(cluster: Any, kube: KubeClient, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, namespace=namespace, settings=SETTINGS)
    log = Log()
    informer.add_handler(log.handler())
    cluster.faults.cut_watches(0.2, resource="configmaps", times=1)
    async with running(informer):
        await eventually(lambda: informer.watches >= 2, what="a second watch after the cut")
        await kube.create(CONFIGMAPS, configmap("after-cut"), namespace=namespace)
        await eventually(lambda: ("add", "after-cut") in log.events, what="event on the resumed watch")
        assert informer.relists == 1


async def test_expired_version_relists_and_delivers_missed_deletes(
    cluster: Any, kube: KubeClient, namespace: str
) -> None:
    for name in ("stays", "changes", "goes"):
        await kube.create(CONFIGMAPS, configmap(name), namespace=namespace)
    informer = Informer(kube, CONFIGMAPS, namespace=namespace, settings=SETTINGS)
    log = Log()
    informer.add_handler(log.handler())
    async with running(informer):
        assert len(informer) == 3
    # The informer is away (its cache kept) while the world changes...
    await kube.delete(CONFIGMAPS, "goes", namespace=namespace)
    await kube.patch(CONFIGMAPS, "changes", {"data": {"k": "2"}}, namespace=namespace)
    await kube.create(CONFIGMAPS, configmap("new"), namespace=namespace)
    # ...and by the time it resumes, its resourceVersion has left the server's history.
    cluster.faults.expire_watches(resource="configmaps", times=1)
    log.events.clear()
    async with running(informer):
        await eventually(lambda: informer.relists == 2 and len(log.events) == 3, what="re-list")
        assert sorted(log.events) == [("add", "new"), ("delete", "goes"), ("update", "changes")]
        assert sorted(informer.keys()) == [f"{namespace}/{n}" for n in ("changes", "new", "stays")]
        # And the watch after the re-list works.
        await kube.delete(CONFIGMAPS, "stays", namespace=namespace)
        await eventually(lambda: ("delete", "stays") in log.events, what="event after re-list")


async def _namespaces(kube: KubeClient, *names: str) -> None:
    for name in names:
        await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


async def test_several_namespaces_feed_one_cache_and_ignore_the_others(cluster: Any, kube: KubeClient) -> None:
    """A namespaced install's informer: one list and one watch per namespace, one cache; objects elsewhere
    never reach it; a 410 in one namespace re-lists that namespace only, and its missed delete is delivered
    without touching the other namespace's objects."""
    await _namespaces(kube, "na", "nb", "other")
    for ns in ("na", "nb", "other"):
        await kube.create(CONFIGMAPS, configmap(f"{ns}-1"), namespace=ns)
    informer = Informer(kube, CONFIGMAPS, namespaces=["na", "nb"], settings=SETTINGS)
    log = Log()
    informer.add_handler(log.handler())
    cluster.request_log.clear()
    async with running(informer):
        assert sorted(informer.keys()) == ["na/na-1", "nb/nb-1"]
        assert informer.relists == 2 and informer.resource_version is None
        await kube.create(CONFIGMAPS, configmap("nb-2"), namespace="nb")
        await kube.create(CONFIGMAPS, configmap("other-2"), namespace="other")
        await eventually(lambda: ("add", "nb-2") in log.events, what="the watch of nb")
        await eventually(lambda: informer.watches == 2, what="one watch per namespace")
        assert informer.get("other-2", namespace="other") is None
        lists = [r for r in cluster.request_log.records if r.verb == "list" and r.resource == "configmaps"]
        assert sorted(r.namespace for r in lists) == ["na", "nb"]  # never a cluster-wide list
    await kube.delete(CONFIGMAPS, "na-1", namespace="na")
    cluster.faults.expire_watches(resource="configmaps", namespace="na", times=1)
    log.events.clear()
    async with running(informer):
        await eventually(lambda: ("delete", "na-1") in log.events, what="the missed delete in na")
        assert ("delete", "nb-1") not in log.events and sorted(informer.keys()) == ["nb/nb-1", "nb/nb-2"]


async def test_per_namespace_informers_cost_one_list_and_watch_per_namespace(cluster: Any, kube: KubeClient) -> None:
    """The measurement behind docs/install.md: N watched namespaces cost N lists and N watch streams per
    resource where a cluster-wide informer costs one of each (and then nothing per event: both are watches)."""
    names = [f"m{i}" for i in range(4)]
    await _namespaces(kube, *names)
    for ns in names:
        await kube.create(CONFIGMAPS, configmap("x"), namespace=ns)
    counts = {}
    async with KubeClient(configuration=cluster.configuration) as client:  # one page per list
        for label, scope in (("cluster-wide", None), ("per-namespace", names)):
            cluster.request_log.clear()
            informer = Informer(client, CONFIGMAPS, namespaces=scope, settings=SETTINGS)
            async with running(informer):
                streams = len(scope or [None])
                await eventually(lambda i=informer, n=streams: i.watches == n, what="the watches")  # type: ignore[misc]
                assert len(informer) == len(names)
                lists = [r for r in cluster.request_log.records if r.resource == "configmaps" and r.verb == "list"]
                counts[label] = (len(lists), informer.watches)
    assert counts == {"cluster-wide": (1, 1), "per-namespace": (len(names), len(names))}
