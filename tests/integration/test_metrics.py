"""The controller's metrics as an operator reads them (issue 37), on both control planes.

- ``/metrics`` over HTTPS is refused without a token (401) and with a token the API server does not know
  (401); on the real control plane a ServiceAccount without the metrics reader role gets 403, one bound to it
  gets the metrics, and a revoked binding is refused again within the cache's few seconds. The controller
  runs under the rendered RBAC there, so its TokenReviews and SubjectAccessReviews are allowed by the
  manifests' own binding. The embedded server authenticates only the tokens it issued and authorizes every
  authenticated ServiceAccount (docs/local-cluster.md).
- The probes answer on their own plain port, without a token.
- The Grafana dashboard queries only series the controller really exports: it runs jobs that succeed, fail
  over (host network), fail and are evicted, then scrapes ``/metrics`` and checks every metric, every grouping label and
  every label matcher of every panel against the scrape.
"""

from __future__ import annotations

import contextlib
import json
import re
import ssl
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_local.kubernetes.install import service_account_token
from kubedl_py.api import constants as c
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import NAMESPACES, PODS, Resource
from kubedl_py.templates.render import dashboard_json, metrics_reader_role
from tests.integration.conftest import (
    PYTORCHJOBS,
    Env,
    Kube,
    RunningController,
    eventually,
    fast_options,
    pods_of,
    pytorchjob,
    replica,
    wait_condition,
)
from tests.tiers import KUBERNETES

SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
#: the session's real cluster is installed in the manifests' default namespace
CONTROLLER_NAMESPACE = "kubedl-system"


@pytest.fixture
async def secure_controller(cluster: Env, kube: Kube) -> Any:
    """The controller as installed: leader election (a Lease of its own in the controller's namespace, as the
    rendered Role allows), HTTPS metrics, plain probes."""
    try:
        await kube.get(NAMESPACES, CONTROLLER_NAMESPACE)
    except NotFound:  # the embedded cluster starts without it
        await create_namespace(kube, CONTROLLER_NAMESPACE)
    running = RunningController(
        cluster,
        fast_options(
            namespace=cluster.namespace,
            metrics_addr="127.0.0.1:0",
            metrics_secure=True,
            health_addr="127.0.0.1:0",
            leader_elect=True,
            leader_elect_namespace=CONTROLLER_NAMESPACE,
            leader_elect_name=f"kubedl-py-{cluster.namespace}",
        ),
    )
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


async def scrape(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # the certificate is self-signed (kubedl_py/kube/tls.py)
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http,
        http.get(url, headers=headers, ssl=insecure) as response,
    ):
        return response.status, await response.text()


async def service_account(kube: Kube, name: str) -> str:
    """A ServiceAccount of the test's namespace, and a token for it from the TokenRequest API."""
    await kube.create(SERVICE_ACCOUNTS, {"metadata": {"name": name}}, namespace=kube.ns)
    token, _ = await service_account_token(kube, kube.ns, name, seconds=3600)
    return token


async def test_metrics_need_a_token_the_api_server_authorizes(
    cluster: Env, kube: Kube, secure_controller: RunningController
) -> None:
    manager = secure_controller.manager
    assert manager is not None and manager.metrics_server is not None and manager.health is not None
    url = manager.metrics_server.url + "/metrics"
    assert url.startswith("https://")

    status, body = await scrape(url)
    assert status == 401, body
    status, body = await scrape(url, "not-a-token-the-api-server-issued")
    assert status == 401, body
    # the probes: plain HTTP, no token, on their own port
    async with aiohttp.ClientSession() as http, http.get(manager.health.url + "/readyz") as response:
        assert response.status == 200 and manager.health.url.startswith("http://")
    async with aiohttp.ClientSession() as http, http.get(manager.health.url + "/metrics") as response:
        assert response.status == 404  # /metrics is not served in the clear

    reader = await service_account(kube, "metrics-reader")
    stranger = await service_account(kube, "stranger")
    binding = f"{kube.ns}-metrics-reader"
    if cluster.tier == KUBERNETES:
        status, body = await scrape(url, stranger)
        assert status == 403, body
        assert f"system:serviceaccount:{kube.ns}:stranger" in body and '"/metrics"' in body
        await kube.create(
            CLUSTER_ROLE_BINDINGS,
            {
                "metadata": {"name": binding},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": metrics_reader_role(CONTROLLER_NAMESPACE),
                },
                "subjects": [{"kind": "ServiceAccount", "name": "metrics-reader", "namespace": kube.ns}],
            },
        )
    try:
        status, body = await scrape(url, reader)
        assert status == 200, body
        assert "kubedl_reconcile_total" in body and "kubedl_jobs_by_state{" in body
        auth = manager.metrics_server.auth
        assert auth is not None
        reviews = auth.reviews
        for _ in range(3):
            assert (await scrape(url, reader))[0] == 200
        assert auth.reviews == reviews, "answers are cached: repeated scrapes send no review"
        if cluster.tier == KUBERNETES:
            await kube.delete(CLUSTER_ROLE_BINDINGS, binding)

            async def refused() -> bool:
                return (await scrape(url, reader))[0] == 403

            # the cached "allowed" lasts a few seconds only (DelegationSettings.ttl)
            await eventually(refused, within=30, interval=0.5, what="the revoked reader to be refused")
    finally:
        if cluster.tier == KUBERNETES:
            with contextlib.suppress(NotFound):
                await kube.delete(CLUSTER_ROLE_BINDINGS, binding)


