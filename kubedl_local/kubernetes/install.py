"""Put kubedl-py on a cluster the way an operator would: the rendered manifests, applied server-side.

Why here and not by hand in each test: the real tier must run the controller *under the RBAC in deploy/*,
so the ServiceAccount, ClusterRole and bindings that tests and ``local up --control-plane kubernetes`` rely on
are exactly the rendered ones, applied with server-side apply (what ``kubectl apply --server-side`` sends).
A controller then authenticates as that ServiceAccount with a token from the TokenRequest API, as a pod's
projected token volume would give it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import Resource
from kubedl_py.templates import ManifestOptions, render_manifests

FIELD_MANAGER = "kubedl-py-install"

#: the kinds the rendered manifests contain, by apiVersion and kind
_RESOURCES: dict[tuple[str, str], Resource] = {
    ("v1", "Namespace"): Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    ("v1", "ServiceAccount"): Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    ("v1", "Service"): Resource("", "v1", "services", "Service"),
    ("apps/v1", "Deployment"): Resource("apps", "v1", "deployments", "Deployment"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): Resource(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
    ),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): Resource(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
    ),
    ("rbac.authorization.k8s.io/v1", "Role"): Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): Resource(
        "rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): Resource(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", False
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        False,
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): Resource(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
    ),
}

#: what the controller runs under: everything of the manifests but the Deployment and its Service
#: what the API server enforces for the jobs, beside the CRDs' schemas (``kubedl_py.api.admission``)
ADMISSION_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
CONTROLLER_IDENTITY_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def manifest_documents(options: ManifestOptions | None = None, *, kinds: Iterable[str] | None = None) -> list[Any]:
    """The rendered manifests as objects, optionally only some kinds (in manifest order)."""
    wanted = set(kinds) if kinds is not None else None
    documents = [doc for doc in yaml.safe_load_all(render_manifests(options)) if doc]
    return [doc for doc in documents if wanted is None or doc["kind"] in wanted]


def resource_of(document: Mapping[str, Any]) -> Resource:
    key = (str(document.get("apiVersion")), str(document.get("kind")))
    if key not in _RESOURCES:
        raise ValueError(f"no REST mapping for {key[1]} ({key[0]}) in the install manifests")
    return _RESOURCES[key]


async def apply(kube: KubeClient, documents: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Server-side apply each document (creating or updating it), in order."""
    applied = []
    for document in documents:
        resource = resource_of(document)
        meta = document.get("metadata") or {}
        applied.append(
            await kube.patch(
                resource,
                str(meta["name"]),
                document,
                namespace=meta.get("namespace") if resource.namespaced else None,
                patch_type="apply",
                field_manager=FIELD_MANAGER,
                force=True,
            )
        )
    return applied


async def service_account_token(
    kube: KubeClient, namespace: str, name: str, *, seconds: int = 24 * 3600, audiences: Iterable[str] = ()
) -> tuple[str, datetime]:
    """A token for the ServiceAccount from the TokenRequest API, and when it expires."""
    body: dict[str, Any] = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds, "audiences": list(audiences) or None},
    }
    if not body["spec"]["audiences"]:
        del body["spec"]["audiences"]
    answer = await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body=body)
    status = answer.get("status") or {}
    expires = status.get("expirationTimestamp")
    when = (
        datetime.fromisoformat(str(expires).replace("Z", "+00:00"))
        if expires
        else datetime.now(UTC) + timedelta(seconds=seconds)
    )
    return str(status["token"]), when
