"""Scheduler (node selector, resources incl. extended, host ports, unschedulable + retry) and the simulated
kubelet (status, IPs, exit codes, restart policies, logs, eviction, node loss)."""

from __future__ import annotations

import os
from typing import Any

import aiohttp

from kubedl_local import LocalCluster
from tests.local.conftest import Http, eventually, pod

PODS = "/api/v1/namespaces/default/pods"


async def get_pod(http: Http, name: str) -> dict[str, Any]:
    r = await http.get(f"{PODS}/{name}")
    assert r.status == 200, r.body
    body: dict[str, Any] = r.body
    return body


def phase_is(http: Http, name: str, *phases: str) -> Any:
    async def check() -> dict[str, Any] | None:
        p = await get_pod(http, name)
        return p if p["status"].get("phase") in phases else None

    return check


async def test_running_status_fields(http: Http) -> None:
    await http.post(PODS, pod("r", initContainers=[{"name": "init", "image": "busybox"}]))
    p = await eventually(phase_is(http, "r", "Running"))
    st = p["status"]
    node = (await http.get("/api/v1/nodes/local-node-0")).body
    node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    assert st["hostIP"] == node_ip and st["podIP"].startswith("198.19.") and st["startTime"]
    assert not node_ip.startswith("127.") or os.geteuid() != 0  # root: RFC 2544 addresses, not loopback
    assert {c["type"]: c["status"] for c in st["conditions"]} == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    cs = st["containerStatuses"][0]
    assert cs["ready"] and cs["restartCount"] == 0 and "running" in cs["state"] and cs["containerID"]
    assert st["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    hn = pod("hn", hostNetwork=True)
    await http.post(PODS, hn)
    p2 = await eventually(phase_is(http, "hn", "Running"))
    assert p2["status"]["podIP"] == p2["status"]["hostIP"] == node_ip
    await http.post(PODS, pod("r2"))
    p3 = await eventually(phase_is(http, "r2", "Running"))
    assert p3["status"]["podIP"] != st["podIP"]


async def test_exit_codes_and_restart_policies(http: Http) -> None:
    await http.post(PODS, pod("ok", annotations={"local.kubedl.io/exit-code": "0"}, restartPolicy="Never"))
    await http.post(PODS, pod("bad", annotations={"local.kubedl.io/exit-code": "3"}, restartPolicy="Never"))
    await http.post(
        PODS,
        pod(
            "onf",
            annotations={"local.kubedl.io/exit-code": "0", "local.kubedl.io/run-seconds": "0.05"},
            restartPolicy="OnFailure",
        ),
    )
    ok = await eventually(phase_is(http, "ok", "Succeeded"))
    t = ok["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (t["exitCode"], t["reason"]) == (0, "Completed")
    bad = await eventually(phase_is(http, "bad", "Failed"))
    t = bad["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (t["exitCode"], t["reason"]) == (3, "Error")
    await eventually(phase_is(http, "onf", "Succeeded"))
    await http.post(PODS, pod("crash", annotations={"local.kubedl.io/exit-code": "1"}, restartPolicy="OnFailure"))

    async def restarted() -> bool:
        p = await get_pod(http, "crash")
        cs = p["status"].get("containerStatuses") or [{}]
        return cs[0].get("restartCount", 0) >= 2 and p["status"]["phase"] == "Running"

    await eventually(restarted)
    p = await get_pod(http, "crash")
    assert p["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1


async def test_annotation_change_ends_a_running_pod(http: Http) -> None:
    await http.post(PODS, pod("late", restartPolicy="Never"))
    await eventually(phase_is(http, "late", "Running"))
    await http.patch(f"{PODS}/late", {"metadata": {"annotations": {"local.kubedl.io/exit-code": "7"}}})
    p = await eventually(phase_is(http, "late", "Failed"))
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 7


async def test_logs(cluster: LocalCluster, http: Http) -> None:
    await http.post(PODS, pod("l", annotations={"local.kubedl.io/exit-code": "1"}, restartPolicy="Always"))

    async def restarted() -> bool:
        p = await get_pod(http, "l")
        return any(c.get("restartCount", 0) >= 1 for c in p["status"].get("containerStatuses") or [])

    await eventually(restarted)
    r = await http.get(f"{PODS}/l/log?previous=true")
    assert r.status == 200 and "exiting with code 1" in r.body
    r = await http.get(f"{PODS}/l/log?container=main&tailLines=1")
    assert r.status == 200 and len(r.body.strip().splitlines()) == 1
    r = await http.get(f"{PODS}/l/log?container=nope")
    assert r.status == 400
    await http.post(PODS, pod("two", containers=[{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]))
    await eventually(phase_is(http, "two", "Running"))
    r = await http.get(f"{PODS}/two/log")
    assert r.status == 400 and "choose one of: [a b]" in r.body["message"]
    await http.post(
        PODS,
        pod(
            "fl",
            annotations={"local.kubedl.io/exit-code": "0", "local.kubedl.io/run-seconds": "0.3"},
            restartPolicy="Never",
        ),
    )
    await eventually(phase_is(http, "fl", "Running"))
    async with aiohttp.ClientSession() as s, s.get(f"{cluster.url}{PODS}/fl/log?follow=true") as resp:
        text = (await resp.read()).decode()  # ends when the container exits
    assert "started" in text and "exiting with code 0" in text


async def test_scheduler_resources_selectors_and_host_ports() -> None:
    async with (
        LocalCluster(
            nodes=2,
            node_resources=[{"rdma/hca": "1", "cpu": "4"}, {"cpu": "4"}],
            node_labels=[{"zone": "a"}, {"zone": "b"}],
        ) as c,
        aiohttp.ClientSession() as s,
    ):
        http = Http(s, c.url)

        def res(name: str, **requests: str) -> dict[str, Any]:
            p = pod(name)
            p["spec"]["containers"][0]["resources"] = {"requests": requests, "limits": requests}
            return p

        await http.post(PODS, res("rdma", **{"rdma/hca": "1"}))
        p = await eventually(phase_is(http, "rdma", "Running"))
        assert p["spec"]["nodeName"] == "local-node-0"
        assert p["status"]["hostIP"] == c.node_ips["local-node-0"]
        await http.post(PODS, res("rdma2", **{"rdma/hca": "1"}))

        async def unschedulable() -> dict[str, Any] | None:
            q = await get_pod(http, "rdma2")
            cond = next((x for x in q["status"].get("conditions") or [] if x["type"] == "PodScheduled"), None)
            return q if cond and cond["status"] == "False" and cond["reason"] == "Unschedulable" else None

        q = await eventually(unschedulable)
        msg = next(x for x in q["status"]["conditions"] if x["type"] == "PodScheduled")["message"]
        assert msg.startswith("0/2 nodes are available") and "Insufficient rdma/hca" in msg
        evs = (
            await http.get(
                "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Drdma2,reason%3DFailedScheduling"
            )
        ).body["items"]
        assert len(evs) == 1 and evs[0]["type"] == "Warning"
        await http.delete(f"{PODS}/rdma")  # frees the resource: the pending pod is retried
        p = await eventually(phase_is(http, "rdma2", "Running"), timeout=10)
        assert p["spec"]["nodeName"] == "local-node-0"
        await http.post(PODS, pod("zb", nodeSelector={"zone": "b"}))
        assert (await eventually(phase_is(http, "zb", "Running")))["spec"]["nodeName"] == "local-node-1"
        for i in range(3):
            hp = pod(f"hp{i}", hostNetwork=True)
            hp["spec"]["containers"][0]["ports"] = [{"containerPort": 23456}]
            await http.post(PODS, hp)
        await eventually(phase_is(http, "hp0", "Running"))
        await eventually(phase_is(http, "hp1", "Running"))
        nodes = {(await get_pod(http, f"hp{i}"))["spec"].get("nodeName") for i in range(2)}
        assert nodes == {"local-node-0", "local-node-1"}  # never two on one node
        p = await get_pod(http, "hp0")
        assert p["spec"]["containers"][0]["ports"][0]["hostPort"] == 23456
        assert p["status"]["podIP"] in (c.node_ips["local-node-0"], c.node_ips["local-node-1"])
        third = await get_pod(http, "hp2")
        assert "nodeName" not in third["spec"]
        await http.post(PODS, res("cpu", cpu="5"))

        async def cpu_unschedulable() -> bool:
            q = await get_pod(http, "cpu")
            return any(
                x.get("reason") == "Unschedulable" and "Insufficient cpu" in x.get("message", "")
                for x in q["status"].get("conditions") or []
            )

        await eventually(cpu_unschedulable)


async def test_evict_pod_like_kubelet(cluster: LocalCluster, http: Http) -> None:
    await http.post(PODS, pod("e"))
    await eventually(phase_is(http, "e", "Running"))
    written = await cluster.evict_pod("default", "e")
    assert written["status"]["reason"] == "Evicted"
    p = await get_pod(http, "e")
    assert (p["status"]["phase"], p["status"]["reason"]) == ("Failed", "Evicted")
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


async def test_eviction_subresource(http: Http) -> None:
    await http.post(PODS, pod("ev"))
    await eventually(phase_is(http, "ev", "Running"))
    r = await http.post(
        f"{PODS}/ev/eviction", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "ev"}}
    )
    assert r.status == 201
    await eventually(lambda: _gone(http, "ev"))


async def test_lose_node_taints_and_evicts_after_toleration(cluster: LocalCluster, http: Http) -> None:
    await http.post(PODS, pod("n"))
    await eventually(phase_is(http, "n", "Running"))
    await cluster.lose_node("local-node-0")
    node = (await http.get("/api/v1/nodes/local-node-0")).body
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "Unknown"
    assert {(t["key"], t["effect"]) for t in node["spec"]["taints"]} == {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    p = await get_pod(http, "n")
    assert next(c for c in p["status"]["conditions"] if c["type"] == "Ready")["status"] == "False"
    tol = [t for t in p["spec"]["tolerations"] if t["key"] == "node.kubernetes.io/unreachable"]
    assert tol[0]["tolerationSeconds"] == 1

    async def terminating() -> bool:
        q = await get_pod(http, "n")
        return bool(q["metadata"].get("deletionTimestamp"))

    await eventually(terminating)  # evicted by the taint manager after tolerationSeconds ...
    await http.post(PODS, pod("after"))
    after = await get_pod(http, "after")
    assert "nodeName" not in after["spec"]  # ... and nothing new lands on the tainted node
    p = await get_pod(http, "n")
    assert p["status"]["phase"] == "Running"  # the kubelet is gone: stuck Terminating as in Kubernetes
    await cluster.restore_node("local-node-0")
    await eventually(lambda: _gone(http, "n"))
    await eventually(phase_is(http, "after", "Running"))


async def test_remove_node_force_deletes_its_pods(cluster: LocalCluster, http: Http) -> None:
    await http.post(PODS, pod("rm"))
    await eventually(phase_is(http, "rm", "Running"))
    await cluster.lose_node("local-node-0", status="False")
    await cluster.remove_node("local-node-0")
    await eventually(lambda: _gone(http, "rm"))


async def _gone(http: Http, name: str) -> bool:
    return (await http.get(f"{PODS}/{name}")).status == 404


async def test_unschedulable_pod_retried_when_its_spec_changes(http: Http) -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    r = await http.patch("/api/v1/nodes/local-node-0", {"spec": {"taints": [taint]}})
    assert r.status == 200
    await http.post(PODS, pod("t"))

    async def unschedulable() -> bool:
        q = await get_pod(http, "t")
        return any(x.get("reason") == "Unschedulable" for x in q["status"].get("conditions") or [])

    await eventually(unschedulable)
    r = await http.patch(
        f"{PODS}/t",
        [{"op": "add", "path": "/spec/tolerations/-", "value": {**taint, "operator": "Equal"}}],
        content_type="application/json-patch+json",
    )
    assert r.status == 200, r.body
    p = await eventually(phase_is(http, "t", "Running"))
    assert p["spec"]["nodeName"] == "local-node-0"


async def test_resources_fit_against_capacity_the_server_stored_canonical(http: Http) -> None:
    """Node capacity ``cpu: 1000`` reads back as ``"1k"``, like a real server's; requests are fitted
    against it (the scheduler once read only ``m`` suffixes for cpu and crashed on every pod asking cpu)."""
    node = (await http.get("/api/v1/nodes/local-node-0")).body
    assert node["status"]["allocatable"]["cpu"] == "1k"
    asks = {"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    await http.post(PODS, pod("fits", containers=[{"name": "c", "image": "busybox", "resources": asks}]))
    placed = await eventually(phase_is(http, "fits", "Running"))
    assert placed["spec"]["nodeName"] == "local-node-0"
    too_big = {"requests": {"cpu": "2k"}, "limits": {"cpu": "2k"}}
    await http.post(PODS, pod("huge", containers=[{"name": "c", "image": "busybox", "resources": too_big}]))

    async def unschedulable() -> bool:
        conditions = (await get_pod(http, "huge"))["status"].get("conditions") or []
        return any(c["type"] == "PodScheduled" and c["reason"] == "Unschedulable" for c in conditions)

    await eventually(unschedulable)
