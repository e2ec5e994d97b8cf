"""The two API groups of every kind: one model, each group's layout, defaults and refusals."""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_py.api import JobValidationError, parse_job, with_defaults
from kubedl_py.api.groups import KUBEDL, KUBEFLOW, condition_reason, peer_labels, to_wire


def template(name: str = "tensorflow") -> dict[str, Any]:
    return {"spec": {"containers": [{"name": name, "image": "x"}]}}


def tfjob(api_version: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "TFJob",
        "metadata": {"name": "tf"},
        "spec": {"tfReplicaSpecs": {"PS": {"template": template()}, "Worker": {"template": template()}}, **spec},
    }


def errors(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(JobValidationError) as info:
        parse_job(document)
    return {error.field: error.message for error in info.value.errors}


def test_kubeflow_run_policy_is_read_from_run_policy_and_written_back_there() -> None:
    job = parse_job(tfjob("kubeflow.org/v1", runPolicy={"backoffLimit": 4, "suspend": True}))
    assert (job.run_policy.backoff_limit, job.run_policy.suspend, job.api_group) == (4, True, KUBEFLOW)
    wire = job.to_dict()
    assert wire["spec"]["runPolicy"] == {"backoffLimit": 4, "suspend": True}
    assert "backoffLimit" not in wire["spec"]
    # training.kubedl.io writes them inline, and reads KubeDL's MPIJob layout (spec.runPolicy) too.
    native = parse_job(tfjob("training.kubedl.io/v1alpha1", runPolicy={"backoffLimit": 4}))
    assert native.to_dict()["spec"]["backoffLimit"] == 4 and "runPolicy" not in native.to_dict()["spec"]


def test_misplaced_run_policy_fields_name_the_place() -> None:
    found = errors(tfjob("kubeflow.org/v1", backoffLimit=2))
    assert (
        found["spec.backoffLimit"]
        == "kubeflow.org/v1 keeps it under spec.runPolicy: move it to spec.runPolicy.backoffLimit"
    )
    both = errors(tfjob("training.kubedl.io/v1alpha1", backoffLimit=2, runPolicy={"backoffLimit": 3}))
    assert "is also set as spec.backoffLimit" in both["spec.runPolicy.backoffLimit"]
    # A schema error under runPolicy is reported where the user wrote it.
    bad = errors(tfjob("kubeflow.org/v1", runPolicy={"backoffLimit": -1}))
    assert "must be >= 0" in bad["spec.runPolicy.backoffLimit"]


def test_defaults_follow_the_group() -> None:
    kubeflow = with_defaults(parse_job(tfjob("kubeflow.org/v1")))
    native = with_defaults(parse_job(tfjob("training.kubedl.io/v1alpha1")))
    # The Training Operator's TFJob defaults, and KubeDL's.
    assert (kubeflow.replica_specs["Worker"].restart_policy, kubeflow.run_policy.clean_pod_policy) == ("Never", "None")
    assert (native.replica_specs["Worker"].restart_policy, native.run_policy.clean_pod_policy) == (
        "ExitCode",
        "Running",
    )


def test_lower_case_replica_types_are_normalised_and_a_duplicate_is_refused() -> None:
    document = tfjob("kubeflow.org/v1")
    document["spec"]["tfReplicaSpecs"] = {"ps": {"template": template()}, "worker": {"template": template()}}
    assert list(parse_job(document).replica_specs) == ["PS", "Worker"]
    document["spec"]["tfReplicaSpecs"]["Worker"] = {"template": template()}
    assert "is Worker again in another letter case" in errors(document)["spec.tfReplicaSpecs.Worker"]


@pytest.mark.parametrize("field", ["cronPolicy", "modelVersion", "cacheBackend"])
def test_kubedl_only_fields_are_refused_by_name(field: str) -> None:
    found = errors(tfjob("training.kubedl.io/v1alpha1", **{field: {}}))
    assert found[f"spec.{field}"].startswith("is a KubeDL feature kubedl-py does not support")


def test_an_unknown_api_version_names_both_served_ones() -> None:
    document = tfjob("kubeflow.org/v1")
    document["apiVersion"] = "kubeflow.org/v2beta1"
    assert "use training.kubedl.io/v1alpha1 or kubeflow.org/v1" in errors(document)["apiVersion"]


def test_names_per_group() -> None:
    assert condition_reason(KUBEFLOW, "TFJob", "Created") == "TFJobCreated"
    assert condition_reason(KUBEFLOW, "TFJob", "Failed", "BackoffLimitExceeded") == "TFJobFailed"
    assert condition_reason(KUBEDL, "TFJob", "Failed", "BackoffLimitExceeded") == "BackoffLimitExceeded"
    assert condition_reason(KUBEDL, "TFJob", "Suspended") == "JobSuspended"
    assert peer_labels(KUBEDL, "TFJob", "tf", "PS", 0, master=False) == {}
    assert peer_labels(KUBEFLOW, "XGBoostJob", "x", "Master", 0, master=True) == {
        "training.kubeflow.org/operator-name": "xgboostjob-controller",
        "training.kubeflow.org/job-name": "x",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/job-role": "master",
    }
    assert to_wire({"spec": {"suspend": True}}, KUBEDL) == {"spec": {"suspend": True}}


@pytest.mark.parametrize("api_version", ["kubeflow.org/v1", "training.kubedl.io/v1alpha1"])
@pytest.mark.parametrize(
    ("run_policy", "said"),
    [
        ({"bogus": 1}, "spec.runPolicy.bogus: is not a known field"),
        ({"cleanPodPolicy": "Alll"}, "spec.runPolicy.cleanPodPolicy: must be 'All', 'Running' or 'None'"),
        ({"backoffLimit": "three"}, "spec.runPolicy.backoffLimit: must be an integer"),
    ],
)
def test_errors_under_run_policy_name_the_path_the_user_wrote(
    api_version: str, run_policy: dict[str, object], said: str
) -> None:
    from kubedl_py.api.validation import JobValidationError, parse_job

    template = {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}
    doc = {
        "apiVersion": api_version,
        "kind": "PyTorchJob",
        "metadata": {"name": "x"},
        "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
    }
    with pytest.raises(JobValidationError) as e:
        parse_job(doc)
    assert len(e.value.errors) == 1 and str(e.value.errors[0]).startswith(said), e.value.errors
