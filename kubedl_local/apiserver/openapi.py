"""The OpenAPI v3 documents the embedded API server publishes: built-in kinds and custom resources.

Why: ``kubectl explain`` reads its schemas from ``/openapi/v3``, kubectl builds strategic merge patches for
built-in kinds from their ``x-kubernetes-patch-*`` extensions, and clients decide from the operations'
parameters whether the server validates fields itself. A document with paths and no schemas leaves
``kubectl explain`` with nothing to explain.

Built-in kinds: the real server's documents are published with each release in the ``k8s.io/kubernetes``
module (``api/openapi-spec/v3``). They are downloaded once for the pinned release from the Go module proxy
(``$GOPROXY`` honoured) and kept under the kubedl-py cache directory, by ``python -m kubedl_local.sources``
(``make test`` runs it) or on first use. That download is their one source: the local Go module cache is
never read, so what the server publishes does not change with whether the real control plane was built on
this machine. Nothing of them is committed: they are Kubernetes' own text (2.5 MB of descriptions), which
this repository does not copy. Each is served with the paths of the resources the embedded server does not
serve removed.

Custom resources: each served version gets the document the apiextensions server builds from the CRD
(``builder.BuildOpenAPIV3``): the version's schema with ``apiVersion``/``kind`` described, ``metadata`` a
reference to ObjectMeta, ``x-kubernetes-group-version-kind``, a ``<Kind>List`` schema, the metadata
schemas they refer to (from the built-in documents), and the resource's operations.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import io
import json
import os
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubedl_local.apiserver.protobuf.table import FETCH_TIMEOUT, proxy_url
from kubedl_local.pins import KUBERNETES_VERSION, cache_root

Obj = dict[str, Any]

#: the documents of the groups the embedded server serves (file names as in api/openapi-spec/v3)
DOCUMENTS = {
    "api": "api_openapi.json",
    "api/v1": "api__v1_openapi.json",
    "apis": "apis_openapi.json",
    "apis/coordination.k8s.io": "apis__coordination.k8s.io_openapi.json",
    "apis/coordination.k8s.io/v1": "apis__coordination.k8s.io__v1_openapi.json",
    "apis/apiextensions.k8s.io": "apis__apiextensions.k8s.io_openapi.json",
    "apis/apiextensions.k8s.io/v1": "apis__apiextensions.k8s.io__v1_openapi.json",
    "version": "version_openapi.json",
}
_SPEC_DIR = f"k8s.io/kubernetes@v{KUBERNETES_VERSION}/api/openapi-spec/v3"
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
#: the metadata schemas a custom resource's document carries along
CRD_META_SCHEMAS = (
    "DeleteOptions",
    "FieldsV1",
    "ListMeta",
    "ManagedFieldsEntry",
    "ObjectMeta",
    "OwnerReference",
    "Patch",
    "Preconditions",
    "ShardInfo",
    "Status",
    "StatusCause",
    "StatusDetails",
    "Time",
)
API_VERSION_DESCRIPTION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
KIND_DESCRIPTION = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer this "
    "from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
METADATA_DESCRIPTION = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
LIST_METADATA_DESCRIPTION = (
    "Standard list metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)


class SpecsUnavailable(RuntimeError):
    """The documents are not cached and could not be fetched; the message says how to get them."""


def specs_dir(version: str = KUBERNETES_VERSION) -> Path:
    return cache_root() / "openapi" / f"v{version}"


def how_to_get() -> str:
    return (
        f"the OpenAPI documents of Kubernetes v{KUBERNETES_VERSION} are not cached in {specs_dir()}: run "
        f"`python -m kubedl_local.sources` (or `make test`) once with access to {proxy_url()}"
    )


def load_cached() -> dict[str, bytes] | None:
    out: dict[str, bytes] = {}
    for key, name in DOCUMENTS.items():
        try:
            out[key] = (specs_dir() / name).read_bytes()
        except OSError:
            return None
    return out


def ensure_specs(*, fetch: bool = True) -> dict[str, bytes]:
    """The built-in documents by path (``api/v1``): cached, else downloaded (the ``k8s.io/kubernetes``
    module zip, about 20 MB, once)."""
    found = load_cached()
    if found is not None:
        return found
    target = specs_dir()
    target.mkdir(parents=True, exist_ok=True)
    with _locked(target / ".lock"):
        found = load_cached()
        if found is not None:
            return found
        if not fetch:
            raise SpecsUnavailable(how_to_get())
        try:
            files = _from_zip(_download())
        except (OSError, urllib.error.URLError, zipfile.BadZipFile, KeyError) as exc:
            raise SpecsUnavailable(f"{how_to_get()} ({exc})") from exc
        for name, data in files.items():
            fd, tmp = tempfile.mkstemp(dir=target, prefix=".doc-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, target / name)
    result = load_cached()
    if result is None:  # pragma: no cover - written just above
        raise SpecsUnavailable(how_to_get())
    return result


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download() -> bytes:
    url = f"{proxy_url()}/k8s.io/kubernetes/@v/v{KUBERNETES_VERSION}.zip"
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT * 5) as response:
        data: bytes = response.read()
    return data


def _from_zip(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(f"{_SPEC_DIR}/{name}") for name in DOCUMENTS.values()}


def document_hash(data: bytes) -> str:
    return hashlib.sha512(data).hexdigest().upper()


# ------------------------------------------------------------------------------------------ built-in documents


def _resource_of(path: str, base: str) -> tuple[str, str | None] | None:
    """(plural, subresource) a path of a group-version document is about; None for the version's root."""
    rest = [p for p in path[len(base) :].split("/") if p]
    if rest and rest[0] == "watch":
        rest = rest[1:]
    if len(rest) >= 2 and rest[0] == "namespaces" and rest[1] == "{namespace}":
        rest = rest[2:]
    if not rest:
        return None
    sub = rest[2] if len(rest) > 2 else None
    return rest[0], sub


