"""The request sequences kubedl-py's controller and node agents make, replayed by hand."""

from __future__ import annotations

from typing import Any

from tests.differential.cases.common import (
    EXIT_CODE,
    IMAGE,
    core,
    grouped,
    make,
    owner_ref,
    phase_is,
    pod,
    pytorchjob,
    service,
)
from tests.differential.harness import Reply, Tier, case

JOB_LABEL = "training.kubedl.io/job-name"


def _replica_pod(job: dict[str, Any], rtype: str, index: int, **extra: Any) -> dict[str, Any]:
    name = f"{job['metadata']['name']}-{rtype}-{index}"
    body = pod(
        name,
        labels={
            JOB_LABEL: job["metadata"]["name"],
            "training.kubedl.io/replica-type": rtype,
            "training.kubedl.io/replica-index": str(index),
        },
        containers=[
            {
                "name": "pytorch",
                "image": IMAGE,
                "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
                "env": [
                    {"name": "MASTER_ADDR", "value": f"{job['metadata']['name']}-master-0"},
                    {"name": "RANK", "value": str(index)},
                ],
            }
        ],
        restartPolicy="Never",
        **extra,
    )
    body["metadata"]["ownerReferences"] = [owner_ref(job, controller=True, block=True)]
    return body


@case("controller-job-pods-and-services", nodes=True)
async def _(t: Tier) -> None:
    """A job's pods and headless Services as the controller makes them; pods run, Services get endpoints."""
    job = await make(t, grouped(t, "pytorchjobs"), pytorchjob("job"))
    for rtype, index in (("master", 0), ("worker", 0)):
        await t.post(core(t, "pods"), _replica_pod(job, rtype, index), keep=lambda b: b["metadata"]["ownerReferences"])
        svc = service(
            f"job-{rtype}-{index}",
            [{"name": "pytorchjob-port", "port": 23456, "targetPort": 23456}],
            clusterIP="None",
            selector={
                JOB_LABEL: "job",
                "training.kubedl.io/replica-type": rtype,
                "training.kubedl.io/replica-index": str(index),
            },
        )
        svc["metadata"]["ownerReferences"] = [owner_ref(job, controller=True, block=True)]
        await t.post(core(t, "services"), svc, keep=lambda b: b["spec"])
    await t.poll(
        core(t, "pods", query=f"labelSelector={JOB_LABEL}%3Djob"),
        lambda r: all((i.get("status") or {}).get("phase") == "Running" for i in r.body["items"]),
        keep=lambda b: [(i["metadata"]["name"], i["status"]["phase"]) for i in b["items"]],
    )
    await t.poll(
        core(t, "endpoints", "job-master-0"),
        lambda r: r.status == 200 and bool(r.body.get("subsets")),
        keep=lambda b: [
            {
                "ports": s.get("ports"),
                "addresses": [(a.get("targetRef") or {}).get("name") for a in s.get("addresses") or []],
            }
            for s in b["subsets"]
        ],
    )


@case("controller-status-patch-with-resource-version")
async def _(t: Tier) -> None:
    """Job status written with a merge patch to /status carrying the resourceVersion read: the second
    write with the old version loses (409)."""
    job = await make(t, grouped(t, "pytorchjobs"), pytorchjob("job"))
    rv = job["metadata"]["resourceVersion"]
    status = {
        "conditions": [
            {
                "type": "Created",
                "status": "True",
                "reason": "PyTorchJobCreated",
                "message": "created",
                "lastUpdateTime": "2026-01-01T00:00:00Z",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}},
        "startTime": "2026-01-01T00:00:00Z",
    }
    await t.patch(
        grouped(t, "pytorchjobs", "job", "status"),
        {"metadata": {"resourceVersion": rv}, "status": status},
        keep=lambda b: (b.get("status"), b["metadata"].get("generation")),
    )
    await t.patch(
        grouped(t, "pytorchjobs", "job", "status"), {"metadata": {"resourceVersion": rv}, "status": {"startTime": None}}
    )
    await t.kubectl("get", "pytorchjob.training.kubedl.io", "job")


