"""Each validation rule rejects bad input with a message that names the field and says the fix."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubedl_py.api import JobValidationError, load_jobs, parse_job
from kubedl_py.api.validation import host_port_count, host_port_errors

CONTAINER = {"name": "pytorch", "image": "img"}


def pytorch(name: str = "job", **specs: Any) -> dict[str, Any]:
    replica_specs = specs or {"Master": {"replicas": 1, "template": {"spec": {"containers": [CONTAINER]}}}}
    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": replica_specs},
    }


def tfjob(**specs: Any) -> dict[str, Any]:
    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "tf"},
        "spec": {"tfReplicaSpecs": specs},
    }


def replica(replicas: int | None = 1, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [dict(CONTAINER)]}}, **extra}
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


def errors_of(document: Any) -> dict[str, str]:
    with pytest.raises(JobValidationError) as info:
        parse_job(document)
    return {error.field: error.message for error in info.value.errors}


def test_a_valid_job_passes() -> None:
    job = parse_job(pytorch())
    assert job.name == "job"


def test_wrong_kind_is_named() -> None:
    errors = errors_of({**pytorch(), "kind": "Deployment"})
    assert "kind" in errors
    assert "use one of PyTorchJob, TFJob" in errors["kind"]  # every registered kind, in registry order


def test_wrong_api_version_is_named() -> None:
    errors = errors_of({**pytorch(), "apiVersion": "kubeflow.org/v2"})
    assert "use training.kubedl.io/v1alpha1 or kubeflow.org/v1" in errors["apiVersion"]


def test_not_a_mapping() -> None:
    assert "(document)" in errors_of(["a", "list"])


def test_pytorch_master_must_be_one() -> None:
    errors = errors_of(pytorch(Master=replica(2)))
    assert "set it to 1" in errors["spec.pytorchReplicaSpecs.Master.replicas"]


def test_elastic_policy_needs_a_worker() -> None:
    document = pytorch(Master=replica(1))
    document["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    errors = errors_of(document)
    assert "at least 1 Worker" in errors["spec.pytorchReplicaSpecs.Worker.replicas"]


def test_elastic_min_above_max() -> None:
    document = pytorch(Worker=replica(2))
    document["spec"]["elasticPolicy"] = {"minReplicas": 4, "maxReplicas": 3}
    assert "minReplicas <= maxReplicas" in errors_of(document)["spec.elasticPolicy.minReplicas"]


def test_an_elastic_job_with_more_workers_than_max_replicas_is_refused() -> None:
    """It ran all 4 Workers with maxReplicas 2 (an adversary's finding): refused, naming both fields."""
    document = pytorch(Worker=replica(4))
    document["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2}
    message = errors_of(document)["spec.pytorchReplicaSpecs.Worker.replicas"]
    assert "is 4, above elasticPolicy.maxReplicas 2" in message


@pytest.mark.parametrize("value", ["yes", "no", "3", 1, "true"])
def test_a_boolean_field_takes_true_or_false_only(value: Any) -> None:
    """The SDK made booleans of "yes", "no" and "3", which kubectl and the API server refuse."""
    document = pytorch()
    document["spec"]["suspend"] = value
    assert "valid boolean" in errors_of(document)["spec.suspend"]


def test_an_integer_past_int32_is_refused_by_name() -> None:
    """``ttlSecondsAfterFinished: 1e20`` raised a raw TypeError (Integer exceeds 64-bit range) on the way out."""
    for value in (10**20, 1e20, 2**31):
        document = pytorch()
        document["spec"]["ttlSecondsAfterFinished"] = value
        assert "spec.ttlSecondsAfterFinished" in errors_of(document)


def test_a_generated_name_is_judged_as_the_generate_name_it_came_from() -> None:
    """The controller sees the name the API server made (generateName + 5 characters): the advice is about the
    generateName the user wrote, with its own limit, as the SDK gives it before the job exists."""
    document = pytorch(Worker=replica(1))
    document["metadata"] = {"generateName": "b" * 50 + "-", "name": "b" * 50 + "-x7k2q"}
    errors = errors_of(document)
    assert "at most 49 characters" in errors["metadata.generateName"] and "metadata.name" not in errors


def test_tf_chief_and_master_conflict() -> None:
    errors = errors_of(tfjob(Chief=replica(1), Master=replica(1), Worker=replica(2)))
    assert "not both" in errors["spec.tfReplicaSpecs.Master"]


def test_tf_chief_is_single() -> None:
    errors = errors_of(tfjob(Chief=replica(3)))
    assert "set it to 0 or 1" in errors["spec.tfReplicaSpecs.Chief.replicas"]


def test_negative_replicas() -> None:
    errors = errors_of(pytorch(Worker=replica(-1)))
    assert errors["spec.pytorchReplicaSpecs.Worker.replicas"].startswith("must be >= 0")


def test_huge_replica_count_is_refused() -> None:
    errors = errors_of(pytorch(Worker=replica(100_000)))
    assert "must be <= 10000" in errors["spec.pytorchReplicaSpecs.Worker.replicas"]


@pytest.mark.parametrize(
    ("document", "field"),
    [
        (pytorch(Worker=replica(0)), "spec.pytorchReplicaSpecs"),
        (pytorch(Master=replica(0), Worker=replica(0)), "spec.pytorchReplicaSpecs"),
        (tfjob(PS=replica(0), Worker=replica(0)), "spec.tfReplicaSpecs"),
    ],
)
def test_a_job_with_no_replica_to_run_is_refused(document: dict[str, Any], field: str) -> None:
    message = errors_of(document)[field]
    assert message.startswith("has no replica to run") and "replicas >= 1" in message, message


def test_total_replicas_bounded() -> None:
    errors = errors_of(tfjob(PS=replica(5000), Worker=replica(6000)))
    assert "at most 10000" in errors["spec.tfReplicaSpecs"]


def test_unknown_replica_type_suggests_the_right_one() -> None:
    errors = errors_of(pytorch(Master=replica(1), Wroker=replica(2)))
    assert "did you mean 'Worker'" in errors["spec.pytorchReplicaSpecs.Wroker"]
    errors = errors_of(tfjob(Learner=replica(1)))
    assert "use one of PS, Worker, Chief, Master, Evaluator" in errors["spec.tfReplicaSpecs.Learner"]


def test_no_replica_specs() -> None:
    document = pytorch()
    document["spec"]["pytorchReplicaSpecs"] = {}
    assert "add at least one replica type" in errors_of(document)["spec.pytorchReplicaSpecs"]


def test_name_too_long_for_service_names_says_the_maximum() -> None:
    # "-worker-11" is 10 characters, so the longest name that fits is 53.
    ok = pytorch("a" * 53, Worker=replica(12))
    parse_job(ok)
    errors = errors_of(pytorch("a" * 54, Worker=replica(12)))
    assert "at most 53 characters" in errors["metadata.name"]
    assert "64 characters" in errors["metadata.name"]


def test_generate_name_counts_the_random_suffix() -> None:
    document = pytorch(Worker=replica(1))
    document["metadata"] = {"generateName": "b" * 50 + "-"}
    errors = errors_of(document)
    assert "at most 49 characters" in errors["metadata.generateName"]


def test_name_must_be_dns_label() -> None:
    errors = errors_of(pytorch("My_Job"))
    assert "lower-case" in errors["metadata.name"]


def test_missing_name() -> None:
    document = pytorch()
    document["metadata"] = {}
    assert "needs a name" in errors_of(document)["metadata.name"]


def test_template_without_containers() -> None:
    errors = errors_of(pytorch(Master={"replicas": 1, "template": {"spec": {"containers": []}}}))
    assert "at least one container" in errors["spec.pytorchReplicaSpecs.Master.template.spec.containers"]


def test_container_without_image_uses_kubernetes_paths() -> None:
    errors = errors_of(pytorch(Master={"template": {"spec": {"containers": [{"name": "pytorch"}]}}}))
    assert errors["spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image"] == "is required"


def test_enum_fields_list_allowed_values() -> None:
    errors = errors_of(pytorch(Master=replica(1, restartPolicy="Sometimes")))
    message = errors["spec.pytorchReplicaSpecs.Master.restartPolicy"]
    assert "'ExitCode'" in message
    assert "'Sometimes'" in message
    document = pytorch()
    document["spec"]["cleanPodPolicy"] = "Some"
    assert "'Running'" in errors_of(document)["spec.cleanPodPolicy"]


def test_typo_in_a_closed_field_is_reported() -> None:
    document = pytorch()
    document["spec"]["backofLimit"] = 3
    assert "not a known field" in errors_of(document)["spec.backofLimit"]


def test_nproc_per_node_forms() -> None:
    for good in (4, "4", "auto", "gpu"):
        document = pytorch()
        document["spec"]["nprocPerNode"] = good
        parse_job(document)
    document = pytorch()
    document["spec"]["nprocPerNode"] = "lots"
    assert "'auto'" in errors_of(document)["spec.nprocPerNode"]


def test_every_problem_is_reported_at_once() -> None:
    errors = errors_of(tfjob(Chief=replica(2), Master=replica(1)))
    assert len(errors) == 2


def test_yaml_errors_are_clear_and_positioned() -> None:
    with pytest.raises(JobValidationError) as info:
        load_jobs("kind: [unclosed", source="bad.yaml")
    assert "not valid YAML at line 1" in str(info.value)
    assert "bad.yaml" in str(info.value)


def test_multi_document_names_the_bad_document() -> None:
    import yaml

    good = yaml.safe_dump(pytorch())
    bad = copy.deepcopy(pytorch())
    bad["kind"] = "Pod"
    text = good + "---\n" + yaml.safe_dump(bad)
    with pytest.raises(JobValidationError) as info:
        load_jobs(text, source="jobs.yaml")
    assert "jobs.yaml (document 2)" in str(info.value)


def test_empty_input() -> None:
    with pytest.raises(JobValidationError, match="empty"):
        load_jobs("\n---\n")


def test_a_gang_larger_than_the_job_is_refused_with_the_most_it_may_be() -> None:
    document = pytorch(Master=replica(1), Worker=replica(2))
    document["spec"]["schedulingPolicy"] = {"minAvailable": 4}
    message = errors_of(document)["spec.schedulingPolicy.minAvailable"]
    assert "3 replicas" in message and "at most 3" in message
    document["spec"]["schedulingPolicy"] = {"minAvailable": 3}
    parse_job(document)


def test_a_gang_of_the_kubeflow_layout_is_named_where_it_is_written() -> None:
    document = pytorch(Worker=replica(2))
    document["apiVersion"] = "kubeflow.org/v1"
    document["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 3, "minResources": {"cpu": "lots"}}}
    errors = errors_of(document)
    assert "not a Kubernetes quantity" in errors["spec.runPolicy.schedulingPolicy.minResources.cpu"]
    # a gang larger than the job: the Training Operator accepts it (the job waits until minAvailable is lowered),
    # so the kubeflow.org drop-in does too (gang.py); training.kubedl.io refuses it
    assert "spec.runPolicy.schedulingPolicy.minAvailable" not in errors
    own = pytorch(Worker=replica(2))
    own["spec"]["schedulingPolicy"] = {"minAvailable": 3}
    assert "at most 2" in errors_of(own)["spec.schedulingPolicy.minAvailable"]


# ------------------------------------------------------------------------------------------- host network


def _annotated(document: dict[str, Any], mode: str) -> dict[str, Any]:
    document["metadata"]["annotations"] = {"kubedl.io/network-mode": mode}
    return document


@pytest.mark.parametrize("mode", ["Host", "hosts", "HOST ", "", "default"])
def test_a_misspelt_network_mode_is_refused_naming_the_annotation_and_the_values(mode: str) -> None:
    errors = errors_of(_annotated(pytorch(), mode))
    message = errors["metadata.annotations[kubedl.io/network-mode]"]
    assert repr(mode) in message and "'host'" in message and "'pod'" in message


@pytest.mark.parametrize("mode", ["host", "pod"])
def test_the_network_modes_are_accepted(mode: str) -> None:
    assert parse_job(_annotated(pytorch(), mode)).host_network is (mode == "host")


def test_a_host_network_template_without_the_annotation_is_host_network_mode() -> None:
    document = pytorch(Master=replica(1), Worker=replica(2))
    document["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = True
    job = parse_job(document)
    assert job.host_network and job.host_network_templates == ["Worker"]


def test_a_host_network_template_contradicting_the_pod_mode_is_refused() -> None:
    document = _annotated(pytorch(Master=replica(1), Worker=replica(2)), "pod")
    document["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = True
    errors = errors_of(document)
    assert "set the annotation to 'host'" in errors["spec.pytorchReplicaSpecs.Worker.template.spec.hostNetwork"]


def _ports(count: int, *, host_port: bool = False) -> list[dict[str, Any]]:
    return [{"containerPort": 30000 + i, **({"hostPort": 30000 + i} if host_port else {})} for i in range(count)]


def test_host_ports_per_pod_are_bounded_naming_the_replica_and_the_flag() -> None:
    document = _annotated(pytorch(Master=replica(1), Worker=replica(2)), "host")
    worker = document["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["containers"][0]["ports"] = _ports(7)  # 7 and the framework's: 8, the default limit
    job = parse_job(document)
    assert host_port_count(job, "Worker") == 8 and host_port_errors(job, 8) == []
    worker["initContainers"] = [{"name": "init", "image": "img", "ports": _ports(1)}]
    (error,) = host_port_errors(parse_job(document), 8)
    assert error.field == "spec.pytorchReplicaSpecs.Worker.template.spec.containers"
    assert "9 host ports" in error.message and "--max-host-ports-per-pod" in error.message
    assert host_port_errors(parse_job(document), None) == []


def test_in_the_pod_network_only_declared_host_ports_count() -> None:
    document = pytorch(Master=replica(1))
    master = document["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    master["containers"][0]["ports"] = [*_ports(20), *_ports(2, host_port=True)]
    job = parse_job(document)
    assert host_port_count(job, "Master") == 2


def test_a_thousand_port_template_in_a_kubeflow_job_is_named_where_it_is_written() -> None:
    document = pytorch(Master=replica(1))
    document["apiVersion"] = "kubeflow.org/v1"
    document["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["hostNetwork"] = True
    document["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["ports"] = _ports(1000)
    (error,) = host_port_errors(parse_job(document), 8)
    assert (
        error.field == "spec.pytorchReplicaSpecs.Master.template.spec.containers" and "1001 host ports" in error.message
    )


def test_a_kind_in_the_wrong_letter_case_gets_a_did_you_mean() -> None:
    doc = pytorch()
    doc["kind"] = "PytorchJob"
    with pytest.raises(JobValidationError) as caught:
        parse_job(doc)
    (error,) = caught.value.errors
    assert error.field == "kind"
    assert "'PytorchJob' is not a training job kind (did you mean PyTorchJob?)" in error.message, error.message


@pytest.mark.parametrize(
    "resources,field,words",
    [
        ({"limits": {"cpu": "lots"}}, "limits.cpu", "'lots' is not a Kubernetes quantity"),
        ({"requests": {"memory": "-1Gi"}}, "requests.memory", "must not be negative"),
        ({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}, "requests.cpu", "more than its limit '1'"),
    ],
    ids=["not-a-quantity", "negative", "request-above-limit"],
)
def test_container_resources_are_checked_naming_replica_and_field(
    resources: dict[str, Any], field: str, words: str
) -> None:
    worker = replica(2)
    worker["template"]["spec"]["containers"][0]["resources"] = resources
    with pytest.raises(JobValidationError) as caught:
        parse_job(pytorch(Master=replica(1), Worker=worker))
    (error,) = caught.value.errors
    assert error.field == f"spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.{field}"
    assert words in error.message, error.message


def test_valid_resources_pass() -> None:
    master = replica(1)
    master["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "500m", "memory": "1.5Gi", "nvidia.com/gpu": 1},
        "limits": {"cpu": 2, "memory": "2Gi", "nvidia.com/gpu": "1"},
    }
    parse_job(pytorch(Master=master))
