"""The job builders of the SDK: what they do with the arguments a user is likely to get wrong."""

from __future__ import annotations

import pytest

from kubedl_py import JobValidationError, pytorch_job, tf_job


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
