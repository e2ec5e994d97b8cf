"""Install manifests: the checked-in copy matches the templates, RBAC is least-privilege, the controller
runs locked down."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubedl_py.api.kinds import KINDS
from kubedl_py.templates import ManifestOptions, render_manifests
from kubedl_py.templates.render import InvalidOptions

ROOT = Path(__file__).resolve().parents[1]


def _docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_checked_in_manifests_match_the_templates() -> None:
    assert (ROOT / "deploy" / "kubedl-py.yaml").read_text() == render_manifests(), (
        "deploy/kubedl-py.yaml drifted from the templates: run `make manifests`"
    )
    assert (ROOT / "deploy" / "crds.yaml").read_text() == render_manifests(ManifestOptions(crds_only=True))


def test_manifest_kinds() -> None:
    kinds = [doc["kind"] for doc in _docs(render_manifests())]
    assert kinds == [
        "Namespace",
        *["CustomResourceDefinition"] * len(KINDS),  # one per registered kind
        *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * len(KINDS),  # what a schema cannot say
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ClusterRoleBinding",  # the metrics endpoint's reviews (system:auth-delegator)
        "ClusterRole",  # the metrics reader
        "Lease",
        "Deployment",
        "Service",
    ]


def test_rbac_has_no_wildcards_and_lists_what_the_controller_needs() -> None:
    docs = _docs(render_manifests())
    rules = [rule for doc in docs if doc["kind"] in ("ClusterRole", "Role") for rule in doc["rules"]]
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs", "nonResourceURLs"):
            assert "*" not in rule.get(key, []), rule
    rules = [rule for rule in rules if "resources" in rule]
    grants = {(g, r): set(rule["verbs"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    # patch: adopting the running pods of a job taken over from KubeDL or the Training Operator
    # no deletecollection: cleanup deletes the job's own objects one by one (a selector would take a namesake's)
    assert grants[("", "pods")] == {"get", "list", "watch", "create", "delete", "patch"}
    assert "deletecollection" not in grants[("", "services")]
    assert "patch" in grants[("", "services")]
    assert grants[("training.kubedl.io", "pytorchjobs/status")] >= {"patch"}
    assert "update" not in grants[("training.kubedl.io", "pytorchjobs")]
    assert grants[("coordination.k8s.io", "leases")] == {"get", "create", "update"}
    assert not any(group == "scheduling.volcano.sh" for group, _ in grants)


def test_gang_scheduler_adds_only_its_podgroups() -> None:
    docs = _docs(render_manifests(ManifestOptions(gang_scheduler="volcano")))
    role = next(doc for doc in docs if doc["kind"] == "ClusterRole")
    assert any("scheduling.volcano.sh" in rule["apiGroups"] for rule in role["rules"])


def test_controller_runs_non_root_and_read_only() -> None:
    docs = _docs(render_manifests(ManifestOptions(image="example/kubedl:1", namespace="ml")))
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == "ml"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["image"] == "example/kubedl:1"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "--leader-elect" in container["args"]


def test_cli_prints_the_same_stream() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kubedl_py.cli", "manifests", "--crds-only"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout == render_manifests(ManifestOptions(crds_only=True))


def _entrypoint() -> list[str]:
    """The image's ENTRYPOINT, as the container runtime reads it (the exec form is a JSON array)."""
    import json

    lines = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("ENTRYPOINT ")]
    assert len(lines) == 1, "the Dockerfile must have exactly one ENTRYPOINT"
    entrypoint: list[str] = json.loads(lines[0].removeprefix("ENTRYPOINT "))
    return entrypoint


