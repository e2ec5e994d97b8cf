"""Strict decoding, malformed bodies, and the Status bodies of 400/403/404/405/409/413/415/422."""

from __future__ import annotations

from tests.differential.cases.common import IMAGE, configmap, core, grouped, make, pod, pytorchjob
from tests.differential.harness import Tier, case

POD_WITH_UNKNOWN = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "foo": 1},
    "spec": {"bar": 2, "containers": [{"name": "c", "image": IMAGE, "baz": True}]},
    "qux": 3,
}


@case("decode-unknown-fields-strict")
async def _(t: Tier) -> None:
    """fieldValidation=Strict: unknown fields are a 400 listing them in document order."""
    await t.post(core(t, "pods", query="dryRun=All&fieldValidation=Strict"), POD_WITH_UNKNOWN)


@case("decode-unknown-fields-warn")
async def _(t: Tier) -> None:
    """fieldValidation=Warn (and no parameter): one Warning header per unknown field, the fields dropped."""
    await t.post(
        core(t, "pods", query="dryRun=All&fieldValidation=Warn"), POD_WITH_UNKNOWN, keep=lambda b: sorted(b["spec"])
    )
    await t.post(core(t, "pods", query="dryRun=All"), POD_WITH_UNKNOWN, keep=False)
    await t.post(core(t, "pods", query="dryRun=All&fieldValidation=Ignore"), POD_WITH_UNKNOWN, keep=False)
    await t.post(core(t, "pods", query="dryRun=All&fieldValidation=Loud"), POD_WITH_UNKNOWN)


@case("decode-duplicate-fields")
async def _(t: Tier) -> None:
    """Repeated keys in a JSON body: Strict refuses, Warn warns, the last one wins."""
    raw = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d","name":"e"},"data":{"a":"1","a":"2"}}'
    await t.http("POST", core(t, "configmaps", query="dryRun=All&fieldValidation=Strict"), raw=raw)
    await t.http(
        "POST",
        core(t, "configmaps", query="dryRun=All&fieldValidation=Warn"),
        raw=raw,
        keep=lambda b: (b["metadata"]["name"], b["data"]),
    )


@case("decode-wrong-types")
async def _(t: Tier) -> None:
    """Wrong JSON types: the Go struct's unmarshal errors (whatever fieldValidation says)."""
    for body in (
        pod("p", containers=[{"name": "c", "image": IMAGE, "ports": [{"containerPort": "80"}]}]),
        pod("p", containers="nope"),
        {"metadata": {"name": "c", "labels": {"a": 1}}},
        {"metadata": {"name": "c"}, "data": ["x"]},
        {"metadata": {"name": "c"}, "immutable": "yes"},
    ):
        plural = "pods" if body.get("kind") == "Pod" else "configmaps"
        await t.post(core(t, plural, query="dryRun=All&fieldValidation=Ignore"), body)


@case("decode-malformed-json")
async def _(t: Tier) -> None:
    """Bodies that are not JSON objects: the scheme's 'object provided is unrecognized' with Go's syntax error."""
    for raw in (b"", b'{"a":1,}', b"[1,2]", b'"x"', b"{", b'{"metadata":{"name":"x"}} x', b"null"):
        await t.http("POST", core(t, "configmaps", query="dryRun=All"), raw=raw)


