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

from .kubernetes.release import KUBERNETES_VERSION
from .resources import Catalogue, ResourceType

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
        entry["storageVersionHash"] = hashlib.sha256(f"{rt.group}/{rt.plural}".encode()).hexdigest()[:11]
        out.append(entry)
        for sub in rt.subresources:
            sub_entry: Obj = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }
            if sub == "log":
                sub_entry.update(kind="Pod", verbs=["get"])
            elif sub == "binding":
                sub_entry.update(kind="Binding", verbs=["create"])
            elif sub == "eviction":
                sub_entry.update(kind="Eviction", group="policy", version="v1", verbs=["create"])
            elif sub == "token":
                sub_entry.update(kind="TokenRequest", group="authentication.k8s.io", version="v1", verbs=["create"])
            elif sub == "finalize":
                sub_entry.update(verbs=["update"])
            elif sub == "scale":
                sub_entry.update(kind="Scale", group="autoscaling", version="v1")
            out.append(sub_entry)
    return out


def resource_list(cat: Catalogue, group: str, version: str) -> Obj | None:
    rts = cat.in_group_version(group, version)
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
    groups = cat.groups()
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g, vs) for g, vs in sorted(groups.items())]}


def group(cat: Catalogue, name: str) -> Obj | None:
    vs = cat.groups().get(name)
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
