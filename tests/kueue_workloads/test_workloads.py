"""Kueue without its kubeflow.org integration: kubedl-py makes each queued job's Workload and obeys it.

Kueue (built from its Go module, ``batch/job`` its only built-in integration, kubedl-py's kinds declared as
external frameworks) decides; kubedl-py acts: a Workload owned by the job, no pod before the Workload is
``Admitted`` (a pod watch checks every pod made in the test's namespace), pods on the admitted flavor's
nodes, an eviction stops the job and gives its reservation back, a finished job finishes its Workload.
Each scenario runs for a ``training.kubedl.io`` PyTorchJob in host-network mode and a ``kubeflow.org``
TFJob. Jobs end when the test says so (the simulated node agents read ``local.kubedl.io/exit-code``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from harness.kueue import PRIORITY_CLASS_LABEL, QUEUE_LABEL, WORKLOADS, Kueue
from kubedl_py.api import constants as c
from kubedl_py.api.groups import KUBEFLOW
from kubedl_py.controllers.kueue import JOB_UID_LABEL, PODSET_LABEL
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import NODES, PODS, Resource
from tests.integration.conftest import Env, Kube, RunningController, condition, eventually, job_state
from tests.kueue.queues import delete_queues, make_queues

PYTORCHJOBS = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
KF_TFJOBS = Resource(KUBEFLOW.group, KUBEFLOW.version, "tfjobs", "TFJob")
EXIT_CODE = "local.kubedl.io/exit-code"
WITHIN = 60.0
#: each job asks for 2 x 500m CPU; the ClusterQueue has 1 CPU: one job at a time
JOB_CPU = "500m"
QUOTA = "1"
#: the flavor stands for the nodes labelled so; the test's node is
POOL = {"kubedl-py.test/pool": "queued"}
#: and tainted so, in the first scenario: the flavor's toleration is what lets the pods on
TAINT = {"key": "kubedl-py.test/queued", "value": "yes", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Case:
    """A job flavour the scenarios run with."""

    resource: Resource
    types: tuple[str, str]
    host_network: bool

    def job(self, name: str, *, priority_class: str | None = None, queue: str = "queue") -> dict[str, Any]:
        labels = {QUEUE_LABEL: queue}
        if priority_class is not None:
            labels[PRIORITY_CLASS_LABEL] = priority_class
        container = "pytorch" if self.resource.kind == "PyTorchJob" else "tensorflow"

        def replica() -> dict[str, Any]:
            resources = {"requests": {"cpu": JOB_CPU, "memory": "64Mi"}}
            spec = {
                "containers": [{"name": container, "image": "busybox", "command": ["train"], "resources": resources}]
            }
            return {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": spec}}

        replicas = {t: replica() for t in self.types}
        metadata: dict[str, Any] = {"name": name, "labels": labels}
        if self.host_network:
            metadata["annotations"] = {c.ANNOTATION_NETWORK_MODE: "host"}
        if self.resource.group == KUBEFLOW.group:
            spec: dict[str, Any] = {"runPolicy": {"cleanPodPolicy": "None"}, "tfReplicaSpecs": replicas}
        else:
            spec = {"pytorchReplicaSpecs": replicas}
        return {"apiVersion": self.resource.api_version, "kind": self.resource.kind, "metadata": metadata, "spec": spec}


CASES = [
    pytest.param(Case(PYTORCHJOBS, ("Master", "Worker"), host_network=True), id="training.kubedl.io-pytorch-hostnet"),
    pytest.param(Case(KF_TFJOBS, ("PS", "Worker"), host_network=False), id="kubeflow.org-tfjob"),
]


# ------------------------------------------------------------------------------------------------ probes


async def live_pods(kube: Kube, job: str) -> list[dict[str, Any]]:
    listed = await kube.list(PODS, namespace=kube.ns, label_selector=f"{c.LABEL_JOB_NAME}={job}")
    return sorted(
        (p for p in listed.items if not p["metadata"].get("deletionTimestamp")), key=lambda p: p["metadata"]["name"]
    )


async def workload_of(kube: Kube, job: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return await kube.get(WORKLOADS, workload_name_of(job), namespace=kube.ns)
    except NotFound:
        return None


def workload_name_of(job: dict[str, Any]) -> str:
    meta = job["metadata"]
    suffix = f"-{meta['uid'][:5]}"
    return f"{job['kind'].lower()}-{meta['name']}"[: 253 - len(suffix)] + suffix


def wl_condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            found: dict[str, Any] = cond
            return found
    return None


def wl_true(workload: dict[str, Any] | None, kind: str) -> bool:
    cond = wl_condition(workload, kind)
    return bool(cond and cond["status"] == "True")


async def wait_running(kube: Kube, case: Case, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The job's Workload Admitted, the job Running and not Suspended, both its pods Running."""

    async def running() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        job = await job_state(kube, case.resource, name)
        if job is None or not condition(job, "Running") or condition(job, "Suspended"):
            return None
        workload = await workload_of(kube, job)
        pods = await live_pods(kube, name)
        phases = {(p.get("status") or {}).get("phase") for p in pods}
        ok = wl_true(workload, "Admitted") and len(pods) == 2 and phases == {"Running"}
        return (workload, pods) if ok and workload is not None else None

    result: tuple[dict[str, Any], list[dict[str, Any]]] = await eventually(
        running, within=WITHIN, what=f"{name} admitted and Running"
    )
    return result


