"""Discovery and OpenAPI: what clients read before anything else."""

from __future__ import annotations

from typing import Any

from tests.differential.harness import Tier, case


def _resources(body: Any) -> Any:
    return sorted(
        (
            r["name"],
            r.get("kind"),
            r.get("namespaced"),
            sorted(r.get("verbs") or []),
            sorted(r.get("shortNames") or []),
            sorted(r.get("categories") or []),
        )
        for r in body["resources"]
    )


@case("discovery-our-group")
async def _(t: Tier) -> None:
    """/apis/training.kubedl.io and its version: our kinds, verbs, short names, categories."""
    await t.get("/apis/training.kubedl.io")
    await t.get(
        "/apis/training.kubedl.io/v1alpha1",
        keep=lambda b: {k: v for k, v in b.items() if k != "resources"} | {"resources": _resources(b)},
    )


@case("discovery-core-served-kinds")
async def _(t: Tier) -> None:
    """/api/v1 entries of the kinds the embedded server serves (the others are compared elsewhere)."""
    served = {
        "pods",
        "pods/status",
        "pods/log",
        "pods/binding",
        "pods/eviction",
        "pods/ephemeralcontainers",
        "services",
        "services/status",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "serviceaccounts/token",
        "namespaces",
        "namespaces/status",
        "namespaces/finalize",
        "nodes",
        "nodes/status",
        "endpoints",
        "events",
    }
    await t.get("/api/v1", keep=lambda b: [r for r in _resources(b) if r[0] in served])


@case("discovery-core-all-kinds")
async def _(t: Tier) -> None:
    """/api/v1: every resource the server lists."""
    await t.get("/api/v1", keep=lambda b: sorted(r["name"] for r in b["resources"]))


@case("discovery-api-versions")
async def _(t: Tier) -> None:
    """/api: the core versions."""
    await t.get("/api", keep=lambda b: (b["kind"], b["versions"]))


@case("discovery-aggregated")
async def _(t: Tier) -> None:
    """Aggregated discovery (kubectl's first request): our group's entry."""
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"

    def ours(b: Any) -> Any:
        if b.get("kind") != "APIGroupDiscoveryList":
            return b.get("kind")
        return [g for g in b["items"] if g["metadata"]["name"] == "training.kubedl.io"]

    await t.get("/apis", headers={"Accept": accept}, keep=ours)


@case("discovery-version")
async def _(t: Tier) -> None:
    """/version: the release (build details aside)."""
    await t.get("/version", keep=lambda b: {k: b[k] for k in ("major", "minor", "gitVersion", "platform")})


@case("openapi-v3-our-group")
async def _(t: Tier) -> None:
    """/openapi/v3 lists our group version; its document's schemas of PyTorchJob and TFJob."""
    root = await t.get("/openapi/v3", keep=lambda b: sorted(p for p in b["paths"] if "training.kubedl.io" in p))
    url = root.body["paths"]["apis/training.kubedl.io/v1alpha1"]["serverRelativeURL"]
    await t.get(url, keep=lambda b: {k: v for k, v in b["components"]["schemas"].items() if "training" in k})


@case("openapi-v3-core-pod")
async def _(t: Tier) -> None:
    """The core group's OpenAPI document: the Pod schema."""
    root = await t.quiet("GET", "/openapi/v3")
    url = root.body["paths"]["api/v1"]["serverRelativeURL"]
    await t.get(url, keep=lambda b: b["components"]["schemas"]["io.k8s.api.core.v1.Pod"])


@case("health-endpoints")
async def _(t: Tier) -> None:
    """/healthz, /readyz, /livez answer ok."""
    for path in ("/healthz", "/readyz", "/livez"):
        await t.get(path)
