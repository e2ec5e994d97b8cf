"""What a kind of object is, as far as the REST paths are concerned.

The machinery works on raw dicts, so it needs only the few facts that build a URL and name a kind:
group, version, plural, kind, and whether the objects live in a namespace. Custom resources (the
training jobs) are described the same way by the controllers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

__all__ = [
    "CONFIGMAPS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "SERVICES",
    "Resource",
    "object_key",
    "split_key",
]


@dataclass(frozen=True)
class Resource:
    """One REST resource: ``/apis/{group}/{version}/[namespaces/{ns}/]{plural}``; core group is ``""``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` field of its objects: ``v1`` or ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path of the collection, or of one object (and one of its subresources)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
EVENTS = Resource("", "v1", "events", "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")


def object_key(obj: Mapping[str, Any]) -> str:
    """The cache and work-queue key of an object: ``namespace/name``, or ``name`` when cluster-scoped."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    name = str(meta.get("name", ""))
    return f"{namespace}/{name}" if namespace else name


def split_key(key: str) -> tuple[str | None, str]:
    """``"ns/name"`` -> ``("ns", "name")``; ``"name"`` -> ``(None, "name")``."""
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else (None, namespace)
