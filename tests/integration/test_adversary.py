"""What an adversary found on the real control plane (issue 47), each as a test on both tiers: a job blocked by
a name it needs costs nothing but backed-off reads; no rank is made while a name it dials is held by a
stranger, and a job's Services select only its own pods; the host ports a namespace's deletion frees are
offered again at once.

The controller runs under its own ServiceAccount on the real tier (RBAC enforced), its requests seen by the
fault proxy's request log; on the embedded tier by the server's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from kubedl_local.faults import FaultRule, RequestRecord
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_py.api import constants as c
from kubedl_py.controllers.failures.policies import UNSEEN_BY_SCHEDULER_SECONDS
from kubedl_py.controllers.hostnetwork.feature import HostNetwork
from kubedl_py.controllers.setup import build_manager
from kubedl_py.kube.client import ClientSettings, KubeClient
from kubedl_py.kube.errors import AlreadyExists
from kubedl_py.kube.leader import LeaderElectionSettings, LeadershipLost
from kubedl_py.kube.resources import NAMESPACES, PODS, SERVICES
from tests.integration.conftest import (
    PYTORCHJOBS,
    TFJOBS,
    Env,
    Kube,
    RunningController,
    events_for,
    eventually,
    fast_options,
    job_state,
    pytorchjob,
    replica,
    tfjob,
)
from tests.tiers import EMBEDDED, LoopThread

KUBEFLOW_PYTORCHJOBS = PYTORCHJOBS.__class__("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")


def _blocked_reason(job: dict[str, Any] | None) -> str | None:
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == "Running" and cond["status"] == "False":
            return str(cond.get("reason"))
    return None


def _writes(records: list[RequestRecord], namespace: str, since: float) -> dict[str, int]:
    """Successful writes in ``namespace`` from ``since`` (monotonic), by resource."""
    counts: dict[str, int] = {}
    for record in records:
        if record.started < since or record.namespace != namespace or record.status >= 400:
            continue
        if record.verb in ("create", "update", "patch", "delete"):
            counts[record.resource] = counts.get(record.resource, 0) + 1
    return counts


async def _owned_pods(kube: Kube, uid: str) -> list[dict[str, Any]]:
    listed = await kube.list(PODS, namespace=kube.ns)
    return [
        pod
        for pod in listed.items
        if any(ref.get("uid") == uid for ref in pod["metadata"].get("ownerReferences") or [])
    ]


async def _watch_window(cluster: Env, kube: Kube, seconds: float, *, bound: dict[str, int]) -> dict[str, int]:
    """Watch the request log for ``seconds`` (a deadline, failing as soon as a bound is passed): the writes the
    namespace got meanwhile."""
    since = time.monotonic()
    deadline = since + seconds
    writes: dict[str, int] = {}
    while time.monotonic() < deadline:
        writes = _writes(cluster.request_log.records, kube.ns, since)
        over = {resource: n for resource, n in writes.items() if n > bound.get(resource, 0)}
        assert not over, f"writes over the bound {bound} within {time.monotonic() - since:.1f}s: {writes}"
        await asyncio.sleep(0.2)
    return writes


@pytest.mark.nodes(3)
async def test_a_host_network_job_blocked_by_a_strangers_service_makes_no_writes(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """A TFJob facing a stranger's Service ``t-ps-0`` (docs/host-network.md): it said once why it waits, then
    makes no write at all (no Service re-pointed, no Event) while the name stays taken, only a backed-off read
    of the stranger's Service; it starts once the name is free. It re-pointed its Services 530 times in 10 s."""
    stranger = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "t-ps-0"},
        "spec": {"selector": {"app": "someone-else"}, "ports": [{"port": 2222}]},
    }
    await kube.create(SERVICES, stranger, namespace=kube.ns)
    job = tfjob("t", host=True, replicas={"PS": replica(1, name="tensorflow"), "Worker": replica(2, name="tensorflow")})
    await kube.create(TFJOBS, job, namespace=kube.ns)

    async def blocked() -> bool:
        return _blocked_reason(await job_state(kube, TFJOBS, "t")) == "NameInUse"

    await eventually(blocked, what="the NameInUse condition")
    # Let the reconciles the job's own first writes woke run out, then watch.
    await eventually(lambda: _quiet(cluster, kube.ns, 1.0), within=15, what="the namespace quiet for a second")
    since = time.monotonic()
    writes = await _watch_window(cluster, kube, 12.0, bound={})
    assert writes == {}, f"a blocked job wrote: {writes}"
    looks = [
        r
        for r in cluster.request_log.records
        if r.started >= since and r.verb == "get" and r.resource == "services" and r.name == "t-ps-0"
    ]
    # Looks at 1, 2, 4, 8 s after the block at most (BLOCKED_RECHECK_FIRST doubling), some before the window.
    assert len(looks) <= 4, f"{len(looks)} reads of the stranger's Service in 12 s"
    assert await _owned_pods(kube, (await kube.get(TFJOBS, "t", namespace=kube.ns))["metadata"]["uid"]) == []

    await kube.delete(SERVICES, "t-ps-0", namespace=kube.ns)

    async def running() -> bool:
        found = await job_state(kube, TFJOBS, "t")
        return len(await _owned_pods(kube, (found or {}).get("metadata", {}).get("uid", ""))) == 3

    await eventually(running, within=30, what="the job's 3 pods once the name is free")


