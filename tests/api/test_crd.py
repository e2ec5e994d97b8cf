"""The generated CRDs are structural, and the schema and the pydantic models agree on what is valid."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubedl_py.api import JobValidationError, parse_job
from kubedl_py.api.crd import all_crds, crd_for
from kubedl_py.api.jobs import TENSORFLOW
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient

CONTAINER = {"name": "pytorch", "image": "img", "resources": {"limits": {"rdma/hca": 1}}}


def _job(kind: str = "PyTorchJob", **spec: Any) -> dict[str, Any]:
    field = "pytorchReplicaSpecs" if kind == "PyTorchJob" else "tfReplicaSpecs"
    first = "Master" if kind == "PyTorchJob" else "Worker"
    body: dict[str, Any] = {field: {first: {"replicas": 1, "template": {"spec": {"containers": [CONTAINER]}}}}}
    body.update(spec)
    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "j"},
        "spec": body,
    }


def _with(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    document = copy.deepcopy(document)
    *parents, leaf = path.split(".")
    node: Any = document
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is _DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return document


_DELETE = object()
_REPLICA = {"template": {"spec": {"containers": [CONTAINER]}}}
MASTER = "spec.pytorchReplicaSpecs.Master"
VALID = [
    _job(),
    _job(nprocPerNode=4),
    _job(nprocPerNode="auto"),
    _job(cleanPodPolicy="None", ttlSecondsAfterFinished=0, backoffLimit=3, activeDeadlineSeconds=60),
    _job(schedulingPolicy={"minAvailable": 1, "queue": "q", "priorityClassName": "high"}),
    _job(
        failurePolicy={
            "infrastructureBackoffLimit": 50,
            "nodeLostTimeoutSeconds": 0,
            "avoidNodeAfterFailures": 2,
        },
        progressDeadlineSeconds=600,
    ),
    _job(
        failurePolicy={"restartScope": "Job", "pendingTimeoutSeconds": 300},
        completionPolicy={"replicaType": "Master", "minSucceeded": "100%", "maxFailed": 0},
        successPolicy="AllWorkers",
    ),
    _with(
        _job(elasticPolicy={"minReplicas": 1, "maxReplicas": 4, "rdzvConf": [{"key": "k", "value": "v"}]}),
        "spec.pytorchReplicaSpecs.Worker",
        {"replicas": 2, "template": {"spec": {"containers": [CONTAINER]}}},
    ),
    _with(_job(), f"{MASTER}.template.spec.unknownPodField", {"kept": True}),
    _with(_job(), f"{MASTER}.template.metadata", {"labels": {"a": "b"}}),
    _job("TFJob", successPolicy="AllWorkers"),
    _job("TFJob", successPolicy=""),
]
# Each invalid document with the field the API server names in its 422 (every one also fails the models).
INVALID = [
    (_with(_job(), f"{MASTER}.replicas", -1), f"{MASTER}.replicas"),
    (_with(_job(), f"{MASTER}.replicas", 100_000), f"{MASTER}.replicas"),
    (_with(_job(), f"{MASTER}.replicas", "one"), f"{MASTER}.replicas"),
    (_with(_job(), f"{MASTER}.restartPolicy", "Sometimes"), f"{MASTER}.restartPolicy"),
    (_with(_job(), f"{MASTER}.template.spec.containers", []), f"{MASTER}.template.spec.containers"),
    (
        _with(_job(), f"{MASTER}.template.spec.containers.0.image", _DELETE),
        f"{MASTER}.template.spec.containers[0].image",
    ),
    (
        _with(_job(), f"{MASTER}.template.spec.containers.0.ports", [{"containerPort": 70000}]),
        f"{MASTER}.template.spec.containers[0].ports[0].containerPort",
    ),
    (_with(_job(), f"{MASTER}.template", _DELETE), f"{MASTER}.template"),
    (_with(_job(), "spec.pytorchReplicaSpecs", {}), "spec.pytorchReplicaSpecs"),
    (_job(cleanPodPolicy="Sometimes"), "spec.cleanPodPolicy"),
    (_job(backoffLimit=-1), "spec.backoffLimit"),
    (_job(activeDeadlineSeconds=0), "spec.activeDeadlineSeconds"),
    (_job(progressDeadlineSeconds=5), "spec.progressDeadlineSeconds"),
    (_job(failurePolicy={"avoidNodeAfterFailures": 0}), "spec.failurePolicy.avoidNodeAfterFailures"),
    (_job(nprocPerNode="lots"), "spec.nprocPerNode"),
    (_job(nprocPerNode=0), "spec.nprocPerNode"),
    (_job(elasticPolicy={"rdzvPort": 0}), "spec.elasticPolicy.rdzvPort"),
    (_job("TFJob", successPolicy="Everyone"), "spec.successPolicy"),
    (_with(_job(), "spec", _DELETE), "spec"),
]
# What only the CRD's CEL rules can say (a map keyed by replica type), with the rule's message.
CEL_ONLY = [
    (_with(_job(), f"{MASTER}.replicas", 2), "a PyTorchJob has exactly one Master: set Master.replicas to 1"),
    (
        _with(_job(), "spec.pytorchReplicaSpecs.Wroker", _REPLICA),
        "unknown replica type; use one of Master, Worker",
    ),
    (
        _with(_with(_job("TFJob"), "spec.tfReplicaSpecs.Chief", _REPLICA), "spec.tfReplicaSpecs.Master", _REPLICA),
        "a TFJob may have a Chief or a Master, not both",
    ),
    # Jobs with no replica to run (they would stay Created for ever): no Master and 0 Workers; 0 PS, 0 Workers.
    (
        _with(
            _with(_job(), "spec.pytorchReplicaSpecs.Master", _DELETE),
            "spec.pytorchReplicaSpecs.Worker",
            {**_REPLICA, "replicas": 0},
        ),
        "has no replica to run: give at least one replica type replicas >= 1",
    ),
    (
        _with(
            _with(_job("TFJob"), "spec.tfReplicaSpecs.PS", {**_REPLICA, "replicas": 0}),
            "spec.tfReplicaSpecs.Worker",
            {**_REPLICA, "replicas": 0},
        ),
        "has no replica to run: give at least one replica type replicas >= 1",
    ),
]


async def _dry_run_create(kube: KubeClient, document: dict[str, Any]) -> dict[str, Any]:
    plural = "pytorchjobs" if document["kind"] == "PyTorchJob" else "tfjobs"
    created: dict[str, Any] = await kube.request(
        "POST",
        f"/apis/training.kubedl.io/v1alpha1/namespaces/default/{plural}",
        query={"dryRun": "All", "fieldValidation": "Strict"},
        body=document,
    )
    return created


@pytest.mark.parametrize("document", VALID)
async def test_valid_documents_are_accepted_unpruned(api: KubeClient, document: dict[str, Any]) -> None:
    assert parse_job(document).to_dict() == document
    created = await _dry_run_create(api, document)
    assert created["spec"] == document["spec"]  # nothing of ours pruned or rewritten by the schema


@pytest.mark.parametrize("document,field", INVALID)
async def test_invalid_documents_are_refused_naming_the_field(
    api: KubeClient, document: dict[str, Any], field: str
) -> None:
    with pytest.raises(JobValidationError):
        parse_job(document)
    with pytest.raises(errors.Invalid) as refused:
        await _dry_run_create(api, document)
    assert field in {cause.field for cause in refused.value.causes}, refused.value


async def test_unknown_fields_are_refused_by_strict_decoding(api: KubeClient) -> None:
    with pytest.raises(errors.BadRequest) as refused:
        await _dry_run_create(api, _job(backofLimit=3))
    assert 'unknown field "spec.backofLimit"' in str(refused.value)


@pytest.mark.parametrize("document,message", CEL_ONLY)
async def test_cel_rules_refuse_at_create(api: KubeClient, document: dict[str, Any], message: str) -> None:
    with pytest.raises(JobValidationError):
        parse_job(document)
    with pytest.raises(errors.Invalid) as refused:
        await _dry_run_create(api, document)
    replica_field = "spec.pytorchReplicaSpecs" if document["kind"] == "PyTorchJob" else "spec.tfReplicaSpecs"
    assert [(cause.field, cause.message) for cause in refused.value.causes] == [
        (replica_field, f"Invalid value: {message}")
    ]


def _walk(schema: Any, path: str = "") -> Any:
    yield path, schema
    for key, child in (schema.get("properties") or {}).items():
        yield from _walk(child, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("crd", all_crds(kubeflow=True), ids=lambda crd: crd["metadata"]["name"])
def test_crd_is_structural_and_complete(crd: dict[str, Any]) -> None:
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    if crd["spec"]["group"] == "kubeflow.org":
        # As the Training Operator's CRDs: no short names (``ptj`` stays ours), and no place in ``get all``.
        assert crd["spec"]["names"]["categories"] == ["kubeflow"]
        assert "shortNames" not in crd["spec"]["names"]
        assert crd["spec"]["versions"][0]["name"] == "v1"
        assert "runPolicy" in version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    else:
        assert crd["spec"]["names"]["categories"] == ["kubedl", "all"]
        assert crd["spec"]["names"]["shortNames"]
    assert [column["name"] for column in version["additionalPrinterColumns"]] == ["State", "Last-Failure", "Age"]
    for path, node in _walk(version["schema"]["openAPIV3Schema"]):
        assert "$ref" not in node and "nullable" not in node, path
        typed = (
            "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path


@pytest.mark.parametrize("crd", all_crds(kubeflow=True), ids=lambda crd: crd["metadata"]["name"])
def test_every_field_is_described_for_kubectl_explain(crd: dict[str, Any]) -> None:
    """What ``kubectl explain pytorchjob.spec`` shows: a field added without a docstring fails here."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    undescribed = [path for path, node in _walk(schema) if path and not str(node.get("description", "")).strip()]
    # metadata may only be typed in a CRD (the API server describes it as ObjectMeta)
    undescribed = [path for path in undescribed if path != ".metadata"]
    # the nodes of a list or map are described by the list's or map's own field
    undescribed = [path for path in undescribed if not path.endswith(("[]", "{}"))]
    assert undescribed == [], f"fields without a description (a docstring under the model's field): {undescribed}"


def test_refused_kubedl_fields_are_described_as_refused() -> None:
    spec = crd_for(TENSORFLOW)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["cacheBackend"]["description"].startswith("Refused: cacheBackend is a KubeDL feature")
    rules = [rule["rule"] for rule in spec["x-kubernetes-validations"]]
    assert "!has(self.cacheBackend)" in rules


def test_pod_template_keeps_unknown_fields() -> None:
    spec = crd_for(TENSORFLOW)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    template = spec["properties"]["tfReplicaSpecs"]["additionalProperties"]["properties"]["template"]
    assert template["x-kubernetes-preserve-unknown-fields"] is True
    assert template["properties"]["spec"]["properties"]["containers"]["minItems"] == 1
