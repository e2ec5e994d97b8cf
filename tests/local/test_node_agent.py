"""The node agents as API clients: registration and leases, status only through ``/status``, graceful
deletion confirmed over the API, the HTTPS kubelet endpoint (TLS client CA, log parameters) behind
``pods/{name}/log``, and service-account tokens (TokenRequest)."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from kubedl_local import LocalCluster, pki
from kubedl_local.node import AgentSettings
from kubedl_local.node.spec import (
    EXEC_WEBSOCKETS,
    RESTART_ALL_CONTAINERS,
    UNDECLARE_LABEL,
    USER_AGENT,
    NodeSpec,
    declared_features,
)
from kubedl_local.pins import KUBERNETES_VERSION
from tests.local.conftest import Http, eventually, pod

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
async def fast() -> AsyncIterator[LocalCluster]:
    settings = AgentSettings(lease_renew_interval=0.2, node_status_interval=0.2, watch_all_bound_pods=True)
    async with LocalCluster(nodes=2, agent_settings=settings) as c:
        yield c


@pytest.fixture
async def fhttp(fast: LocalCluster) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession() as s:
        yield Http(s, fast.url)


async def _running(http: Http, name: str) -> dict[str, Any] | None:
    p = (await http.get(f"{PODS}/{name}")).body
    return p if (p.get("status") or {}).get("phase") == "Running" else None


async def test_nodes_register_with_addresses_endpoint_and_renewed_leases(fast: LocalCluster, fhttp: Http) -> None:
    node = (await fhttp.get("/api/v1/nodes/local-node-1")).body
    st = node["status"]
    assert st["addresses"] == [
        {"type": "InternalIP", "address": fast.node_ips["local-node-1"]},
        {"type": "Hostname", "address": "local-node-1"},
    ]
    assert st["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
    assert st["allocatable"] == st["capacity"] and st["nodeInfo"]["kubeletVersion"] == f"v{KUBERNETES_VERSION}"
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["lastHeartbeatTime"]
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/local-node-1"
    lease = (await fhttp.get(path)).body
    assert lease["spec"]["leaseDurationSeconds"] == 40 and lease["spec"]["holderIdentity"] == "local-node-1"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    first = lease["spec"]["renewTime"]

    async def renewed() -> bool:
        return bool((await fhttp.get(path)).body["spec"]["renewTime"] != first)

    await eventually(renewed, timeout=5)

    # A heartbeat renews the Lease and then re-posts the node's status: under load the test can look between
    # the two writes, so it waits for both.
    async def agent_wrote_both() -> bool:
        writes = {
            (r.resource, r.subresource)
            for r in fast.request_log.records
            if r.user_agent == USER_AGENT and r.verb == "patch"
        }
        return writes >= {("leases", ""), ("nodes", "status")}

    await eventually(agent_wrote_both, timeout=5)

    # A lost node stops renewing; a restored one renews again.
    await fast.lose_node("local-node-1")
    stopped = (await fhttp.get(path)).body["spec"]["renewTime"]
    await asyncio.sleep(0.6)  # three renew intervals: absence of writes can only be shown over time
    assert (await fhttp.get(path)).body["spec"]["renewTime"] == stopped
    await fast.restore_node("local-node-1")
    node = (await fhttp.get("/api/v1/nodes/local-node-1")).body
    assert next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"
    assert not node["spec"].get("taints")


async def test_status_only_through_the_status_subresource_and_deletion_confirmed(
    fast: LocalCluster, fhttp: Http
) -> None:
    fast.request_log.clear()
    await fhttp.post(PODS, pod("st", restartPolicy="Never"))
    p = await eventually(lambda: _running(fhttp, "st"))
    assert p["status"]["podIP"].startswith(("198.19.", "127."))
    mine = [r for r in fast.request_log.records if r.user_agent == USER_AGENT and r.resource == "pods"]
    assert mine and all(r.subresource == "status" for r in mine if r.verb in ("patch", "update"))
    assert not [r for r in mine if r.verb in ("update", "patch") and r.subresource == ""]
    # Graceful deletion: the user's DELETE leaves the pod terminating; the agent reports and confirms.
    r = await fhttp.delete(f"{PODS}/st")
    assert r.status == 200 and r.body["metadata"]["deletionTimestamp"]  # the real server answers 200 too

    async def gone() -> bool:
        return (await fhttp.get(f"{PODS}/st")).status == 404

    await eventually(gone)
    confirms = [
        r
        for r in fast.request_log.records
        if r.user_agent == USER_AGENT and r.verb == "delete" and r.resource == "pods" and r.name == "st"
    ]
    assert [r.status for r in confirms] == [200]
    events = (await fhttp.get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dst")).body
    killing = [e for e in events["items"] if e["reason"] == "Killing"]
    assert killing and killing[0]["source"] == {"component": "kubelet", "host": p["spec"]["nodeName"]}


async def test_log_parameters_through_the_api_server(fast: LocalCluster, fhttp: Http) -> None:
    ann = {"local.kubedl.io/exit-code": "1", "local.kubedl.io/run-seconds": "0.3"}
    await fhttp.post(PODS, pod("lg", annotations=ann, restartPolicy="OnFailure"))

    async def restarted() -> bool:
        p = (await fhttp.get(f"{PODS}/lg")).body
        return any(c.get("restartCount", 0) >= 1 for c in (p.get("status") or {}).get("containerStatuses") or [])

    await eventually(restarted)
    full = (await fhttp.get(f"{PODS}/lg/log")).body
    assert "restarted" in full
    prev = (await fhttp.get(f"{PODS}/lg/log?previous=true")).body
    assert prev.splitlines()[-1].endswith("exiting with code 1")
    assert (await fhttp.get(f"{PODS}/lg/log?previous=true&tailLines=1")).body.count("\n") == 1
    stamped = (await fhttp.get(f"{PODS}/lg/log?previous=true&timestamps=true")).body.splitlines()[0]
    assert stamped.split(" ", 1)[0].endswith("Z") and "[simulated]" in stamped
    limited = (await fhttp.get(f"{PODS}/lg/log?previous=true&limitBytes=5")).body
    assert limited == prev[:5]
    assert (await fhttp.get(f"{PODS}/lg/log?previous=true&sinceTime=2999-01-01T00:00:00Z")).body is None  # empty
    assert (await fhttp.get(f"{PODS}/lg/log?previous=true&sinceSeconds=3600")).body == prev
    assert (await fhttp.get(f"{PODS}/lg/log?tailLines=-1")).status == 422
    assert (await fhttp.get(f"{PODS}/lg/log?sinceSeconds=5&sinceTime=2020-01-01T00:00:00Z")).status == 422
    assert (await fhttp.get(f"{PODS}/lg/log?container=nope")).status == 400
    # follow streams until the instance exits (the next restart ends it)
    started = time.monotonic()
    async with aiohttp.ClientSession() as s, s.get(f"{fast.url}{PODS}/lg/log?follow=true&tailLines=0") as resp:
        followed = (await resp.read()).decode()
    assert time.monotonic() - started < 5 and "exiting with code 1" in followed
    # A pod nobody scheduled has no log: 204 No Content, as on a real API server (a nil log location).
    await fhttp.patch("/api/v1/nodes/local-node-0", {"spec": {"unschedulable": True}})
    await fhttp.patch("/api/v1/nodes/local-node-1", {"spec": {"unschedulable": True}})
    await fhttp.post(PODS, pod("nowhere"))
    r = await fhttp.get(f"{PODS}/nowhere/log")
    assert (r.status, r.body) == (204, None)


async def test_kubelet_endpoint_requires_a_client_certificate_of_the_cluster_ca(
    fast: LocalCluster, fhttp: Http
) -> None:
    await fhttp.post(PODS, pod("tls"))
    p = await eventually(lambda: _running(fhttp, "tls"))
    node = (await fhttp.get(f"/api/v1/nodes/{p['spec']['nodeName']}")).body
    ip = node["status"]["addresses"][0]["address"]
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    url = f"https://{ip}:{port}/containerLogs/default/tls/main"
    anonymous = pki.client_context(None)
    async with aiohttp.ClientSession() as s:
        with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
            async with s.get(url, ssl=anonymous) as r:
                await r.read()
        stranger = pki.CertificateAuthority("someone-else").issue("intruder", client=True)
        with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
            async with s.get(url, ssl=pki.client_context(stranger)) as r:
                await r.read()
        trusted = pki.client_context(fast.kubelet_client)
        async with s.get(url, ssl=trusted) as r:
            assert r.status == 200 and "started" in await r.text()
        async with s.get(f"https://{ip}:{port}/containerLogs/default/nope/main", ssl=trusted) as r:
            assert r.status == 404
        async with s.get(f"https://{ip}:{port}/containerLogs/default/tls/other", ssl=trusted) as r:
            assert r.status == 404


async def test_token_request_and_service_account_volume(fast: LocalCluster, fhttp: Http) -> None:
    cluster, http = fast, fhttp

    async def has_sa() -> bool:
        return (await http.get("/api/v1/namespaces/default/serviceaccounts/default")).status == 200

    await eventually(has_sa)
    tr = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    r = await http.post("/api/v1/namespaces/default/serviceaccounts/default/token", tr)
    assert r.status == 201 and r.body["status"]["token"].count(".") == 2 and r.body["status"]["expirationTimestamp"]
    short = {"spec": {"expirationSeconds": 60}}
    assert (await http.post("/api/v1/namespaces/default/serviceaccounts/default/token", short)).status == 422
    assert (await http.post("/api/v1/namespaces/default/serviceaccounts/nobody/token", tr)).status == 404
    created = (await http.post(PODS, pod("sa"))).body
    vol = next(v for v in created["spec"]["volumes"] if v["name"].startswith("kube-api-access-"))
    assert [next(iter(s)) for s in vol["projected"]["sources"]] == ["serviceAccountToken", "configMap", "downwardAPI"]
    mount = created["spec"]["containers"][0]["volumeMounts"][0]
    assert mount == {
        "name": vol["name"],
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        "readOnly": True,
    }
    off = (await http.post(PODS, pod("nosa", automountServiceAccountToken=False))).body
    assert not off["spec"].get("volumes")
    ca = (await http.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")).body
    assert ca["data"]["ca.crt"] == cluster.ca.cert_pem.decode()


@pytest.mark.parametrize(
    ("runtime", "restarts_whole"),
    [("simulated://1.0", True), ("process://1.0", True), ("podman+process://1.0", True), ("unknown://0", False)],
)
def test_the_runtimes_that_restart_a_pod_whole_declare_it(runtime: str, restarts_whole: bool) -> None:
    node = NodeSpec("n", "127.0.0.1", runtime_version=runtime)
    assert declared_features(node) == [EXEC_WEBSOCKETS, *([RESTART_ALL_CONTAINERS] if restarts_whole else [])]
    older = NodeSpec("n", "127.0.0.1", runtime_version=runtime, labels={UNDECLARE_LABEL: RESTART_ALL_CONTAINERS})
    assert declared_features(older) == [EXEC_WEBSOCKETS]
