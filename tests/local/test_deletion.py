"""Deletion: graceful pods, finalizers, garbage collection (Background/Foreground/Orphan), dangling owners,
namespace deletion and DELETE on a collection."""

from __future__ import annotations

import asyncio
from typing import Any

from kubedl_local import LocalCluster
from tests.local.conftest import Http, eventually, pod

PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"


def owned(name: str, owner: dict[str, Any], block: bool = False) -> dict[str, Any]:
    ref = {
        "apiVersion": "v1",
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
    if block:
        ref["blockOwnerDeletion"] = True
    return {"metadata": {"name": name, "ownerReferences": [ref]}, "data": {}}


async def gone(http: Http, path: str) -> bool:
    return (await http.get(path)).status == 404


async def test_bound_pod_deletion_is_graceful(cluster: LocalCluster, http: Http) -> None:
    await http.post(PODS, pod("p", annotations={"local.kubedl.io/termination-seconds": "0.3"}))
    await eventually(lambda: _phase(http, "p", "Running"))
    r = await http.delete(f"{PODS}/p")
    assert r.status == 200  # as the real server: 202 only for orphanDependents=false
    md = r.body["metadata"]
    assert md["deletionTimestamp"] and md["deletionGracePeriodSeconds"] == 30
    assert (await http.get(f"{PODS}/p")).status == 200  # the kubelet has not finished yet
    await eventually(lambda: gone(http, f"{PODS}/p"))


async def test_unbound_pod_deleted_at_once(http: Http) -> None:
    await http.post(PODS, pod("u", schedulerName="nobody"))
    r = await http.delete(f"{PODS}/u")
    assert r.status == 200 and r.body["kind"] == "Pod"
    assert await gone(http, f"{PODS}/u")


async def test_force_delete_with_grace_zero(http: Http) -> None:
    await http.post(PODS, pod("f", annotations={"local.kubedl.io/termination-seconds": "30"}))
    await eventually(lambda: _phase(http, "f", "Running"))
    await http.delete(f"{PODS}/f")
    r = await http.delete(f"{PODS}/f?gracePeriodSeconds=0")
    assert r.status == 200 and await gone(http, f"{PODS}/f")


async def test_finalizers_hold_objects(http: Http) -> None:
    await http.post(CMS, {"metadata": {"name": "h", "finalizers": ["test/hold"]}, "data": {}})
    r = await http.delete(f"{CMS}/h")
    assert r.status == 200 and r.body["metadata"]["deletionTimestamp"]
    held = (await http.get(f"{CMS}/h")).body
    assert held["metadata"]["finalizers"] == ["test/hold"]
    r = await http.patch(f"{CMS}/h", {"metadata": {"finalizers": ["test/hold", "test/new"]}})
    assert r.status == 422  # no new finalizers once deleting
    r = await http.patch(f"{CMS}/h", {"metadata": {"finalizers": None}})
    assert r.status == 200 and await gone(http, f"{CMS}/h")


async def test_gc_background(http: Http) -> None:
    owner = (await http.post(CMS, {"metadata": {"name": "o"}, "data": {}})).body
    await http.post(CMS, owned("d1", owner))
    await http.post(CMS, owned("d2", owner))
    assert (await http.delete(f"{CMS}/o")).status == 200
    await eventually(lambda: _all_gone(http, ["d1", "d2"]))


async def test_gc_foreground(http: Http) -> None:
    owner = (await http.post(CMS, {"metadata": {"name": "fo"}, "data": {}})).body
    dep = owned("fd", owner, block=True)
    dep["metadata"]["finalizers"] = ["test/slow"]
    await http.post(CMS, dep)
    r = await http.delete(f"{CMS}/fo", {"propagationPolicy": "Foreground"})
    assert r.status == 200 and "foregroundDeletion" in r.body["metadata"]["finalizers"]
    await eventually(lambda: _deleting(http, "fd"))
    assert (await http.get(f"{CMS}/fo")).status == 200  # held while a blocking dependent exists
    await http.patch(f"{CMS}/fd", {"metadata": {"finalizers": None}})
    await eventually(lambda: _all_gone(http, ["fo", "fd"]))


async def test_gc_orphan(http: Http) -> None:
    owner = (await http.post(CMS, {"metadata": {"name": "oo"}, "data": {}})).body
    await http.post(CMS, owned("od", owner))
    await http.delete(f"{CMS}/oo?propagationPolicy=Orphan")
    await eventually(lambda: gone(http, f"{CMS}/oo"))
    r = await http.get(f"{CMS}/od")
    assert r.status == 200 and r.body["kind"] == "ConfigMap"  # orphaned, not collected
    assert "ownerReferences" not in r.body["metadata"]


async def test_dangling_owner_collects_dependent(http: Http) -> None:
    fake = {"kind": "ConfigMap", "metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"}}
    await http.post(CMS, owned("orphan", fake))
    await eventually(lambda: gone(http, f"{CMS}/orphan"))


