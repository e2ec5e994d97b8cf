"""Lists and watches as informers use them: pagination, selectors, watch from a resourceVersion, bookmarks,
410 on an expired version, deletecollection."""

from __future__ import annotations

from typing import Any

from tests.differential.cases.common import configmap, core, make, names, pod
from tests.differential.harness import Tier, WatchEvent, case


def _event_summary(ev: WatchEvent) -> Any:
    obj = ev.object or {}
    if ev.type == "BOOKMARK":
        return {"type": ev.type, "kind": obj.get("kind"), "annotations": obj.get("metadata", {}).get("annotations")}
    if ev.type == "ERROR":
        return {"type": ev.type, "object": obj}
    md = obj.get("metadata", {})
    return {
        "type": ev.type,
        "name": md.get("name"),
        "resourceVersion": md.get("resourceVersion"),
        "data": obj.get("data"),
        "labels": md.get("labels"),
    }


async def _seed(t: Tier, count: int, **labels: str) -> None:
    for i in range(count):
        await make(t, core(t, "configmaps"), configmap(f"item-{i:02d}", {"i": str(i)}, labels=dict(labels)))


@case("list-pagination")
async def _(t: Tier) -> None:
    """limit/continue through 5 ConfigMaps (plus the root CA one): pages, remainingItemCount, the end."""
    await _seed(t, 5)
    page = await t.get(
        core(t, "configmaps", query="limit=2"), keep=lambda b: {"names": names(b), "meta": b["metadata"]}
    )
    seen = 0
    while page.body["metadata"].get("continue") and seen < 5:
        seen += 1
        token = page.body["metadata"]["continue"]
        page = await t.get(
            core(t, "configmaps", query=f"limit=2&continue={token}"),
            keep=lambda b: {"names": names(b), "meta": b["metadata"]},
        )


@case("list-pagination-with-selector")
async def _(t: Tier) -> None:
    """limit with a label selector: pages count only matching items."""
    await _seed(t, 4, group="a")
    await make(t, core(t, "configmaps"), configmap("other", labels={"group": "b"}))
    first = await t.get(
        core(t, "configmaps", query="limit=3&labelSelector=group%3Da"),
        keep=lambda b: {"names": names(b), "meta": b["metadata"]},
    )
    token = first.body["metadata"]["continue"]
    await t.get(
        core(t, "configmaps", query=f"limit=3&labelSelector=group%3Da&continue={token}"),
        keep=lambda b: {"names": names(b), "meta": b["metadata"]},
    )


@case("list-pagination-bad-continue")
async def _(t: Tier) -> None:
    """A continue token that is not one: 400 with the real message."""
    await t.get(core(t, "configmaps", query="limit=1&continue=garbage"))
    await t.get(core(t, "configmaps", query="limit=-1"))
    await t.get(core(t, "configmaps", query="limit=abc"))


@case("list-pagination-changes-between-pages")
async def _(t: Tier) -> None:
    """Objects created and deleted between pages: the second page is read at the first page's version."""
    await _seed(t, 4)
    first = await t.get(core(t, "configmaps", query="limit=2"), keep=names)
    await make(t, core(t, "configmaps"), configmap("item-99"))
    await t.quiet("DELETE", core(t, "configmaps", "item-03"))
    token = first.body["metadata"]["continue"]
    await t.get(core(t, "configmaps", query=f"limit=10&continue={token}"), keep=names)


@case("list-resource-version-semantics")
async def _(t: Tier) -> None:
    """List with resourceVersion=0 (any), with an exact match, with a version far in the future."""
    await _seed(t, 2)
    listed = await t.get(core(t, "configmaps"), keep=names)
    rv = listed.body["metadata"]["resourceVersion"]
    await t.get(core(t, "configmaps", query="resourceVersion=0"), keep=names)
    await t.get(core(t, "configmaps", query=f"resourceVersion={rv}&resourceVersionMatch=NotOlderThan"), keep=names)
    await t.get(
        core(t, "configmaps", query="resourceVersion=999999999&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")
    )
    await t.get(core(t, "configmaps", query="resourceVersionMatch=Exact"))