@case("controller-kubectl-wait-job-condition")
async def _(t: Tier) -> None:
    """kubectl wait --for=condition=Succeeded on a PyTorchJob whose status the controller set."""
    await make(t, grouped(t, "pytorchjobs"), pytorchjob("job"))
    await t.quiet(
        "PATCH",
        grouped(t, "pytorchjobs", "job", "status"),
        {"status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "JobSucceeded"}]}},
        "application/merge-patch+json",
    )
    await t.kubectl("wait", "--for=condition=Succeeded", "pytorchjob.training.kubedl.io/job", "--timeout=30s")
    await t.kubectl("wait", "--for=condition=Failed", "pytorchjob.training.kubedl.io/job", "--timeout=1s")


@case("controller-recreate-terminating-pod", nodes=True)
async def _(t: Tier) -> None:
    """A failed replica replaced under the same name: create while the old pod terminates is 409
    AlreadyExists; once it is gone the create succeeds."""
    job = await make(t, grouped(t, "pytorchjobs"), pytorchjob("job"))
    body = _replica_pod(job, "worker", 0, annotations={"local.kubedl.io/termination-seconds": "2"})
    await make(t, core(t, "pods"), body)
    await t.poll(core(t, "pods", "job-worker-0"), phase_is("Running"), keep=lambda b: b["status"]["phase"])
    await t.delete(core(t, "pods", "job-worker-0"), keep=lambda b: "deletionTimestamp" in b["metadata"])
    await t.post(core(t, "pods"), body, keep=lambda b: b.get("reason"))
    await t.poll(core(t, "pods", "job-worker-0"), lambda r: r.status == 404, keep=False)
    await t.post(core(t, "pods"), body, keep=lambda b: b["metadata"]["name"])


@case("controller-service-retarget")
async def _(t: Tier) -> None:
    """Host-network failover: a Service's targetPort re-pointed with a merge patch, then a strategic one."""
    await make(
        t,
        core(t, "services"),
        service("job-master-0", [{"name": "p", "port": 23456, "targetPort": 31000}], selector={JOB_LABEL: "job"}),
    )
    await t.patch(
        core(t, "services", "job-master-0"),
        {"spec": {"ports": [{"name": "p", "port": 23456, "targetPort": 32000}]}},
        keep=lambda b: b["spec"]["ports"],
    )
    await t.patch(
        core(t, "services", "job-master-0"),
        {"spec": {"ports": [{"name": "p", "port": 23456, "targetPort": 33000}]}},
        "strategic",
        keep=lambda b: b["spec"]["ports"],
    )


@case("controller-informer-list-watch", nodes=True)
async def _(t: Tier) -> None:
    """The informer's pattern: list pods by the job label, watch from the list's version with bookmarks,
    see a pod appear and finish."""
    job = await make(t, grouped(t, "pytorchjobs"), pytorchjob("job"))
    listed = await t.get(core(t, "pods", query=f"labelSelector={JOB_LABEL}%3Djob"), keep=lambda b: b["items"])
    rv = listed.body["metadata"]["resourceVersion"]
    query = f"watch=1&resourceVersion={rv}&labelSelector={JOB_LABEL}%3Djob&allowWatchBookmarks=true&timeoutSeconds=300"
    async with t.watching(core(t, "pods", query=query)) as w:
        await make(t, core(t, "pods"), _replica_pod(job, "master", 0, annotations={EXIT_CODE: "0"}))
        events = await w.collect(
            lambda evs: any(
                (e.object.get("status") or {}).get("phase") == "Succeeded" for e in evs if e.type != "BOOKMARK"
            ),
            record=False,
        )
        seen = []
        for ev in events:
            if ev.type == "BOOKMARK":
                continue
            step = [ev.type, (ev.object.get("status") or {}).get("phase")]
            if not seen or seen[-1] != step:
                seen.append(step)
        t.note("events", seen)


@case("controller-pod-template-fields", nodes=True)
async def _(t: Tier) -> None:
    """A replica pod with the fields the controller sets (host network, dnsPolicy, hostPort, env,
    annotations, scheduler name), as stored and as the node reports it."""
    job = await make(t, grouped(t, "pytorchjobs"), pytorchjob("job"))
    body = _replica_pod(job, "master", 0, hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    body["spec"]["containers"][0]["ports"] = [{"name": "pytorchjob-port", "containerPort": 31234, "hostPort": 31234}]
    body["metadata"]["annotations"] = {"kubedl.io/network-mode": "host"}
    await t.post(core(t, "pods"), body, keep=lambda b: b["spec"])
    await t.poll(
        core(t, "pods", "job-master-0"),
        phase_is("Running"),
        keep=lambda b: {
            "hostIP==podIP": b["status"].get("hostIP") == b["status"].get("podIP"),
            "phase": b["status"]["phase"],
        },
    )


@case("controller-events-for-job")
async def _(t: Tier) -> None:
    """The controller's events about a PyTorchJob, listed as kubectl describe shows them."""
    job = await make(t, grouped(t, "pytorchjobs"), pytorchjob("job"))
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "job."},
        "involvedObject": {
            "apiVersion": job["apiVersion"],
            "kind": "PyTorchJob",
            "name": "job",
            "namespace": t.ns,
            "uid": job["metadata"]["uid"],
            "resourceVersion": job["metadata"]["resourceVersion"],
        },
        "reason": "SuccessfulCreatePod",
        "message": "Created pod: job-master-0",
        "type": "Normal",
        "source": {"component": "kubedl-py"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }
    await t.post(core(t, "events"), event)
    await t.kubectl("describe", "pytorchjob.training.kubedl.io", "job", out=lambda s: s.split("Events:")[1])


@case("controller-node-read")
async def _(t: Tier) -> None:
    """The node a pod runs on, as the controller and kubectl read it (labels, capacity, conditions)."""

    def shape(b: Any) -> Any:
        status = b["status"]
        return {
            "labels": sorted(b["metadata"].get("labels") or {}),
            "capacity": status.get("capacity"),
            "conditions": sorted((c["type"], c["status"]) for c in status.get("conditions") or []),
            "addresses": sorted(a["type"] for a in status.get("addresses") or []),
            "taints": b["spec"].get("taints"),
        }

    await t.get(f"/api/v1/nodes/{t.node}", keep=shape)


def _ready(reply: Reply) -> bool:
    return phase_is("Running")(reply)
