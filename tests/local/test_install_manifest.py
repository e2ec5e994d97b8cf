"""The install manifest (deploy/kubedl-py.yaml) through the real kubectl, on the embedded cluster.

Within its scope the embedded server answers as the real one: the CRDs and the RBAC apply, re-applying CRDs
that someone else created (the controller does on ``local up``) is a strategic-merge patch, which a real
server accepts for every built-in kind. Outside its scope (Deployments, admission policies) kubectl shows
the embedded cluster's own message, which says to use ``--control-plane kubernetes``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.local.conftest import KUBECTL, Http, Run

pytestmark = [pytest.mark.kubectl, pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")]

Kubectl = Callable[..., Awaitable[Run]]
MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "kubedl-py.yaml"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
SMP = "application/strategic-merge-patch+json"


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def crds() -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == "CustomResourceDefinition"]


async def test_apply_of_the_install_manifest(kubectl: Kubectl, http: Http) -> None:
    r = await kubectl("apply", "-f", str(MANIFEST))
    assert r.code == 1, r.out  # the Deployment and the admission policies are not served
    for crd in crds():
        name = crd["metadata"]["name"]
        assert f"customresourcedefinition.apiextensions.k8s.io/{name} created" in r.out
        assert (await http.get(f"{CRDS}/{name}")).status == 200
    for doc in documents():
        kind, md = doc["kind"], doc["metadata"]
        if kind in ("ClusterRole", "ClusterRoleBinding"):
            got = await http.get(f"{RBAC}/{kind.lower()}s/{md['name']}")
        elif kind in ("Role", "RoleBinding"):
            got = await http.get(f"{RBAC}/namespaces/{md['namespace']}/{kind.lower()}s/{md['name']}")
        else:
            continue
        assert got.status == 200, (kind, md["name"], got.body)
        assert got.body.get("rules", got.body.get("subjects")) == doc.get("rules", doc.get("subjects"))
    unserved = {d["kind"] for d in documents()} & {"Deployment", "ValidatingAdmissionPolicy"}
    assert unserved == {"Deployment", "ValidatingAdmissionPolicy"}
    assert "ensure CRDs are installed first" not in r.err
    assert (
        "the embedded cluster does not serve deployments.apps (apps/v1 Deployment): run the cluster with "
        "`kubedl-py local up --control-plane kubernetes`" in r.err
    )
    assert "the embedded cluster does not serve validatingadmissionpolicies.admissionregistration.k8s.io" in r.err
    again = await kubectl("apply", "-f", str(MANIFEST))
    assert again.code == 1
    for crd in crds():
        assert f"customresourcedefinition.apiextensions.k8s.io/{crd['metadata']['name']} unchanged" in again.out


async def test_kubectl_create_deployment_names_the_embedded_cluster(kubectl: Kubectl) -> None:
    r = await kubectl("create", "deployment", "web", "--image=nginx:1.27")
    assert r.code == 1
    assert "the embedded cluster does not serve deployments.apps" in r.err
    assert "--control-plane kubernetes" in r.err


async def test_reapply_of_crds_installed_by_another_client(kubectl: Kubectl, http: Http, tmp_path: Path) -> None:
    """The controller creates the CRDs on ``local up`` with no last-applied annotation: kubectl's apply is
    then a strategic-merge patch of each (it was a 415 before)."""
    for crd in crds():
        created = await http.post(CRDS, crd)
        assert created.status == 201, created.body
    f = tmp_path / "crds.yaml"
    f.write_text(yaml.safe_dump_all(crds()))
    r = await kubectl("apply", "-f", str(f))
    assert r.code == 0, r.err
    for crd in crds():
        name = crd["metadata"]["name"]
        assert f"customresourcedefinition.apiextensions.k8s.io/{name} configured" in r.out
        got = (await http.get(f"{CRDS}/{name}")).body
        assert "kubectl.kubernetes.io/last-applied-configuration" in got["metadata"]["annotations"]
        assert got["spec"]["versions"][0]["name"] == crd["spec"]["versions"][0]["name"]


async def test_strategic_merge_patch_of_a_crd_and_a_cluster_role(http: Http) -> None:
    crd = crds()[0]
    name = crd["metadata"]["name"]
    crd["metadata"]["labels"] = {"keep": "1"}
    crd["metadata"]["finalizers"] = ["example.com/a"]
    assert (await http.post(CRDS, crd)).status == 201
    patch = {
        "metadata": {"labels": {"added": "2"}, "finalizers": ["example.com/b"]},
        "spec": {"names": {"shortNames": ["pj"]}},
    }
    r = await http.patch(f"{CRDS}/{name}", patch, content_type=SMP)
    assert r.status == 200, r.body
    assert r.body["metadata"]["labels"] == {"keep": "1", "added": "2"}
    assert r.body["metadata"]["finalizers"] == ["example.com/a", "example.com/b"]  # ObjectMeta's merge strategy
    assert r.body["spec"]["names"]["shortNames"] == ["pj"]  # no strategy: replaced
    assert r.body["spec"]["names"]["plural"] == crd["spec"]["names"]["plural"]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }
    assert (await http.post(f"{RBAC}/clusterroles", role)).status == 201
    rules = [{"apiGroups": [""], "resources": ["services"], "verbs": ["list"]}]
    r = await http.patch(f"{RBAC}/clusterroles/reader", {"rules": rules}, content_type=SMP)
    assert r.status == 200, r.body
    assert r.body["rules"] == rules  # PolicyRule lists have no merge key: replaced, as on the real server
