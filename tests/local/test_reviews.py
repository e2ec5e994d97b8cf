"""What kubectl auth, aggregated discovery and protobuf-only clients get from the embedded server."""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from kubedl_local import LocalCluster
from kubedl_local.apiserver import protobuf
from tests.local.conftest import Http

SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


async def test_access_reviews_are_allowed_and_validated(http: Http) -> None:
    attrs = {"namespace": "default", "verb": "create", "resource": "pods"}
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}
    r = await http.post(f"{SSAR}?fieldManager=me", {**body, "spec": {"resourceAttributes": attrs}})
    assert (r.status, r.body["status"], r.body["spec"]["resourceAttributes"]) == (201, {"allowed": True}, attrs)
    assert r.body["metadata"]["managedFields"][0]["manager"] == "me"  # nothing stored, but the manager shows
    bad = await http.post(SSAR, body)
    assert (bad.status, bad.body["message"]) == (
        422,
        '.authorization.k8s.io "" is invalid: spec: Invalid value: null: '
        "exactly one of nonResourceAttributes or resourceAttributes must be specified",
    )
    assert (await http.get(SSAR)).status == 405  # create only
    assert (await http.get("/api/v1/namespaces/default/configmaps/x")).status == 404  # and nothing else moved


async def test_rules_and_whoami_are_the_administrators(http: Http) -> None:
    rules = await http.post(
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": "x"}},
    )
    assert rules.status == 201 and rules.body["status"]["resourceRules"][0] == {
        "verbs": ["*"],
        "apiGroups": ["*"],
        "resources": ["*"],
    }
    me = await http.post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert me.body["status"]["userInfo"] == {
        "username": "kubernetes-admin",
        "groups": ["system:masters", "system:authenticated"],
    }


async def test_aggregated_discovery(http: Http) -> None:
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    groups = await http.get("/apis", headers={"Accept": accept})
    assert groups.headers["Content-Type"] == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    names = [g["metadata"]["name"] for g in groups.body["items"]]
    assert names.index("authorization.k8s.io") < names.index("apiextensions.k8s.io")  # the real priority order
    core = await http.get("/api", headers={"Accept": accept})
    pods = next(r for r in core.body["items"][0]["versions"][0]["resources"] if r["resource"] == "pods")
    eviction = next(s for s in pods["subresources"] if s["subresource"] == "eviction")
    assert eviction["responseKind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert pods["responseKind"] == {"group": "", "version": "", "kind": "Pod"} and pods["scope"] == "Namespaced"
    plain = await http.get("/apis")  # no aggregated type asked for: the legacy APIGroupList
    assert plain.body["kind"] == "APIGroupList"


async def test_read_only_quotas(http: Http) -> None:
    quotas = "/api/v1/namespaces/default/resourcequotas"
    assert (await http.get(quotas)).body["items"] == []
    refused = await http.post(quotas, {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "1"}}})
    assert (refused.status, refused.body["reason"]) == (405, "MethodNotAllowed")


async def test_protobuf_only_clients(cluster: LocalCluster, http: Http) -> None:
    cms = "/api/v1/namespaces/default/configmaps"
    await http.post(cms, {"metadata": {"name": "c"}, "data": {"k": "v"}})
    as_json = (await http.get(f"{cms}/c")).body
    pb = {"Accept": protobuf.CONTENT_TYPE}
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{cluster.url}{cms}/c", headers=pb) as r:
            assert r.headers["Content-Type"] == protobuf.CONTENT_TYPE
            assert protobuf.decode(await r.read(), protobuf.ensure_table()) == as_json
        async with s.get(f"{cluster.url}{cms}?watch=1", headers=pb) as r:
            assert r.status == 406  # watch streams are JSON only here


TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


async def test_token_reviews_authenticate_only_tokens_this_server_issued(http: Http) -> None:
    """What a component delegating authentication (the controller's HTTPS /metrics) asks: a token the server
    issued is its ServiceAccount, with the groups a real server gives; a made-up one, or one whose
    ServiceAccount was deleted, is not authenticated."""
    await http.post("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "scraper"}})
    issued = await http.post(
        "/api/v1/namespaces/default/serviceaccounts/scraper/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    token = issued.body["status"]["token"]

    def review(token: str) -> dict[str, Any]:
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}

    ok = await http.post(TOKEN_REVIEWS, review(token))
    assert ok.status == 201 and ok.body["kind"] == "TokenReview"
    assert ok.body["status"]["authenticated"] is True
    user = ok.body["status"]["user"]
    assert user["username"] == "system:serviceaccount:default:scraper"
    assert user["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]
    for bad in ("made-up", token.rsplit(".", 2)[0] + ".e30.", ""):
        refused = await http.post(TOKEN_REVIEWS, review(bad))
        assert refused.body["status"]["authenticated"] is False, bad
    await http.delete("/api/v1/namespaces/default/serviceaccounts/scraper")
    gone = await http.post(TOKEN_REVIEWS, review(token))
    assert gone.body["status"]["authenticated"] is False
    assert "deleted" in gone.body["status"]["error"]


def test_an_expired_token_is_not_authenticated() -> None:
    from kubedl_local.apiserver.serviceaccounts import review_token, token_request

    class OneAccount:  # the one read both functions make of the store
        def get(self, rkey: object, ns: str, name: str) -> dict[str, Any] | None:
            return {"metadata": {"name": "sa", "namespace": "default", "uid": "u1"}} if name == "sa" else None

    store: Any = OneAccount()
    answer = token_request(store, "default", "sa", {"spec": {"expirationSeconds": 600}}, issuer="https://x")
    token = answer["status"]["token"]
    assert review_token(store, token, issuer="https://x")["authenticated"] is True
    assert review_token(store, token, issuer="https://elsewhere")["authenticated"] is False
    late = review_token(store, token, issuer="https://x", now=time.time() + 601)
    assert late == {"authenticated": False, "user": {}, "error": "invalid bearer token, token has expired"}
