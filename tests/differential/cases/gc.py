"""Deletion: ownerReferences and garbage collection (Background, Foreground, Orphan), finalizers,
preconditions, and kubectl delete --cascade; what the controller relies on when a job goes."""

from __future__ import annotations

from typing import Any

from tests.differential.cases.common import configmap, core, make, owner_ref
from tests.differential.harness import Reply, Tier, case


async def _family(t: Tier, *, block: bool = False, children: int = 2) -> dict[str, Any]:
    owner = await make(t, core(t, "configmaps"), configmap("owner"))
    for i in range(children):
        body = configmap(f"child-{i}", ownerReferences=[owner_ref(owner, controller=True, block=block)])
        await make(t, core(t, "configmaps"), body)
    return owner


def _children(body: Any) -> Any:
    return sorted(
        (i["metadata"]["name"], [r["name"] for r in i["metadata"].get("ownerReferences") or []])
        for i in body["items"]
        if i["metadata"]["name"].startswith("child")
    )


def _no_children(reply: Reply) -> bool:
    return not any(i["metadata"]["name"].startswith("child") for i in reply.body["items"])


@case("gc-background")
async def _(t: Tier) -> None:
    """Background deletion of an owner: it goes at once, its dependents soon after."""
    await _family(t)
    await t.delete(core(t, "configmaps", "owner"), {"propagationPolicy": "Background"})
    await t.get(core(t, "configmaps", "owner"))
    await t.poll(core(t, "configmaps"), _no_children, keep=_children)


@case("gc-foreground")
async def _(t: Tier) -> None:
    """Foreground deletion: the owner lingers with the foregroundDeletion finalizer until its blocking
    dependents are gone, then goes."""
    await _family(t, block=True)
    await t.delete(
        core(t, "configmaps", "owner"),
        {"propagationPolicy": "Foreground"},
        keep=lambda b: {
            "finalizers": b["metadata"].get("finalizers"),
            "deleting": "deletionTimestamp" in b["metadata"],
        },
    )
    await t.poll(core(t, "configmaps", "owner"), lambda r: r.status == 404, keep=False)
    await t.poll(core(t, "configmaps"), _no_children, keep=_children)


@case("gc-orphan")
async def _(t: Tier) -> None:
    """Orphan deletion: the owner goes, the dependents stay without their ownerReferences."""
    await _family(t)
    await t.delete(
        core(t, "configmaps", "owner"),
        {"propagationPolicy": "Orphan"},
        keep=lambda b: {
            "finalizers": b["metadata"].get("finalizers"),
            "deleting": "deletionTimestamp" in b["metadata"],
        },
    )
    await t.poll(core(t, "configmaps", "owner"), lambda r: r.status == 404, keep=False)
    await t.poll(
        core(t, "configmaps"),
        lambda r: all(not i["metadata"].get("ownerReferences") for i in r.body["items"]),
        keep=_children,
    )


@case("gc-orphan-dependents-deprecated")
async def _(t: Tier) -> None:
    """orphanDependents=false (deprecated): 202 Accepted... or the object, as the server answers."""
    await _family(t, children=1)
    await t.delete(
        core(t, "configmaps", "owner", query="orphanDependents=false"),
        keep=lambda b: {"kind": b.get("kind"), "finalizers": b.get("metadata", {}).get("finalizers")},
    )
    await t.poll(core(t, "configmaps"), _no_children, keep=_children)


