"""The job builders of the SDK: what they do with the arguments a user is likely to get wrong."""

from __future__ import annotations

import pytest

from kubedl_py import JobValidationError, pytorch_job, tf_job, training_job
from kubedl_py.api import parse_job
from kubedl_py.api.kinds import all_kinds


@pytest.mark.parametrize("build", [pytorch_job, tf_job], ids=["pytorch_job", "tf_job"])
def test_a_command_string_with_spaces_is_refused_not_split_and_the_message_says_so(build: object) -> None:
    with pytest.raises(JobValidationError) as caught:
        build("j", "python:3.12", "python train.py --lr '1e-3 x'")  # type: ignore[operator]
    (error,) = caught.value.errors
    assert error.field == "command"
    assert "refused, not split" in error.message
    assert "command=['python', 'train.py', '--lr', '1e-3 x']" in error.message, error.message


def test_a_one_word_command_string_and_a_list_are_the_argv() -> None:
    one_word = pytorch_job("j", "trainer:1", "train")
    listed = tf_job("t", "python:3.12", ["python", "-c", "print(1)"])
    assert one_word.spec.pytorch_replica_specs["Master"].template.spec.containers[0].command == ["train"]
    assert listed.spec.tf_replica_specs["Worker"].template.spec.containers[0].command == ["python", "-c", "print(1)"]


def test_resources_that_are_no_quantity_are_refused_naming_the_field() -> None:
    with pytest.raises(JobValidationError) as caught:
        pytorch_job("j", "python:3.12", ["python", "train.py"], workers=1, resources={"cpu": "lots"})
    fields = {error.field for error in caught.value.errors}
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu" in fields, fields
    assert all("'lots' is not a Kubernetes quantity" in error.message for error in caught.value.errors)


@pytest.mark.parametrize("kind", [plugin.name for plugin in all_kinds()])
def test_the_generic_builder_makes_a_job_of_every_kind_from_its_framework(kind: str) -> None:
    plugin = next(p for p in all_kinds() if p.name == kind)
    framework = plugin.framework
    replicas = {replica_type: 1 for replica_type in framework.start_order[:1]}
    replicas[framework.worker_type] = 2
    job = training_job(kind, "any", "trainer:1", ["train"], replicas=replicas, host_network=True)
    assert type(job) is plugin.model and job.framework is framework
    assert {t: s.replicas for t, s in job.replica_specs.items()} == replicas
    container = job.replica_specs[framework.worker_type].template.spec.containers[0]
    assert (container.name, container.image, container.command) == (framework.container_name, "trainer:1", ["train"])
    assert job.metadata.annotations == {"kubedl.io/network-mode": "host"}


def test_the_generic_builder_takes_the_kinds_own_fields_and_any_name_of_the_kind() -> None:
    job = training_job(
        "mpi", "allreduce", "mpi:1", ["mpirun"], replicas={"Launcher": 1, "worker": 2}, spec={"slotsPerWorker": 4}
    )
    assert job.kind == "MPIJob" and job.spec.slots_per_worker == 4  # type: ignore[attr-defined]
    assert list(job.replica_specs) == ["Launcher", "Worker"]  # the canonical spelling, as in a YAML file
    with pytest.raises(JobValidationError) as unknown:
        training_job("caffe", "old", "caffe:1", ["train"], replicas={"Worker": 1})
    assert unknown.value.errors[0].field == "kind" and "use one of PyTorchJob" in unknown.value.errors[0].message
    with pytest.raises(JobValidationError) as wrong:
        training_job("tf", "t", "tf:1", ["train"], replicas={"Leader": 1})
    assert "Leader" in str(wrong.value)


def test_pytorch_job_and_tf_job_are_the_generic_builder_under_their_names() -> None:
    """Byte for byte the documents a user wrote with the two builders before the generic one existed."""
    pytorch = pytorch_job("p", "img", ["python", "t.py"], workers=2, nproc_per_node=2, backoff_limit=3)
    assert pytorch.to_dict()["spec"] == {
        "pytorchReplicaSpecs": {
            t: {
                "replicas": n,
                "template": {
                    "spec": {"containers": [{"name": "pytorch", "image": "img", "command": ["python", "t.py"]}]}
                },
            }
            for t, n in (("Master", 1), ("Worker", 2))
        },
        "nprocPerNode": 2,
        "backoffLimit": 3,
    }
    tf = tf_job("t", "img", ["python", "t.py"], workers=2, ps=1, chief=True, success_policy="AllWorkers")
    assert list(tf.spec.tf_replica_specs) == ["Chief", "PS", "Worker"] and tf.spec.success_policy == "AllWorkers"
    assert tf == parse_job(tf.to_dict())


def test_a_misspelt_keyword_is_refused_as_python_refuses_it() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'worker'"):
        pytorch_job("j", "img", ["train"], worker=2)  # type: ignore[call-arg]
