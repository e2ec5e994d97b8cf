"""Field ownership and what clients beyond kubectl get/apply rely on: server-side apply by controllers (on
objects and on /status), managedFields of plain updates, the access reviews, EndpointSlices, aggregated
discovery of the core group, protobuf-only clients, read-only quotas."""

from __future__ import annotations

from typing import Any

from kubedl_local.apiserver import protobuf
from tests.differential.cases.common import configmap, core, grouped, make, pod, pytorchjob, run_pod, service
from tests.differential.harness import Tier, case

APPLY_CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}}


def _managers(body: Any) -> Any:
    """managedFields without their times (who, how, which fields)."""
    if not isinstance(body, dict) or body.get("kind") == "Status":
        return body
    return [{k: v for k, v in e.items() if k != "time"} for e in body["metadata"].get("managedFields") or []]


@case("http-apply-service-ports-by-key")
async def _(t: Tier) -> None:
    """Two managers apply ports of one Service: the list merges by port and protocol; the first stops
    applying a port and only that one goes."""

    def svc(*ports: int) -> dict[str, Any]:
        body = service("s", [{"name": f"p{p}", "port": p} for p in ports], selector={"app": "s"})
        return body

    path = core(t, "services", "s")
    await t.patch(f"{path}?fieldManager=a", svc(80, 81), "apply", keep=lambda b: b["spec"]["ports"])
    await t.patch(f"{path}?fieldManager=b", svc(90), "apply", keep=lambda b: [p["port"] for p in b["spec"]["ports"]])
    await t.patch(f"{path}?fieldManager=a", svc(80), "apply", keep=lambda b: [p["port"] for p in b["spec"]["ports"]])
    await t.get(path, keep=_managers, managed_fields=True)


@case("http-apply-options-and-errors")
async def _(t: Tier) -> None:
    """What apply refuses: no fieldManager, force on a merge patch, a wrong kind, managedFields in the
    configuration; a conflict's 409 body with its causes."""
    path = core(t, "configmaps", "app")
    await t.patch(path, {**APPLY_CM, "data": {"a": "1"}}, "apply")
    await t.patch(f"{path}?fieldManager=m&force=true", {"data": {"a": "1"}})
    await t.patch(f"{path}?fieldManager=m", {**APPLY_CM, "kind": "Secret"}, "apply")
    managed = {**APPLY_CM, "metadata": {"name": "app", "managedFields": [{"manager": "x"}]}}
    await t.patch(f"{path}?fieldManager=m", managed, "apply")
    await t.patch(f"{path}?fieldManager=alice", {**APPLY_CM, "data": {"a": "1", "b": "2"}}, "apply", keep=False)
    await t.patch(f"{path}?fieldManager=bob", {**APPLY_CM, "data": {"a": "9", "b": "8"}}, "apply")


@case("http-apply-status-subresource")
async def _(t: Tier) -> None:
    """A controller's status by server-side apply (/status, forced): the status changes, spec does not,
    and the entry names the subresource; an apply of the spec leaves the status alone."""
    await make(t, grouped(t, "pytorchjobs"), pytorchjob("j"))
    status = {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "status": {"conditions": [{"type": "Created", "status": "True", "reason": "JobCreated"}]},
    }
    path = grouped(t, "pytorchjobs", "j")
    await t.patch(
        f"{path}/status?fieldManager=controller&force=true",
        status,
        "apply",
        keep=lambda b: (b.get("status"), b["metadata"]["generation"]),
    )
    spec = {**status, "spec": {"backoffLimit": 3}}
    del spec["status"]
    await t.patch(
        f"{path}?fieldManager=user", spec, "apply", keep=lambda b: (b.get("status"), b["spec"]["backoffLimit"])
    )
    await t.get(path, keep=_managers, managed_fields=True)


@case("http-managed-fields-of-updates")
async def _(t: Tier) -> None:
    """Plain writes record their managers: a create, a merge patch by another, a PUT by a third (who takes
    over what it changed), a no-op patch that records nothing; managedFields: [] resets the record."""
    path = core(t, "configmaps")
    created = await t.post(f"{path}?fieldManager=maker", configmap("m", {"a": "1"}, labels={"x": "1"}), keep=False)
    await t.patch(core(t, "configmaps", "m", query="fieldManager=patcher"), {"data": {"b": "2"}}, keep=False)
    body = dict(created.body)
    body["metadata"] = {k: v for k, v in body["metadata"].items() if k not in ("resourceVersion", "managedFields")}
    body["data"] = {"a": "changed", "b": "2"}
    await t.put(core(t, "configmaps", "m", query="fieldManager=putter"), body, keep=_managers, managed_fields=True)
    await t.patch(core(t, "configmaps", "m", query="fieldManager=idle"), {"data": {"a": "changed"}}, keep=False)
    current = await t.get(core(t, "configmaps", "m"), keep=_managers, managed_fields=True)
    reset = dict(current.body)
    reset["metadata"] = {**current.body["metadata"], "managedFields": []}
    await t.put(core(t, "configmaps", "m", query="fieldManager=resetter"), reset, keep=_managers, managed_fields=True)


