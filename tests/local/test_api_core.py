"""CRUD, metadata bookkeeping, errors, concurrency, patches and selectors of the embedded API server."""

from __future__ import annotations

from typing import Any

from kubedl_local import LocalCluster
from tests.local.conftest import Http, eventually, pod

PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"


def cm(name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if labels:
        md["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data or {"k": "v"}}


async def test_discovery_documents(http: Http) -> None:
    assert (await http.get("/version")).body["major"] == "1"
    assert (await http.get("/api")).body["versions"] == ["v1"]
    core = (await http.get("/api/v1")).body
    names = {r["name"] for r in core["resources"]}
    assert {
        "pods",
        "pods/status",
        "pods/log",
        "pods/binding",
        "services",
        "services/status",
        "events",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "nodes",
        "nodes/status",
        "namespaces",
    } <= names
    groups = {g["name"] for g in (await http.get("/apis")).body["groups"]}
    assert {"coordination.k8s.io", "apiextensions.k8s.io"} <= groups
    g = (await http.get("/apis/coordination.k8s.io")).body
    assert g["kind"] == "APIGroup" and g["preferredVersion"]["version"] == "v1"
    leases = (await http.get("/apis/coordination.k8s.io/v1")).body
    assert [r["name"] for r in leases["resources"]] == ["leases"]
    assert (await http.get("/apis/nope.example.com")).status == 404


async def test_create_sets_metadata_and_rv_is_cluster_wide(http: Http) -> None:
    a = (await http.post(CMS, cm("a"))).body
    b = (await http.post(PODS, pod("p"))).body
    assert a["metadata"]["uid"] and a["metadata"]["creationTimestamp"].endswith("Z")
    assert isinstance(a["metadata"]["resourceVersion"], str)
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    gen = (await http.post(CMS, {"metadata": {"generateName": "gen-"}, "data": {}})).body
    assert gen["metadata"]["name"].startswith("gen-") and len(gen["metadata"]["name"]) == 9
    got = await http.get(f"{CMS}/a")
    assert got.body == a


async def test_errors_are_status_objects(http: Http) -> None:
    r = await http.get(f"{CMS}/missing")
    assert r.status == 404 and r.body["kind"] == "Status" and r.body["reason"] == "NotFound"
    assert r.body["details"] == {"name": "missing", "kind": "configmaps"} and r.body["status"] == "Failure"
    await http.post(CMS, cm("dup"))
    r = await http.post(CMS, cm("dup"))
    assert (r.status, r.body["reason"]) == (409, "AlreadyExists")
    r = await http.post(CMS, raw=b"{not json")
    assert (r.status, r.body["reason"]) == (400, "BadRequest")
    r = await http.post(CMS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})
    assert r.status == 400
    r = await http.post(CMS, {"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    assert r.status == 400
    r = await http.post("/api/v1/namespaces/nope/configmaps", cm("x"))
    assert (r.status, r.body["details"]["kind"]) == (404, "namespaces")
    r = await http.request("PUT", CMS, cm("x"))
    assert (r.status, r.body["reason"]) == (405, "MethodNotAllowed")
    r = await http.post(CMS, cm("Bad_Name"))
    assert (r.status, r.body["reason"]) == (422, "Invalid")
    assert r.body["details"]["causes"][0]["field"] == "metadata.name"
    big = cm("big", {"blob": "x" * 1_600_000})
    r = await http.post(CMS, big)
    # validation (at most 1 MiB of data) comes before the storage's size limit, as on the real server
    assert (r.status, r.body["reason"]) == (422, "Invalid")
    assert r.body["details"]["causes"][0]["reason"] == "FieldValueTooLong"
    r = await http.post(CMS, raw=b"{" + b" " * 4_000_000 + b"}")
    assert r.status == 413
    r = await http.get(f"{PODS}?labelSelector=a%20in%20(")
    assert r.status == 400
    r = await http.get(f"{PODS}?fieldSelector=spec.bogus%3Dx")
    assert (r.status, r.body["message"]) == (400, "field label not supported: spec.bogus")
    r = await http.post(PODS, {"metadata": {"name": "nocont"}, "spec": {"containers": []}})
    assert r.status == 422 and r.body["details"]["causes"][0]["field"] == "spec.containers"
    r = await http.post(PODS, {"metadata": {"name": "noimg"}, "spec": {"containers": [{"name": "c"}]}})
    assert r.status == 422 and r.body["details"]["causes"][0]["field"] == "spec.containers[0].image"
    r = await http.get("/api/v1/namespaces/default/nothings")
    assert r.status == 404


async def test_put_optimistic_concurrency_and_noop(http: Http) -> None:
    a = (await http.post(CMS, cm("a"))).body
    a["data"] = {"k": "v2"}
    b = (await http.put(f"{CMS}/a", a)).body
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    stale = await http.put(f"{CMS}/a", a)  # a still carries the old resourceVersion
    assert (stale.status, stale.body["reason"]) == (409, "Conflict")
    same = (await http.put(f"{CMS}/a", b)).body
    assert same["metadata"]["resourceVersion"] == b["metadata"]["resourceVersion"]  # no-op: no new rv
    del b["metadata"]["resourceVersion"]
    b["data"] = {"k": "v3"}
    assert (await http.put(f"{CMS}/a", b)).status == 200  # unconditional update allowed for core kinds
    r = await http.put(f"{CMS}/other", cm("a"))
    assert r.status == 400  # name mismatch
    r = await http.put(f"{CMS}/ghost", cm("ghost"))
    assert r.status == 404


async def test_patch_flavours(http: Http) -> None:
    await http.post(PODS, pod("p", labels={"a": "1"}, volumes=[{"name": "v", "emptyDir": {}}]))
    r = await http.patch(f"{PODS}/p", {"metadata": {"labels": {"b": "2", "a": None}}})
    assert r.body["metadata"]["labels"] == {"b": "2"}
    r = await http.patch(
        f"{PODS}/p",
        [
            {"op": "add", "path": "/metadata/annotations", "value": {"x/y": "z"}},
            {"op": "test", "path": "/metadata/labels/b", "value": "2"},
        ],
        content_type="application/json-patch+json",
    )
    assert r.body["metadata"]["annotations"] == {"x/y": "z"}
    r = await http.patch(
        f"{PODS}/p",
        [{"op": "test", "path": "/metadata/labels/b", "value": "nope"}],
        content_type="application/json-patch+json",
    )
    assert r.status == 422
    r = await http.patch(
        f"{PODS}/p",
        {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}},
        content_type="application/strategic-merge-patch+json",
    )
    c = r.body["spec"]["containers"]
    assert len(c) == 1 and c[0]["image"] == "busybox:2" and c[0]["terminationMessagePath"]  # merged by name
    r = await http.patch(
        f"{PODS}/p",
        {"spec": {"containers": [{"name": "main", "image": "x", "$patch": "delete"}]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert r.status == 422  # deleting the only container is both a change of containers and invalid

    # The node agent writes the pod's status while it starts: let it settle before a precondition on its version.
    async def settled() -> bool:
        return bool((await http.get(f"{PODS}/p")).body["status"].get("phase") == "Running")

    await eventually(settled)
    rv = (await http.get(f"{PODS}/p")).body["metadata"]["resourceVersion"]
    r = await http.patch(f"{PODS}/p", {"metadata": {"resourceVersion": "1", "labels": {"c": "3"}}})
    assert (r.status, r.body["reason"]) == (409, "Conflict")
    r = await http.patch(f"{PODS}/p", {"metadata": {"resourceVersion": rv, "labels": {"c": "3"}}})
    assert r.status == 200
    r = await http.patch(f"{PODS}/p", {"x": 1}, content_type="application/apply-patch+yaml")
    assert (r.status, r.body["details"]["causes"][0]["field"]) == (422, "fieldManager")  # apply needs a manager
    r = await http.patch(f"{PODS}/missing", {"metadata": {}})
    assert r.status == 404


async def test_strategic_merge_keys(http: Http) -> None:
    svc = {
        "metadata": {"name": "s"},
        "spec": {"selector": {"a": "b"}, "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]},
    }
    await http.post("/api/v1/namespaces/default/services", svc)
    r = await http.patch(
        "/api/v1/namespaces/default/services/s",
        {"spec": {"ports": [{"port": 81, "targetPort": 9000, "name": "b"}]}},
        content_type="application/strategic-merge-patch+json",
    )
    ports = {p["port"]: p for p in r.body["spec"]["ports"]}
    assert set(ports) == {80, 81} and ports[81]["targetPort"] == 9000
    base = pod("q")
    base["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    base["spec"]["containers"][0]["volumeMounts"] = [{"name": "v", "mountPath": "/a"}]
    base["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    await http.post(PODS, base)
    patch = {
        "$setElementOrder/containers": [{"name": "main"}],
        "spec": {"containers": [{"name": "main", "image": "busybox:3", "env": [{"name": "B", "$patch": "delete"}]}]},
    }
    r = await http.patch(f"{PODS}/q", patch, content_type="application/strategic-merge-patch+json")
    assert r.status == 422  # env is immutable on a pod: the merge happened, validation refused it
    assert "pod updates may not change fields" in r.body["message"]
    r = await http.patch(
        f"{PODS}/q", {"metadata": {"finalizers": ["a/b"]}}, content_type="application/strategic-merge-patch+json"
    )
    r = await http.patch(
        f"{PODS}/q", {"metadata": {"finalizers": ["c/d"]}}, content_type="application/strategic-merge-patch+json"
    )
    assert r.body["metadata"]["finalizers"] == ["a/b", "c/d"]


async def test_status_subresource_and_generation(http: Http) -> None:
    p = (await http.post(PODS, pod("g"))).body
    assert p["status"]["phase"] == "Pending" and p["metadata"]["generation"] == 1
    p2 = (await http.patch(f"{PODS}/g", {"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "y"}}})).body
    assert p2["status"]["phase"] != "Failed" and p2["metadata"]["labels"] == {"x": "y"}
    assert p2["metadata"]["generation"] == 1  # metadata-only change
    p3 = (await http.patch(f"{PODS}/g/status", {"status": {"message": "hi"}, "metadata": {"labels": {"x": "z"}}})).body
    # a pod's status strategy resets spec (and owner references), not labels: they change through /status too
    assert p3["status"]["message"] == "hi" and p3["metadata"]["labels"] == {"x": "z"}
    p4 = (await http.patch(f"{PODS}/g", {"spec": {"activeDeadlineSeconds": 100}})).body
    assert p4["metadata"]["generation"] == 2


async def test_list_selectors_and_pagination(http: Http) -> None:
    for i in range(7):
        await http.post(CMS, cm(f"c{i}", labels={"i": str(i), "even": str(i % 2 == 0).lower()}))

    async def names(q: str) -> list[str]:
        r = await http.get(f"{CMS}?{q}")
        assert r.status == 200, r.body
        return [o["metadata"]["name"] for o in r.body["items"]]

    assert await names("labelSelector=even%3Dtrue") == ["c0", "c2", "c4", "c6"]
    assert await names("labelSelector=even%3D%3Dtrue,i!%3D2") == ["c0", "c4", "c6"]
    assert await names("labelSelector=i%20in%20(1,3)") == ["c1", "c3"]
    assert await names("labelSelector=i%20notin%20(1,3),even%3Dfalse") == ["c5"]
    assert await names("labelSelector=i") == [f"c{i}" for i in range(7)]
    assert await names("labelSelector=!i") == []
    assert await names("fieldSelector=metadata.name%3Dc3") == ["c3"]
    assert await names("fieldSelector=metadata.name!%3Dc3,metadata.namespace%3D%3Ddefault") == [
        f"c{i}" for i in range(7) if i != 3
    ]
    page = (await http.get(f"{CMS}?limit=3")).body
    got = [o["metadata"]["name"] for o in page["items"]]
    while page["metadata"].get("continue"):
        page = (await http.get(f"{CMS}?limit=3&continue={page['metadata']['continue']}")).body
        got += [o["metadata"]["name"] for o in page["items"]]
    assert got == [f"c{i}" for i in range(7)]
    all_ns = (await http.get("/api/v1/configmaps")).body
    assert all_ns["kind"] == "ConfigMapList" and len(all_ns["items"]) == 7


async def test_pod_field_selectors(http: Http, cluster: LocalCluster) -> None:
    await http.post(PODS, pod("p1"))
    await http.post(PODS, pod("p2", schedulerName="nobody"))
    from tests.local.conftest import eventually

    async def running() -> bool:
        r = await http.get(f"{PODS}?fieldSelector=status.phase%3DRunning")
        return [o["metadata"]["name"] for o in r.body["items"]] == ["p1"]

    await eventually(running)
    r = await http.get(f"{PODS}?fieldSelector=spec.nodeName%3Dlocal-node-0")
    assert [o["metadata"]["name"] for o in r.body["items"]] == ["p1"]
    r = await http.get(f"{PODS}?fieldSelector=spec.nodeName%3D")
    assert [o["metadata"]["name"] for o in r.body["items"]] == ["p2"]
    r = await http.get(f"{PODS}?fieldSelector=status.phase!%3DRunning")
    assert [o["metadata"]["name"] for o in r.body["items"]] == ["p2"]


async def test_services_cluster_ip(http: Http) -> None:
    svcs = "/api/v1/namespaces/default/services"
    a = (
        await http.post(svcs, {"metadata": {"name": "a"}, "spec": {"ports": [{"port": 80, "targetPort": "http"}]}})
    ).body
    b = (await http.post(svcs, {"metadata": {"name": "b"}, "spec": {"ports": [{"port": 80}]}})).body
    assert a["spec"]["clusterIP"].startswith("127.1.") and a["spec"]["clusterIP"] != b["spec"]["clusterIP"]
    assert a["spec"]["ports"][0]["targetPort"] == "http" and b["spec"]["ports"][0]["targetPort"] == 80
    h = (await http.post(svcs, {"metadata": {"name": "h"}, "spec": {"clusterIP": "None", "selector": {"a": "b"}}})).body
    assert h["spec"]["clusterIP"] == "None"
    a["spec"]["clusterIP"] = "127.1.9.9"
    r = await http.put(f"{svcs}/a", a)
    assert r.status == 422 and r.body["details"]["causes"][0]["field"].startswith("spec.clusterIP")
    del a["spec"]["clusterIP"]
    del a["spec"]["clusterIPs"]
    a["metadata"].pop("resourceVersion")
    r = await http.put(f"{svcs}/a", a)
    assert (
        r.status == 200 and r.body["spec"]["clusterIP"] == b["spec"]["clusterIP"][:-1] + r.body["spec"]["clusterIP"][-1]
    )  # kept the allocated IP
    r = await http.post(svcs, {"metadata": {"name": "bad"}, "spec": {"ports": [{"port": 70000}]}})
    assert r.status == 422 and r.body["details"]["causes"][0]["field"] == "spec.ports[0].port"
    r = await http.post(
        svcs, {"metadata": {"name": "taken"}, "spec": {"clusterIP": b["spec"]["clusterIP"], "ports": [{"port": 1}]}}
    )
    assert r.status == 422


async def test_service_dry_run_reserves_nothing(cluster: LocalCluster, http: Http) -> None:
    svcs = "/api/v1/namespaces/default/services"
    spec = {"type": "NodePort", "ports": [{"port": 80}]}
    ips, ports = set(cluster.registry.ips.used), set(cluster.registry.node_ports)
    dry = await http.post(f"{svcs}?dryRun=All", {"metadata": {"name": "d"}, "spec": spec})
    assert dry.status == 201 and dry.body["spec"]["clusterIP"] and dry.body["spec"]["ports"][0]["nodePort"]
    assert cluster.registry.ips.used == ips and cluster.registry.node_ports == ports
    assert (await http.get(f"{svcs}/d")).status == 404
    explicit = {
        "type": "NodePort",
        "clusterIP": dry.body["spec"]["clusterIP"],
        "ports": [{"port": 80, "nodePort": 31000}],
    }
    assert (await http.post(f"{svcs}?dryRun=All", {"metadata": {"name": "e"}, "spec": explicit})).status == 201
    assert (await http.post(svcs, {"metadata": {"name": "e"}, "spec": explicit})).status == 201


async def test_service_explicit_node_port_is_reserved(http: Http) -> None:
    svcs = "/api/v1/namespaces/default/services"

    def svc(name: str, node_port: int | None = None) -> dict[str, Any]:
        port: dict[str, Any] = {"port": 80} if node_port is None else {"port": 80, "nodePort": node_port}
        return {"metadata": {"name": name}, "spec": {"type": "NodePort", "ports": [port]}}

    assert (await http.post(svcs, svc("a", 30000))).body["spec"]["ports"][0]["nodePort"] == 30000
    r = await http.post(svcs, svc("b", 30000))
    assert r.status == 422 and r.body["details"]["causes"][0] == {
        "reason": "FieldValueInvalid",
        "message": "Invalid value: 30000: provided port is already allocated",
        "field": "spec.ports[0].nodePort",
    }
    r = await http.post(svcs, svc("c", 80))
    assert r.status == 422 and "valid range" in r.body["details"]["causes"][0]["message"]
    assert (await http.post(svcs, svc("d"))).body["spec"]["ports"][0]["nodePort"] != 30000
    # the refused creates left nothing behind: the port comes free with "a"
    assert (await http.delete(f"{svcs}/a")).status == 200
    assert (await http.post(svcs, svc("b", 30000))).status == 201


async def test_service_update_to_node_port_allocates_and_back_releases(cluster: LocalCluster, http: Http) -> None:
    svcs = "/api/v1/namespaces/default/services"
    await http.post(svcs, {"metadata": {"name": "s"}, "spec": {"ports": [{"name": "http", "port": 80}]}})
    r = await http.patch(f"{svcs}/s", {"spec": {"type": "NodePort"}})
    assert r.status == 200
    np = r.body["spec"]["ports"][0]["nodePort"]
    assert 30000 <= np <= 32767 and np in cluster.registry.node_ports
    # a replace without the node port keeps it (matched by port name)
    body = r.body
    del body["spec"]["ports"][0]["nodePort"]
    assert (await http.put(f"{svcs}/s", body)).body["spec"]["ports"][0]["nodePort"] == np
    r = await http.patch(f"{svcs}/s", {"spec": {"type": "ClusterIP"}})
    assert r.status == 200 and "nodePort" not in r.body["spec"]["ports"][0]
    assert np not in cluster.registry.node_ports
