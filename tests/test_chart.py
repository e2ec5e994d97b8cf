"""The Helm chart: generated from the manifests' templates, rendered by the real ``helm`` into the same objects.

- the checked-in ``charts/kubedl-py`` is exactly what ``make manifests`` generates (every tier: pure Python);
- with the real ``helm`` (built from ``helm.sh/helm/v4``, ``kubedl_local/kubernetes/helm.py``): ``helm lint``
  passes, ``helm template`` renders, for a range of options, exactly the objects ``kubedl-py manifests`` renders
  with the same options (Helm's two bookkeeping labels aside), and bad values are refused naming the field;
- the optional ServiceMonitor and PodMonitor are valid objects of the Prometheus Operator's own CRDs (from
  its Go module), as the real API server judges them in a server-side dry run.

``tests/test_helm_install.py`` installs, upgrades and uninstalls the chart on the real control plane.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.schedulers import install_scheduler_crds
from kubedl_local.kubernetes.helm import run_helm
from kubedl_local.kubernetes.monitoring import monitor_crds
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import Invalid, NotFound
from kubedl_py.templates import ManifestOptions, render_manifests
from kubedl_py.templates.chart import chart_files, chart_values, split_image
from tests.conftest import CRDS, RealCluster
from tests.tiers import KUBERNETES, require_tier

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "kubedl-py"
#: labels Helm's chart adds for its own bookkeeping; the manifests have no Helm to keep books for
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")

#: options whose manifests the chart must reproduce: every template branch is taken at least once
CASES: dict[str, ManifestOptions] = {
    "defaults": ManifestOptions(),
    "namespaced": ManifestOptions(namespace="ml-ops", watch_namespaces=("team-a", "team-b"), gang_scheduler="volcano"),
    "everything-optional": ManifestOptions(
        kubeflow_api=True,
        gang_scheduler="scheduler-plugins",
        metrics_secure=False,
        metrics_port=8080,
        service_monitor=True,
        pod_monitor=True,
        dashboard_configmap=True,
    ),
    "secure-monitors": ManifestOptions(service_monitor=True, pod_monitor=True, pod_monitor_token_secret="prom-token"),
    "custom-image-and-flags": ManifestOptions(
        image="registry.example.com:5000/ml/kubedl-py:2.0@sha256:" + "ab" * 32,
        image_pull_policy="Always",
        replicas=3,
        host_port_range="31000-31999",
        health_port=9440,
        resources={"requests": {"cpu": "1", "memory": "1Gi"}},
        controller_args=("--workers=32", "--repair-window=0"),
        max_host_ports_per_pod=3,
        kubeflow_api=True,
    ),
    "no-leader-election": ManifestOptions(leader_elect=False, image="example.org/kubedl-py:dev"),
}


def test_checked_in_chart_matches_the_templates() -> None:
    expected = chart_files()
    present = {str(p.relative_to(CHART)): p.read_text() for p in CHART.rglob("*") if p.is_file()}
    assert sorted(present) == sorted(expected), "charts/kubedl-py has other files than generated: run `make manifests`"
    for name, text in expected.items():
        assert present[name] == text, f"charts/kubedl-py/{name} drifted from kubedl_py/templates: run `make manifests`"


def test_values_yaml_holds_the_defaults_of_the_manifests() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values == chart_values(ManifestOptions())
    assert values["image"]["tag"] == ""  # the chart's appVersion
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert f"{values['image']['repository']}:{chart['appVersion']}" == ManifestOptions().image


def test_split_image() -> None:
    assert split_image("kubedl-py:0.1.0") == ("kubedl-py", "0.1.0", "")
    assert split_image("registry:5000/ml/kubedl-py") == ("registry:5000/ml/kubedl-py", "", "")
    assert split_image("r:5000/k@sha256:00") == ("r:5000/k", "", "sha256:00")


# ------------------------------------------------------------------------------------------ the real helm


@pytest.fixture
def helm_home(tmp_path: Path) -> Path:
    require_tier(KUBERNETES)  # the tier of the tools built from Go modules (make test builds Helm first)
    return tmp_path / "helm"


def _objects(stream: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(kind, namespace, name) -> object, Helm's bookkeeping labels removed."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for doc in yaml.safe_load_all(stream):
        if not doc:
            continue
        labels = doc["metadata"].get("labels") or {}
        for label in HELM_LABELS:
            labels.pop(label, None)
        key = (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
        assert key not in found, f"{key} rendered twice"
        found[key] = doc
    return found


def test_helm_lint_passes(helm_home: Path) -> None:
    linted = run_helm("lint", "--strict", str(CHART), home=helm_home)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in linted.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_helm_template_renders_what_the_manifests_render(case: str, helm_home: Path, tmp_path: Path) -> None:
    options = CASES[case]
    values = tmp_path / "values.json"
    values.write_text(json.dumps(chart_values(options)))
    rendered = run_helm(
        "template",
        "kubedl-py",
        str(CHART),
        "--namespace",
        options.namespace,
        "--include-crds",
        "-f",
        str(values),
        home=helm_home,
    )
    assert rendered.returncode == 0, rendered.stderr
    chart = _objects(rendered.stdout)
    manifests = _objects(render_manifests(options))
    # Helm installs into a namespace it is given (--namespace / --create-namespace); the manifests make theirs.
    del manifests[("Namespace", "", options.namespace)]
    assert sorted(chart) == sorted(manifests)
    for key, obj in manifests.items():
        assert chart[key] == obj, f"{case}: {key} differs between the chart and the manifests"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "watchNamespace=a"], "additional properties 'watchNamespace' not allowed"),
        (["--set", "watchNamespaces={Team_A}"], "/watchNamespaces/0"),
        (["--set", "gangScheduler.name=kube-batch"], "/gangScheduler/name"),
        (
            ["--set", "replicaCount=2", "--set", "leaderElection.enabled=false"],
            "replicaCount above 1 needs leaderElection",
        ),
        (["--set", "hostNetwork.portRange=30000-20000"], "hostNetwork.portRange must be LOW-HIGH"),
        (["--set", "metrics.podMonitor.enabled=true"], "metrics.podMonitor.tokenSecret: name a Secret"),
    ],
)
def test_helm_refuses_bad_values_naming_them(values: list[str], message: str, helm_home: Path) -> None:
    rendered = run_helm("template", "kubedl-py", str(CHART), *values, home=helm_home)
    assert rendered.returncode != 0
    assert message in rendered.stderr, rendered.stderr


async def test_the_monitors_are_valid_prometheus_operator_objects(real_cluster: RealCluster) -> None:
    crds = await asyncio.to_thread(monitor_crds)
    secure = ManifestOptions(service_monitor=True, pod_monitor=True, pod_monitor_token_secret="prom-token")
    plain = ManifestOptions(metrics_secure=False, service_monitor=True, pod_monitor=True)
    async with real_cluster.client() as kube:
        await install_scheduler_crds(kube, crds)
        try:
            monitors = [
                doc
                for options in (secure, plain)
                for doc in yaml.safe_load_all(render_manifests(options))
                if doc and doc["apiVersion"] == "monitoring.coreos.com/v1"
            ]
            assert sorted(doc["kind"] for doc in monitors) == [
                "PodMonitor",
                "PodMonitor",
                "ServiceMonitor",
                "ServiceMonitor",
            ]
            for doc in monitors:
                await _dry_run(kube, doc)
            # the dry run judges: a monitor the schema refuses is refused
            broken = json.loads(json.dumps(monitors[0]))
            endpoints = broken["spec"].get("endpoints") or broken["spec"]["podMetricsEndpoints"]
            endpoints[0]["scheme"] = "htps"
            with pytest.raises(Invalid, match="scheme"):
                await _dry_run(kube, broken)
        finally:
            for crd in crds:
                with contextlib.suppress(NotFound):
                    await kube.delete(CRDS, crd["metadata"]["name"])


async def _dry_run(kube: KubeClient, doc: dict[str, Any]) -> None:
    plural = doc["kind"].lower() + "s"
    path = f"/apis/monitoring.coreos.com/v1/namespaces/{doc['metadata']['namespace']}/{plural}"
    await kube.request("POST", path, query={"dryRun": "All"}, body=doc)