def test_container_command_line_is_what_the_cli_accepts() -> None:
    """The image entrypoint followed by the Deployment's args is one valid ``kubedl-py`` command line (an
    entrypoint that already said ``controller`` made every real install crash-loop with exit 2)."""
    from kubedl_py.cli.parser import build_parser as _build_parser

    deployment = next(doc for doc in _docs(render_manifests()) if doc["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "command" not in container  # the image's entrypoint is used
    argv = _entrypoint() + container["args"]
    assert argv[0] == "kubedl-py"
    parsed = _build_parser().parse_args(argv[1:])  # exits 2 (SystemExit) on an unknown argument
    assert parsed.command == "controller"


def test_manifests_pin_the_image_of_this_release() -> None:
    """The rendered Deployment runs ``kubedl-py:<version>``, the tag ``make image`` builds, with the version the
    installed package reports (one source: ``kubedl_py.__version__``, which pyproject.toml reads too)."""
    from importlib.metadata import version

    import kubedl_py

    deployment = next(doc for doc in _docs(render_manifests()) if doc["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"kubedl-py:{kubedl_py.__version__}"
    assert version("kubedl-py") == kubedl_py.__version__


def test_kubeflow_api_adds_its_crds_rbac_and_the_controller_flag() -> None:
    docs = _docs(render_manifests(ManifestOptions(kubeflow_api=True)))
    crds = [doc["metadata"]["name"] for doc in docs if doc["kind"] == "CustomResourceDefinition"]
    kubeflow = sorted(name for name in crds if name.endswith(".kubeflow.org"))
    assert kubeflow == sorted(f"{k.framework.plural}.kubeflow.org" for k in KINDS)
    assert len(crds) == 2 * len(KINDS)
    role = next(doc for doc in docs if doc["kind"] == "ClusterRole")
    grants = {
        (g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert grants[("kubeflow.org", "tfjobs")] == {"get", "list", "watch", "delete"}
    assert grants[("kubeflow.org", "tfjobs/status")] == {"get", "update", "patch"}
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    assert "--kubeflow-api" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    # Without the flag, nothing of kubeflow.org (a cluster running the Training Operator owns those CRDs).
    # (runPolicy.managedBy's values name kubeflow.org/training-operator, a value, not the group)
    plain = render_manifests().replace("kubeflow.org/training-operator", "")
    assert "kubeflow.org" not in plain
    result = subprocess.run(
        [sys.executable, "-m", "kubedl_py.cli", "manifests", "--crds-only", "--kubeflow-api"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout == render_manifests(ManifestOptions(crds_only=True, kubeflow_api=True))


def _grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    return {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule.get("apiGroups", [])
        for r in rule["resources"]
    }


def test_namespaced_install_grants_the_job_rules_in_a_role_per_watched_namespace_only() -> None:
    """A namespaced install (issue 37): the ClusterRole's rules move into a Role of each watched namespace, the
    controller is told its namespaces, and what stays cluster-scoped is the metrics endpoint's review rights and
    the reader role, and reading a node by name (no ClusterRole of the controller can create or delete
    anything, nor read anything but one node, Kueue flavor or priority class at a time)."""
    options = ManifestOptions(namespace="ml-ops", watch_namespaces=("team-a", "team-b"), gang_scheduler="volcano")
    docs = _docs(render_manifests(options))
    default_role = next(
        d for d in _docs(render_manifests(ManifestOptions(gang_scheduler="volcano"))) if d["kind"] == "ClusterRole"
    )
    roles = {
        d["metadata"]["namespace"]: d
        for d in docs
        if d["kind"] == "Role" and d["metadata"]["name"] == "kubedl-py-controller"
    }
    assert sorted(roles) == ["team-a", "team-b"]
    everywhere = _grants(default_role)
    # cluster-scoped reads by name: a lost node (controllers/recovery.py), Kueue's flavors and priority classes
    # (controllers/kueue.py)
    cluster_scoped = {
        ("", "nodes"),
        ("kueue.x-k8s.io", "resourceflavors"),
        ("kueue.x-k8s.io", "workloadpriorityclasses"),
        ("scheduling.k8s.io", "priorityclasses"),
    }
    nodes = {key: verbs for key, verbs in everywhere.items() if key in cluster_scoped}
    assert nodes == {key: {"get"} for key in cluster_scoped}
    for namespace, role in roles.items():
        assert _grants(role) == {key: verbs for key, verbs in everywhere.items() if key not in nodes}, namespace
        binding = next(d for d in docs if d["kind"] == "RoleBinding" and d["metadata"].get("namespace") == namespace)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "kubedl-py-controller",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "kubedl-py-controller", "namespace": "ml-ops"}
        ]
    # what stays cluster-scoped: reading a node (or a Kueue flavor) by name, the metrics endpoint's reviews, the
    # reader role
    cluster_roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "ClusterRole"}
    assert cluster_roles == {
        "kubedl-py-ml-ops-nodes": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["resourceflavors", "workloadpriorityclasses"],
                "verbs": ["get"],
            },
            {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get"]},
        ],
        "kubedl-py-ml-ops-metrics-reader": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }
    bindings = {d["metadata"]["name"]: d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"}
    assert bindings == {
        "kubedl-py-ml-ops-nodes": "kubedl-py-ml-ops-nodes",
        "kubedl-py-ml-ops-metrics-auth": "system:auth-delegator",
    }
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert "--namespace=team-a,team-b" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--gang-scheduler=volcano" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def test_metrics_are_served_over_https_and_probes_on_a_plain_port() -> None:
    docs = _docs(render_manifests())
    (container,) = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"]
    assert {"--metrics-addr=0.0.0.0:8443", "--metrics-secure", "--health-addr=0.0.0.0:8081"} <= set(container["args"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8443, "health": 8081}
    assert container["livenessProbe"]["httpGet"]["port"] == container["readinessProbe"]["httpGet"]["port"] == "health"
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8443, "targetPort": "metrics", "protocol": "TCP"}]
    insecure = _docs(render_manifests(ManifestOptions(metrics_secure=False)))
    assert not [d for d in insecure if d["kind"] == "ClusterRoleBinding" and "metrics-auth" in d["metadata"]["name"]]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (ManifestOptions(replicas=2, leader_elect=False), "needs leader election"),
        (ManifestOptions(watch_namespaces=("Team_A",)), "'Team_A' is not a namespace name"),
        (ManifestOptions(host_port_range="3-2"), "host port range '3-2'"),
        (ManifestOptions(metrics_port=8081), "must differ"),
        (ManifestOptions(pod_monitor=True), "pod_monitor_token_secret"),
    ],
)
def test_bad_options_are_refused_naming_them(options: ManifestOptions, message: str) -> None:
    with pytest.raises(InvalidOptions, match=message):
        render_manifests(options)


def test_cli_renders_a_namespaced_install_and_refuses_a_bad_namespace() -> None:
    command = [sys.executable, "-m", "kubedl_py.cli", "manifests", "--watch-namespace", "team-a,team-b"]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    assert result.stdout == render_manifests(ManifestOptions(watch_namespaces=("team-a", "team-b")))
    bad = subprocess.run([*command[:-1], "Team_A"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "'Team_A' is not a namespace name" in bad.stderr, bad.stderr
