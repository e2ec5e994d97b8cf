"""Install manifests: the checked-in copy matches the templates, RBAC is least-privilege, the controller
runs locked down."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from kubedl_py.api.kinds import KINDS
from kubedl_py.templates import ManifestOptions, render_manifests

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
        "Deployment",
        "Service",
    ]


def test_rbac_has_no_wildcards_and_lists_what_the_controller_needs() -> None:
    docs = _docs(render_manifests())
    rules = [rule for doc in docs if doc["kind"] in ("ClusterRole", "Role") for rule in doc["rules"]]
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[key], rule
    grants = {(g, r): set(rule["verbs"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    # patch: adopting the running pods of a job taken over from KubeDL or the Training Operator
    assert grants[("", "pods")] == {"get", "list", "watch", "create", "delete", "deletecollection", "patch"}
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