@case("decode-kind-mismatch")
async def _(t: Tier) -> None:
    """A body of another kind or version than the URL: 400 in the scheme's words."""
    await t.post(core(t, "configmaps"), {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})
    await t.post(core(t, "configmaps"), {"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "x"}})
    await t.post(core(t, "configmaps"), {"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    await t.post(
        f"/apis/coordination.k8s.io/v1/namespaces/{t.ns}/leases",
        {"apiVersion": "v1", "kind": "Lease", "metadata": {"name": "x"}},
    )


@case("decode-yaml-body")
async def _(t: Tier) -> None:
    """A YAML body, a malformed YAML body."""
    await t.http(
        "POST", core(t, "configmaps"), raw=b"metadata:\n  name: y\ndata:\n  a: '1'\n", content_type="application/yaml"
    )
    await t.http("POST", core(t, "configmaps"), raw=b"metadata: [\n", content_type="application/yaml")


@case("error-not-found-shapes")
async def _(t: Tier) -> None:
    """404s: a missing object names it; a missing resource or version has empty details; an unknown group
    is the mux's plain-text 404."""
    for path in (
        core(t, "pods", "nope"),
        f"/apis/coordination.k8s.io/v1/namespaces/{t.ns}/leases/nope",
        grouped(t, "pytorchjobs", "nope"),
        "/api/v1/namespaces/nope-nope",
        "/api/v1/foos",
        core(t, "foos", "x"),
        core(t, "pods", "x", "nope"),
        "/apis/coordination.k8s.io/v2/leases",
        "/api/v2/pods",
        "/apis/nope.io/v1/foos",
        "/apis/training.kubedl.io/v1alpha1/foos",
        "/nope",
    ):
        await t.get(path)


@case("error-method-not-allowed")
async def _(t: Tier) -> None:
    """Verbs a path does not take: 405 with the real body."""
    await t.put(core(t, "configmaps"), configmap("x"))
    await t.post(core(t, "configmaps", "x"), configmap("x"))
    await t.http("PATCH", core(t, "configmaps"), {}, content_type="application/merge-patch+json")
    await t.post("/api/v1/pods", pod("x"))
    await t.delete("/api/v1/namespaces")


@case("error-conflicts")
async def _(t: Tier) -> None:
    """409 AlreadyExists and 409 Conflict bodies, for a ConfigMap and for a custom resource."""
    await make(t, core(t, "configmaps"), configmap("c"))
    await t.post(core(t, "configmaps"), configmap("c"))
    await t.put(core(t, "configmaps", "c"), configmap("c", resourceVersion="1"))
    await make(t, grouped(t, "pytorchjobs"), pytorchjob("j"))
    await t.post(grouped(t, "pytorchjobs"), pytorchjob("j"))


@case("error-too-large")
async def _(t: Tier) -> None:
    """An object over the size limit, and a request body over 3 MiB."""
    await t.post(core(t, "configmaps"), configmap("big", {"a": "x" * 1_600_000}))
    await t.post(core(t, "configmaps"), configmap("huge", {"a": "x" * 3_200_000}))


@case("error-label-and-annotation-validation")
async def _(t: Tier) -> None:
    """Invalid label keys and values, too long annotations: 422 with one cause each."""
    # one bad label each: the real server reports a map's errors in Go's (random) map order
    for labels in (
        {"-bad": "v"},
        {"ok": "-bad"},
        {"a/b/c": "v"},
        {"x" * 64: "v"},
        {"k": "v" * 64},
        {"Example.com/x": "v"},
    ):
        await t.post(core(t, "configmaps", query="dryRun=All"), configmap("l", labels=labels))
    await t.post(core(t, "configmaps", query="dryRun=All"), configmap("a", annotations={"big": "x" * 262145}))
    await t.post(core(t, "configmaps", query="dryRun=All"), configmap("k", {"bad key!": "v"}))


@case("error-unsupported-media-type")
async def _(t: Tier) -> None:
    """415s: a create in text/plain, a protobuf-only Accept on a custom resource."""
    await t.http("POST", core(t, "configmaps"), raw=b"hello", content_type="text/plain")
    await t.get(
        core(t, "configmaps"),
        headers={"Accept": "application/vnd.kubernetes.protobuf"},
        keep=lambda b: type(b).__name__,
    )


@case("error-terminating-namespace")
async def _(t: Tier) -> None:
    """A create in a namespace being deleted: 403 with the NamespaceTerminating cause."""
    name = t.unique("ns")
    t.extra_namespaces.append(name)
    await t.post("/api/v1/namespaces", {"metadata": {"name": name}}, keep=False)
    await t.quiet("POST", f"/api/v1/namespaces/{name}/configmaps", configmap("held", finalizers=["example.com/x"]))
    await t.delete(f"/api/v1/namespaces/{name}", keep=False)
    await t.post(f"/api/v1/namespaces/{name}/configmaps", configmap("late"))
    await t.quiet(
        "PATCH",
        f"/api/v1/namespaces/{name}/configmaps/held",
        {"metadata": {"finalizers": None}},
        "application/merge-patch+json",
    )