async def _quiet(cluster: Env, namespace: str, seconds: float) -> bool:
    now = time.monotonic()
    return not _writes(cluster.request_log.records, namespace, now - seconds)


@pytest.mark.parametrize("host", [False, True], ids=["pod-network", "host-network"])
async def test_no_rank_is_made_while_a_stranger_pod_holds_the_masters_name(
    cluster: Env, kube: Kube, controller: RunningController, host: bool
) -> None:
    """A pod ``d-master-0`` of no one's, made before job ``d``, with the labels the job's Service would select
    by name: the job makes no pod at all (its Workers would dial a Master that is not the job's), and its
    Service selects only pods of its own uid, so the squatter gets none of the job's traffic."""
    squatter = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "d-master-0",
            "labels": {
                c.LABEL_CONTROLLER: c.CONTROLLER_NAME,
                c.LABEL_JOB_NAME: "d",
                c.LABEL_REPLICA_TYPE: "master",
                c.LABEL_REPLICA_INDEX: "0",
            },
        },
        "spec": {"containers": [{"name": "squat", "image": "busybox", "command": ["listen"]}]},
    }
    await kube.create(PODS, squatter, namespace=kube.ns)
    await kube.create(PYTORCHJOBS, pytorchjob("d", host=host), namespace=kube.ns)

    async def blocked() -> dict[str, Any] | None:
        found = await job_state(kube, PYTORCHJOBS, "d")
        return found if _blocked_reason(found) == "NameInUse" else None

    job = await eventually(blocked, what="the NameInUse condition")
    uid = job["metadata"]["uid"]
    # Give any wrongly made Worker time to show: the block is told after the Master's create was refused.
    await eventually(lambda: _quiet(cluster, kube.ns, 1.0), within=15, what="the namespace quiet for a second")
    assert await _owned_pods(kube, uid) == [], "a rank was made while the Master's name is held by a stranger"
    made = [
        r
        for r in cluster.request_log.records
        if r.verb == "create" and r.resource == "pods" and r.namespace == kube.ns and r.status == 201
    ]
    assert len(made) <= 1, f"pods created in the namespace: {len(made)} (the squatter's only)"
    service = await kube.get(SERVICES, "d-master-0", namespace=kube.ns)
    assert service["spec"]["selector"].get(c.LABEL_JOB_UID) == uid
    assert not _selects(service, squatter)

    await kube.delete(PODS, "d-master-0", namespace=kube.ns, grace_period_seconds=0)
    await eventually(lambda: _n_owned(kube, uid, 3), within=30, what="the job's 3 pods once the name is free")
    for pod in await _owned_pods(kube, uid):
        assert _selects(service, pod) == pod["metadata"]["name"].startswith("d-master-")


async def _n_owned(kube: Kube, uid: str, n: int) -> bool:
    return len(await _owned_pods(kube, uid)) == n


def _selects(service: dict[str, Any], pod: dict[str, Any]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in service["spec"]["selector"].items())