def add_enums(doc: Obj, table: Obj) -> None:
    """What a live server adds to the published documents: ``enum`` and "Possible enum values" for fields
    whose Go type is marked ``+enum`` (openapi-gen's enum support; the files in the module lack them)."""
    enums: dict[str, dict[str, list[list[str]]]] = table.get("enums", {})
    messages: dict[str, Obj] = table.get("messages", {})
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        if not name.startswith("io.k8s."):
            continue
        message = "k8s.io." + name[len("io.k8s.") :]
        package = message.rsplit(".", 1)[0]
        spec = messages.get(message)
        values = enums.get(package)
        if spec is None or not values:
            continue
        by_name = _fields_by_name(messages, spec)
        for prop, sub in (schema.get("properties") or {}).items():
            go = str((by_name.get(prop) or {}).get("go", ""))
            container = ""
            if go.startswith("[]"):
                container, go = "items", go[2:]
            elif go.startswith("map["):
                container, go = "additionalProperties", go[go.index("]") + 1 :]
            qualifier, _, type_name = go.rpartition(".")
            consts = values.get(type_name) if qualifier == package.rsplit(".", 1)[-1] else None
            target = sub.get(container) if container else sub
            if not consts or not isinstance(target, dict) or "enum" in target:
                continue
            target["enum"] = [value for value, _ in consts]
            if container:
                continue  # lists and maps of enum values get the values only
            lines = [f" - `{json.dumps(value)}`" + (f" {text}" if text else "") for value, text in consts]
            described = sub.get("description", "")
            sub["description"] = (
                (described + "\n\n" if described else "") + "Possible enum values:\n" + "\n".join(lines)
            )


def _fields_by_name(messages: dict[str, Obj], spec: Obj) -> dict[str, Obj]:
    """A message's fields by JSON name, those of inlined structs included."""
    out: dict[str, Obj] = {}
    for f in spec["fields"].values():
        if f.get("inline") and f["type"] in messages:
            out.update(_fields_by_name(messages, messages[f["type"]]))
        elif f.get("name"):
            out[f["name"]] = f
    return out


