"""The Helm chart on a fresh real control plane, as an operator uses it (issue 37): install, run, upgrade, uninstall.

One cluster, a node that runs the controller's pod from the image built here (podman), and the real ``helm``
(``kubedl_local/kubernetes/helm.py``):

1. ``helm install --wait`` of ``charts/kubedl-py`` as a **namespaced** install (``watchNamespaces``): the
   Deployment becomes Available; ``kubectl auth can-i`` says its ServiceAccount may create pods in a watched
   namespace and not in ``kube-system``; the README's example job (``examples/quickstart-pytorch.yaml``)
   succeeds in a watched namespace while a job in another namespace is left alone.
2. ``/metrics`` through its Service: 401 without a token, 403 for a ServiceAccount without the reader role,
   the metrics (the job counted as Succeeded) once that ServiceAccount is bound to the chart's reader role.
3. ``helm upgrade --wait`` to the default values (every namespace): the Roles give way to the ClusterRole and
   the job that was ignored runs.
4. ``helm uninstall --wait``: no object of ours is left, in any namespace or cluster-wide, but the CRDs (Helm
   never deletes a chart's ``crds/``, as it documents).

Skipped when podman is missing or not root (like tests/test_install.py), or the real tier is not selected.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from kubedl_local.kubernetes.cluster import KubernetesCluster, KubernetesClusterOptions, create_namespace
from kubedl_local.kubernetes.helm import run_helm
from kubedl_local.kubernetes.install import service_account_token
from kubedl_py.api import constants as c
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import LEASES, PODS, SERVICES, Resource
from kubedl_py.templates.render import metrics_auth_binding, metrics_reader_role, nodes_role
from tests.test_install import diagnose, image_id, kubectl, pytestmark, until  # noqa: F401 - fixture; same skips

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "kubedl-py"
NAMESPACE = "kubedl-system"
RELEASE = "kubedl-py"
PYTORCHJOBS = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
POLICIES = Resource(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", namespaced=False
)
POLICY_BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
#: what an uninstall must leave no object of ours in (namespaced kinds: every namespace)
NAMESPACED_KINDS = (DEPLOYMENTS, SERVICES, SERVICE_ACCOUNTS, CONFIGMAPS, ROLES, ROLE_BINDINGS, LEASES, PODS)
OURS = "app.kubernetes.io/name=kubedl-py"


async def helm(*args: str, home: Path, kubeconfig: Path) -> str:
    """The real helm, off the event loop the cluster's node agent runs on; its output, or the test fails."""
    done = await asyncio.to_thread(run_helm, *args, home=home, kubeconfig=kubeconfig, timeout=400)
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


async def scrape(url: str, token: str | None = None) -> tuple[int, str]:
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # the certificate is self-signed
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.get(url, headers=headers, ssl=insecure) as response,
    ):
        return response.status, await response.text()


async def can_i(admin: Path, subject: str, verb: str, resource: str, namespace: str) -> str:
    answer = await kubectl(admin, "auth", "can-i", verb, resource, "-n", namespace, "--as", subject)
    return answer.stdout.strip()


async def job_state(kube: KubeClient, name: str, namespace: str) -> str:
    job = await kube.get(PYTORCHJOBS, name, namespace=namespace)
    conditions = (job.get("status") or {}).get("conditions") or []
    return next((cond["type"] for cond in reversed(conditions) if cond.get("status") == "True"), "")


