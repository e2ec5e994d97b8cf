"""The catalogue of resource types the embedded API server serves.

Built-in kinds are listed here once; custom resources are added and removed at run time when CRDs are
created and deleted. Discovery, routing, validation and tables all read this catalogue, so a kind is served
consistently everywhere or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    singular: str = ""
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    subresources: list[str] = field(default_factory=list)  # e.g. ["status", "log", "binding"]
    verbs: list[str] = field(default_factory=lambda: list(ALL_VERBS))
    # Custom resources only:
    custom: bool = False
    versions: list[str] = field(default_factory=list)  # all served versions (CRDs)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)  # version -> openAPIV3Schema
    rules: dict[str, bool] = field(default_factory=dict)  # version -> whether its schema has CEL rules
    printer_columns: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    crd_name: str = ""

    def __post_init__(self) -> None:
        if not self.singular:
            self.singular = self.kind.lower()
        if not self.versions:
            self.versions = [self.version]

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def api_version(self, version: str | None = None) -> str:
        v = version or self.version
        return f"{self.group}/{v}" if self.group else v

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _core(kind: str, plural: str, namespaced: bool, **kw: Any) -> ResourceType:
    return ResourceType(group="", version="v1", kind=kind, plural=plural, namespaced=namespaced, **kw)


def builtin_types() -> list[ResourceType]:
    return [
        _core(
            "Namespace",
            "namespaces",
            False,
            short_names=["ns"],
            subresources=["status", "finalize"],
            verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
        ),
        _core(
            "Pod",
            "pods",
            True,
            short_names=["po"],
            categories=["all"],
            subresources=["status", "log", "binding", "eviction", "ephemeralcontainers", "exec"],
        ),
        _core(
            "Service",
            "services",
            True,
            short_names=["svc"],
            categories=["all"],
            subresources=["status"],
            verbs=["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        ),
        _core("Endpoints", "endpoints", True, short_names=["ep"]),
        _core("Event", "events", True, short_names=["ev"]),
        _core("ConfigMap", "configmaps", True, short_names=["cm"]),
        _core("Secret", "secrets", True),
        _core("ServiceAccount", "serviceaccounts", True, short_names=["sa"], subresources=["token"]),
        _core("Node", "nodes", False, short_names=["no"], subresources=["status"]),
        # Quotas and limit ranges are read-only here: listing them works (kubectl describe namespace does),
        # but without their admission and controllers the server refuses to store any (405).
        _core("ResourceQuota", "resourcequotas", True, short_names=["quota"], verbs=["get", "list", "watch"]),
        _core("LimitRange", "limitranges", True, short_names=["limits"], verbs=["get", "list", "watch"]),
        ResourceType("coordination.k8s.io", "v1", "Lease", "leases", True),
        ResourceType("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", True),
        ResourceType(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            False,
            short_names=["crd", "crds"],
            categories=["api-extensions"],
            subresources=["status"],
        ),
    ]


def review_types() -> list[ResourceType]:
    """The review kinds of ``kubectl auth`` (reviews.py): create only, never stored."""

    def review(group: str, kind: str, namespaced: bool = False) -> ResourceType:
        return ResourceType(group, "v1", kind, kind.lower() + "s", namespaced, verbs=["create"])

    return [
        review("authorization.k8s.io", "LocalSubjectAccessReview", True),
        review("authorization.k8s.io", "SelfSubjectAccessReview"),
        review("authorization.k8s.io", "SelfSubjectRulesReview"),
        review("authorization.k8s.io", "SubjectAccessReview"),
        review("authentication.k8s.io", "SelfSubjectReview"),
        review("authentication.k8s.io", "TokenReview"),
    ]


class Catalogue:
    """Resource types by (group, plural), with lookups by version and kind."""

    def __init__(self) -> None:
        self.types: dict[tuple[str, str], ResourceType] = {}
        for rt in (*builtin_types(), *review_types()):
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self.types[rt.key] = rt

    def remove(self, key: tuple[str, str]) -> None:
        self.types.pop(key, None)

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        rt = self.types.get((group, plural))
        if rt is None or version not in rt.versions:
            return None
        return rt

    def by_kind(self, group: str, kind: str) -> ResourceType | None:
        for rt in self.types.values():
            if rt.group == group and rt.kind == kind:
                return rt
        return None

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, preferred first (core group excluded)."""
        out: dict[str, list[str]] = {}
        for rt in self.types.values():
            if not rt.group:
                continue
            vs = out.setdefault(rt.group, [])
            for v in rt.versions:
                if v not in vs:
                    vs.append(v)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self.types.values() if rt.group == group and version in rt.versions]