async def wait_held(kube: Kube, case: Case, name: str) -> dict[str, Any]:
    """Kueue has no quota for the job: its Workload is pending, the job is Suspended (naming the Workload),
    and it has no pods. Returns the Workload."""

    async def held() -> dict[str, Any] | None:
        job = await job_state(kube, case.resource, name)
        suspended = condition(job, "Suspended")
        if job is None or suspended is None:
            return None
        workload = await workload_of(kube, job)
        reserved = wl_condition(workload, "QuotaReserved")
        pending = reserved is not None and reserved["status"] == "False"
        if not pending or wl_true(workload, "Admitted") or await live_pods(kube, name):
            return None
        assert workload is not None and workload["metadata"]["name"] in suspended["message"]
        return workload

    workload: dict[str, Any] = await eventually(held, within=WITHIN, what=f"{name} held: Workload pending, no pods")
    return workload


async def finish(kube: Kube, name: str) -> None:
    for pod in await live_pods(kube, name):
        await kube.patch(
            PODS, pod["metadata"]["name"], {"metadata": {"annotations": {EXIT_CODE: "0"}}}, namespace=kube.ns
        )


async def wait_finished(kube: Kube, case: Case, name: str) -> dict[str, Any]:
    """The job Succeeded and kubedl-py marked its Workload Finished (Succeeded)."""

    async def done() -> dict[str, Any] | None:
        job = await job_state(kube, case.resource, name)
        if not condition(job, "Succeeded") or job is None:
            return None
        workload = await workload_of(kube, job)
        return workload if wl_true(workload, "Finished") else None

    workload: dict[str, Any] = await eventually(done, within=WITHIN, what=f"{name} Succeeded, its Workload Finished")
    assert wl_condition(workload, "Finished")["reason"] == "Succeeded"  # type: ignore[index]
    return workload


# ---------------------------------------------------------------------------------------- the pod audit