@case("gc-dangling-owner")
async def _(t: Tier) -> None:
    """A dependent whose owner uid does not exist is collected."""
    ghost = {"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "11111111-2222-3333-4444-555555555555"}
    await make(t, core(t, "configmaps"), configmap("child-orphan", ownerReferences=[ghost]))
    await t.poll(core(t, "configmaps", "child-orphan"), lambda r: r.status == 404, keep=False)


@case("gc-two-owners")
async def _(t: Tier) -> None:
    """A dependent with two owners survives the deletion of one, keeping the other reference."""
    a = await make(t, core(t, "configmaps"), configmap("owner-a"))
    b = await make(t, core(t, "configmaps"), configmap("owner-b"))
    await make(t, core(t, "configmaps"), configmap("child-shared", ownerReferences=[owner_ref(a), owner_ref(b)]))
    await t.delete(core(t, "configmaps", "owner-a"), keep=False)
    await t.poll(
        core(t, "configmaps", "child-shared"),
        lambda r: len(r.body["metadata"].get("ownerReferences") or []) == 1,
        keep=lambda body: [r["name"] for r in body["metadata"].get("ownerReferences") or []],
        within=20,
    )


@case("gc-owner-reference-validation")
async def _(t: Tier) -> None:
    """ownerReferences the server refuses: missing uid, two controllers, a namespaced owner of a
    cluster-scoped... an invalid apiVersion."""
    owner = await make(t, core(t, "configmaps"), configmap("owner"))
    bad = [
        [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner"}],
        [
            owner_ref(owner, controller=True),
            dict(owner_ref(owner, controller=True), name="owner2", uid="22222222-2222-3333-4444-555555555555"),
        ],
        [dict(owner_ref(owner), apiVersion="")],
        [dict(owner_ref(owner), kind="")],
    ]
    for refs in bad:
        await t.post(core(t, "configmaps", query="dryRun=All"), configmap("child", ownerReferences=refs))


@case("gc-pytorchjob-owns-pods")
async def _(t: Tier) -> None:
    """What the controller does: pods and Services owned by a PyTorchJob go when the job is deleted."""
    from tests.differential.cases.common import GROUP, grouped, pod, pytorchjob, service

    job = await make(t, grouped(t, "pytorchjobs"), pytorchjob("job"))
    ref = owner_ref(job, controller=True, block=True)
    p = pod("job-master-0", labels={"training.kubedl.io/job-name": "job"}, nodeSelector={"no": "node"})
    p["metadata"]["ownerReferences"] = [ref]
    await make(t, core(t, "pods"), p)
    s = service("job-master-0", clusterIP="None", selector={"training.kubedl.io/job-name": "job"})
    s["metadata"]["ownerReferences"] = [ref]
    await make(t, core(t, "services"), s)
    await t.get(core(t, "pods", "job-master-0"), keep=lambda b: b["metadata"]["ownerReferences"])
    await t.delete(
        grouped(t, "pytorchjobs", "job"),
        keep=lambda b: (b.get("kind"), b.get("status") if b.get("kind") == "Status" else None),
    )
    await t.poll(core(t, "pods", "job-master-0"), lambda r: r.status == 404, keep=False)
    await t.poll(core(t, "services", "job-master-0"), lambda r: r.status == 404, keep=False)
    assert GROUP


@case("kubectl-delete-cascade-orphan")
async def _(t: Tier) -> None:
    """kubectl delete --cascade=orphan: dependents stay, unowned."""
    await _family(t)
    await t.kubectl("delete", "configmap", "owner", "--cascade=orphan")
    await t.poll(
        core(t, "configmaps"),
        lambda r: all(not i["metadata"].get("ownerReferences") for i in r.body["items"]),
        keep=_children,
    )


@case("kubectl-delete-cascade-foreground")
async def _(t: Tier) -> None:
    """kubectl delete --cascade=foreground waits for the dependents, then the owner."""
    await _family(t, block=True)
    await t.kubectl("delete", "configmap", "owner", "--cascade=foreground", "--timeout=60s")
    await t.get(core(t, "configmaps"), keep=_children)


@case("kubectl-delete-cascade-background")
async def _(t: Tier) -> None:
    """kubectl delete (--cascade=background, the default): owner gone, dependents collected."""
    await _family(t)
    await t.kubectl("delete", "configmap", "owner")
    await t.poll(core(t, "configmaps"), _no_children, keep=_children)
    await t.kubectl("delete", "configmap", "x", "--cascade=sideways")


@case("finalizer-holds-deletion")
async def _(t: Tier) -> None:
    """An object with a finalizer: DELETE answers 200 with deletionTimestamp set, it stays until the
    finalizer is removed; no new finalizer may be added meanwhile."""
    await make(t, core(t, "configmaps"), configmap("held", finalizers=["example.com/hold"]))
    await t.delete(
        core(t, "configmaps", "held"),
        keep=lambda b: {
            "finalizers": b["metadata"].get("finalizers"),
            "deleting": "deletionTimestamp" in b["metadata"],
            "grace": b["metadata"].get("deletionGracePeriodSeconds"),
        },
    )
    await t.delete(core(t, "configmaps", "held"), keep=lambda b: b["metadata"].get("finalizers"))
    await t.patch(core(t, "configmaps", "held"), {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}})
    await t.patch(core(t, "configmaps", "held"), {"data": {"still": "writable"}}, keep=lambda b: b.get("data"))
    await t.patch(
        core(t, "configmaps", "held"),
        {"metadata": {"finalizers": None}},
        keep=lambda b: b["metadata"].get("finalizers"),
    )
    await t.get(core(t, "configmaps", "held"))


@case("finalizer-validation")
async def _(t: Tier) -> None:
    """Finalizer names the server refuses or warns about."""
    for fin in ("no-slash", "example.com/ok", "Bad/Name", "kubernetes"):
        await t.post(core(t, "configmaps", query="dryRun=All"), configmap("f", finalizers=[fin]))


@case("finalizer-custom-resource")
async def _(t: Tier) -> None:
    """A PyTorchJob with a finalizer: held on delete (the object answered), gone when released."""
    from tests.differential.cases.common import grouped, pytorchjob

    job = pytorchjob("held")
    job["metadata"]["finalizers"] = ["kubedl.io/cleanup"]
    await make(t, grouped(t, "pytorchjobs"), job)
    await t.delete(
        grouped(t, "pytorchjobs", "held"),
        keep=lambda b: {
            "kind": b.get("kind"),
            "deleting": "deletionTimestamp" in b.get("metadata", {}),
            "finalizers": b.get("metadata", {}).get("finalizers"),
        },
    )
    await t.patch(grouped(t, "pytorchjobs", "held"), {"metadata": {"finalizers": []}}, keep=False)
    await t.get(grouped(t, "pytorchjobs", "held"))


@case("delete-preconditions")
async def _(t: Tier) -> None:
    """DeleteOptions preconditions: a wrong uid, a stale resourceVersion (409), the right ones."""
    created = await make(t, core(t, "configmaps"), configmap("pre"))
    md = created["metadata"]
    await t.delete(core(t, "configmaps", "pre"), {"preconditions": {"uid": "00000000-0000-0000-0000-000000000001"}})
    await t.delete(core(t, "configmaps", "pre"), {"preconditions": {"resourceVersion": "1"}})
    await t.delete(
        core(t, "configmaps", "pre"), {"preconditions": {"uid": md["uid"], "resourceVersion": md["resourceVersion"]}}
    )


@case("delete-options-invalid")
async def _(t: Tier) -> None:
    """DeleteOptions the server refuses: an unknown propagationPolicy, both orphan flags, negative grace."""
    await make(t, core(t, "configmaps"), configmap("x"))
    await t.delete(core(t, "configmaps", "x"), {"propagationPolicy": "Sideways"})
    await t.delete(core(t, "configmaps", "x"), {"propagationPolicy": "Orphan", "orphanDependents": False})
    await t.delete(core(t, "configmaps", "x", query="gracePeriodSeconds=abc"))
    await t.delete(core(t, "configmaps", "x"), {"dryRun": ["Maybe"]})


@case("delete-answers")
async def _(t: Tier) -> None:
    """What DELETE answers: a Status for ConfigMaps and Secrets, the object for Services and custom
    resources, 404 for a second delete."""
    from tests.differential.cases.common import grouped, pytorchjob, service

    await make(t, core(t, "configmaps"), configmap("c"))
    await make(t, core(t, "services"), service("s"))
    await make(t, core(t, "secrets"), {"metadata": {"name": "sec"}})
    await make(t, grouped(t, "pytorchjobs"), pytorchjob("j"))
    await t.delete(core(t, "configmaps", "c"))
    await t.delete(core(t, "configmaps", "c"))
    await t.delete(core(t, "services", "s"), keep=lambda b: (b["kind"], b["metadata"]["name"]))
    await t.delete(core(t, "secrets", "sec"))
    await t.delete(grouped(t, "pytorchjobs", "j"))
