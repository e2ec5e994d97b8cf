"""Informer against the embedded API server: list+watch, scoping, cut watches, 410 re-list with missed deletes."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kubedl_py.kube.client import CONFIGMAPS, KubeClient
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