def filter_document(data: bytes, base: str, served: dict[str, list[str]], table: Obj | None = None) -> bytes:
    """A built-in group version's document with only the paths of ``served`` resources (plural ->
    subresources), and the enums a live server adds. Schemas stay: kubectl looks kinds up by
    group-version-kind, and the served ones refer to many others."""
    doc = json.loads(data)
    if table is not None:
        add_enums(doc, table)
    paths = {}
    for path, item in doc.get("paths", {}).items():
        about = _resource_of(path, base)
        if about is not None:
            plural, sub = about
            if plural not in served:
                if not (plural == "namespaces" and sub is None and "namespaces" in served):
                    continue
            elif sub is not None and sub not in served[plural]:
                continue
        paths[path] = item
    doc["paths"] = paths
    return json.dumps(doc, separators=(",", ":")).encode()


# ------------------------------------------------------------------------------------------ custom resources


def model_name(group: str, version: str, kind: str) -> str:
    """``gvkToModelName``: the group reversed (``training.kubedl.io`` -> ``io.kubedl.training``)."""
    return f"{'.'.join(reversed(group.split('.')))}.{version}.{kind}"


def _ref(name: str) -> Obj:
    return {"$ref": f"#/components/schemas/{name}"}


def _unfold(schema: Any) -> Any:
    """``Structural.Unfold``: an int-or-string node gets ``anyOf: [integer, string]``."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out and "allOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _unfold(v) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _unfold(out[key])
    return _embedded(out)


def _embedded(schema: Obj) -> Obj:
    """``addEmbeddedProperties``: an embedded resource node is described like an object's top level."""
    if not schema.get("x-kubernetes-embedded-resource"):
        return schema
    props = dict(schema.get("properties") or {})
    props["apiVersion"] = {
        "description": "apiVersion defines the versioned schema of this representation of an object. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
        "type": "string",
    }
    props["kind"] = {
        "description": "kind is a string value representing the type of this object. In CamelCase. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
        "type": "string",
    }
    props["metadata"] = {"description": METADATA_DESCRIPTION, "allOf": [_ref(f"{META}.ObjectMeta")]}
    required = list(schema.get("required") or [])
    required += [k for k in ("kind", "apiVersion") if k not in required]
    return {**schema, "properties": props, "required": required}


def crd_kind_schema(group: str, version: str, kind: str, schema: Obj | None) -> Obj:
    """``buildKubeNative``: the schema of one kind as the real server publishes it."""
    gvk = [{"group": group, "kind": kind, "version": version}]
    if not schema:
        return {"type": "object", "x-kubernetes-group-version-kind": gvk}
    out: Obj = _unfold(copy.deepcopy(schema))
    props = dict(out.get("properties") or {})
    props["metadata"] = {"description": METADATA_DESCRIPTION, "allOf": [_ref(f"{META}.ObjectMeta")]}
    props["apiVersion"] = {"description": API_VERSION_DESCRIPTION, "type": "string"}
    props["kind"] = {"description": KIND_DESCRIPTION, "type": "string"}
    out["properties"] = dict(sorted(props.items()))
    out["x-kubernetes-group-version-kind"] = gvk
    return out


def crd_list_schema(group: str, version: str, kind: str, list_kind: str, plural: str) -> Obj:
    return {
        "description": f"{list_kind} is a list of {kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": API_VERSION_DESCRIPTION, "type": "string"},
            "items": {
                "description": f"List of {plural}. More info: "
                "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md",
                "type": "array",
                "items": _ref(model_name(group, version, kind)),
            },
            "kind": {"description": KIND_DESCRIPTION, "type": "string"},
            "metadata": {"description": LIST_METADATA_DESCRIPTION, "allOf": [_ref(f"{META}.ListMeta")]},
        },
        "x-kubernetes-group-version-kind": [{"group": group, "kind": list_kind, "version": version}],
    }