@pytest.mark.usefixtures("image_id")  # the controller image, built from this checkout as `make image` builds it
async def test_helm_install_runs_the_example_job_then_upgrade_and_uninstall(tmp_path: Path) -> None:
    options = KubernetesClusterOptions(
        runtime="container",
        nodes=1,
        install=False,  # a bare cluster: the chart installs everything
        bridge=f"kdh{uuid.uuid4().hex[:6]}",
        pod_cidr=f"10.{random.randint(200, 250)}.{random.randint(0, 255)}.0/24",
    )
    home = tmp_path / "helm"
    async with KubernetesCluster(options) as cluster:
        admin = cluster.admin_kubeconfig
        async with KubeClient(kubeconfig=admin) as kube:
            for namespace in ("team-a", "team-b", "elsewhere"):
                await create_namespace(kube, namespace)

            # 1. a namespaced install
            await helm(
                "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
                "--set", "watchNamespaces={team-a,team-b}", "--wait", "--timeout", "300s",
                home=home, kubeconfig=admin,
            )  # fmt: skip
            deployment = await kube.get(DEPLOYMENTS, "kubedl-py-controller", namespace=NAMESPACE)
            available = {cond["type"]: cond["status"] for cond in deployment["status"]["conditions"]}
            assert available["Available"] == "True", deployment["status"] + await diagnose(admin)
            subject = f"system:serviceaccount:{NAMESPACE}:kubedl-py-controller"
            assert await can_i(admin, subject, "create", "pods", "kube-system") == "no"
            assert await can_i(admin, subject, "get", "secrets", "kube-system") == "no"
            assert await can_i(admin, subject, "create", "pods", "elsewhere") == "no"
            assert await can_i(admin, subject, "create", "pods", "team-a") == "yes"

            applied = await kubectl(
                admin, "-n", "team-a", "apply", "-f", str(ROOT / "examples/quickstart-pytorch.yaml")
            )
            assert applied.returncode == 0, applied.stderr
            ignored = yaml.safe_load((ROOT / "examples/quickstart-pytorch.yaml").read_text())
            ignored["metadata"]["name"] = "ignored"
            await kube.create(PYTORCHJOBS, ignored, namespace="elsewhere")

            async def succeeded() -> bool:
                return await job_state(kube, "quickstart", "team-a") == "Succeeded"

            await until(succeeded, within=180, what="the README's example job to succeed")
            assert await job_state(kube, "ignored", "elsewhere") == ""
            assert (await kube.list(PODS, namespace="elsewhere")).items == []

            # 2. /metrics through its Service
            service = await kube.get(SERVICES, "kubedl-py-controller-metrics", namespace=NAMESPACE)
            url = f"https://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}/metrics"
            await kube.create(SERVICE_ACCOUNTS, {"metadata": {"name": "prometheus"}}, namespace="team-a")
            token, _ = await service_account_token(kube, "team-a", "prometheus", seconds=3600)
            assert (await scrape(url))[0] == 401
            assert (await scrape(url, token))[0] == 403
            bound = await kubectl(
                admin, "create", "clusterrolebinding", "prometheus-kubedl-py",
                f"--clusterrole={metrics_reader_role(NAMESPACE)}", "--serviceaccount=team-a:prometheus",
            )  # fmt: skip
            assert bound.returncode == 0, bound.stderr

            async def metrics() -> str | None:
                status, text = await scrape(url, token)
                return text if status == 200 else None

            text = await until(metrics, within=60, what="the metrics for the bound reader")
            assert 'kubedl_jobs_by_state{kind="PyTorchJob",state="Succeeded"} 1.0' in text
            await kubectl(admin, "delete", "clusterrolebinding", "prometheus-kubedl-py")

            # 3. upgrade to every namespace: the chart's defaults (given no values, Helm would reuse the release's)
            await helm(
                "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reset-values",
                "--wait", "--timeout", "300s", home=home, kubeconfig=admin,
            )  # fmt: skip
            await kube.get(CLUSTER_ROLES, "kubedl-py-controller")
            for namespace in ("team-a", "team-b"):
                roles = await kube.list(ROLES, namespace=namespace, label_selector=OURS)
                assert roles.items == [], f"the namespaced Role in {namespace} outlived the upgrade"
            assert await can_i(admin, subject, "create", "pods", "elsewhere") == "yes"

            async def picked_up() -> bool:
                return await job_state(kube, "ignored", "elsewhere") in ("Running", "Succeeded")

            await until(picked_up, within=180, what="the other namespace's job to be reconciled after the upgrade")
            lease = await kube.get(LEASES, "kubedl-py-controller", namespace=NAMESPACE)
            assert lease["spec"].get("holderIdentity"), "the upgraded controller leads"

            # 4. uninstall: the user's jobs go first (their pods and Services with them), then the release
            for namespace, name in (("team-a", "quickstart"), ("elsewhere", "ignored")):
                await kube.delete(PYTORCHJOBS, name, namespace=namespace)
            await helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", home=home, kubeconfig=admin)
            left: list[str] = []

            async def all_gone() -> bool:
                left[:] = await _left_of_ours(kube)
                return not left

            try:
                await until(all_gone, within=120, what="nothing of ours left")
            except AssertionError:
                raise AssertionError(f"left behind by `helm uninstall`: {left}") from None
            crds = await kube.list(CRDS)
            ours = sorted(crd["metadata"]["name"] for crd in crds.items if crd["spec"]["group"] == c.GROUP)
            assert f"{c.PYTORCH_PLURAL}.{c.GROUP}" in ours, "Helm keeps a chart's CRDs (crds/), as it documents"


async def _left_of_ours(kube: KubeClient) -> list[str]:
    """What of ours is still in the cluster (CRDs aside)."""
    left: list[str] = []
    for resource in NAMESPACED_KINDS:
        listed = await kube.list(resource, label_selector=OURS)
        left += [f"{resource.kind} {o['metadata']['namespace']}/{o['metadata']['name']}" for o in listed.items]
    for resource in (CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS):
        left += [f"{resource.kind} {o['metadata']['name']}" for o in (await kube.list(resource)).items if _ours(o)]
    for resource in (POLICIES, POLICY_BINDINGS):  # the jobs' admission policies, kubedl-py-<plural>
        listed = (await kube.list(resource)).items
        left += [
            f"{resource.kind} {o['metadata']['name']}" for o in listed if o["metadata"]["name"].startswith("kubedl-py-")
        ]
    for resource in (PODS, SERVICES):  # the jobs' own, labelled by job name
        for namespace in ("team-a", "elsewhere"):
            listed = await kube.list(resource, namespace=namespace, label_selector=c.LABEL_JOB_NAME)
            left += [f"{resource.kind} {namespace}/{o['metadata']['name']}" for o in listed.items]
    try:
        await kube.get(LEASES, "kubedl-py-controller", namespace=NAMESPACE)
        left.append(f"Lease {NAMESPACE}/kubedl-py-controller")
    except NotFound:
        pass
    return left


def _ours(obj: dict[str, Any]) -> bool:
    """A cluster-scoped object the chart makes (by name, or by our label); not the local cluster's own
    (its node agents' bindings, ``kubedl-py:node-agent:*``, belong to the test cluster, not the release)."""
    name = obj["metadata"]["name"]
    labels = obj["metadata"].get("labels") or {}
    made = {
        "kubedl-py-controller",
        metrics_reader_role(NAMESPACE),
        metrics_auth_binding(NAMESPACE),
        nodes_role(NAMESPACE),
    }
    return name in made or labels.get("app.kubernetes.io/name") == "kubedl-py"
