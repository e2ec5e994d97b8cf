"""The endpoints controller: Services resolve to their ready pods with targetPort resolved."""

from __future__ import annotations

from typing import Any

from tests.local.conftest import Http, eventually, pod

NS = "/api/v1/namespaces/default"


async def endpoints(http: Http, name: str) -> dict[str, Any] | None:
    r = await http.get(f"{NS}/endpoints/{name}")
    return r.body if r.status == 200 else None


async def test_endpoints_follow_pods(http: Http) -> None:
    await http.post(
        f"{NS}/services",
        {
            "metadata": {"name": "svc"},
            "spec": {"selector": {"app": "a"}, "ports": [{"name": "http", "port": 80, "targetPort": "web"}]},
        },
    )
    for i in range(2):
        p = pod(f"a{i}", labels={"app": "a"})
        p["spec"]["containers"][0]["ports"] = [{"name": "web", "containerPort": 8080 + i}]
        await http.post(f"{NS}/pods", p)
    await http.post(f"{NS}/pods", pod("other", labels={"app": "b"}))

    async def two_ready() -> dict[str, Any] | None:
        ep = await endpoints(http, "svc")
        if ep is None:
            return None
        addrs = [a for s in ep.get("subsets") or [] for a in s.get("addresses") or []]
        return ep if len(addrs) == 2 else None

    ep = await eventually(two_ready)
    got = sorted((s["ports"][0]["port"], s["addresses"][0]["targetRef"]["name"]) for s in ep["subsets"])
    assert got == [(8080, "a0"), (8081, "a1")]
    assert ep["subsets"][0]["ports"][0]["name"] == "http"
    await http.delete(f"{NS}/pods/a0")

    async def one_left() -> bool:
        e = await endpoints(http, "svc")
        return e is not None and [
            a["targetRef"]["name"] for s in e.get("subsets") or [] for a in s.get("addresses") or []
        ] == ["a1"]

    await eventually(one_left)
    await http.delete(f"{NS}/services/svc")

    async def removed() -> bool:
        return await endpoints(http, "svc") is None

    await eventually(removed)


async def slices(http: Http, service: str) -> list[dict[str, Any]]:
    selector = f"kubernetes.io/service-name%3D{service}"
    r = await http.get(f"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector={selector}")
    items: list[dict[str, Any]] = r.body["items"]
    return items


async def test_endpoint_slices_follow_pods(http: Http) -> None:
    svc = await http.post(
        f"{NS}/services",
        {"metadata": {"name": "web"}, "spec": {"selector": {"app": "w"}, "ports": [{"name": "h", "port": 80}]}},
    )
    # No pod yet: one slice with neither endpoints nor ports, owned by the Service.
    empty = await eventually(lambda: slices(http, "web"))
    assert len(empty) == 1 and empty[0]["endpoints"] is None and empty[0]["ports"] is None
    md = empty[0]["metadata"]
    assert md["name"].startswith("web-") and md["labels"]["endpointslice.kubernetes.io/managed-by"] == (
        "endpointslice-controller.k8s.io"
    )
    assert md["ownerReferences"][0]["uid"] == svc.body["metadata"]["uid"]
    await http.post(f"{NS}/pods", pod("w0", labels={"app": "w"}))

    async def ready() -> list[dict[str, Any]] | None:
        found = await slices(http, "web")
        eps = [e for s in found for e in s.get("endpoints") or []]
        return found if len(eps) == 1 and eps[0]["conditions"]["ready"] else None

    full = await eventually(ready)
    assert len(full) == 1 and full[0]["metadata"]["name"] == md["name"]  # the same slice, updated
    assert full[0]["ports"] == [{"name": "h", "protocol": "TCP", "port": 80}]
    endpoint = full[0]["endpoints"][0]
    assert endpoint["targetRef"]["name"] == "w0" and endpoint["conditions"] == {
        "ready": True,
        "serving": True,
        "terminating": False,
    }
    await http.delete(f"{NS}/services/web")

    async def gone() -> bool:
        return not await slices(http, "web")

    await eventually(gone)
