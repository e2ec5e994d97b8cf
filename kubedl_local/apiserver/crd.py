"""CustomResourceDefinitions: turning a stored CRD into served resources, and back.

Creating a CRD makes its resources available at once (discovery included) with the ``Established``
condition set; updating it changes schemas and columns; deleting it removes every instance (with DELETED
watch events) and stops serving the kind, as the apiextensions server does.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from kubedl_local.apiserver import cel, schema
from kubedl_local.apiserver.errors import FieldError
from kubedl_local.apiserver.resources import Catalogue, ResourceType
from kubedl_local.storage.store import Event, Obj, Store, now_iso

#: the finalizer a CRD carries until its custom resources are deleted (the registry adds it, the CRD
#: controller here removes it)
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
#: the verbs of a custom resource, in the apiextensions discovery controller's order
CRD_VERBS = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")
_PLURAL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def validate_crd(crd: Obj) -> list[FieldError]:
    errs: list[FieldError] = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [FieldError("FieldValueRequired", "spec")]
    group = spec.get("group")
    names = spec.get("names") or {}
    if not group or not isinstance(group, str):
        errs.append(FieldError("FieldValueRequired", "spec.group"))
    elif "." not in group:
        errs.append(FieldError("FieldValueInvalid", "spec.group", "should be a domain with at least one dot", group))
    plural = names.get("plural")
    if not plural:
        errs.append(FieldError("FieldValueRequired", "spec.names.plural"))
    elif not _PLURAL.match(str(plural)):
        errs.append(FieldError("FieldValueInvalid", "spec.names.plural", "a lowercase RFC 1123 label", plural))
    if not names.get("kind"):
        errs.append(FieldError("FieldValueRequired", "spec.names.kind"))
    if plural and group and crd["metadata"].get("name") != f"{plural}.{group}":
        errs.append(
            FieldError(
                "FieldValueInvalid",
                "metadata.name",
                'must be spec.names.plural+"."+spec.group',
                crd["metadata"].get("name"),
            )
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errs.append(
            FieldError(
                "FieldValueNotSupported", "spec.scope", 'supported values: "Cluster", "Namespaced"', spec.get("scope")
            )
        )
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        errs.append(
            FieldError("FieldValueRequired", "spec.versions", "must have exactly one version marked as storage version")
        )
        return errs
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    schemas = [(v.get("schema") or {}).get("openAPIV3Schema") if isinstance(v, dict) else None for v in versions]
    # the internal CRD keeps one top-level schema when every version has the same (validation messages say so)
    hoisted = all(sch == schemas[0] for sch in schemas)
    if len(storage) != 1:
        shown = [_internal_version(v, hoisted) for v in versions if isinstance(v, dict)]
        errs.append(
            FieldError(
                "FieldValueInvalid", "spec.versions", "must have exactly one version marked as storage version", shown
            )
        )
    if not storage:
        errs.append(
            FieldError("FieldValueInvalid", "status.storedVersions", "must have at least one stored version", None)
        )
    for i, v in enumerate(versions):
        if not isinstance(v, dict) or not v.get("name"):
            errs.append(FieldError("FieldValueRequired", f"spec.versions[{i}].name"))
            continue
        sch = (v.get("schema") or {}).get("openAPIV3Schema")
        if sch is None:
            errs.append(
                FieldError("FieldValueRequired", f"spec.versions[{i}].schema.openAPIV3Schema", "schemas are required")
            )
        else:
            where = "spec.validation.openAPIV3Schema" if hoisted else f"spec.versions[{i}].schema.openAPIV3Schema"
            schema.check_structural(sch, where, errs)
            errs += cel.check_schema(sch, "spec.validation.openAPIV3Schema")
            if hoisted:
                break  # one schema, checked once
    return errs


def _internal_version(v: Obj, hoisted: bool) -> Obj:
    """A version as the real server prints it in an error: the internal Go struct, without JSON tags."""
    return {
        "Name": v.get("name", ""),
        "Served": bool(v.get("served")),
        "Storage": bool(v.get("storage")),
        "Deprecated": bool(v.get("deprecated")),
        "DeprecationWarning": v.get("deprecationWarning"),
        "Schema": None if hoisted else v.get("schema"),
        "Subresources": None if hoisted else v.get("subresources"),
        "AdditionalPrinterColumns": None if hoisted else v.get("additionalPrinterColumns"),
        "SelectableFields": v.get("selectableFields"),
    }


def default_crd(crd: Obj) -> None:
    spec = crd.setdefault("spec", {})
    names = spec.setdefault("names", {})
    if names.get("kind"):
        names.setdefault("singular", str(names["kind"]).lower())
        names.setdefault("listKind", f"{names['kind']}List")
    for v in spec.get("versions") or []:
        if isinstance(v, dict):
            v.setdefault("served", True)
    spec.setdefault("conversion", {"strategy": "None"})
    now = now_iso()
    storage = next(
        (v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")), None
    )
    crd["status"] = {
        "acceptedNames": dict(names),
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
        "storedVersions": [storage] if storage else [],
    }


def resource_type(crd: Obj) -> ResourceType:
    spec = crd["spec"]
    names = spec["names"]
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    storage = next((v for v in spec["versions"] if v.get("storage")), spec["versions"][0])
    subs: list[str] = []
    if any((v.get("subresources") or {}).get("status") is not None for v in spec["versions"]):
        subs.append("status")
    if any((v.get("subresources") or {}).get("scale") is not None for v in spec["versions"]):
        subs.append("scale")
    return ResourceType(
        group=spec["group"],
        version=storage["name"],
        kind=names["kind"],
        plural=names["plural"],
        namespaced=spec.get("scope") == "Namespaced",
        singular=names.get("singular", ""),
        short_names=list(names.get("shortNames") or []),
        categories=list(names.get("categories") or []),
        subresources=subs,
        custom=True,
        verbs=list(CRD_VERBS),
        versions=[v["name"] for v in versions] or [storage["name"]],
        schemas={v["name"]: (v.get("schema") or {}).get("openAPIV3Schema") or {} for v in spec["versions"]},
        rules={v["name"]: cel.has_rules((v.get("schema") or {}).get("openAPIV3Schema")) for v in spec["versions"]},
        printer_columns={v["name"]: list(v.get("additionalPrinterColumns") or []) for v in spec["versions"]},
        crd_name=crd["metadata"]["name"],
    )


class CRDController:
    """Keeps the catalogue in step with the stored CRDs."""

    def __init__(self, store: Store, catalogue: Catalogue) -> None:
        self.store = store
        self.catalogue = catalogue
        for crd in store.iter(CRD_KEY):
            self._serve(crd)
        store.listeners.append(self._on_event)

    def _serve(self, crd: Obj) -> None:
        try:
            rt = resource_type(crd)
        except (KeyError, TypeError, IndexError):
            return
        if rt.key in self.catalogue.types and not self.catalogue.types[rt.key].custom:
            return  # never shadow a built-in kind
        self.catalogue.add(rt)

    def _on_event(self, ev: Event) -> None:
        if ev.rkey != CRD_KEY:
            return
        if ev.type == "DELETED":
            try:
                key = (ev.obj["spec"]["group"], ev.obj["spec"]["names"]["plural"])
            except (KeyError, TypeError):
                return
            served = self.catalogue.types.get(key)
            name = (ev.obj.get("metadata") or {}).get("name")
            if served is None or not served.custom or served.crd_name != name:
                return  # a built-in kind, or a type this CRD never served
            self.catalogue.remove(key)
            asyncio.get_running_loop().call_soon(self._purge, key)
        else:
            self._serve(ev.obj)
            md = ev.obj["metadata"]
            if md.get("deletionTimestamp") and CRD_CLEANUP_FINALIZER in (md.get("finalizers") or []):
                asyncio.get_running_loop().call_soon(self._clean_up, md["name"])

    def _clean_up(self, name: str) -> None:
        """The finalizer's work: every instance goes (DELETED events), then the finalizer, then the CRD."""
        crd = self.store.get(CRD_KEY, "", name)
        if crd is None or CRD_CLEANUP_FINALIZER not in (crd["metadata"].get("finalizers") or []):
            return
        try:
            key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        except (KeyError, TypeError):
            key = None
        served = self.catalogue.types.get(key) if key is not None else None
        if key is not None and served is not None and served.custom and served.crd_name == name:
            # only the instances this CRD serves (a CRD shadowing a built-in kind never served any)
            for obj in list(self.store.iter(key)):
                self.store.remove(key, obj)
        left = [f for f in crd["metadata"].get("finalizers") or [] if f != CRD_CLEANUP_FINALIZER]
        if left:  # someone else's finalizer still holds it
            new = dict(crd, metadata=dict(crd["metadata"], finalizers=left, resourceVersion=str(self.store.next_rv())))
            self.store.put(CRD_KEY, new, crd)
            return
        self.store.remove(CRD_KEY, crd)

    def _purge(self, key: tuple[str, str]) -> None:
        if key in self.catalogue.types:
            return  # recreated meanwhile
        for obj in list(self.store.iter(key)):
            self.store.remove(key, obj)
        self.store.drop_resource(key)


def crd_columns(rt: ResourceType, version: str) -> list[dict[str, Any]]:
    return rt.printer_columns.get(version) or []