# ------------------------------------------------------------------------------------------- the dashboard

#: a selector in a PromQL expression: a metric name, optionally with label matchers
_SELECTOR = re.compile(r"\b((?:kubedl|training_operator)_[a-z_]+)(\{([^}]*)\})?")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_BY = re.compile(r"\bby\s*\(([^)]*)\)")


def _samples(text: str) -> dict[str, list[dict[str, str]]]:
    """Sample name -> the label sets it is exported with."""
    found: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(dict(sample.labels))
    return found


def dashboard_problems(dashboard: dict[str, Any], exported: dict[str, list[dict[str, str]]]) -> list[str]:
    """What of the dashboard's queries the scrape cannot answer: an unknown metric, a grouping label no sample
    of its metrics has, a label matcher no sample satisfies."""
    problems: list[str] = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            selectors = _SELECTOR.findall(expr)
            if not selectors:
                problems.append(f"{panel['title']}: no kubedl metric in {expr!r}")
            names = [name for name, _, _ in selectors]
            for name, _, matchers in selectors:
                if name not in exported:
                    problems.append(f"{panel['title']}: {name} is not exported")
                    continue
                for label, op, pattern in _MATCHER.findall(matchers):
                    values = {labels.get(label, "") for labels in exported[name]}
                    regex = re.compile(f"^(?:{pattern})$")
                    if op in ("=", "=~") and not any((v == pattern if op == "=" else regex.match(v)) for v in values):
                        problems.append(f"{panel['title']}: no sample of {name} has {label}{op}{pattern!r}")
            for group in _BY.findall(expr):
                for label in (part.strip() for part in group.split(",")):
                    if not any(label in labels for name in names for labels in exported.get(name, [])):
                        problems.append(f"{panel['title']}: no sample of {names} has the label {label!r}")
    return problems


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    """What Grafana needs to load it: JSON, a schema version, unique panel ids on a grid, a Prometheus
    datasource variable every query uses, and a PromQL expression per target."""
    dashboard = json.loads(dashboard_json())
    assert dashboard["uid"] == "kubedl-py" and isinstance(dashboard["schemaVersion"], int)
    (variable,) = dashboard["templating"]["list"]
    assert (variable["type"], variable["query"], variable["name"]) == ("datasource", "prometheus", "datasource")
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"] and all(t["expr"] and t["refId"] for t in panel["targets"])
    titles = {panel["title"] for panel in dashboard["panels"]}
    # what issue 37 asked the dashboard to show
    assert {
        "Jobs by state",
        "Host-network failovers",
        "Replica failures by class",
        "Time to Running",
        "Reconcile latency (p99)",
        "Write latency (p99)",
    } <= titles


def test_dashboard_check_finds_a_metric_the_controller_does_not_export() -> None:
    """The check below can fail: a renamed metric, a grouping label that does not exist, a matcher no sample meets."""
    exported = {"kubedl_jobs": [{"kind": "PyTorchJob", "state": "Running"}]}
    panel = {
        "title": "t",
        "targets": [{"expr": 'sum by (phase) (kubedl_jobz{kind="TFJob"}) + kubedl_jobs{kind="TFJob"}'}],
    }
    problems = dashboard_problems({"panels": [panel]}, exported)
    assert problems == [
        "t: kubedl_jobz is not exported",
        "t: no sample of kubedl_jobs has kind='TFJob'",
        "t: no sample of ['kubedl_jobz', 'kubedl_jobs'] has the label 'phase'",
    ]


