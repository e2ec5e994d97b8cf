"""What a real API server refuses, and what the controller then does (kubedl_py/controllers/refusals.py).

The embedded server has no PodSecurity, ResourceQuota or Priority admission and no RBAC (all listed in
docs/local-cluster.md), so these run where the refusals come from: the real control plane, with the
controller authenticated as the ServiceAccount rendered in deploy/.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_local.kubernetes.install import apply, manifest_documents
from kubedl_py.kube.resources import NAMESPACES, Resource
from tests.conftest import SESSION_MANIFESTS
from tests.integration.conftest import (
    PYTORCHJOBS,
    Env,
    Kube,
    RunningController,
    condition,
    events_for,
    eventually,
    job_state,
    pods_of,
    pytorchjob,
    replica,
    wait_condition,
)
from tests.tiers import KUBERNETES

QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)


@pytest.fixture(autouse=True)
def real_only(tier: str) -> None:
    if tier != KUBERNETES:
        pytest.skip("the embedded server has no PodSecurity/ResourceQuota/Priority admission or RBAC")


async def warnings(kube: Kube, job: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in await events_for(kube, job) if e["reason"] == reason and e["type"] == "Warning"]


async def test_pod_security_refusal_fails_the_job_quoting_the_server(kube: Kube, controller: RunningController) -> None:
    await kube.patch(NAMESPACES, kube.ns, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    await kube.create(PYTORCHJOBS, pytorchjob("hostile", host=True), namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "hostile", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "AdmissionRefused", cond
    assert 'violates PodSecurity "baseline:latest"' in cond["message"] and "hostNetwork=true" in cond["message"]
    (event, *_) = await eventually(lambda: warnings(kube, "hostile", "AdmissionRefused"), what="the event")
    assert "violates PodSecurity" in event["message"]
    assert await pods_of(kube, "hostile") == []


async def test_a_missing_priority_class_fails_the_job(kube: Kube, controller: RunningController) -> None:
    job = pytorchjob("unknown-priority")
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["priorityClassName"] = "no-such-class"
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "unknown-priority", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "AdmissionRefused"
    assert "no PriorityClass with name no-such-class was found" in cond["message"]


async def test_a_type_mistake_in_the_template_fails_the_job_as_invalid(
    kube: Kube, controller: RunningController
) -> None:
    # The job's schema keeps pod template fields it does not model; the API server's decoder refuses the
    # pod (400), which no retry can fix.
    job = pytorchjob("typo", replicas={"Master": replica(1)})
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["terminationGracePeriodSeconds"] = "thirty"
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "typo", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "InvalidSpec"
    assert "terminationGracePeriodSeconds" in cond["message"]


async def test_quota_is_waited_out_with_an_event_not_a_failure(kube: Kube, controller: RunningController) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "two-pods"},
        "spec": {"hard": {"pods": "2"}},
    }
    await kube.create(QUOTAS, quota, namespace=kube.ns)

    async def enforced() -> bool:  # the quota controller fills status.hard before admission enforces it
        current = await kube.get(QUOTAS, "two-pods", namespace=kube.ns)
        return bool((current.get("status") or {}).get("hard"))

    await eventually(enforced, what="quota status")
    await kube.create(PYTORCHJOBS, pytorchjob("squeezed"), namespace=kube.ns)  # Master + 2 Workers
    (event, *_) = await eventually(lambda: warnings(kube, "squeezed", "QuotaExceeded"), what="QuotaExceeded event")
    assert "exceeded quota: two-pods" in event["message"]
    assert len(await pods_of(kube, "squeezed")) == 2
    state = await job_state(kube, PYTORCHJOBS, "squeezed")
    assert condition(state, "Failed") is None
    await kube.delete(QUOTAS, "two-pods", namespace=kube.ns)
    await eventually(lambda: _count(kube, "squeezed", 3), within=60, what="the third pod once the quota is gone")


async def _count(kube: Kube, job: str, n: int) -> bool:
    return len(await pods_of(kube, job)) == n


async def test_rbac_is_enforced_on_the_controller(cluster: Env, kube: Kube, controller: RunningController) -> None:
    """The controller runs with the ClusterRole rendered in deploy/: without ``create`` on pods a job gets
    none (and says so); with the rendered role back it runs to success."""
    assert cluster.real is not None
    role = await kube.get(CLUSTER_ROLES, "kubedl-py-controller")
    for rule in role["rules"]:
        if rule["resources"] == ["pods"]:
            rule["verbs"] = [verb for verb in rule["verbs"] if verb != "create"]
    await kube.replace(CLUSTER_ROLES, role)
    try:
        job = pytorchjob("denied", replicas={"Master": replica(1, exit_code=0, run_seconds=0.2)})
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        (event, *_) = await eventually(lambda: warnings(kube, "denied", "FailedCreate"), what="FailedCreate event")
        assert 'cannot create resource "pods"' in event["message"]
        assert "system:serviceaccount:kubedl-system:kubedl-py-controller" in event["message"]
        assert await pods_of(kube, "denied") == []
    finally:
        # Shared by the session: put back exactly what the manifests render.
        await apply(kube, manifest_documents(SESSION_MANIFESTS, kinds=("ClusterRole",)))
    await wait_condition(kube, PYTORCHJOBS, "denied", "Succeeded", within=60)
