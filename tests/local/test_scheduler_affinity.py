"""The scheduler's inter-pod affinity (as kube-scheduler's InterPodAffinity) and extended-resource fit on a
cluster of two network blocks: local-node-0/1 in block a, local-node-2/3 in block b."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from kubedl_local import LocalCluster
from tests.local.conftest import Http, eventually, pod

PODS = "/api/v1/namespaces/default/pods"
BLOCK = "network.kubedl.io/block"
BLOCKS = [{BLOCK: "a"}, {BLOCK: "a"}, {BLOCK: "b"}, {BLOCK: "b"}]
BLOCK_OF = {f"local-node-{i}": labels[BLOCK] for i, labels in enumerate(BLOCKS)}


@pytest.fixture
async def blocks() -> AsyncIterator[Http]:
    resources = [{"rdma/hca": "1"}, {}, {}, {"rdma/hca": "1"}]
    async with (
        LocalCluster(nodes=4, node_labels=BLOCKS, node_resources=resources) as cluster,
        aiohttp.ClientSession() as session,
    ):
        yield Http(session, cluster.url)


def term(labels: dict[str, str], key: str = BLOCK, **extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key, **extra}


def affinity(kind: str = "podAffinity", required: list[Any] | None = None, preferred: list[Any] | None = None) -> Any:
    section: dict[str, Any] = {}
    if required is not None:
        section["requiredDuringSchedulingIgnoredDuringExecution"] = required
    if preferred is not None:
        section["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {kind: section}


async def node_of(http: Http, name: str) -> str:
    async def bound() -> str | None:
        r = await http.get(f"{PODS}/{name}")
        node: str | None = r.body["spec"].get("nodeName")
        return node

    result: str = await eventually(bound)
    return result


async def unschedulable(http: Http, name: str) -> str:
    async def message() -> str | None:
        r = await http.get(f"{PODS}/{name}")
        assert not r.body["spec"].get("nodeName"), f"{name} was bound to {r.body['spec'].get('nodeName')}"
        for cond in r.body["status"].get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                found: str = cond["message"]
                return found
        return None

    result: str = await eventually(message)
    return result


async def test_required_affinity_packs_a_group_into_the_first_pods_block(blocks: Http) -> None:
    # The first pod matches its own term and no other pod does: it may go anywhere (least loaded: node-0).
    group = {"job": "g1"}
    rule = affinity(required=[term(group)])
    names = [f"g1-{i}" for i in range(4)]
    for name in names:
        await blocks.post(PODS, pod(name, labels=group, affinity=rule))
    nodes = [await node_of(blocks, name) for name in names]
    assert {BLOCK_OF[n] for n in nodes} == {"a"}
    assert len(set(nodes)) == 2  # spread over both nodes of the block, least loaded first
    # A pod whose required term matches existing pods only in block a, but which does not match its own
    # term, is not a "first pod": it still must join block a.
    await blocks.post(PODS, pod("follower", labels={"job": "other"}, affinity=rule))
    assert BLOCK_OF[await node_of(blocks, "follower")] == "a"


async def test_required_affinity_without_matches_and_without_self_match_waits(blocks: Http) -> None:
    rule = affinity(required=[term({"job": "nobody"})])
    await blocks.post(PODS, pod("lonely", labels={"job": "x"}, affinity=rule))
    message = await unschedulable(blocks, "lonely")
    assert message == "0/4 nodes are available: 4 node(s) didn't match pod affinity rules."


async def test_required_affinity_needs_the_topology_label_on_the_node(blocks: Http) -> None:
    rule = affinity(required=[term({"job": "g"}, key="no-such-label")])
    await blocks.post(PODS, pod("unlabelled", labels={"job": "g"}, affinity=rule))
    assert "4 node(s) didn't match pod affinity rules" in await unschedulable(blocks, "unlabelled")


async def test_match_expressions_and_namespaces(blocks: Http) -> None:
    await blocks.post(PODS, pod("anchor", labels={"tier": "db"}, nodeName="local-node-3"))
    expr = {"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db", "cache"]}]}}
    rule = affinity(required=[{**expr, "topologyKey": BLOCK}])
    await blocks.post(PODS, pod("near-db", affinity=rule))
    assert BLOCK_OF[await node_of(blocks, "near-db")] == "b"
    # The same term limited to another namespace finds no pod, and near-db2 does not match itself.
    elsewhere = affinity(required=[{**expr, "topologyKey": BLOCK, "namespaces": ["other"]}])
    await blocks.post(PODS, pod("near-db2", affinity=elsewhere))
    assert "didn't match pod affinity rules" in await unschedulable(blocks, "near-db2")
    # An empty namespaceSelector means every namespace.
    everywhere = affinity(required=[{**expr, "topologyKey": BLOCK, "namespaceSelector": {}}])
    await blocks.post(PODS, pod("near-db3", affinity=everywhere))
    assert BLOCK_OF[await node_of(blocks, "near-db3")] == "b"


async def test_preferred_affinity_packs_and_anti_affinity_spreads(blocks: Http) -> None:
    group = {"job": "p"}
    rule = affinity(preferred=[{"weight": 100, "podAffinityTerm": term(group)}])
    names = [f"p-{i}" for i in range(4)]
    for name in names:
        await blocks.post(PODS, pod(name, labels=group, affinity=rule))
    assert {BLOCK_OF[await node_of(blocks, name)] for name in names} == {"a"}
    # Without affinity the least-loaded choice goes to block b's empty nodes.
    await blocks.post(PODS, pod("plain"))
    assert BLOCK_OF[await node_of(blocks, "plain")] == "b"
    # Required anti-affinity to the group: only block b will do, and symmetric: a pod of a group that
    # declares required anti-affinity to "plain" keeps away from plain's block.
    await blocks.post(PODS, pod("anti", affinity=affinity("podAntiAffinity", required=[term(group)])))
    assert BLOCK_OF[await node_of(blocks, "anti")] == "b"
    avoid = affinity("podAntiAffinity", required=[term({"role": "loner"})])
    await blocks.post(PODS, pod("loner-guard", labels={"role": "guard"}, affinity=avoid, nodeName="local-node-2"))
    await blocks.post(PODS, pod("loner", labels={"role": "loner"}))
    assert BLOCK_OF[await node_of(blocks, "loner")] == "a"


async def test_hostname_anti_affinity_fills_every_node_then_waits(blocks: Http) -> None:
    group = {"app": "one-per-node"}
    rule = affinity("podAntiAffinity", required=[term(group, key="kubernetes.io/hostname")])
    for i in range(5):
        await blocks.post(PODS, pod(f"spread-{i}", labels=group, affinity=rule))
    nodes = {await node_of(blocks, f"spread-{i}") for i in range(4)}
    assert len(nodes) == 4
    assert "4 node(s) didn't match pod anti-affinity rules" in await unschedulable(blocks, "spread-4")


async def test_extended_resource_lands_only_where_it_exists(blocks: Http) -> None:
    wants = {"resources": {"limits": {"rdma/hca": "1"}}}
    for i in range(3):
        await blocks.post(PODS, pod(f"rdma-{i}", containers=[{"name": "main", "image": "busybox", **wants}]))
    nodes = {await node_of(blocks, f"rdma-{i}") for i in range(2)}
    assert nodes == {"local-node-0", "local-node-3"}
    assert "Insufficient rdma/hca" in await unschedulable(blocks, "rdma-2")


async def test_limits_default_requests_key_by_key() -> None:
    """A limit without a request becomes the request for that resource, also when other requests exist."""
    from kubedl_local import LocalCluster
    from kubedl_py.kube.client import KubeClient
    from kubedl_py.kube.resources import PODS

    async with LocalCluster(nodes=1) as cluster, KubeClient(configuration=cluster.configuration) as kube:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "nvidia.com/gpu": "1"}},
                    }
                ]
            },
        }
        created = await kube.create(PODS, pod, namespace="default")
        resources = created["spec"]["containers"][0]["resources"]
        assert resources["requests"] == {"cpu": "1", "nvidia.com/gpu": "1"}