@pytest.mark.nodes(2)
async def test_the_dashboard_queries_series_the_controller_exports(
    cluster: Env, kube: Kube, secure_controller: RunningController
) -> None:
    manager = secure_controller.manager
    assert manager is not None and manager.metrics_server is not None
    # a job that runs to the end, a host-network job that loses a pod (a failover), a job whose worker fails
    quick = {"Master": replica(1, run_seconds=1), "Worker": replica(1, run_seconds=1)}
    await kube.create(PYTORCHJOBS, pytorchjob("done", replicas=quick), namespace=kube.ns)
    await kube.create(PYTORCHJOBS, pytorchjob("moved", host=True), namespace=kube.ns)
    # one failed write (what the API errors panel shows), answered by the retry policy
    cluster.faults.fail(500, verb="create", resource="services", times=1)
    failing = {"Master": replica(1), "Worker": replica(1, restart_policy="ExitCode", exit_code=137, run_seconds=0.5)}
    await kube.create(PYTORCHJOBS, pytorchjob("crashy", replicas=failing, backoffLimit=2), namespace=kube.ns)
    await wait_condition(kube, PYTORCHJOBS, "done", "Succeeded", within=60)
    await wait_condition(kube, PYTORCHJOBS, "moved", "Running", within=60)
    # the Master's pod: its Service (the address its peers dial) is what a failover re-points
    old = next(p for p in await pods_of(kube, "moved") if p["metadata"]["name"] == "moved-master-0")
    await kube.delete(PODS, "moved-master-0", namespace=kube.ns, grace_period_seconds=0)

    def value(name: str, **labels: str) -> float:
        found = manager.metrics.value(name, labels)
        return found or 0.0

    await eventually(
        lambda: _async(value("kubedl_hostnetwork_failovers_total", kind=c.PYTORCH_KIND) >= 1),
        within=60,
        what="a failover counted",
    )
    await eventually(
        lambda: _async(value("kubedl_pod_failures_total", kind=c.PYTORCH_KIND, **{"class": "user"}) >= 1),
        within=60,
        what="the crashing worker counted as a user failure",
    )

    async def replaced() -> bool:
        pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await pods_of(kube, "moved")}
        return pods.get("moved-master-0") not in (None, old["metadata"]["uid"])

    await eventually(replaced, within=60, what="the failed-over master's replacement")
    # the node evicts a pod (pressure): an infrastructure failure, not the program's
    await evict(cluster, kube.ns, "moved-worker-1")
    await eventually(
        lambda: _async(value("kubedl_pod_failures_total", kind=c.PYTORCH_KIND, **{"class": "infrastructure"}) >= 1),
        within=60,
        what="the evicted worker counted as an infrastructure failure",
    )

    reader = await service_account(kube, "dashboard")
    if cluster.tier == KUBERNETES:
        await kube.create(
            CLUSTER_ROLE_BINDINGS,
            {
                "metadata": {"name": f"{kube.ns}-dashboard"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": metrics_reader_role(CONTROLLER_NAMESPACE),
                },
                "subjects": [{"kind": "ServiceAccount", "name": "dashboard", "namespace": kube.ns}],
            },
        )
    try:
        status, text = await scrape(manager.metrics_server.url + "/metrics", reader)
    finally:
        if cluster.tier == KUBERNETES:
            await kube.delete(CLUSTER_ROLE_BINDINGS, f"{kube.ns}-dashboard")
    assert status == 200, text
    exported = _samples(text)
    assert dashboard_problems(json.loads(dashboard_json()), exported) == []
    # and the series say what happened
    states = {labels["state"] for labels in exported["kubedl_jobs_by_state"] if labels["kind"] == c.PYTORCH_KIND}
    assert states == {"New", "Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed"}
    assert value("kubedl_jobs_by_state", kind=c.PYTORCH_KIND, state="Succeeded") >= 1
    assert value("kubedl_job_time_to_running_seconds_count", kind=c.PYTORCH_KIND) >= 2
    assert value("kubedl_api_request_duration_seconds_count", verb="create", resource="pods") >= 5


async def evict(cluster: Env, namespace: str, name: str) -> None:
    """The kubelet's eviction under node pressure: phase Failed, reason Evicted, a DisruptionTarget condition."""
    if cluster.local is not None:
        await cluster.local.evict_pod(namespace, name)
        return
    assert cluster.real is not None and cluster.real.cluster.agent is not None
    await cluster.real.loop.call(cluster.real.cluster.agent.evict(namespace, name, "The node was low on memory. "))


async def _async(result: bool) -> bool:
    return result