@dataclass
class PodAudit:
    """Every pod made in the test's namespace, checked as it appears: its job's Workload must be Admitted."""

    kube: Kube
    resources: dict[str, Resource]
    seen: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    async def run(self) -> None:
        known: set[str] = set()
        while True:
            listed = await self.kube.list(PODS, namespace=self.kube.ns)
            for pod in listed.items:
                known.add(pod["metadata"]["uid"])
            watch = self.kube.watch(
                PODS, namespace=self.kube.ns, resource_version=listed.resource_version, timeout_seconds=60
            )
            async with contextlib.aclosing(watch) as events:
                async for event in events:
                    pod = event.object
                    uid = str((pod.get("metadata") or {}).get("uid"))
                    if event.type != "ADDED" or uid in known:
                        continue
                    known.add(uid)
                    await self.check(pod)

    async def check(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.seen.append(meta["name"])
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
        if owner is None or owner["kind"] not in self.resources:
            return
        job = await job_state(self.kube, self.resources[owner["kind"]], owner["name"])
        if job is not None and QUEUE_LABEL not in (job["metadata"].get("labels") or {}):
            return  # not queued: not Kueue's to admit
        workload = await workload_of(self.kube, job) if job is not None else None
        if not wl_true(workload, "Admitted"):
            state = [
                (cond["type"], cond["status"])
                for cond in ((workload or {}).get("status") or {}).get("conditions") or []
            ]
            self.violations.append(f"pod {meta['name']} made while its Workload was not admitted: {state}")


@pytest.fixture
async def pod_audit(kube: Kube) -> AsyncIterator[PodAudit]:
    audit = PodAudit(kube, {"PyTorchJob": PYTORCHJOBS, "TFJob": KF_TFJOBS})
    task = asyncio.create_task(audit.run())
    try:
        yield audit
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert audit.violations == []


# ---------------------------------------------------------------------------------------------- scenarios


@pytest.mark.nodes(1, labels=[POOL])
@pytest.mark.parametrize("case", CASES)
async def test_queued_jobs_wait_for_quota_and_are_admitted_in_priority_order(
    kube: Kube,
    cluster: Env,
    workload_controller: RunningController,
    pod_audit: PodAudit,
    case: Case,
) -> None:
    # The flavor's nodes are tainted: only pods given the flavor's toleration (by kubedl-py, from the admission)
    # can run there.
    (node,) = cluster.node_names
    await kube.patch(NODES, node, {"spec": {"taints": [TAINT]}})
    queues = await make_queues(
        kube,
        cpu=QUOTA,
        priorities={"low": 100, "high": 1000},
        node_labels=POOL,
        tolerations=[{"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
    )
    try:
        first = await kube.create(
            case.resource, case.job("first", priority_class=queues.priorities["low"]), namespace=kube.ns
        )
        assert not (first["spec"].get("suspend") or first["spec"].get("runPolicy", {}).get("suspend"))
        workload, pods = await wait_running(kube, case, "first")
        assert TAINT in (await kube.get(NODES, node))["spec"]["taints"]  # still there: the toleration let them on
        # The Workload kubedl-py made: owned by the job, one pod set per replica type, the class's priority.
        meta = workload["metadata"]
        assert meta["name"] == f"{case.resource.kind.lower()}-first-{first['metadata']['uid'][:5]}"
        assert meta["labels"][JOB_UID_LABEL] == first["metadata"]["uid"]
        assert [(o["kind"], o["name"], o["controller"]) for o in meta["ownerReferences"]] == [
            (case.resource.kind, "first", True)
        ]
        spec = workload["spec"]
        assert [(s["name"], s["count"]) for s in spec["podSets"]] == [(t.lower(), 1) for t in case.types]
        assert (spec["queueName"], spec["priority"]) == ("queue", 100)
        assert spec["priorityClassRef"]["name"] == queues.priorities["low"]
        # The pods run where the admission put them: the flavor's node labels, Kueue's pod-set label.
        for pod in pods:
            assert pod["spec"]["nodeSelector"] == POOL
            assert {"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
            assert pod["metadata"]["labels"][PODSET_LABEL] == pod["metadata"]["labels"][c.LABEL_REPLICA_TYPE]
            assert pod["spec"].get("hostNetwork", False) is case.host_network

        # Two more jobs, the high one last: both wait, with no pods, while the first holds the quota.
        await kube.create(case.resource, case.job("second", priority_class=queues.priorities["low"]), namespace=kube.ns)
        await wait_held(kube, case, "second")
        await kube.create(case.resource, case.job("third", priority_class=queues.priorities["high"]), namespace=kube.ns)
        await wait_held(kube, case, "third")

        await finish(kube, "first")
        await wait_finished(kube, case, "first")
        # The quota freed goes to the higher priority, though it came last; the other still waits.
        await wait_running(kube, case, "third")
        await wait_held(kube, case, "second")
        await finish(kube, "third")
        await wait_finished(kube, case, "third")
        await wait_running(kube, case, "second")
        resumed = await job_state(kube, case.resource, "second")
        suspended = next(cond for cond in resumed["status"]["conditions"] if cond["type"] == "Suspended")  # type: ignore[index]
        assert suspended["status"] == "False"
        assert sorted(set(pod_audit.seen)) == sorted(
            f"{job}-{t.lower()}-0" for job in ("first", "second", "third") for t in case.types
        )
    finally:
        await delete_queues(kube, queues)


@pytest.mark.nodes(1, labels=[POOL])
@pytest.mark.parametrize("case", CASES)
async def test_a_higher_priority_job_preempts_a_running_one_which_resumes_after(
    kueue_running: Kueue, kube: Kube, workload_controller: RunningController, pod_audit: PodAudit, case: Case
) -> None:
    queues = await make_queues(
        kube,
        cpu=QUOTA,
        preemption={"withinClusterQueue": "LowerPriority"},
        priorities={"low": 100, "high": 1000},
        node_labels=POOL,
    )
    try:
        await kube.create(case.resource, case.job("low", priority_class=queues.priorities["low"]), namespace=kube.ns)
        _, low_pods = await wait_running(kube, case, "low")
        await kube.create(case.resource, case.job("high", priority_class=queues.priorities["high"]), namespace=kube.ns)

        # Kueue evicts the low job's Workload; kubedl-py deletes its pods, suspends it, and once nothing of it
        # runs gives the reservation back (QuotaReserved False, Requeued), so the high job gets the quota.
        async def requeued() -> dict[str, Any] | None:
            job = await job_state(kube, case.resource, "low")
            workload = await workload_of(kube, job) if job is not None else None
            reserved = wl_condition(workload, "QuotaReserved")
            ok = (
                condition(job, "Suspended")
                and not condition(job, "Running")
                and wl_true(workload, "Requeued")
                and reserved is not None
                and reserved["status"] == "False"
                and not (workload or {}).get("status", {}).get("admission")
                and not await live_pods(kube, "low")
            )
            return workload if ok else None

        victim = await eventually(requeued, within=WITHIN, what="low evicted, stopped and back in the queue")
        assert wl_condition(victim, "Evicted")["reason"] == "Preempted"  # type: ignore[index]
        assert wl_condition(victim, "Requeued")["reason"] == "Preempted"  # type: ignore[index]
        low = await job_state(kube, case.resource, "low")
        suspended = condition(low, "Suspended")
        assert suspended is not None and "evicted" in suspended["message"]

        await wait_running(kube, case, "high")
        assert await live_pods(kube, "low") == []
        await finish(kube, "high")
        await wait_finished(kube, case, "high")

        # The low job is admitted again and starts afresh, with new pods, and runs to the end.
        _, again = await wait_running(kube, case, "low")
        assert not {p["metadata"]["uid"] for p in again} & {p["metadata"]["uid"] for p in low_pods}
        await finish(kube, "low")
        await wait_finished(kube, case, "low")
    finally:
        await delete_queues(kube, queues)


@pytest.mark.nodes(1, labels=[POOL])
async def test_no_pod_is_made_for_a_job_whose_workload_is_not_admitted(
    kueue_running: Kueue, kube: Kube, workload_controller: RunningController, pod_audit: PodAudit
) -> None:
    """A queue with no quota at all: the job's Workload is never admitted. A job without the queue label, made
    after it, runs: the controller has acted on later events, yet the queued job has not a single pod."""
    case = Case(PYTORCHJOBS, ("Master", "Worker"), host_network=True)
    queues = await make_queues(kube, cpu="0", node_labels=POOL)
    try:
        await kube.create(case.resource, case.job("queued"), namespace=kube.ns)
        await wait_held(kube, case, "queued")
        free = case.job("free")
        del free["metadata"]["labels"]
        await kube.create(case.resource, free, namespace=kube.ns)

        async def free_running() -> bool:
            return bool(condition(await job_state(kube, case.resource, "free"), "Running"))

        await eventually(free_running, within=WITHIN, what="the unqueued job Running")
        assert await live_pods(kube, "queued") == []
        assert [name for name in pod_audit.seen if name.startswith("queued-")] == []
        job = await job_state(kube, case.resource, "queued")
        assert condition(job, "Suspended") and not condition(job, "Running")
    finally:
        await delete_queues(kube, queues)


TOPOLOGIES = Resource("kueue.x-k8s.io", "v1beta2", "topologies", "Topology", namespaced=False)
HOSTNAME = "kubernetes.io/hostname"


@pytest.mark.nodes(2, labels=[POOL, POOL])
async def test_the_topology_kueue_assigns_places_the_pods_in_their_domain(
    kube: Kube, workload_controller: RunningController, pod_audit: PodAudit
) -> None:
    """Topology-aware scheduling: the Workers' pod set asks for one host; Kueue assigns one, kubedl-py makes
    the pods with Kueue's topology gate, and Kueue's ungater lifts it with that host as node selector."""
    topology = f"topo-{kube.ns}"
    await kube.create(
        TOPOLOGIES,
        {
            "apiVersion": TOPOLOGIES.api_version,
            "kind": "Topology",
            "metadata": {"name": topology},
            "spec": {"levels": [{"nodeLabel": HOSTNAME}]},
        },
    )
    queues = await make_queues(kube, cpu="4", node_labels=POOL, topology=topology)
    try:
        job = Case(PYTORCHJOBS, ("Master", "Worker"), host_network=False).job("placed")
        worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
        worker["replicas"] = 2
        worker["template"]["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": HOSTNAME}}
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)

        async def placed() -> list[dict[str, Any]] | None:
            pods = await live_pods(kube, "placed")
            running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
            return pods if len(pods) == 3 and len(running) == 3 else None

        pods = await eventually(placed, within=WITHIN, what="the job's 3 pods Running after Kueue's ungater")
        workload = await workload_of(kube, await job_state(kube, PYTORCHJOBS, "placed"))  # type: ignore[arg-type]
        assignments = {a["name"]: a for a in workload["status"]["admission"]["podSetAssignments"]}  # type: ignore[index]
        assert assignments["worker"].get("topologyAssignment"), assignments
        workers = [p for p in pods if p["metadata"]["labels"][c.LABEL_REPLICA_TYPE] == "worker"]
        hosts = {p["spec"]["nodeName"] for p in workers}
        assert len(hosts) == 1, hosts  # one host for the pod set, as required
        for pod in pods:
            assert not pod["spec"].get("schedulingGates"), pod["spec"].get("schedulingGates")  # lifted by Kueue
            assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == workload["metadata"]["name"]  # type: ignore[index]
        for pod in workers:
            assert pod["spec"]["nodeSelector"][HOSTNAME] == next(iter(hosts))  # the ungater's choice
    finally:
        await delete_queues(kube, queues)
        with contextlib.suppress(NotFound):
            await kube.delete(TOPOLOGIES, topology)
