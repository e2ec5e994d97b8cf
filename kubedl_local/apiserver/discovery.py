"""API discovery, and the fallback OpenAPI documents of built-in group versions.

kubectl maps kinds to resources through discovery (``/api``, ``/apis``, ``.../<version>``). The OpenAPI v3
documents are openapi.py's; when the real server's documents for built-in kinds cannot be had (offline),
``openapi_gv`` gives a built-in group version paths with their group-version-kind and parameters and no
schemas: kubectl then still leaves validation to the server (the ``fieldValidation`` parameter on PATCH
operations) and builds patches from its compiled-in types; only ``kubectl explain`` has nothing to say.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kubedl_local.apiserver.resources import Catalogue, ResourceType
from kubedl_local.pins import KUBERNETES_VERSION

Obj = dict[str, Any]

_MAJOR, _MINOR, _PATCH = KUBERNETES_VERSION.split(".")
#: the release the embedded server follows (its protobuf table and OpenAPI documents are that release's)
VERSION_INFO: Obj = {
    "major": _MAJOR,
    "minor": _MINOR,
    "emulationMajor": _MAJOR,
    "emulationMinor": _MINOR,
    "minCompatibilityMajor": _MAJOR,
    "minCompatibilityMinor": str(int(_MINOR) - 1),
    "gitVersion": f"v{KUBERNETES_VERSION}",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.26.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions(host: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    }


#: subresource -> (kind, group, version, verbs) where they differ from the parent's kind and get/patch/update
_SUBRESOURCES: dict[str, tuple[str | None, str | None, str | None, list[str]]] = {
    "log": ("Pod", None, None, ["get"]),
    "exec": ("PodExecOptions", None, None, ["create", "get"]),
    "binding": ("Binding", None, None, ["create"]),
    "eviction": ("Eviction", "policy", "v1", ["create"]),
    "token": ("TokenRequest", "authentication.k8s.io", "v1", ["create"]),
    "finalize": (None, None, None, ["update"]),
    "scale": ("Scale", "autoscaling", "v1", ["get", "patch", "update"]),
}


def _subresource(rt: ResourceType, sub: str) -> tuple[str, str | None, str | None, list[str]]:
    kind, group, version, verbs = _SUBRESOURCES.get(sub, (None, None, None, ["get", "patch", "update"]))
    return kind or rt.kind, group, version, verbs


def _resources(rts: list[ResourceType]) -> list[Obj]:
    out: list[Obj] = []
    for rt in sorted(rts, key=lambda r: r.plural):
        entry: Obj = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        if rt.verbs not in (["create"], []):  # the review kinds, stored nowhere, and the refused ones have none
            entry["storageVersionHash"] = hashlib.sha256(f"{rt.group}/{rt.plural}".encode()).hexdigest()[:11]
        out.append(entry)
        for sub in rt.subresources:
            kind, group, version, verbs = _subresource(rt, sub)
            sub_entry: Obj = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": kind,
                "verbs": list(verbs),
            }
            if group is not None:
                sub_entry.update(group=group, version=version)
            out.append(sub_entry)
    return out


# ---- aggregated discovery (apidiscovery.k8s.io/v2: what kubectl asks for first) ------------------------------

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
#: the real server's group order (by priority); groups of custom resources come after, by name
GROUP_ORDER = (
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "resource.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "storagemigration.k8s.io",
)


def wants_aggregated(accept: str) -> bool:
    """Whether an Accept header's first acceptable type is the aggregated discovery document (v2)."""
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        params = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
        if fields[0] in ("application/json", "*/*", "application/*", "") and not params:
            return False
        if (
            params.get("g") == "apidiscovery.k8s.io"
            and params.get("v") == "v2"
            and params.get("as") == ("APIGroupDiscoveryList")
        ):
            return fields[0] == "application/json"
    return False


def _kind_ref(rt: ResourceType, kind: str, group: str | None, version: str | None, gv: str) -> Obj:
    """A responseKind: built-in kinds of the group version leave group and version empty."""
    if group is not None:
        return {"group": group, "version": version, "kind": kind}
    if rt.custom:
        return {"group": rt.group, "version": gv, "kind": kind}
    return {"group": "", "version": "", "kind": kind}


