"""RDMA jobs, gang scheduling and topology placement, end to end: the real controller against both control
planes over HTTP. Nodes: two network blocks (nodes 0 and 1 in block a, 2 and 3 in block b); only nodes 1 and
3 have an RDMA NIC (``rdma/hca``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from kubedl_local.kubernetes.install import apply, manifest_documents
from kubedl_py.api import constants as c
from kubedl_py.api.groups import KUBEDL
from kubedl_py.controllers.gang import Gang
from kubedl_py.controllers.setup import served_resources
from kubedl_py.kube.errors import AlreadyExists, Invalid, NotFound
from kubedl_py.kube.resources import PODS, Resource
from tests.conftest import SESSION_MANIFESTS
from tests.integration.conftest import (
    CRDS,
    PYTORCHJOBS,
    Env,
    Kube,
    RunningController,
    condition,
    env_of,
    events_for,
    eventually,
    fast_options,
    job_state,
    pods_of,
    pytorchjob,
    replica,
    wait_condition,
)

BLOCK = "network.kubedl.io/block"
BLOCKS = ["a", "a", "b", "b"]
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
VOLCANO = Gang("volcano").resource
PLUGINS = Gang("scheduler-plugins").resource
pytestmark = pytest.mark.nodes(
    4, labels=[{BLOCK: block} for block in BLOCKS], resources=[{}, {"rdma/hca": "1"}, {}, {"rdma/hca": "1"}]
)


def block_of(cluster: Env) -> dict[str, str]:
    return dict(zip(cluster.node_names, BLOCKS, strict=True))


async def start(cluster: Env, **options: Any) -> RunningController:
    """The controller with ``options``; with a gang scheduler on a real cluster, under the ClusterRole an
    operator renders for it (``manifests --gang-scheduler``), which adds the PodGroup rules."""
    scheduler = options.get("gang_scheduler")
    if scheduler is not None and cluster.real is not None:
        async with cluster.client() as kube:
            await apply(
                kube, manifest_documents(replace(SESSION_MANIFESTS, gang_scheduler=scheduler), kinds=("ClusterRole",))
            )
    if scheduler is not None:
        # As `kubedl-py controller` does: what the API server serves decides whether PodGroups are watched.
        async with cluster.client() as kube:
            gang = Gang(scheduler, options.get("gang_scheduler_name"))
            options["served"] = await served_resources(kube, (KUBEDL,), gang=gang)
    running = RunningController(cluster, fast_options(namespace=cluster.namespace, **options))
    await running.start()
    return running


async def admit(kube: Kube, resource: Resource, name: str) -> None:
    """Do what Volcano's enqueue action does when the queue has room: the PodGroup's phase becomes Inqueue."""
    await kube.patch(resource, name, {"status": {"phase": "Inqueue"}}, namespace=kube.ns)


async def reconciled_once(kube: Kube, name: str) -> dict[str, Any] | None:
    """The job once a reconcile has written its status: whatever that reconcile created exists by then."""
    job = await kube.get(PYTORCHJOBS, name, namespace=kube.ns)
    return job if condition(job, "Created") else None


@pytest.fixture(autouse=True)
async def rendered_cluster_role(cluster: Env) -> AsyncIterator[None]:
    """The session's real cluster is shared: the default rendered ClusterRole is back after each test."""
    yield
    if cluster.real is not None:
        async with cluster.client() as kube:
            await apply(kube, manifest_documents(SESSION_MANIFESTS, kinds=("ClusterRole",)))