_LIST_PARAMS = (
    ("allowWatchBookmarks", "boolean"),
    ("continue", "string"),
    ("fieldSelector", "string"),
    ("labelSelector", "string"),
    ("limit", "integer"),
    ("resourceVersion", "string"),
    ("resourceVersionMatch", "string"),
    ("sendInitialEvents", "boolean"),
    ("timeoutSeconds", "integer"),
    ("watch", "boolean"),
)
_WRITE_PARAMS = (("dryRun", "string"), ("fieldManager", "string"), ("fieldValidation", "string"))
_PATCH_PARAMS = (*_WRITE_PARAMS, ("force", "boolean"))
_DELETE_PARAMS = (
    ("dryRun", "string"),
    ("gracePeriodSeconds", "integer"),
    ("ignoreStoreReadErrorWithClusterBreakingPotential", "boolean"),
    ("orphanDependents", "boolean"),
    ("propagationPolicy", "string"),
)
_PATCH_TYPES = (
    "application/apply-patch+yaml",
    "application/apply-patch+cbor",
    "application/json-patch+json",
    "application/merge-patch+json",
)


def _params(specs: tuple[tuple[str, str], ...]) -> list[Obj]:
    return [{"name": n, "in": "query", "schema": {"type": t, "uniqueItems": True}} for n, t in specs]


def _content(name: str) -> Obj:
    return {ct: {"schema": _ref(name)} for ct in ("application/json", "application/yaml")}


def _op(
    action: str, gvk: Obj, params: list[Obj], response: str, body: str | None = None, *, patch: bool = False
) -> Obj:
    op: Obj = {"parameters": params, "responses": {"200": {"description": "OK", "content": _content(response)}}}
    if body is not None:
        types = _PATCH_TYPES if patch else ("application/json", "application/yaml")
        op["requestBody"] = {"content": {ct: {"schema": _ref(body)} for ct in types}, "required": True}
    op["x-kubernetes-action"] = action
    op["x-kubernetes-group-version-kind"] = gvk
    return op


def crd_document(resources: list[Obj], meta_schemas: dict[str, Obj]) -> bytes:
    """The document of one custom group version. ``resources``: dicts with group, version, kind, list_kind,
    plural, namespaced, schema, subresources."""
    schemas: Obj = {}
    for name in CRD_META_SCHEMAS:
        full = f"{META}.{name}"
        schemas[full] = meta_schemas.get(full, {"type": "object"})
    paths: Obj = {}
    for r in sorted(resources, key=lambda r: str(r["plural"])):
        group, version, kind = r["group"], r["version"], r["kind"]
        name = model_name(group, version, kind)
        list_name = model_name(group, version, r["list_kind"])
        schemas[name] = crd_kind_schema(group, version, kind, r["schema"])
        schemas[list_name] = crd_list_schema(group, version, kind, r["list_kind"], r["plural"])
        gvk = {"group": group, "version": version, "kind": kind}
        status = f"{META}.Status"
        patch = f"{META}.Patch"
        root = f"/apis/{group}/{version}/{r['plural']}"
        if r["namespaced"]:
            paths[root] = {"get": _op("list", gvk, _params(_LIST_PARAMS), list_name)}
            root = f"/apis/{group}/{version}/namespaces/{{namespace}}/{r['plural']}"
        paths[root] = {
            "get": _op("list", gvk, _params(_LIST_PARAMS), list_name),
            "post": _op("post", gvk, _params(_WRITE_PARAMS), name, name),
            "delete": _op("deletecollection", gvk, _params(_DELETE_PARAMS + _LIST_PARAMS), status),
        }
        paths[f"{root}/{{name}}"] = {
            "get": _op("get", gvk, _params((("resourceVersion", "string"),)), name),
            "put": _op("put", gvk, _params(_WRITE_PARAMS), name, name),
            "delete": _op("delete", gvk, _params(_DELETE_PARAMS), status),
            "patch": _op("patch", gvk, _params(_PATCH_PARAMS), name, patch, patch=True),
        }
        for sub in r["subresources"]:
            if sub == "status":
                paths[f"{root}/{{name}}/status"] = {
                    "get": _op("get", gvk, _params((("resourceVersion", "string"),)), name),
                    "put": _op("put", gvk, _params(_WRITE_PARAMS), name, name),
                    "patch": _op("patch", gvk, _params(_PATCH_PARAMS), name, patch, patch=True),
                }
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": dict(sorted(schemas.items()))},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def meta_schemas_of(api_v1: bytes) -> dict[str, Obj]:
    """The metadata schemas, taken from the core group's document."""
    schemas: dict[str, Obj] = json.loads(api_v1).get("components", {}).get("schemas", {})
    return {str(k): v for k, v in schemas.items() if str(k).startswith(f"{META}.")}


