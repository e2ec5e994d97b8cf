"""Request accounting and fault injection."""

from __future__ import annotations

import time

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from kubedl_local import FaultRule, LocalCluster
from tests.local.conftest import Http, pod

CMS = "/api/v1/namespaces/default/configmaps"


async def test_request_log_and_counters(cluster: LocalCluster, http: Http) -> None:
    cluster.request_log.clear()
    await http.post(CMS, {"metadata": {"name": "a"}, "data": {}})
    await http.get(f"{CMS}/a")
    await http.get(f"{CMS}/missing")
    await http.get(CMS)
    await http.patch("/api/v1/namespaces/default/pods/x/status", {"status": {}})
    log = cluster.request_log
    assert log.count("create", "configmaps") == 1 and log.count("get", "configmaps") == 2
    assert log.count("list", "configmaps") == 1 and log.count("patch", "pods/status") == 1
    assert log.count(verb="get") == 2
    rec = log.find(verb="get", status=404)[0]
    assert rec.path == f"{CMS}/missing" and rec.method == "GET" and rec.latency >= 0
    assert log.status_counts[404] == 2


async def test_fail_next_n(cluster: LocalCluster, http: Http) -> None:
    rule = cluster.faults.fail(500, verb="create", resource="configmaps", times=2)
    codes = [(await http.post(CMS, {"metadata": {"name": f"f{i}"}, "data": {}})).status for i in range(3)]
    assert codes == [500, 500, 201] and rule.hits == 2
    r = await http.post(CMS, {"metadata": {"name": "f0"}, "data": {}})
    assert r.status == 201  # the failed attempts did not create anything


async def test_429_with_retry_after_and_probability(cluster: LocalCluster, http: Http) -> None:
    cluster.faults.fail(429, verb="list", resource="pods", retry_after=2)
    r = await http.get("/api/v1/namespaces/default/pods")
    assert r.status == 429 and r.headers["Retry-After"] == "2" and r.body["reason"] == "TooManyRequests"
    cluster.faults.clear()
    rule = cluster.faults.add(FaultRule(verb="get", resource="configmaps", status=409, probability=0.5))
    await http.post(CMS, {"metadata": {"name": "p"}, "data": {}})
    codes = [(await http.get(f"{CMS}/p")).status for _ in range(60)]
    assert 10 < codes.count(409) < 50 and codes.count(200) == 60 - codes.count(409)
    assert rule.hits == codes.count(409)
    cluster.faults.remove(rule)
    assert (await http.get(f"{CMS}/p")).status == 200


async def test_cut_watch_after_seconds(cluster: LocalCluster, http: Http) -> None:
    cluster.faults.cut_watches(0.3, resource="configmaps")
    rv = (await http.get(CMS)).body["metadata"]["resourceVersion"]
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as s, s.get(f"{cluster.url}{CMS}?watch=1&resourceVersion={rv}") as r:
        try:
            while await r.content.readline():
                pass
        except aiohttp.ClientPayloadError:
            pass  # the connection was cut mid-stream
    assert 0.25 < time.monotonic() - t0 < 3


async def test_force_410_on_watch_resumption(cluster: LocalCluster, http: Http) -> None:
    # Only this namespace's watches: the node agent's cluster-wide pod watch must not take the fault.
    cluster.faults.expire_watches(resource="pods", namespace="default", times=1)
    await http.post("/api/v1/namespaces/default/pods", pod("x"))
    async with client.ApiClient(cluster.configuration) as api:
        core = client.CoreV1Api(api)
        listed = await core.list_namespaced_pod("default")
        resp = await core.list_namespaced_pod(
            "default",
            watch=True,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=1,
            _preload_content=False,
        )
        first = await resp.content.readline()
        resp.release()
        assert b'"code":410' in first and b'"ERROR"' in first
        try:
            cluster.faults.fail(503, verb="get", resource="pods")
            await core.read_namespaced_pod("x", "default")
        except ApiException as e:
            assert e.status == 503
        else:
            raise AssertionError("expected 503")