def podgroup_crd(resource: Resource) -> dict[str, Any]:
    """A minimal PodGroup CRD: the controller only needs the API to exist, not the scheduler behind it."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{resource.plural}.{resource.group}"},
        "spec": {
            "group": resource.group,
            "scope": "Namespaced",
            "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup", "listKind": "PodGroupList"},
            "versions": [
                {
                    "name": resource.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


async def install_podgroups(kube: Kube, resource: Resource) -> None:
    with contextlib.suppress(AlreadyExists):
        await kube.create(CRDS, podgroup_crd(resource))

    async def served() -> bool:
        try:
            await kube.list(resource, namespace=kube.ns)
        except NotFound:
            return False
        return True

    await eventually(served, what="podgroups to be served")


async def podgroup(kube: Kube, resource: Resource, name: str) -> dict[str, Any] | None:
    try:
        return await kube.get(resource, name, namespace=kube.ns)
    except NotFound:
        return None


@pytest.fixture(autouse=True)
async def no_podgroup_crds(kube: Kube) -> AsyncIterator[None]:
    """A cluster shared by tests (the real tier) must not keep a PodGroup CRD from one test to the next:
    one test needs it missing. Removed before and after each test, waiting until it is gone."""
    await _remove_podgroup_crds(kube)
    yield
    await _remove_podgroup_crds(kube)


async def _remove_podgroup_crds(kube: Kube) -> None:
    names = [f"{r.plural}.{r.group}" for r in (VOLCANO, PLUGINS)]
    for name in names:
        with contextlib.suppress(NotFound):
            await kube.delete(CRDS, name)

    async def gone() -> bool:
        for name in names:
            try:
                await kube.get(CRDS, name)
                return False
            except NotFound:
                pass
        return True

    await eventually(gone, within=60, what="PodGroup CRDs deleted")


async def priority_class(kube: Kube, name: str, value: int) -> None:
    """A PriorityClass the jobs name: a real API server refuses pods naming one that does not exist."""
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
    with contextlib.suppress(AlreadyExists):
        await kube.create(PRIORITY_CLASSES, body)


def placed(pods: list[dict[str, Any]]) -> list[str] | None:
    nodes = [pod["spec"].get("nodeName") for pod in pods]
    return nodes if nodes and all(nodes) else None


async def test_rdma_job_gets_its_devices_and_lands_only_where_the_nic_is(cluster: Env, kube: Kube) -> None:
    running = await start(cluster)
    try:
        job = pytorchjob(
            "rdma",
            replicas={"Master": replica(1, run_seconds=30), "Worker": replica(1, run_seconds=30)},
            rdma={"devices": {"rdma/hca": 1}, "shmSize": "16Gi", "nccl": {"NCCL_IB_HCA": "mlx5"}},
        )
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        stored = await kube.get(PYTORCHJOBS, "rdma", namespace=kube.ns)
        assert stored["spec"]["rdma"]["devices"] == {"rdma/hca": 1}  # kept by the API server's pruning
        pods = await eventually(lambda: _placed_pods(kube, "rdma", 2), what="rdma pods bound")
        assert sorted(pod["spec"]["nodeName"] for pod in pods) == [cluster.node_names[1], cluster.node_names[3]]
        for pod in pods:
            main = pod["spec"]["containers"][0]
            assert main["resources"]["limits"]["rdma/hca"] == "1"
            assert main["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
            assert env_of(pod)["NCCL_IB_HCA"] == "mlx5" and env_of(pod)["NCCL_SOCKET_IFNAME"] == "eth0"
            assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["spec"]["volumes"]
        # The CRD schema refuses a malformed block before any controller sees it.
        bad = pytorchjob("bad-rdma", rdma={"shmSize": "lots", "perGpu": {"count": 0, "resource": "x{index}"}})
        with pytest.raises(Invalid) as refused:
            await kube.create(PYTORCHJOBS, bad, namespace=kube.ns)
        assert "spec.rdma.shmSize" in str(refused.value) and "spec.rdma.perGpu.count" in str(refused.value)
    finally:
        await running.stop()


async def _placed_pods(kube: Kube, job: str, count: int) -> list[dict[str, Any]] | None:
    pods = await pods_of(kube, job)
    return pods if len(pods) == count and placed(pods) else None


async def test_required_placement_packs_the_job_into_one_block(cluster: Env, kube: Kube) -> None:
    running = await start(cluster)
    try:
        # A control job without placement, one pod per node: both blocks take pods, so packing below is the
        # placement's doing. (The default scheduler does not promise to spread pods that request nothing.)
        spread = pytorchjob(
            "spread", replicas={"Master": replica(1, run_seconds=30), "Worker": replica(3, run_seconds=30)}
        )
        for spec in spread["spec"]["pytorchReplicaSpecs"].values():
            spec["template"]["spec"]["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"training.kubedl.io/job-name": "spread"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            }
        _on_block_nodes(spread)
        await kube.create(PYTORCHJOBS, spread, namespace=kube.ns)
        nodes = await eventually(lambda: _nodes(kube, "spread", 4), what="spread pods bound")
        assert {block_of(cluster)[n] for n in nodes} == {"a", "b"}
        for mode in ("Required", "Preferred"):
            name = f"packed-{mode.lower()}"
            job = pytorchjob(
                name,
                replicas={"Master": replica(1, run_seconds=30), "Worker": replica(5, run_seconds=30)},
                placement={"topologyKey": BLOCK, "mode": mode},
            )
            _on_block_nodes(job)
            await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
            nodes = await eventually(lambda name=name: _nodes(kube, name, 6), what=f"{name} pods bound")  # type: ignore[misc]
            assert len({block_of(cluster)[n] for n in nodes}) == 1, nodes
            (pod, *_) = await pods_of(kube, name)
            key = (
                "requiredDuringSchedulingIgnoredDuringExecution"
                if mode == "Required"
                else ("preferredDuringSchedulingIgnoredDuringExecution")
            )
            assert key in pod["spec"]["affinity"]["podAffinity"]
    finally:
        await running.stop()


def _on_block_nodes(job: dict[str, Any]) -> None:
    """Keep the job on this test's nodes (those with a block label): the real tier's cluster is shared by the
    session, and another suite's node (the differential suite's) is schedulable too."""
    term = {"matchExpressions": [{"key": BLOCK, "operator": "Exists"}]}
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        affinity = spec["template"]["spec"].setdefault("affinity", {})
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}


async def _nodes(kube: Kube, job: str, count: int) -> list[str] | None:
    pods = await _placed_pods(kube, job, count)
    return [pod["spec"]["nodeName"] for pod in pods] if pods else None


async def test_volcano_gang_podgroup_is_owned_pods_point_at_it_and_it_goes_when_the_job_ends(
    cluster: Env, kube: Kube
) -> None:
    await install_podgroups(kube, VOLCANO)
    if cluster.real is not None:  # the embedded server neither serves PriorityClasses nor checks pods' names
        await priority_class(kube, "high", 1000)
    running = await start(cluster, gang_scheduler="volcano")
    try:
        policy = {"minAvailable": 2, "queue": "training", "priorityClassName": "high"}
        # The deadline ends the job (and its gang) while its pods wait for a scheduler that is not there;
        # long enough that the pods are surely seen first, whatever the control plane's latency.
        job = pytorchjob("gang", schedulingPolicy=policy, activeDeadlineSeconds=8)
        created = await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        group = await eventually(lambda: podgroup(kube, VOLCANO, "gang"), what="PodGroup")
        assert group["spec"] == {"minMember": 2, "queue": "training", "priorityClassName": "high"}
        (owner,) = group["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "PyTorchJob",
            "gang",
            created["metadata"]["uid"],
            True,
        )
        # Not admitted yet (phase unset, as Volcano leaves a group its queue has no room for): no pod at all,
        # though the reconcile that made the group has finished.
        await eventually(lambda: reconciled_once(kube, "gang"), what="the first reconcile's status")
        assert await pods_of(kube, "gang") == []
        await admit(kube, VOLCANO, "gang")
        pods = await eventually(lambda: _pods(kube, "gang", 3), what="gang pods once admitted")
        for pod in pods:
            assert pod["spec"]["schedulerName"] == "volcano"
            assert pod["spec"]["priorityClassName"] == "high"
            assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "gang"
            assert not pod["spec"].get("nodeName")  # no Volcano here: the embedded scheduler leaves them
        await wait_condition(kube, PYTORCHJOBS, "gang", "Failed", within=20)
        await eventually(lambda: _gone(kube, VOLCANO, "gang"), what="PodGroup deleted")
    finally:
        await running.stop()


async def test_a_resubmitted_job_does_not_adopt_its_predecessors_podgroup(cluster: Env, kube: Kube) -> None:
    """The predecessor's group (owned by a job that is gone) is about to be garbage-collected; the new job
    must wait for that and make its own, not point its pods at a group that vanishes."""
    await install_podgroups(kube, VOLCANO)
    stale_owner = {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "name": "again",
        "uid": "uid-of-the-deleted-job",
        "controller": True,
    }
    leftover = {
        "apiVersion": VOLCANO.api_version,
        "kind": "PodGroup",
        # A finalizer holds it while the garbage collector deletes it, as a slow deletion would.
        "metadata": {
            "name": "again",
            "namespace": kube.ns,
            "ownerReferences": [stale_owner],
            "finalizers": ["test.kubedl.io/hold"],
        },
        "spec": {"minMember": 1},
    }
    running = await start(cluster, gang_scheduler="volcano")
    try:
        await kube.create(VOLCANO, leftover, namespace=kube.ns)
        created = await kube.create(PYTORCHJOBS, pytorchjob("again"), namespace=kube.ns)

        # While the old group lingers, no pod may be made (they would point at a group that vanishes).
        async def tried_to_create() -> bool:
            return cluster.request_log.count(verb="create", resource="podgroups") >= 2

        await eventually(tried_to_create, what="the controller retrying its PodGroup")
        assert await pods_of(kube, "again") == []
        await kube.patch(VOLCANO, "again", {"metadata": {"finalizers": None}}, namespace=kube.ns)

        async def owned_by_the_new_job() -> dict[str, Any] | None:
            group = await podgroup(kube, VOLCANO, "again")
            refs = ((group or {}).get("metadata") or {}).get("ownerReferences") or []
            return group if [ref["uid"] for ref in refs] == [created["metadata"]["uid"]] else None

        # A real garbage collector starts watching a newly installed kind within its 30 s discovery resync.
        group = await eventually(owned_by_the_new_job, within=60, what="a PodGroup of the new job")
        assert group["spec"]["minMember"] == 3
        await admit(kube, VOLCANO, "again")
        await eventually(lambda: _pods(kube, "again", 3), what="pods once their group is the job's own")
    finally:
        await running.stop()


async def test_an_orphaned_podgroup_of_the_jobs_name_is_adopted(cluster: Env, kube: Kube) -> None:
    """A group kubedl-py made for a job of this name, left without an owner (its job deleted with
    propagationPolicy=Orphan), is nobody's: the new job adopts it (a patch, which the rendered ClusterRole must
    allow) instead of waiting forever."""
    await install_podgroups(kube, VOLCANO)
    labels = {c.LABEL_CONTROLLER: c.CONTROLLER_NAME, c.LABEL_JOB_NAME: "adopter"}
    orphan = {
        "apiVersion": VOLCANO.api_version,
        "kind": "PodGroup",
        "metadata": {"name": "adopter", "namespace": kube.ns, "labels": labels},
        "spec": {"minMember": 1},
    }
    await kube.create(VOLCANO, orphan, namespace=kube.ns)
    running = await start(cluster, gang_scheduler="volcano")
    try:
        created = await kube.create(PYTORCHJOBS, pytorchjob("adopter"), namespace=kube.ns)

        async def adopted() -> dict[str, Any] | None:
            group = await podgroup(kube, VOLCANO, "adopter")
            refs = ((group or {}).get("metadata") or {}).get("ownerReferences") or []
            return group if [ref["uid"] for ref in refs] == [created["metadata"]["uid"]] else None

        group = await eventually(adopted, what="the orphaned PodGroup owned by the job")
        assert group["spec"]["minMember"] == 3
        await admit(kube, VOLCANO, "adopter")
        await eventually(lambda: _pods(kube, "adopter", 3), what="pods once the group is the job's")
    finally:
        await running.stop()


async def test_a_strangers_podgroup_of_the_jobs_name_is_never_taken(cluster: Env, kube: Kube) -> None:
    """A PodGroup of the job's name that kubedl-py did not make is someone else's: never patched or used; the job
    says so (NameInUse) and makes no pod until the name is free."""
    await install_podgroups(kube, VOLCANO)
    theirs = {
        "apiVersion": VOLCANO.api_version,
        "kind": "PodGroup",
        "metadata": {"name": "squat", "namespace": kube.ns},
        "spec": {"minMember": 7},
    }
    await kube.create(VOLCANO, theirs, namespace=kube.ns)
    running = await start(cluster, gang_scheduler="volcano")
    try:
        await kube.create(PYTORCHJOBS, pytorchjob("squat"), namespace=kube.ns)

        async def blocked() -> dict[str, Any] | None:
            job = await job_state(kube, PYTORCHJOBS, "squat")
            for cond in ((job or {}).get("status") or {}).get("conditions") or []:
                if cond["type"] == "Running" and cond["reason"] == "NameInUse":
                    return cond
            return None

        cond = await eventually(blocked, what="the NameInUse condition")
        assert f"PodGroup {kube.ns}/squat" in cond["message"]
        group = await podgroup(kube, VOLCANO, "squat")
        assert group is not None and group["spec"]["minMember"] == 7 and not group["metadata"].get("ownerReferences")
        assert await pods_of(kube, "squat") == []
    finally:
        await running.stop()


async def _pods(kube: Kube, job: str, count: int) -> list[dict[str, Any]] | None:
    pods = await pods_of(kube, job)
    return pods if len(pods) == count else None


async def _gone(kube: Kube, resource: Resource, name: str) -> bool:
    return await podgroup(kube, resource, name) is None


async def test_scheduler_plugins_gang_job_runs_to_success_and_its_podgroup_is_deleted(cluster: Env, kube: Kube) -> None:
    await install_podgroups(kube, PLUGINS)
    # The embedded scheduler stands in for a coscheduling-enabled default scheduler.
    running = await start(cluster, gang_scheduler="scheduler-plugins", gang_scheduler_name="default-scheduler")
    try:
        job = pytorchjob(
            "coscheduled", replicas={"Master": replica(1, exit_code=0, run_seconds=1), "Worker": replica(2)}
        )
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        group = await eventually(lambda: podgroup(kube, PLUGINS, "coscheduled"), what="PodGroup")
        assert group["spec"] == {"minMember": 3}
        pods = await eventually(lambda: _pods(kube, "coscheduled", 3), what="pods")
        assert {pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for pod in pods} == {"coscheduled"}
        await wait_condition(kube, PYTORCHJOBS, "coscheduled", "Succeeded")
        await eventually(lambda: _gone(kube, PLUGINS, "coscheduled"), what="PodGroup deleted")
    finally:
        await running.stop()


async def test_missing_podgroup_crd_holds_the_pods_back_with_an_event_until_it_is_installed(
    cluster: Env, kube: Kube
) -> None:
    running = await start(cluster, gang_scheduler="volcano")
    try:
        await kube.create(PYTORCHJOBS, pytorchjob("early"), namespace=kube.ns)

        async def warned() -> list[dict[str, Any]]:
            return [e for e in await events_for(kube, "early") if e["reason"] == "PodGroupCreateFailed"]

        (event, *_) = await eventually(warned, what="PodGroupCreateFailed event")
        assert "is volcano installed" in event["message"]
        assert await pods_of(kube, "early") == []
        await install_podgroups(kube, VOLCANO)
        await eventually(lambda: podgroup(kube, VOLCANO, "early"), what="PodGroup after the CRD came", within=15)
        # No watch on PodGroups (the CRD came after the controller): the admission is found by reading it.
        await admit(kube, VOLCANO, "early")
        await eventually(lambda: _pods(kube, "early", 3), what="pods after the PodGroup is admitted")
    finally:
        await running.stop()


async def test_without_the_flag_no_podgroup_and_no_scheduler_fields(cluster: Env, kube: Kube) -> None:
    await install_podgroups(kube, VOLCANO)
    running = await start(cluster)
    try:
        job = pytorchjob("plain", schedulingPolicy={"minAvailable": 3, "priorityClassName": "high"})
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        pods = await eventually(lambda: _pods(kube, "plain", 3), what="pods")
        for pod in pods:
            assert pod["spec"].get("schedulerName", "default-scheduler") == "default-scheduler"
            assert "priorityClassName" not in pod["spec"]
            assert "scheduling.k8s.io/group-name" not in (pod["metadata"].get("annotations") or {})
        assert await podgroup(kube, VOLCANO, "plain") is None
        listed = await kube.list(PODS, namespace=kube.ns)
        assert len(listed.items) == 3
    finally:
        await running.stop()


async def test_a_podgroup_deleted_while_its_job_runs_is_made_again(cluster: Env, kube: Kube) -> None:
    """The PodGroup is watched, not remembered: deleted by hand while the job runs, it comes back (a new
    object, still the job's), so the gang scheduler keeps treating the job's pods as one group."""
    await install_podgroups(kube, PLUGINS)
    running = await start(cluster, gang_scheduler="scheduler-plugins", gang_scheduler_name="default-scheduler")
    try:
        created = await kube.create(PYTORCHJOBS, pytorchjob("kept"), namespace=kube.ns)
        await wait_condition(kube, PYTORCHJOBS, "kept", "Running")
        first = await eventually(lambda: podgroup(kube, PLUGINS, "kept"), what="PodGroup")
        await kube.delete(PLUGINS, "kept", namespace=kube.ns)

        async def made_again() -> dict[str, Any] | None:
            group = await podgroup(kube, PLUGINS, "kept")
            return group if group and group["metadata"]["uid"] != first["metadata"]["uid"] else None

        group = await eventually(made_again, what="the PodGroup made again")
        assert [ref["uid"] for ref in group["metadata"]["ownerReferences"]] == [created["metadata"]["uid"]]
        assert group["spec"]["minMember"] == 3

        async def recreated_events() -> list[dict[str, Any]]:
            return [e for e in await events_for(kube, "kept") if e["reason"] == "PodGroupRecreated"]

        # the event is written just after the PodGroup is made, so the test may see the group first
        await eventually(recreated_events, what="a PodGroupRecreated event")
        assert len(await pods_of(kube, "kept")) == 3  # the running pods were left alone
    finally:
        await running.stop()


async def test_podgroup_min_resources_are_what_the_first_min_member_pods_request(cluster: Env, kube: Kube) -> None:
    """minResources sums the requests (a limit where no request is given) of the minMember pods that come
    first: the master before the workers."""
    await install_podgroups(kube, VOLCANO)
    running = await start(cluster, gang_scheduler="volcano")
    try:
        master = replica(1)
        master["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
        worker = replica(3)
        worker["template"]["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "1"},
            "limits": {"cpu": "2", "nvidia.com/gpu": "1"},
        }
        worker["template"]["spec"]["initContainers"] = [
            {"name": "fetch", "image": "busybox", "resources": {"requests": {"memory": "512Mi"}}}
        ]
        job = pytorchjob("sized", replicas={"Master": master, "Worker": worker}, schedulingPolicy={"minAvailable": 3})
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        group = await eventually(lambda: podgroup(kube, VOLCANO, "sized"), what="PodGroup")
        # master + 2 workers: cpu 0.5 + 2 x 1; memory 1Gi + 2 x 512Mi (each worker's init container); 2 GPUs
        assert group["spec"]["minMember"] == 3
        assert group["spec"]["minResources"] == {"cpu": "2500m", "memory": str(2 * 2**30), "nvidia.com/gpu": "2"}

        explicit = pytorchjob("told", schedulingPolicy={"minResources": {"cpu": "64", "rdma/hca": 8}})
        await kube.create(PYTORCHJOBS, explicit, namespace=kube.ns)
        told = await eventually(lambda: podgroup(kube, VOLCANO, "told"), what="PodGroup of the job that sets it")
        assert told["spec"]["minResources"] == {"cpu": "64", "rdma/hca": "8"}
    finally:
        await running.stop()


async def test_a_gang_larger_than_the_job_is_refused_by_name(cluster: Env, kube: Kube) -> None:
    """minAvailable above the job's replicas could never be met: the job fails at once, naming the field, and
    gets neither PodGroup nor pods."""
    await install_podgroups(kube, VOLCANO)
    running = await start(cluster, gang_scheduler="volcano")
    try:
        job = pytorchjob("toobig", schedulingPolicy={"minAvailable": 5})
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        failed = await wait_condition(kube, PYTORCHJOBS, "toobig", "Failed")
        message = condition(failed, "Failed")["message"]
        assert "spec.schedulingPolicy.minAvailable" in message
        assert "3 replicas" in message
        assert await podgroup(kube, VOLCANO, "toobig") is None
        assert await pods_of(kube, "toobig") == []
    finally:
        await running.stop()
