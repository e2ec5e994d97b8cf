"""managedFields and server-side apply on the embedded server (fieldmanager.py).

The differential suite compares kubectl's view of these with the real server; these tests pin the
mechanics underneath: who owns what after creates, updates and applies, pruning of fields a manager stops
applying, conflicts and forcing, keyed lists, dry runs, and the PatchOptions checks.
"""

from __future__ import annotations

from typing import Any

from kubedl_local.apiserver.fieldmanager import decode_set, encode_set
from tests.local.conftest import Http

CMS = "/api/v1/namespaces/default/configmaps"
SVCS = "/api/v1/namespaces/default/services"
APPLY = "application/apply-patch+yaml"


def cm(data: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "app"}
    if labels:
        md["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}


def managers(body: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in body["metadata"].get("managedFields") or []}


def test_field_sets_round_trip_through_fields_v1() -> None:
    paths = {("f:data",), ("f:data", "f:a"), ("f:spec", 'k:{"port":80,"protocol":"TCP"}', "f:name")}
    encoded = encode_set(paths)
    assert encoded == {"f:data": {".": {}, "f:a": {}}, "f:spec": {'k:{"port":80,"protocol":"TCP"}': {"f:name": {}}}}
    assert decode_set(encoded) == paths


async def test_creates_and_updates_record_their_managers(http: Http) -> None:
    created = await http.post(f"{CMS}?fieldManager=maker", cm({"a": "1"}, {"app": "x"}))
    assert managers(created.body) == {
        ("maker", "Update"): {"f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}}
    }
    # Without ?fieldManager= the manager is the User-Agent's first word.
    patched = await http.request(
        "PATCH",
        f"{CMS}/app",
        {"data": {"b": "2"}},
        content_type="application/merge-patch+json",
        headers={"User-Agent": "tool/1.0 (linux)"},
    )
    assert managers(patched.body)[("tool", "Update")] == {"f:data": {"f:b": {}}}
    # A no-op update changes nothing, not even managedFields.
    again = await http.patch(f"{CMS}/app?fieldManager=other", {"data": {"b": "2"}})
    assert again.body["metadata"]["resourceVersion"] == patched.body["metadata"]["resourceVersion"]
    # Setting managedFields to [] resets them; an untracked object stays untracked on update.
    reset = dict(again.body)
    reset["metadata"] = {**again.body["metadata"], "managedFields": []}
    cleared = await http.put(f"{CMS}/app?fieldManager=x", reset)
    assert cleared.status == 200 and "managedFields" not in cleared.body["metadata"]


async def test_apply_creates_prunes_conflicts_and_forces(http: Http) -> None:
    first = await http.patch(f"{CMS}/app?fieldManager=alice", cm({"a": "1", "b": "2"}, {"app": "x"}), APPLY)
    assert first.status == 201 and first.body["data"] == {"a": "1", "b": "2"}
    assert managers(first.body) == {
        ("alice", "Apply"): {"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}
    }
    # alice stops applying b: it goes (nobody else owns it)
    second = await http.patch(f"{CMS}/app?fieldManager=alice", cm({"a": "1"}, {"app": "x"}), APPLY)
    assert (second.status, second.body["data"]) == (200, {"a": "1"})
    # bob changes alice's field: a 409 naming it, unless forced
    clash = await http.patch(f"{CMS}/app?fieldManager=bob", cm({"a": "9"}), APPLY)
    assert (clash.status, clash.body["reason"]) == (409, "Conflict")
    assert clash.body["message"] == 'Apply failed with 1 conflict: conflict with "alice": .data.a'
    assert clash.body["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".data.a"}
    ]
    # the same value is no conflict: both own it
    shared = await http.patch(f"{CMS}/app?fieldManager=bob", cm({"a": "1"}), APPLY)
    assert shared.status == 200
    assert set(managers(shared.body)) == {("alice", "Apply"), ("bob", "Apply")}
    forced = await http.patch(f"{CMS}/app?fieldManager=carol&force=true", cm({"a": "7"}), APPLY)
    assert forced.body["data"] == {"a": "7"}
    owners = managers(forced.body)
    assert owners[("carol", "Apply")] == {"f:data": {"f:a": {}}}
    assert owners[("alice", "Apply")] == {"f:metadata": {"f:labels": {"f:app": {}}}}  # lost data.a to carol
    # a dry run answers and stores nothing
    dry = await http.patch(f"{CMS}/app?fieldManager=carol&dryRun=All&force=true", cm({"a": "8"}), APPLY)
    assert dry.body["data"] == {"a": "8"}
    assert (await http.get(f"{CMS}/app")).body["data"] == {"a": "7"}


async def test_apply_merges_keyed_lists_by_their_keys(http: Http) -> None:
    def svc(*ports: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s"},
            "spec": {"selector": {"app": "s"}, "ports": [{"name": f"p{p}", "port": p} for p in ports]},
        }

    await http.patch(f"{SVCS}/s?fieldManager=a", svc(80, 81), APPLY)
    await http.patch(f"{SVCS}/s?fieldManager=b", svc(90), APPLY)
    both = (await http.get(f"{SVCS}/s")).body
    assert [p["port"] for p in both["spec"]["ports"]] == [80, 81, 90]
    owned = managers(both)[("b", "Apply")]["f:spec"]["f:ports"]
    assert list(owned) == ['k:{"port":90,"protocol":"TCP"}']  # the key takes the protocol's default
    # a stops applying 81: only that item goes
    after = (await http.patch(f"{SVCS}/s?fieldManager=a", svc(80), APPLY)).body
    assert [p["port"] for p in after["spec"]["ports"]] == [80, 90]


async def test_patch_options_are_checked(http: Http) -> None:
    no_manager = await http.patch(f"{CMS}/app", cm({"a": "1"}), APPLY)
    assert (no_manager.status, no_manager.body["details"]["causes"][0]["message"]) == (
        422,
        "Required value: is required for apply patch",
    )
    forced_merge = await http.patch(f"{CMS}/app?force=true", {"data": {"a": "1"}})
    assert (forced_merge.status, forced_merge.body["details"]["causes"][0]["field"]) == (422, "force")
    wrong_kind = await http.patch(f"{CMS}/app?fieldManager=m", {**cm({}), "kind": "Secret"}, APPLY)
    assert (wrong_kind.status, wrong_kind.body["message"]) == (400, "invalid object type: /v1, Kind=Secret")
    with_managed = cm({})
    with_managed["metadata"]["managedFields"] = [{"manager": "x"}]
    assert (await http.patch(f"{CMS}/app?fieldManager=m", with_managed, APPLY)).status == 400