# ------------------------------------------------------------------------------------------ publishing


class Publisher:
    """``/openapi/v3`` and its documents for the embedded server's current catalogue.

    ``specs`` are the built-in documents (None: not available, offline; then built-in group versions get
    documents with operations and no schemas, and custom resources' metadata schemas are bare objects).
    """

    def __init__(self, specs: dict[str, bytes] | None, table: Obj | None = None) -> None:
        self.specs = specs
        self.table = table
        self._builtin: dict[str, bytes] = {}
        self._meta: dict[str, Obj] = meta_schemas_of(specs["api/v1"]) if specs else {}

    def document(self, key: str, catalogue: Any, fallback: Any) -> bytes | None:
        """The document at ``/openapi/v3/<key>`` (``api/v1``, ``apis/<g>/<v>``), or None if not served."""
        parts = key.split("/")
        if key in ("api", "apis", "version") or (len(parts) == 2 and parts[0] == "apis"):
            if self.specs is not None and key in self.specs and self._group_served(parts, catalogue):
                return self.specs[key]
            return None
        if parts[0] == "api" and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[0] == "apis" and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            return None
        rts = catalogue.in_group_version(group, version)
        custom = [rt for rt in rts if rt.custom]
        if custom:
            return crd_document([_resource(rt, version) for rt in custom], self._meta)
        if not rts and (group, version) != ("", "v1"):
            return None
        if self.specs is not None and key in self.specs:
            cached = self._builtin.get(key)
            if cached is None:
                served = {rt.plural: list(rt.subresources) for rt in rts}
                cached = self._builtin[key] = filter_document(self.specs[key], "/" + key, served, self.table)
            return cached
        doc = fallback(catalogue, group, version)
        return json.dumps(doc, separators=(",", ":")).encode() if doc is not None else None

    @staticmethod
    def _group_served(parts: list[str], catalogue: Any) -> bool:
        if len(parts) < 2:
            return True
        return any(rt.group == parts[1] and not rt.custom for rt in catalogue.types.values())

    def root(self, catalogue: Any, fallback: Any) -> Obj:
        keys = ["api", "api/v1", "apis", "version"]
        gvs = {(rt.group, v) for rt in catalogue.types.values() for v in rt.versions if rt.group}
        for group, version in sorted(gvs):
            builtin = any(rt.group == group and not rt.custom for rt in catalogue.types.values())
            if builtin:
                keys.append(f"apis/{group}")
            keys.append(f"apis/{group}/{version}")
        paths: Obj = {}
        for key in sorted(set(keys)):
            data = self.document(key, catalogue, fallback)
            if data is not None:
                paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={document_hash(data)}"}
        return {"paths": paths}


def _resource(rt: Any, version: str) -> Obj:
    return {
        "group": rt.group,
        "version": version,
        "kind": rt.kind,
        "list_kind": rt.list_kind,
        "plural": rt.plural,
        "namespaced": rt.namespaced,
        "schema": rt.schemas.get(version),
        "subresources": [s for s in rt.subresources if s == "status"],
    }
