"""kubectl explain and auth can-i: what users ask the server about the API and their rights."""

from __future__ import annotations

from tests.differential.harness import Tier, case


@case("kubectl-explain-pod")
async def _(t: Tier) -> None:
    """explain of a built-in kind and of nested fields."""
    await t.kubectl("explain", "pods")
    await t.kubectl("explain", "pods.spec.containers.ports")
    await t.kubectl("explain", "pod.spec.restartPolicy")


@case("kubectl-explain-service-recursive")
async def _(t: Tier) -> None:
    """explain --recursive of a Service's spec."""
    await t.kubectl("explain", "services.spec", "--recursive")


@case("kubectl-explain-pytorchjob")
async def _(t: Tier) -> None:
    """explain of our CRD, top and nested (the schema's descriptions)."""
    await t.kubectl("explain", "pytorchjobs", "--api-version=training.kubedl.io/v1alpha1")
    await t.kubectl("explain", "pytorchjobs.spec.pytorchReplicaSpecs", "--api-version=training.kubedl.io/v1alpha1")
    await t.kubectl("explain", "tfjobs.spec", "--recursive", "--api-version=training.kubedl.io/v1alpha1")


@case("kubectl-explain-errors")
async def _(t: Tier) -> None:
    """explain of a missing field and of an unknown kind."""
    await t.kubectl("explain", "pods.spec.nosuchfield")
    await t.kubectl("explain", "nosuchkind")


@case("kubectl-explain-lease-and-crd")
async def _(t: Tier) -> None:
    """explain of a non-core built-in group (leases) and of CustomResourceDefinition."""
    await t.kubectl("explain", "leases.spec")
    await t.kubectl("explain", "customresourcedefinitions.spec.versions.schema")


@case("kubectl-explain-deployment")
async def _(t: Tier) -> None:
    """explain deployments: a kind every real cluster serves."""
    await t.kubectl("explain", "deployments.spec.replicas")


@case("kubectl-auth-can-i")
async def _(t: Tier) -> None:
    """auth can-i as the administrator: yes to everything asked."""
    await t.kubectl("auth", "can-i", "create", "pods")
    await t.kubectl("auth", "can-i", "delete", "pytorchjobs.training.kubedl.io")
    await t.kubectl("auth", "can-i", "get", "pods", "--subresource=log")
    await t.kubectl("auth", "can-i", "*", "*")
    await t.kubectl("auth", "can-i", "get", "/healthz")


@case("kubectl-auth-can-i-unknown-resource")
async def _(t: Tier) -> None:
    """auth can-i on a resource the server does not know: kubectl warns, the server still answers."""
    await t.kubectl("auth", "can-i", "get", "nosuchthings")


@case("kubectl-auth-can-i-list")
async def _(t: Tier) -> None:
    """auth can-i --list (SelfSubjectRulesReview) as the administrator."""
    await t.kubectl("auth", "can-i", "--list")


@case("kubectl-auth-can-i-as-serviceaccount")
async def _(t: Tier) -> None:
    """auth can-i --as a ServiceAccount that no RoleBinding names."""
    await t.kubectl("auth", "can-i", "create", "pods", f"--as=system:serviceaccount:{t.ns}:default")


@case("kubectl-auth-whoami")
async def _(t: Tier) -> None:
    """auth whoami (SelfSubjectReview)."""
    await t.kubectl("auth", "whoami")


@case("http-selfsubjectaccessreview")
async def _(t: Tier) -> None:
    """A SelfSubjectAccessReview as the controller's SDK would send it."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": t.ns, "verb": "create", "resource": "pods"}},
    }
    await t.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