async def test_gc_deletes_pods_of_owner(http: Http) -> None:
    owner = (await http.post(CMS, {"metadata": {"name": "po"}, "data": {}})).body
    p = pod("child")
    p["metadata"]["ownerReferences"] = owned("x", owner)["metadata"]["ownerReferences"]
    await http.post(PODS, p)
    await eventually(lambda: _phase(http, "child", "Running"))
    await http.delete(f"{CMS}/po")
    await eventually(lambda: gone(http, f"{PODS}/child"))


async def test_namespace_deletion_removes_contents(http: Http) -> None:
    await http.post("/api/v1/namespaces", {"metadata": {"name": "tmp"}})
    await http.post("/api/v1/namespaces/tmp/configmaps", {"metadata": {"name": "c"}, "data": {}})
    await http.post("/api/v1/namespaces/tmp/pods", pod("p"))
    r = await http.delete("/api/v1/namespaces/tmp")
    assert r.status == 200 and r.body["status"]["phase"] == "Terminating"
    r = await http.post("/api/v1/namespaces/tmp/configmaps", {"metadata": {"name": "new"}, "data": {}})
    assert (r.status, r.body["reason"]) == (403, "Forbidden")
    await eventually(lambda: gone(http, "/api/v1/namespaces/tmp"), timeout=10)
    assert await gone(http, "/api/v1/namespaces/tmp/configmaps/c")
    assert await gone(http, "/api/v1/namespaces/tmp/pods/p")


async def test_namespace_held_by_finalizer_is_not_rewritten(http: Http) -> None:
    ns = "/api/v1/namespaces/held"
    await http.post("/api/v1/namespaces", {"metadata": {"name": "held", "finalizers": ["test/hold"]}})
    assert (await http.delete(ns)).status == 200

    async def emptied() -> Any:
        r = await http.get(ns)
        return r.body if r.body["spec"]["finalizers"] == [] else None

    rv = (await eventually(emptied))["metadata"]["resourceVersion"]
    await asyncio.sleep(0.7)  # several namespace-controller passes
    r = await http.get(ns)
    assert r.status == 200 and r.body["metadata"]["resourceVersion"] == rv
    assert (await http.patch(ns, {"metadata": {"finalizers": None}})).status == 200
    await eventually(lambda: gone(http, ns))


async def test_delete_collection_with_selector(http: Http) -> None:
    for i in range(4):
        await http.post(CMS, {"metadata": {"name": f"c{i}", "labels": {"del": str(i < 2).lower()}}, "data": {}})
    r = await http.delete(f"{CMS}?labelSelector=del%3Dtrue")
    assert r.status == 200
    names = [o["metadata"]["name"] for o in (await http.get(CMS)).body["items"]]
    assert names == ["c2", "c3"]


async def test_delete_preconditions(http: Http) -> None:
    c = (await http.post(CMS, {"metadata": {"name": "pc"}, "data": {}})).body
    r = await http.delete(f"{CMS}/pc", {"preconditions": {"uid": "nope"}})
    assert r.status == 409
    r = await http.delete(f"{CMS}/pc", {"preconditions": {"uid": c["metadata"]["uid"]}})
    assert r.status == 200 and r.body["kind"] == "Status" and r.body["status"] == "Success"


async def _phase(http: Http, name: str, phase: str) -> bool:
    r = await http.get(f"{PODS}/{name}")
    return r.status == 200 and r.body["status"].get("phase") == phase


async def _all_gone(http: Http, names: list[str]) -> bool:
    for n in names:
        if not await gone(http, f"{CMS}/{n}"):
            return False
    return True


async def _deleting(http: Http, name: str) -> bool:
    r = await http.get(f"{CMS}/{name}")
    return r.status == 200 and bool(r.body["metadata"].get("deletionTimestamp"))