async def test_jobs_of_one_name_in_both_api_groups_select_only_their_own_pods(
    cluster: Env, kube: Kube, kubeflow_controller: RunningController
) -> None:
    """A training.kubedl.io PyTorchJob ``x`` runs; then a kubeflow.org PyTorchJob ``x`` comes, which makes a Service
    for every replica as the Training Operator does: the Master's name is taken (NameInUse, no pod), its Worker
    Services are made, and they select none of the other job's pods: every Service selects by its job's uid.
    (The adversary saw the kubeflow.org job's Worker Services select the other job's pods; this order does not
    reproduce that on today's code, which the uid selector rules out whatever the order.)"""
    await kube.create(PYTORCHJOBS, pytorchjob("x"), namespace=kube.ns)
    first = (await kube.get(PYTORCHJOBS, "x", namespace=kube.ns))["metadata"]["uid"]
    await eventually(lambda: _n_owned(kube, first, 3), within=30, what="the first job's 3 pods")
    kubeflow = pytorchjob("x")
    kubeflow["apiVersion"] = "kubeflow.org/v1"
    await kube.create(KUBEFLOW_PYTORCHJOBS, kubeflow, namespace=kube.ns)
    second = (await kube.get(KUBEFLOW_PYTORCHJOBS, "x", namespace=kube.ns))["metadata"]["uid"]

    async def blocked() -> bool:
        return _blocked_reason(await job_state(kube, KUBEFLOW_PYTORCHJOBS, "x")) == "NameInUse"

    await eventually(blocked, what="the second job blocked by the Master's name")
    await eventually(lambda: _quiet(cluster, kube.ns, 1.0), within=15, what="the namespace quiet for a second")
    pods = (await kube.list(PODS, namespace=kube.ns)).items
    services = (await kube.list(SERVICES, namespace=kube.ns)).items
    owners = {service["metadata"]["name"]: service["metadata"]["ownerReferences"][0]["uid"] for service in services}
    assert second in owners.values(), f"the second job made no Service: {owners}"
    for service in services:
        owner = owners[service["metadata"]["name"]]
        assert service["spec"]["selector"].get(c.LABEL_JOB_UID) == owner
        for pod in pods:
            if _selects(service, pod):
                assert pod["metadata"]["ownerReferences"][0]["uid"] == owner, (
                    f"Service {service['metadata']['name']} selects pod {pod['metadata']['name']} of another job"
                )


@pytest.mark.nodes(1)
async def test_the_ports_a_deleted_namespace_held_are_offered_again(cluster: Env, kube: Kube) -> None:
    """Host-network jobs in a namespace that is deleted: their pods go, the controller's replacements are
    refused (the namespace is terminating), and every port it reserved for them is given back within seconds,
    so the next job gets them (a leak kept them until the controller restarted)."""
    doomed = f"{kube.ns}-doomed"
    await create_namespace(kube, doomed)
    options = fast_options(namespaces=(kube.ns, doomed), host_port_range=(20000, 20003))
    running = RunningController(cluster, options)
    manager = await running.start()
    try:
        network = _host_network(manager)
        job = pytorchjob("leak", host=True, replicas={"Master": replica(1), "Worker": replica(2)})
        await kube.create(PYTORCHJOBS, job, namespace=doomed)

        async def three_running() -> bool:
            pods = (await kube.list(PODS, namespace=doomed)).items
            return len(pods) == 3 and all(p.get("status", {}).get("phase") == "Running" for p in pods)

        await eventually(three_running, within=60, what="3 pods running in the doomed namespace")
        await kube.delete(NAMESPACES, doomed)

        def reserved_in_doomed() -> list[str]:
            return [key for key in network.allocator._reserved if key.startswith(f"{doomed}/")]

        async def given_back() -> bool:
            ahead = [key for key, kept in network._jobs.items() if key.startswith(f"{doomed}/") and kept.ahead]
            return not reserved_in_doomed() and not ahead

        await eventually(given_back, within=30, what="no port reserved for the deleted namespace")

        # The one node has 4 ports: a 4-pod job gets all of them once the old pods are gone.
        four = pytorchjob("next", host=True, replicas={"Master": replica(1), "Worker": replica(3)})
        await kube.create(PYTORCHJOBS, four, namespace=kube.ns)

        async def four_running() -> bool:
            pods = (await kube.list(PODS, namespace=kube.ns)).items
            return len(pods) == 4 and all(p.get("status", {}).get("phase") == "Running" for p in pods)

        await eventually(four_running, within=90, what="the next job's 4 pods running on the freed ports")
    finally:
        await running.stop()


def _host_network(manager: Any) -> HostNetwork:
    """The controller's one host-network feature (shared by every kind's reconciler), and its allocator."""
    for controller in manager.controllers:
        for feature in getattr(controller.reconciler, "features", ()):
            if isinstance(feature, HostNetwork):
                return feature
    raise AssertionError("the controller has no host-network feature")


