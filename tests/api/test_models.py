"""The models read KubeDL-style YAML losslessly and fill defaults only when asked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubedl_py.api import PyTorchJob, TFJob, load_jobs_file, with_defaults
from kubedl_py.api.defaults import default_container_index, training_port
from kubedl_py.api.jobs import PYTORCH, TENSORFLOW

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["tfjob-ps-worker-hostnet.yaml", "pytorch-rdma.yaml"])
def test_examples_round_trip_without_losing_a_field(name: str) -> None:
    path = EXAMPLES / name
    raw = yaml.safe_load(path.read_text())
    (job,) = load_jobs_file(path)
    assert job.to_dict() == raw


def test_tf_example_has_the_promised_shape() -> None:
    (job,) = load_jobs_file(EXAMPLES / "tfjob-ps-worker-hostnet.yaml")
    assert isinstance(job, TFJob)
    assert job.host_network
    assert job.spec.clean_pod_policy == "None"
    assert {t: s.replicas for t, s in job.spec.tf_replica_specs.items()} == {"PS": 2, "Worker": 3}
    assert job.spec.tf_replica_specs["Worker"].restart_policy == "ExitCode"
    worker = job.spec.tf_replica_specs["Worker"].template.to_dict()
    assert worker["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"] == "mnist-data"
    assert worker["spec"]["containers"][0]["resources"]["limits"]["memory"] == "8Gi"


def test_pytorch_example_keeps_rdma_fields() -> None:
    (job,) = load_jobs_file(EXAMPLES / "pytorch-rdma.yaml")
    assert isinstance(job, PyTorchJob)
    master = job.spec.pytorch_replica_specs["Master"].template.to_dict()
    container = master["spec"]["containers"][0]
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert container["resources"]["limits"]["rdma/hca"] == 1
    assert master["spec"]["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert master["spec"]["schedulerName"] == "volcano"
    assert {e["name"]: e["value"] for e in container["env"]}["NCCL_IB_HCA"] == "mlx5"


def _pytorch(**spec: object) -> PyTorchJob:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "img"}]}}
    body = {"pytorchReplicaSpecs": {"Master": {"template": template}, "Worker": {"template": template}}}
    body.update(spec)
    return PyTorchJob.model_validate({"metadata": {"name": "j"}, "spec": body})


def test_defaults_fill_only_unset_fields_and_leave_the_original_alone() -> None:
    job = _pytorch(cleanPodPolicy="All")
    defaulted = with_defaults(job)
    assert job.spec.pytorch_replica_specs["Worker"].replicas is None
    worker = defaulted.spec.pytorch_replica_specs["Worker"]
    assert (worker.replicas, worker.restart_policy) == (1, "OnFailure")
    assert defaulted.spec.clean_pod_policy == "All"
    assert defaulted.spec.nproc_per_node == "auto"  # torchrun picks one process per GPU (else per CPU)


def test_tf_defaults() -> None:
    template = {"spec": {"containers": [{"name": "tensorflow", "image": "img"}]}}
    job = TFJob.model_validate({"metadata": {"name": "t"}, "spec": {"tfReplicaSpecs": {"PS": {"template": template}}}})
    defaulted = with_defaults(job)
    assert defaulted.spec.tf_replica_specs["PS"].restart_policy == "ExitCode"
    assert defaulted.spec.clean_pod_policy == "Running"
    assert defaulted.spec.success_policy == ""


def test_default_container_and_port() -> None:
    containers = [{"name": "sidecar", "image": "a"}, {"name": "pytorch", "image": "b"}]
    assert default_container_index(containers, PYTORCH) == 1
    assert default_container_index([{"name": "main", "image": "a"}], TENSORFLOW) == 0
    assert training_port({"name": "x"}, TENSORFLOW) == 2222
    assert training_port({"ports": [{"name": "pytorchjob-port", "containerPort": 29500}]}, PYTORCH) == 29500


def test_status_tolerates_fields_from_newer_writers() -> None:
    job = _pytorch()
    parsed = PyTorchJob.model_validate(
        {**job.to_dict(), "status": {"conditions": [{"type": "Created", "status": "True"}], "futureField": 1}}
    )
    assert parsed.status is not None
    assert parsed.status.conditions is not None
    assert parsed.status.conditions[0].type == "Created"