@case("list-label-selectors")
async def _(t: Tier) -> None:
    """labelSelector syntax over HTTP: equality, sets, existence, and malformed selectors (400)."""
    for i, env in enumerate(["prod", "dev", "test"]):
        await make(t, core(t, "configmaps"), configmap(f"c{i}", labels={"env": env, "n": str(i)}))
    for selector in (
        "env=prod",
        "env==dev",
        "env!=prod",
        "env in (prod,test)",
        "env notin (prod)",
        "n",
        "!n",
        "env,n=2",
        "n>1",
        "n<1",
    ):
        await t.get(core(t, "configmaps", query=f"labelSelector={_q(selector)}"), keep=names)
    for selector in ("env in prod", "=x", "env=a b", "n>x", "env in (", "a!"):
        await t.get(core(t, "configmaps", query=f"labelSelector={_q(selector)}"))


def _q(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


@case("list-field-selectors")
async def _(t: Tier) -> None:
    """fieldSelector over HTTP: supported fields per kind, and unsupported ones (400)."""
    await make(t, core(t, "pods"), pod("p1", nodeSelector={"no": "node"}, restartPolicy="Never"))
    await make(t, core(t, "pods"), pod("p2", nodeSelector={"no": "node"}))
    for selector in (
        "metadata.name=p1",
        "spec.restartPolicy=Never",
        "status.phase=Pending",
        "spec.nodeName=",
        "spec.schedulerName=default-scheduler",
        "metadata.name!=p1,status.phase=Pending",
    ):
        await t.get(core(t, "pods", query=f"fieldSelector={_q(selector)}"), keep=names)
    for selector in ("spec.containers=x", "metadata.labels=x", "status.phase>x", "nonsense"):
        await t.get(core(t, "pods", query=f"fieldSelector={_q(selector)}"))
    await t.get(core(t, "secrets", query="fieldSelector=type%3DOpaque"), keep=names)
    await t.get(core(t, "services", query="fieldSelector=spec.clusterIP%3D1.2.3.4"), keep=names)


@case("list-cluster-scoped-field-selector")
async def _(t: Tier) -> None:
    """Listing namespaces by name (cluster-scoped), and pods across namespaces by namespace."""
    await t.get(f"/api/v1/namespaces?fieldSelector=metadata.name%3D{t.ns}", keep=names)
    await t.get(f"/api/v1/pods?fieldSelector=metadata.namespace%3D{t.ns}", keep=names)
    await t.get(f"/api/v1/namespaces?fieldSelector=status.phase%3DActive%2Cmetadata.name%3D{t.ns}", keep=names)


@case("deletecollection-label-selector")
async def _(t: Tier) -> None:
    """DELETE on a collection with a label selector: the deleted items returned, the others stay."""
    await _seed(t, 3, batch="x")
    await make(t, core(t, "configmaps"), configmap("keep-me", labels={"batch": "y"}))
    await t.delete(
        core(t, "configmaps", query="labelSelector=batch%3Dx"),
        keep=lambda b: {"kind": b["kind"], "names": sorted(names(b))},
    )
    await t.get(core(t, "configmaps", query="labelSelector=batch"), keep=names)
    await t.delete(core(t, "configmaps", query="labelSelector=batch%3Dnone"), keep=lambda b: (b["kind"], names(b)))


@case("deletecollection-pods-and-namespaces")
async def _(t: Tier) -> None:
    """deletecollection of pods (allowed) and of namespaces (not a verb namespaces have)."""
    await make(t, core(t, "pods"), pod("p", labels={"x": "1"}, nodeSelector={"no": "node"}))
    await t.delete(core(t, "pods", query="labelSelector=x%3D1"), keep=lambda b: (b["kind"], names(b)))
    await t.delete("/api/v1/namespaces?labelSelector=nothing%3Dmatches")


@case("watch-from-resource-version")
async def _(t: Tier) -> None:
    """list, then watch from the list's resourceVersion: ADDED, MODIFIED, DELETED in order, nothing missed."""
    listed = await t.get(core(t, "configmaps"), keep=names)
    rv = listed.body["metadata"]["resourceVersion"]
    async with t.watching(core(t, "configmaps", query=f"watch=1&resourceVersion={rv}")) as w:
        await make(t, core(t, "configmaps"), configmap("w", {"v": "1"}))
        await t.quiet("PATCH", core(t, "configmaps", "w"), {"data": {"v": "2"}}, "application/merge-patch+json")
        await t.quiet("DELETE", core(t, "configmaps", "w"))
        await w.collect(lambda evs: len(evs) >= 3, keep=_event_summary)


@case("watch-without-resource-version")
async def _(t: Tier) -> None:
    """A watch without resourceVersion starts with ADDED events for what exists."""
    await _seed(t, 2)
    async with t.watching(core(t, "configmaps", query="watch=1")) as w:
        await w.collect(lambda evs: len(evs) >= 3, keep=lambda ev: (ev.type, ev.object["metadata"]["name"]))


@case("watch-label-selector-transitions")
async def _(t: Tier) -> None:
    """A label-selected watch: an object gaining the label is ADDED, losing it is DELETED."""
    listed = await t.quiet("GET", core(t, "configmaps"))
    rv = listed.body["metadata"]["resourceVersion"]
    async with t.watching(
        core(t, "configmaps", query=f"watch=1&resourceVersion={rv}&labelSelector=role%3Dtarget")
    ) as w:
        await make(t, core(t, "configmaps"), configmap("moving"))
        await t.quiet(
            "PATCH",
            core(t, "configmaps", "moving"),
            {"metadata": {"labels": {"role": "target"}}},
            "application/merge-patch+json",
        )
        await t.quiet("PATCH", core(t, "configmaps", "moving"), {"data": {"x": "1"}}, "application/merge-patch+json")
        await t.quiet(
            "PATCH",
            core(t, "configmaps", "moving"),
            {"metadata": {"labels": {"role": "other"}}},
            "application/merge-patch+json",
        )
        await w.collect(lambda evs: len(evs) >= 3, keep=_event_summary)


@case("watch-field-selector-single-object")
async def _(t: Tier) -> None:
    """Watching one object by metadata.name, as kubectl wait does."""
    listed = await t.quiet("GET", core(t, "configmaps"))
    rv = listed.body["metadata"]["resourceVersion"]
    async with t.watching(
        core(t, "configmaps", query=f"watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3Done")
    ) as w:
        await make(t, core(t, "configmaps"), configmap("other"))
        await make(t, core(t, "configmaps"), configmap("one"))
        await t.quiet("DELETE", core(t, "configmaps", "one"))
        await w.collect(lambda evs: len(evs) >= 2, keep=_event_summary)


@case("watch-old-resource-version-after-compaction", exclusive=True)
async def _(t: Tier) -> None:
    """An informer resuming after etcd compacted its history: the watch cache (which compaction does not
    touch) still replays what happened since a resourceVersion of seconds ago; a relist and a watch from
    its version work as usual. (Whether a watch from resourceVersion 1 is a 410 depends on how much the
    real watch cache has dropped since the server started, by count and age: not compared. The embedded
    server's 410 after its history overflows is tested in tests/local/test_watch.py.)"""
    before = await make(t, core(t, "configmaps"), configmap("before"))
    since = before["metadata"]["resourceVersion"]
    after = await make(t, core(t, "configmaps"), configmap("after"))
    await t.compact()

    def replayed(evs: list[WatchEvent]) -> bool:
        return any(e.type == "ERROR" or (e.object or {}).get("metadata", {}).get("name") == "after" for e in evs)

    async with t.watching(core(t, "configmaps", query=f"watch=1&resourceVersion={since}")) as w:
        await w.collect(replayed, within=10)
    await t.get(core(t, "configmaps"), keep=names)
    # resumed from the last object's version (a list's is the whole server's: the real one never idles)
    rv = after["metadata"]["resourceVersion"]
    async with t.watching(core(t, "configmaps", query=f"watch=1&resourceVersion={rv}")) as w:
        await t.quiet("DELETE", core(t, "configmaps", "after"))
        await w.collect(lambda evs: len(evs) >= 1, keep=_event_summary)


@case("watch-bad-resource-version")
async def _(t: Tier) -> None:
    """A watch from a resourceVersion that is not a number: 400."""
    await t.get(core(t, "configmaps", query="watch=1&resourceVersion=abc"))


@case("watch-timeout-seconds")
async def _(t: Tier) -> None:
    """timeoutSeconds ends the stream cleanly (an informer then resumes)."""
    listed = await t.quiet("GET", core(t, "configmaps"))
    rv = listed.body["metadata"]["resourceVersion"]
    async with t.watching(core(t, "configmaps", query=f"watch=1&resourceVersion={rv}&timeoutSeconds=1")) as w:
        await w.collect(within=15)


@case("watch-bookmarks-before-timeout")
async def _(t: Tier) -> None:
    """allowWatchBookmarks with a timeout: a BOOKMARK arrives before the stream ends."""
    listed = await t.quiet("GET", core(t, "configmaps"))
    rv = listed.body["metadata"]["resourceVersion"]
    query = f"watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=4"
    async with t.watching(core(t, "configmaps", query=query)) as w:
        events = await w.collect(within=20, record=False)
    # The real watch cache dispatches bookmarks in whole-second buckets: the pre-timeout one can go out twice
    # when the bucket comes due before the instant itself. Repeats are recorded once.
    summary = [_event_summary(ev) for ev in events]
    once = [s for i, s in enumerate(summary) if i == 0 or s != summary[i - 1]]
    t.log.append({"watch": w.label, "status": w.response.status, "events": t.norm.json(once), "ended": w.ended})


@case("watch-send-initial-events")
async def _(t: Tier) -> None:
    """sendInitialEvents=true (watch-list): ADDED for what exists, then the initial-events-end BOOKMARK."""
    await _seed(t, 2)
    query = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    async with t.watching(core(t, "configmaps", query=query)) as w:
        await w.collect(lambda evs: any(e.type == "BOOKMARK" for e in evs), keep=_event_summary)
    await t.get(core(t, "configmaps", query="watch=1&sendInitialEvents=true"))


@case("watch-pods-lifecycle", nodes=True)
async def _(t: Tier) -> None:
    """What a pod watcher sees as a pod is created, scheduled, started and deleted (phases in order)."""
    listed = await t.quiet("GET", core(t, "pods"))
    rv = listed.body["metadata"]["resourceVersion"]
    async with t.watching(core(t, "pods", query=f"watch=1&resourceVersion={rv}")) as w:
        await make(
            t, core(t, "pods"), pod("life", annotations={"local.kubedl.io/exit-code": "0"}, restartPolicy="Never")
        )
        events = await w.collect(
            lambda evs: any((e.object.get("status") or {}).get("phase") == "Succeeded" for e in evs), record=False
        )
        phases: list[Any] = []
        for ev in events:
            step = (ev.type, (ev.object.get("status") or {}).get("phase"), bool(ev.object["spec"].get("nodeName")))
            if not phases or phases[-1] != step:
                phases.append(step)
        t.note("phases", [list(p) for p in phases])


@case("watch-table")
async def _(t: Tier) -> None:
    """A Table watch (kubectl get -w): rows with the kind's columns."""
    listed = await t.quiet("GET", core(t, "configmaps"))
    rv = listed.body["metadata"]["resourceVersion"]
    path = core(t, "configmaps", query=f"watch=1&resourceVersion={rv}")
    async with t.plane.session.get(
        t.plane.url + path,
        headers={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"},
        ssl=t._ssl(),
    ) as response:
        from tests.differential.harness import Watch

        w = Watch(t, response, "WATCH table")
        await make(t, core(t, "configmaps"), configmap("tbl", {"a": "1"}))
        await w.collect(
            lambda evs: len(evs) >= 1,
            keep=lambda ev: {
                "type": ev.type,
                "kind": ev.object.get("kind"),
                "columns": [c["name"] for c in ev.object.get("columnDefinitions") or []],
                "cells": [r["cells"][:2] for r in ev.object.get("rows") or []],
            },
        )