@pytest.mark.nodes(6)
async def test_a_leader_paused_mid_failover_writes_nothing_once_it_lost_the_lease(cluster: Env, kube: Kube) -> None:
    """The leader runs on an event loop of its own; 0.05 s after 8 of a job's pods are deleted (8 failovers
    under way) that loop is frozen for longer than the lease, as SIGSTOP freezes a process; the standby takes
    the Lease and acts; then the old leader resumes, its reconciles mid-write. Not one write it sends after the
    takeover may succeed (one unconditioned Service patch did, re-pointing a Service to a wrong port)."""
    with contextlib.suppress(AlreadyExists):  # the real tier's install made it
        await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubedl-system"}})
    settings = LeaderElectionSettings(
        name=f"kubedl-py-{kube.ns}", namespace="kubedl-system", lease_duration=3.0, renew_deadline=2.0, retry_period=0.5
    )
    options = fast_options(namespace=kube.ns, leader_elect=True, leader_election=settings)
    paused_agent = "kubedl-py-paused-leader"
    thread = LoopThread("paused-leader")
    leader_client = _client_for(cluster, ClientSettings(user_agent=paused_agent))
    leader = build_manager(leader_client, options)

    async def lead() -> None:
        await leader_client.open()
        with contextlib.suppress(LeadershipLost):
            await leader.run()

    leading = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(lead(), thread.loop))
    standby = RunningController(cluster, options)
    standby_started: asyncio.Task[Any] | None = None
    try:
        await eventually(lambda: _ready(leader), within=30, what="the first controller leads")
        standby_started = asyncio.create_task(standby.start())
        job = pytorchjob("j8", host=True, replicas={"Master": replica(1), "Worker": replica(WORKERS)})
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)

        async def all_running() -> bool:
            pods = (await kube.list(PODS, namespace=kube.ns)).items
            return len(pods) == WORKERS + 1 and all(p.get("status", {}).get("phase") == "Running" for p in pods)

        await eventually(all_running, within=60, what="every pod running")
        await asyncio.gather(*(kube.delete(PODS, f"j8-worker-{i}", namespace=kube.ns) for i in range(WORKERS)))
        await asyncio.sleep(0.05)  # the fault: the pause lands 0.05 s into the failovers (not a wait for a state)
        thread.loop.call_soon_threadsafe(time.sleep, settings.lease_duration + 3.0)  # SIGSTOP
        await asyncio.wait_for(standby_started, timeout=20)  # the standby takes the Lease: it leads now
        took_over = time.monotonic()

        async def stepped_down() -> bool:
            return leading.done() or not leader.running

        await eventually(stepped_down, within=20, what="the old leader stepping down after it resumed")
        late = [
            record
            for record in cluster.request_log.records
            if record.user_agent == paused_agent
            and record.started >= took_over
            and record.verb in ("create", "update", "patch", "delete")
            and record.status < 400
        ]
        assert late == [], f"the old leader's writes after the takeover: {late}"
        await eventually(all_running, within=60, what="the new leader finishing the failovers")
    finally:
        leader.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(leading, timeout=30)
        thread.run(leader_client.close(), timeout=30)
        thread.close()
        if standby_started is not None and not standby_started.done():
            standby_started.cancel()
        await standby.stop()


#: the workers of the paused leader's job, all failing over when the pause lands
WORKERS = 8


def _client_for(cluster: Env, settings: ClientSettings) -> KubeClient:
    """A controller's client as ``cluster.controller_client`` makes it, with ``settings`` (a user agent of its
    own: the request log tells its requests apart)."""
    if cluster.local is not None:
        return KubeClient(configuration=cluster.local.configuration, settings=settings)
    return KubeClient(kubeconfig=cluster.controller_kubeconfig_path, settings=settings)


async def _ready(manager: Any) -> bool:
    return bool(manager.ready())


async def test_a_replica_whose_service_account_does_not_exist_says_so_on_the_job(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """``serviceAccountName: no-such-sa`` on the Workers: the API server refuses their pods (for now: the
    ServiceAccount may be made). The job said only ``Created``, the refusals in Warning events; now ``Running`` is
    False with the refusal's reason and the server's words, naming the ServiceAccount."""
    if cluster.tier == EMBEDDED:
        pytest.skip("the embedded API server does not refuse a pod whose ServiceAccount is missing (the real one does)")
    job = pytorchjob("sa")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["serviceAccountName"] = "no-such-sa"
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)

    async def said() -> dict[str, Any] | None:
        found = await job_state(kube, PYTORCHJOBS, "sa")
        for cond in ((found or {}).get("status") or {}).get("conditions") or []:
            if cond["type"] == "Running" and cond["status"] == "False" and cond["reason"] == "FailedCreate":
                return dict(cond)
        return None

    cond = await eventually(said, within=30, what="Running False, FailedCreate")
    assert "no-such-sa" in cond["message"], cond["message"]