def _discovered(rt: ResourceType, version: str) -> Obj:
    entry: Obj = {
        "resource": rt.plural,
        "responseKind": _kind_ref(rt, rt.kind, None, None, version),
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    subs = []
    for sub in sorted(rt.subresources):
        kind, group, sub_version, verbs = _subresource(rt, sub)
        ref = _kind_ref(rt, kind, group, sub_version, version)
        subs.append({"subresource": sub, "responseKind": ref, "verbs": list(verbs)})
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(cat: Catalogue, *, core: bool) -> Obj:
    """``/api`` (core) or ``/apis`` as an APIGroupDiscoveryList."""
    items: list[Obj] = []
    if core:
        resources = [_discovered(rt, "v1") for rt in sorted(cat.discoverable_in("", "v1"), key=lambda r: r.plural)]
        items.append({"metadata": {}, "versions": [{"version": "v1", "resources": resources, "freshness": "Current"}]})
    else:
        groups = cat.discoverable_groups()
        rank = {g: i for i, g in enumerate(GROUP_ORDER)}
        for name in sorted(groups, key=lambda g: (rank.get(g, len(GROUP_ORDER)), g)):
            versions = []
            for version in groups[name]:
                rts = sorted(cat.discoverable_in(name, version), key=lambda r: r.plural)
                versions.append(
                    {
                        "version": version,
                        "resources": [_discovered(rt, version) for rt in rts],
                        "freshness": "Current",
                    }
                )
            items.append({"metadata": {"name": name}, "versions": versions})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}


def resource_list(cat: Catalogue, group: str, version: str) -> Obj | None:
    rts = cat.discoverable_in(group, version)
    if not rts:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": _resources(rts),
    }


def _group(name: str, versions: list[str]) -> Obj:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def group_list(cat: Catalogue) -> Obj:
    groups = cat.discoverable_groups()
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g, vs) for g, vs in sorted(groups.items())]}


def group(cat: Catalogue, name: str) -> Obj | None:
    vs = cat.discoverable_groups().get(name)
    if not vs:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, vs)}


# ---- OpenAPI v3 ------------------------------------------------------------------------------------------


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_root(cat: Catalogue) -> Obj:
    paths: Obj = {}
    gvs = {("", "v1")}
    for rt in cat.types.values():
        for v in rt.versions:
            gvs.add((rt.group, v))
    for g, v in sorted(gvs):
        p = _gv_path(g, v)
        h = hashlib.sha256(repr(sorted((r.plural, r.kind) for r in cat.in_group_version(g, v))).encode()).hexdigest()
        paths[p] = {"serverRelativeURL": f"/openapi/v3/{p}?hash={h[:32].upper()}"}
    return {"paths": paths}


_PARAMS = [
    {"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
    for n in ("dryRun", "fieldManager", "fieldValidation", "force")
]


def openapi_gv(cat: Catalogue, group: str, version: str) -> Obj | None:
    rts = cat.in_group_version(group, version)
    if not rts and (group, version) != ("", "v1"):
        return None
    paths: Obj = {}
    base = "/" + _gv_path(group, version)
    for rt in rts:
        gvk = {"group": rt.group, "version": version, "kind": rt.kind}
        item = (
            f"{base}/namespaces/{{namespace}}/{rt.plural}/{{name}}" if rt.namespaced else f"{base}/{rt.plural}/{{name}}"
        )
        coll = item.rsplit("/", 1)[0]
        op = {"x-kubernetes-group-version-kind": gvk, "parameters": _PARAMS, "responses": {}}
        paths[item] = {
            "get": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "get", "responses": {}},
            "put": {**op, "x-kubernetes-action": "put"},
            "patch": {**op, "x-kubernetes-action": "patch"},
            "delete": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "delete", "responses": {}},
        }
        paths[coll] = {
            "post": {**op, "x-kubernetes-action": "post"},
            "get": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "list", "responses": {}},
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION_INFO["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    }
