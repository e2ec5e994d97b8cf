"""How Kueue's own manifests are trimmed and pointed at the local webhook Service (no cluster, no build).

Why it matters: a webhook of a disabled integration has no handler behind it and fails closed, so keeping
one would refuse every object of that kind on the shared cluster; and the rotator waits until every CRD it
is told about has a conversion webhook to inject into.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.kueue import (
    MUTATING,
    MUTATING_WEBHOOKS,
    NAMESPACE,
    VALIDATING,
    WEBHOOK_SERVICE,
    KueueOptions,
    configuration,
    crd_documents,
    webhook_configurations,
)


def _hook(name: str, path: str) -> dict[str, Any]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [],
    }


def _source(tmp_path: Path) -> Path:
    webhooks = tmp_path / "config" / "components" / "webhook"
    webhooks.mkdir(parents=True)
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            _hook("mclusterqueue.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue"),
            _hook("mpytorchjob.kb.io", "/mutate-kubeflow-org-v1-pytorchjob"),
            _hook("mmpijob.kb.io", "/mutate-kubeflow-org-v2beta1-mpijob"),
            _hook("mpod.kb.io", "/mutate--v1-pod"),
            _hook("mjob.kb.io", "/mutate-batch-v1-job"),
        ],
    }
    validating = {**mutating, "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "validating"}}
    (webhooks / "manifests.yaml").write_text(yaml.safe_dump_all([mutating, validating]))
    crds = tmp_path / "config" / "components" / "crd" / "bases"
    crds.mkdir(parents=True)
    for plural in ("workloads", "resourceflavors"):
        crd = {"kind": "CustomResourceDefinition", "metadata": {"name": f"{plural}.kueue.x-k8s.io"}}
        crd["spec"] = {"names": {"plural": plural}}
        (crds / f"kueue.x-k8s.io_{plural}.yaml").write_text(yaml.safe_dump(crd))
    return tmp_path


def test_only_kueues_own_hooks_and_the_enabled_integrations_are_kept(tmp_path: Path) -> None:
    result = webhook_configurations(_source(tmp_path), ["kubeflow.org/pytorchjob", "pod"], port=30443)
    assert set(result) == {MUTATING, VALIDATING}
    mutating = result[MUTATING]
    assert mutating["metadata"]["name"] == MUTATING_WEBHOOKS  # the name Kueue's rotator injects its CA into
    hooks = {hook["name"]: hook for hook in mutating["webhooks"]}
    assert set(hooks) == {"mclusterqueue.kb.io", "mpytorchjob.kb.io", "mpod.kb.io"}
    service = hooks["mpytorchjob.kb.io"]["clientConfig"]["service"]
    assert service == {
        "name": WEBHOOK_SERVICE,
        "namespace": NAMESPACE,
        "path": "/mutate-kubeflow-org-v1-pytorchjob",
        "port": 30443,
    }
    # Job hooks leave the system namespaces alone, as Kueue's own install does; its own objects' hooks do not.
    assert hooks["mpod.kb.io"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", NAMESPACE]
    assert "namespaceSelector" not in hooks["mclusterqueue.kb.io"]


def test_conversion_webhooks_are_patched_into_the_crds_kueue_converts(tmp_path: Path) -> None:
    crds = {crd["spec"]["names"]["plural"]: crd for crd in crd_documents(_source(tmp_path), webhook_port=30443)}
    conversion = crds["workloads"]["spec"]["conversion"]
    assert conversion["strategy"] == "Webhook"
    assert conversion["webhook"]["clientConfig"]["service"]["path"] == "/convert"
    assert "conversion" not in crds["resourceflavors"]["spec"]


def test_the_configuration_binds_the_webhook_service_address_and_enables_the_integrations() -> None:
    options = KueueOptions(feature_gates={"TopologyAwareScheduling": False}, extra_config={"fairSharing": {}})
    config = configuration(
        options,
        health_port=1,
        webhook_host="127.88.0.12",
        webhook_port=2,
        cert_dir=Path("/certs"),
    )
    assert config["webhook"] == {"host": "127.88.0.12", "port": 2, "certDir": "/certs"}
    assert config["integrations"] == {"frameworks": ["kubeflow.org/pytorchjob", "kubeflow.org/tfjob"]}
    assert config["internalCertManagement"]["enable"] is True
    assert config["featureGates"] == {"VisibilityOnDemand": False, "TopologyAwareScheduling": False}
    assert config["fairSharing"] == {}