async def test_a_pod_no_scheduler_looks_at_says_so_on_the_job(kube: Kube, controller: RunningController) -> None:
    """``schedulerName: no-such-scheduler``: no scheduler ever looks at the pods, so nothing says anything; the
    job said ``Created`` for ever. Once a pod has waited UNSEEN_BY_SCHEDULER_SECONDS unseen, the job says which
    scheduler it waits for."""
    job = pytorchjob("nosched", replicas={"Master": replica(1)})
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["schedulerName"] = "no-such-scheduler"
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)

    async def said() -> dict[str, Any] | None:
        found = await job_state(kube, PYTORCHJOBS, "nosched")
        for cond in ((found or {}).get("status") or {}).get("conditions") or []:
            if cond["type"] == "Running" and cond["status"] == "False" and cond["reason"] == "NotScheduled":
                return dict(cond)
        return None

    cond = await eventually(said, within=UNSEEN_BY_SCHEDULER_SECONDS + 20, what="Running False, NotScheduled")
    assert "no-such-scheduler" in cond["message"], cond["message"]


async def test_a_template_saying_pod_network_under_the_host_annotation_is_told_it_runs_on_the_host(
    kube: Kube, controller: RunningController
) -> None:
    """``hostNetwork: false`` in a template of a job annotated ``host`` is overridden (the job's mode wins, so
    its ranks get host ports): it was silent; a Warning event now says which templates and what to do."""
    job = pytorchjob("ovr", host=True, replicas={"Master": replica(1), "Worker": replica(1)})
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = False
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)

    async def told() -> list[dict[str, Any]] | None:
        found = [e for e in await events_for(kube, "ovr") if e["reason"] == "HostNetworkOverridden"]
        return found or None

    (event,) = await eventually(told, what="the HostNetworkOverridden event")
    assert "Worker" in event["message"] and "hostNetwork: false" in event["message"]
    pods = await eventually(lambda: _n_pods_of(kube, "ovr", 2), what="both pods")
    assert all(pod["spec"].get("hostNetwork") for pod in pods)


async def _n_pods_of(kube: Kube, job: str, n: int) -> list[dict[str, Any]] | None:
    listed = (await kube.list(PODS, namespace=kube.ns, label_selector=f"{c.LABEL_JOB_NAME}={job}")).items
    return listed if len(listed) == n else None


@pytest.mark.nodes(2)
async def test_a_replacement_refused_because_the_namespace_is_terminating_keeps_no_port(
    cluster: Env, kube: Kube
) -> None:
    """The path of the adversary's leak, made certain: a failover's replacement is refused with the 403 a
    terminating namespace answers. The refused create gives its port back, so the allocator holds no reservation
    for a pod that does not exist (each such create leaked one, until the controller restarted)."""
    running = RunningController(cluster, fast_options(namespace=kube.ns, host_port_range=(20000, 20009)))
    manager = await running.start()
    try:
        network = _host_network(manager)
        await kube.create(PYTORCHJOBS, pytorchjob("gone", host=True), namespace=kube.ns)
        await eventually(lambda: _n_running(kube, 3), within=60, what="3 pods running")
        refused = FaultRule(
            verb="create",
            resource="pods",
            namespace=kube.ns,
            status=403,
            reason="Forbidden",
            message=f'pods "gone-worker-0" is forbidden: unable to create new content in namespace {kube.ns} '
            "because it is being terminated",
        )
        cluster.faults.add(refused)
        await kube.delete(PODS, "gone-worker-0", namespace=kube.ns)
        await eventually(lambda: _hits(refused, 1), within=60, what="the replacement's create refused")
        pod_key = f"{kube.ns}/gone-worker-0"

        async def nothing_reserved() -> bool:
            return not network.allocator._reserved.get(pod_key)

        await eventually(nothing_reserved, within=10, what="no port reserved for the pod that was not made")
        cluster.faults.rules.remove(refused)
        # A terminating namespace sends no event that it is not: something must wake the job (here, a label).
        await kube.patch(PYTORCHJOBS, "gone", {"metadata": {"labels": {"woken": "1"}}}, namespace=kube.ns)
        await eventually(lambda: _n_running(kube, 3), within=60, what="the replacement once creates pass")
        assert not network.allocator._reserved.get(pod_key)
    finally:
        await running.stop()


async def _n_running(kube: Kube, n: int) -> bool:
    pods = (await kube.list(PODS, namespace=kube.ns)).items
    return len(pods) == n and all(p.get("status", {}).get("phase") == "Running" for p in pods)


async def _hits(rule: FaultRule, n: int) -> bool:
    return rule.hits >= n
