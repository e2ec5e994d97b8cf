"""Only the Services that are dialed: which replicas of each kind get one, in both network modes, the switch
(``kubedl.io/replica-services``), kubeflow.org's one per replica, and what a job keeps when the switch changes.

Every case also reads what the pods are told (their settings, MPI's hostfile): no address may name a Service
the job does not have.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kubedl_py.api import constants as c
from kubedl_py.api.groups import KUBEFLOW
from kubedl_py.api.kinds import kind_api
from kubedl_py.kube.errors import Invalid
from kubedl_py.kube.resources import CONFIGMAPS, PODS, Resource
from tests.integration.conftest import (
    Env,
    Kube,
    RunningController,
    condition,
    eventually,
    pods_of,
    services_of,
    wait_condition,
)
from tests.tiers import KUBERNETES


def resource(kind: str, group: str = c.GROUP, version: str = c.VERSION) -> Resource:
    return Resource(group, version, kind_api(kind).framework.plural, kind)


def kind_job(
    kind: str,
    name: str,
    replicas: dict[str, int],
    *,
    host: bool = False,
    services: str | None = None,
    api_version: str = c.API_VERSION,
    **spec: Any,
) -> dict[str, Any]:
    framework = kind_api(kind).framework
    container = {"name": framework.container_name, "image": "busybox", "command": ["train"]}
    annotations: dict[str, str] = {}
    if host:
        annotations[c.ANNOTATION_NETWORK_MODE] = c.NETWORK_MODE_HOST
    if services is not None:
        annotations[c.ANNOTATION_REPLICA_SERVICES] = services
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            framework.replica_specs_field: {
                rtype: {"replicas": n, "template": {"spec": {"containers": [dict(container)]}}}
                for rtype, n in replicas.items()
            },
            **spec,
        },
    }


async def _all_pods(kube: Kube, job: str, n: int) -> list[dict[str, Any]] | None:
    pods = [p for p in await pods_of(kube, job) if not p["metadata"].get("deletionTimestamp")]
    return pods if len(pods) == n else None


async def _named(kube: Kube, job: str, pods: list[dict[str, Any]]) -> set[str]:
    """Every replica name of the job in what its pods are told: settings and the ConfigMaps they mount."""
    texts = [json.dumps(container.get("env") or []) for pod in pods for container in pod["spec"]["containers"]]
    maps = {
        volume["configMap"]["name"]
        for pod in pods
        for volume in pod["spec"].get("volumes") or []
        if "configMap" in volume
    }
    for name in maps:
        texts.append(json.dumps((await kube.get(CONFIGMAPS, name, namespace=kube.ns)).get("data") or {}))
    return {m for text in texts for m in re.findall(rf"\b{re.escape(job)}-[a-z]+-\d+\b", text)}


CASES = [
    # kind, replicas, spec, the replicas that get a Service
    ("PyTorchJob", {"Master": 1, "Worker": 2}, {}, ["master-0"]),
    ("PyTorchJob", {"Worker": 3}, {}, ["worker-0"]),
    ("TFJob", {"PS": 1, "Worker": 2, "Evaluator": 1}, {}, ["ps-0", "worker-0", "worker-1"]),
    ("MPIJob", {"Launcher": 1, "Worker": 2}, {}, ["worker-0", "worker-1"]),
    ("XGBoostJob", {"Master": 1, "Worker": 2}, {}, ["master-0", "worker-0", "worker-1"]),
    ("JAXJob", {"Worker": 3}, {}, ["worker-0"]),
    ("PaddleJob", {"Worker": 3}, {}, ["worker-0"]),
]


@pytest.mark.parametrize("host", [False, True], ids=["pod-network", "host-network"])
@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case[0]}-{'-'.join(case[1])}")
async def test_only_the_replicas_peers_dial_get_a_service(
    kube: Kube, controller: RunningController, case: tuple[str, dict[str, int], dict[str, Any], list[str]], host: bool
) -> None:
    kind, replicas, spec, wanted = case
    name = f"dl-{kind[:3].lower()}-{'h' if host else 'p'}"
    await kube.create(resource(kind), kind_job(kind, name, replicas, host=host, **spec), namespace=kube.ns)
    # Services are made before the pods that need them: once every pod exists, so does every Service.
    pods = await eventually(lambda: _all_pods(kube, name, sum(replicas.values())), within=30, what="every pod")
    services = await services_of(kube, name)
    assert [s["metadata"]["name"] for s in services] == [f"{name}-{w}" for w in wanted]
    if host:
        # each dialed Service forwards to its pod's own host port
        ports = {p["metadata"]["name"]: int(p["metadata"]["annotations"][c.ANNOTATION_HOST_PORT]) for p in pods}
        assert all(s["spec"]["ports"][0]["targetPort"] == ports[s["metadata"]["name"]] for s in services)
    named = await _named(kube, name, pods)
    assert named, "the pods are told at least one peer's address"
    assert named <= {s["metadata"]["name"] for s in services}, f"named without a Service: {named}"


async def test_replica_services_all_gives_every_replica_its_service(kube: Kube, controller: RunningController) -> None:
    job = kind_job("PyTorchJob", "dl-all", {"Master": 1, "Worker": 2}, services=c.REPLICA_SERVICES_ALL)
    await kube.create(resource("PyTorchJob"), job, namespace=kube.ns)
    await eventually(lambda: _all_pods(kube, "dl-all", 3), what="every pod")
    names = [s["metadata"]["name"] for s in await services_of(kube, "dl-all")]
    assert names == ["dl-all-master-0", "dl-all-worker-0", "dl-all-worker-1"]


async def test_a_kubeflow_job_opting_out_gets_only_the_dialed_services(
    kube: Kube, kubeflow_controller: RunningController
) -> None:
    job = kind_job(
        "PyTorchJob",
        "kf-dialed",
        {"Master": 1, "Worker": 2},
        services=c.REPLICA_SERVICES_DIALED,
        api_version=KUBEFLOW.api_version,
    )
    await kube.create(resource("PyTorchJob", KUBEFLOW.group, KUBEFLOW.version), job, namespace=kube.ns)

    async def three_pods() -> list[dict[str, Any]] | None:
        listed = await kube.list(PODS, namespace=kube.ns, label_selector="training.kubeflow.org/job-name=kf-dialed")
        return listed.items if len(listed.items) == 3 else None

    await eventually(three_pods, what="every pod")
    assert [s["metadata"]["name"] for s in await services_of(kube, "kf-dialed")] == ["kf-dialed-master-0"]


async def test_a_job_switched_to_dialed_keeps_the_services_it_has(kube: Kube, controller: RunningController) -> None:
    """Conservative: a Service the job no longer wants may be resolved by a running script, so it stays (and,
    in host-network mode, keeps following its pod's port); only a new job goes without it."""
    job = kind_job("PyTorchJob", "dl-keep", {"Master": 1, "Worker": 2}, host=True, services=c.REPLICA_SERVICES_ALL)
    await kube.create(resource("PyTorchJob"), job, namespace=kube.ns)
    pods = await eventually(lambda: _all_pods(kube, "dl-keep", 3), what="every pod")
    old = next(p for p in pods if p["metadata"]["name"] == "dl-keep-worker-1")
    await kube.patch(
        resource("PyTorchJob"),
        "dl-keep",
        {"metadata": {"annotations": {c.ANNOTATION_REPLICA_SERVICES: c.REPLICA_SERVICES_DIALED}}},
        namespace=kube.ns,
    )
    await kube.delete(PODS, "dl-keep-worker-1", namespace=kube.ns, grace_period_seconds=0)

    async def replaced() -> dict[str, Any] | None:
        for pod in await pods_of(kube, "dl-keep"):
            if pod["metadata"]["name"] == "dl-keep-worker-1" and pod["metadata"]["uid"] != old["metadata"]["uid"]:
                return pod
        return None

    new = await eventually(replaced, what="the replacement of worker 1")
    port = int(new["metadata"]["annotations"][c.ANNOTATION_HOST_PORT])
    services = {s["metadata"]["name"]: s for s in await services_of(kube, "dl-keep")}
    assert sorted(services) == ["dl-keep-master-0", "dl-keep-worker-0", "dl-keep-worker-1"]
    assert services["dl-keep-worker-1"]["spec"]["ports"][0]["targetPort"] == port


async def test_a_misspelt_choice_of_services_is_refused(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    job = kind_job("PyTorchJob", "dl-typo", {"Master": 1, "Worker": 1}, services="All")
    field = f"metadata.annotations[{c.ANNOTATION_REPLICA_SERVICES}]"
    if cluster.tier == KUBERNETES:
        # the admission policy refuses it at create
        with pytest.raises(Invalid) as refused:
            await kube.create(resource("PyTorchJob"), job, namespace=kube.ns)
        assert field in str(refused.value) and '"All" is not a choice of Services' in str(refused.value)
        return
    await kube.create(resource("PyTorchJob"), job, namespace=kube.ns)
    failed = await wait_condition(kube, resource("PyTorchJob"), "dl-typo", "Failed")
    message = condition(failed, "Failed")["message"]  # type: ignore[index]
    assert field in message and "'All' is not a choice of Services" in message
    assert await pods_of(kube, "dl-typo") == [] and await services_of(kube, "dl-typo") == []
