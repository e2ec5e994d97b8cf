"""Watch semantics: JSON-lines frames, resuming, bookmarks, 410 after history expiry, timeouts, selectors."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from kubedl_local import LocalCluster
from tests.local.conftest import Http

CMS = "/api/v1/namespaces/default/configmaps"


def cm(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": {"k": "v"}}


async def frames(url: str, n: int, limit: float = 5.0) -> list[dict[str, Any]]:
    """Read ``n`` frames (or until the stream ends) from a watch URL."""
    out: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as s, s.get(url, timeout=aiohttp.ClientTimeout(total=limit)) as r:
        assert r.status == 200
        while len(out) < n:
            line = await r.content.readline()
            if not line:
                break
            out.append(orjson.loads(line))
    return out


async def test_list_then_watch_misses_nothing(cluster: LocalCluster, http: Http) -> None:
    await http.post(CMS, cm("a"))
    listed = (await http.get(CMS)).body
    rv = listed["metadata"]["resourceVersion"]
    await http.post(CMS, cm("b"))  # happens between list and watch
    reader = asyncio.create_task(frames(f"{cluster.url}{CMS}?watch=1&resourceVersion={rv}", 3))
    await http.patch(f"{CMS}/a", {"data": {"k": "v2"}})
    await http.delete(f"{CMS}/b")
    got = await reader
    assert [(f["type"], f["object"]["metadata"]["name"]) for f in got] == [
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    rvs = [int(f["object"]["metadata"]["resourceVersion"]) for f in got]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    assert got[1]["object"]["kind"] == "ConfigMap" and got[1]["object"]["data"] == {"k": "v2"}


async def test_watch_without_rv_starts_with_current_state(cluster: LocalCluster, http: Http) -> None:
    await http.post(CMS, cm("x"))
    await http.post(CMS, cm("y"))
    for rv in ("", "0"):
        got = await frames(f"{cluster.url}{CMS}?watch=true&resourceVersion={rv}", 2)
        assert sorted((f["type"], f["object"]["metadata"]["name"]) for f in got) == [("ADDED", "x"), ("ADDED", "y")]


async def test_bookmarks_carry_only_rv(cluster: LocalCluster, http: Http) -> None:
    rv = (await http.get(CMS)).body["metadata"]["resourceVersion"]
    got = await frames(f"{cluster.url}{CMS}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true", 1)
    assert got[0]["type"] == "BOOKMARK"
    obj = got[0]["object"]
    assert set(obj) == {"kind", "apiVersion", "metadata"} and set(obj["metadata"]) == {"resourceVersion"}
    assert obj["kind"] == "ConfigMap" and int(obj["metadata"]["resourceVersion"]) >= int(rv)


async def test_expired_rv_gets_410_then_end(http: Http) -> None:
    async with LocalCluster(watch_history=3) as small, aiohttp.ClientSession() as s:
        h = Http(s, small.url)
        first = (await h.post(CMS, cm("a"))).body["metadata"]["resourceVersion"]
        for i in range(5):
            await h.post(CMS, cm(f"n{i}"))
        got = await frames(f"{small.url}{CMS}?watch=1&resourceVersion={first}", 5)
        assert len(got) == 1 and got[0]["type"] == "ERROR"
        st = got[0]["object"]
        assert (st["kind"], st["code"], st["reason"], st["status"]) == ("Status", 410, "Expired", "Failure")
        # within the window: fine
        rv = (await h.get(CMS)).body["metadata"]["resourceVersion"]
        await h.post(CMS, cm("late"))
        got = await frames(f"{small.url}{CMS}?watch=1&resourceVersion={rv}", 1)
        assert got[0]["type"] == "ADDED"


async def test_timeout_seconds_ends_stream(cluster: LocalCluster, http: Http) -> None:
    rv = (await http.get(CMS)).body["metadata"]["resourceVersion"]
    t0 = time.monotonic()
    got = await frames(f"{cluster.url}{CMS}?watch=1&resourceVersion={rv}&timeoutSeconds=1", 10)
    assert got == [] and 0.9 < time.monotonic() - t0 < 3


async def test_selector_transitions(cluster: LocalCluster, http: Http) -> None:
    await http.post(CMS, cm("s", {"role": "a"}))
    rv = (await http.get(CMS)).body["metadata"]["resourceVersion"]
    reader = asyncio.create_task(frames(f"{cluster.url}{CMS}?watch=1&resourceVersion={rv}&labelSelector=role%3Db", 2))
    await http.patch(f"{CMS}/s", {"metadata": {"labels": {"role": "b"}}})  # enters the selection
    await http.patch(f"{CMS}/s", {"metadata": {"labels": {"role": "c"}}})  # leaves it
    got = await reader
    assert [f["type"] for f in got] == ["ADDED", "DELETED"]


async def test_events_are_flushed_one_by_one(cluster: LocalCluster, http: Http) -> None:
    rv = (await http.get(CMS)).body["metadata"]["resourceVersion"]
    async with aiohttp.ClientSession() as s, s.get(f"{cluster.url}{CMS}?watch=1&resourceVersion={rv}") as r:
        for i in range(3):
            await http.post(CMS, cm(f"f{i}"))
            line = await asyncio.wait_for(r.content.readline(), 2)
            assert orjson.loads(line)["object"]["metadata"]["name"] == f"f{i}"


async def test_kubernetes_asyncio_list_watch_patch_status(cluster: LocalCluster) -> None:
    async with client.ApiClient(cluster.configuration) as api:
        core = client.CoreV1Api(api)
        pods = await core.list_namespaced_pod("default", label_selector="app=k")
        assert pods.items == []
        await core.create_namespaced_pod(
            "default",
            {"metadata": {"name": "k1", "labels": {"app": "k"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        )
        w = watch.Watch()
        seen: list[tuple[str, str]] = []
        async with w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=pods.metadata.resource_version,
            timeout_seconds=5,
            allow_watch_bookmarks=True,
        ) as stream:
            async for ev in stream:
                if ev["type"] == "BOOKMARK":
                    continue
                seen.append((ev["type"], ev["object"].status.phase))
                if ev["object"].status.phase == "Running":
                    break
        assert seen[0] == ("ADDED", "Pending") and seen[-1] == ("MODIFIED", "Running")
        await core.patch_namespaced_pod_status("k1", "default", {"status": {"message": "from-test"}})
        p = await core.read_namespaced_pod("k1", "default")
        assert p.status.message == "from-test"
        try:
            await core.read_namespaced_pod("nope", "default")
        except ApiException as e:
            assert e.status == 404
        else:
            raise AssertionError("expected 404")


async def test_kubernetes_asyncio_watch_after_expiry_raises_410(cluster: LocalCluster, http: Http) -> None:
    rv = (await http.get(CMS)).body["metadata"]["resourceVersion"]
    await http.post(CMS, cm("z"))
    cluster.expire_watch_history("configmaps")
    async with client.ApiClient(cluster.configuration) as api:
        core = client.CoreV1Api(api)
        resp = await core.list_namespaced_config_map("default", watch=True, resource_version=rv, _preload_content=False)
        body = await resp.content.readline()
        resp.release()
        ev = orjson.loads(body)
        assert ev["type"] == "ERROR" and ev["object"]["code"] == 410