@case("http-access-reviews")
async def _(t: Tier) -> None:
    """The access reviews a controller or webhook makes: the administrator may create pods and read
    /healthz; a review naming neither attribute kind, and a local review for another namespace, are 422s."""
    ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"}
    await t.post(ssar, {**body, "spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}})
    await t.post(ssar, {**body, "spec": {}})
    sar = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "kubernetes-admin",
            "groups": ["system:masters"],
            "resourceAttributes": {"namespace": t.ns, "verb": "delete", "resource": "pods"},
        },
    }
    await t.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", sar, keep=lambda b: b.get("status"))
    local = {**sar, "kind": "LocalSubjectAccessReview"}
    local["spec"] = {**sar["spec"], "resourceAttributes": {"namespace": "elsewhere", "verb": "get", "resource": "pods"}}
    await t.post(f"/apis/authorization.k8s.io/v1/namespaces/{t.ns}/localsubjectaccessreviews", local)
    await t.get(ssar)


@case("http-endpointslices-of-a-service", nodes=True)
async def _(t: Tier) -> None:
    """The EndpointSlice of a Service: empty before any pod, then the running pod with its conditions and
    the resolved port; labels, owner and address type as the EndpointSlice controller writes them."""
    await make(
        t, core(t, "services"), service("web", [{"name": "h", "port": 80, "targetPort": 8080}], selector={"app": "w"})
    )
    slices = (
        f"/apis/discovery.k8s.io/v1/namespaces/{t.ns}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dweb"
    )

    def summary(body: Any) -> Any:
        return [
            {
                "generateName": s["metadata"].get("generateName"),
                "labels": s["metadata"].get("labels"),
                "owner": [
                    (o["kind"], o["name"], o.get("controller")) for o in s["metadata"].get("ownerReferences") or []
                ],
                "addressType": s.get("addressType"),
                "ports": s.get("ports"),
                "endpoints": [
                    (e.get("conditions"), (e.get("targetRef") or {}).get("name")) for e in s.get("endpoints") or []
                ],
            }
            for s in body["items"]
        ]

    await t.poll(slices, lambda r: bool(r.body.get("items")), keep=summary)
    await run_pod(t, pod("w0", labels={"app": "w"}))

    def ready(r: Any) -> bool:
        eps = [e for s in r.body.get("items") or [] for e in s.get("endpoints") or []]
        return bool(eps) and all((e.get("conditions") or {}).get("ready") for e in eps)

    await t.poll(slices, ready, keep=summary)


@case("discovery-aggregated-core")
async def _(t: Tier) -> None:
    """Aggregated discovery of the core group (kubectl's first request): the entries of the kinds the
    embedded server serves, with the subresources it serves."""
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    served = {"pods", "services", "configmaps", "secrets", "serviceaccounts", "namespaces", "nodes", "events"}

    # subresources the embedded server serves (exec, attach, proxy... are compared in discovery-core-all-kinds)
    subresources = {"status", "log", "binding", "eviction", "ephemeralcontainers", "token", "finalize"}

    def ours(b: Any) -> Any:
        resources = b["items"][0]["versions"][0]["resources"]
        out = []
        for r in resources:
            if r["resource"] in served:
                subs = [s for s in r.get("subresources") or [] if s["subresource"] in subresources]
                out.append({**r, "subresources": subs})
        return out

    await t.get("/api", headers={"Accept": accept}, keep=ours)


@case("http-protobuf-only-client")
async def _(t: Tier) -> None:
    """A client that takes only protobuf: a ConfigMap and a list of them come in protobuf (decoded here), a
    custom resource is a 406 whose Status is protobuf too."""
    await make(t, core(t, "configmaps"), configmap("p", {"k": "v"}))
    table = protobuf.ensure_table()
    accept = {"Accept": protobuf.CONTENT_TYPE}
    one = await t.get(core(t, "configmaps", "p"), headers=accept, keep=False)
    t.note("decoded", protobuf.decode(one.raw, table))
    listed = await t.get(core(t, "configmaps"), headers=accept, keep=False)
    t.note("decoded list", sorted(i["metadata"]["name"] for i in protobuf.decode(listed.raw, table)["items"]))
    jobs = await t.get(grouped(t, "pytorchjobs"), headers=accept, keep=False)
    t.note("decoded status", protobuf.decode(jobs.raw, table))


@case("kubectl-get-quotas-and-limit-ranges")
async def _(t: Tier) -> None:
    """kubectl get of ResourceQuotas and LimitRanges in a namespace that has none."""
    await t.kubectl("get", "resourcequotas")
    await t.kubectl("get", "limitranges")
