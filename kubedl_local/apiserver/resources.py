"""The catalogue of resource types the embedded API server serves.

Built-in kinds are listed here once; custom resources are added and removed at run time when CRDs are
created and deleted. Discovery, routing, validation and tables all read this catalogue, so a kind is served
consistently everywhere or not at all.

The catalogue also names the kinds of the real server's built-in groups that the embedded server does not
serve (``apps/v1`` Deployments, admission policies, ...; docs/local-cluster.md lists the scope). They are
listed in discovery with no verbs, so kubectl maps them and sends its request, and every request for them
is refused with a message that names the embedded cluster and the way out (``--control-plane
kubernetes``). Left out of discovery, kubectl would say "ensure CRDs are installed first", which misleads.
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


def _rbac(kind: str, plural: str, namespaced: bool) -> ResourceType:
    return ResourceType("rbac.authorization.k8s.io", "v1", kind, plural, namespaced)


def rbac_types() -> list[ResourceType]:
    """Roles and bindings, stored (``kubectl apply`` of an install manifest carries them) and never
    enforced: the embedded server authorizes every request (docs/local-cluster.md)."""
    return [
        _rbac("ClusterRole", "clusterroles", False),
        _rbac("ClusterRoleBinding", "clusterrolebindings", False),
        _rbac("Role", "roles", True),
        _rbac("RoleBinding", "rolebindings", True),
    ]


#: group version -> (kind, plural, namespaced) of the real server's built-in kinds the embedded one refuses
UNSERVED: dict[tuple[str, str], tuple[tuple[str, str, bool], ...]] = {
    ("", "v1"): (
        ("PersistentVolume", "persistentvolumes", False),
        ("PersistentVolumeClaim", "persistentvolumeclaims", True),
        ("PodTemplate", "podtemplates", True),
        ("ReplicationController", "replicationcontrollers", True),
    ),
    ("apps", "v1"): (
        ("ControllerRevision", "controllerrevisions", True),
        ("DaemonSet", "daemonsets", True),
        ("Deployment", "deployments", True),
        ("ReplicaSet", "replicasets", True),
        ("StatefulSet", "statefulsets", True),
    ),
    ("batch", "v1"): (("CronJob", "cronjobs", True), ("Job", "jobs", True)),
    ("autoscaling", "v2"): (("HorizontalPodAutoscaler", "horizontalpodautoscalers", True),),
    ("policy", "v1"): (("PodDisruptionBudget", "poddisruptionbudgets", True),),
    ("networking.k8s.io", "v1"): (
        ("Ingress", "ingresses", True),
        ("IngressClass", "ingressclasses", False),
        ("NetworkPolicy", "networkpolicies", True),
    ),
    ("storage.k8s.io", "v1"): (("StorageClass", "storageclasses", False),),
    ("scheduling.k8s.io", "v1"): (("PriorityClass", "priorityclasses", False),),
    ("admissionregistration.k8s.io", "v1"): (
        ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", False),
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies", False),
        ("ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", False),
        ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations", False),
    ),
}


def unserved_types() -> list[ResourceType]:
    return [
        ResourceType(group, version, kind, plural, namespaced, verbs=[])
        for (group, version), kinds in UNSERVED.items()
        for kind, plural, namespaced in kinds
    ]


def not_served(rt: ResourceType) -> str:
    """What the embedded server answers for a kind outside its scope."""
    what = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    return (
        f"the embedded cluster does not serve {what} ({rt.api_version()} {rt.kind}): run the cluster with "
        f"`kubedl-py local up --control-plane kubernetes` for the real Kubernetes API server"
    )


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
        for rt in (*builtin_types(), *rbac_types(), *review_types()):
            self.add(rt)
        self.unserved: dict[tuple[str, str], ResourceType] = {rt.key: rt for rt in unserved_types()}

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

    def refused(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The kind outside the embedded server's scope at this path, unless a CRD has since taken it."""
        rt = self.unserved.get((group, plural))
        if rt is None or version not in rt.versions or (group, plural) in self.types:
            return None
        return rt

    def discoverable_groups(self) -> dict[str, list[str]]:
        """``groups()`` with the groups of the refused kinds: what discovery lists."""
        out = self.groups()
        for group, version in UNSERVED:
            if group and version not in out.setdefault(group, []):
                out[group].append(version)
        return out

    def discoverable_in(self, group: str, version: str) -> list[ResourceType]:
        """The served kinds of a group version and the refused ones (listed with no verbs)."""
        refused = [rt for (g, plural), rt in self.unserved.items() if g == group and self.refused(g, version, plural)]
        return self.in_group_version(group, version) + refused
