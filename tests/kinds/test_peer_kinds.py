"""XGBoostJob, PaddleJob and JAXJob: their validation, defaults and the settings each process is told.

The variable names and values are the Training Operator v1's, so a job moved from there keeps working;
host-network mode changes only the port a process binds and how it reaches itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_py.api import JobValidationError, parse_job, validate_job, with_defaults
from kubedl_py.api.kinds import kind_api
from kubedl_py.api.kinds.base import TrainingJob
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds import controller_for
from kubedl_py.controllers.pods import addressing_for


def job(kind: str, **replicas: int) -> TrainingJob:
    plugin = kind_api(kind)
    framework = plugin.model.FRAMEWORK
    specs = {
        rtype: {"replicas": n, "template": {"spec": {"containers": [{"name": framework.container_name, "image": "i"}]}}}
        for rtype, n in replicas.items()
    }
    parsed = parse_job(
        {
            "apiVersion": "training.kubedl.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": "j", "namespace": "ml", "uid": "u"},
            "spec": {framework.replica_specs_field: specs},
        }
    )
    return with_defaults(parsed)


def env_of(training: TrainingJob, rtype: str, index: int, addressing: Addressing | None = None) -> dict[str, Any]:
    return dict(
        controller_for(training.kind).rendezvous_env(training, rtype, index, addressing or addressing_for(training))
    )


def test_xgboost_ranks_master_first_and_lists_workers_as_the_training_operator_does() -> None:
    training = job("XGBoostJob", Master=1, Worker=2)
    master, worker1 = env_of(training, "Master", 0), env_of(training, "Worker", 1)
    assert master["RANK"] == "0" and worker1["RANK"] == "2"
    assert master["WORLD_SIZE"] == worker1["WORLD_SIZE"] == "3"
    assert worker1["MASTER_ADDR"] == "j-master-0" and worker1["MASTER_PORT"] == "9999"
    assert worker1["WORKER_ADDRS"] == "j-worker-0,j-worker-1"


def test_xgboost_master_binds_its_host_port_and_workers_use_its_service() -> None:
    training = job("XGBoostJob", Master=1, Worker=1)
    base = addressing_for(training)
    hosted = Addressing(namespace="ml", port=base.port, host_ports={("Master", 0): 31001, ("Worker", 0): 31002})
    assert (
        env_of(training, "Master", 0, hosted)["MASTER_ADDR"],
        env_of(training, "Master", 0, hosted)["MASTER_PORT"],
    ) == (
        "127.0.0.1",
        "31001",
    )
    assert env_of(training, "Worker", 0, hosted)["MASTER_PORT"] == "9999"  # the Service port, stable over failover


@pytest.mark.parametrize(
    ("replicas", "field"), [(0, "spec.xgbReplicaSpecs.Master.replicas"), (2, "spec.xgbReplicaSpecs.Master.replicas")]
)
def test_xgboost_needs_exactly_one_master(replicas: int, field: str) -> None:
    with pytest.raises(JobValidationError) as caught:
        validate_job(job("XGBoostJob", Master=replicas, Worker=1))
    assert field in str(caught.value)


def test_xgboost_without_a_master_is_refused_naming_the_field() -> None:
    with pytest.raises(JobValidationError) as caught:
        validate_job(job("XGBoostJob", Worker=2))
    assert "spec.xgbReplicaSpecs.Master" in str(caught.value)


def test_jax_worker_zero_is_the_coordinator() -> None:
    training = job("JAXJob", Worker=3)
    env = env_of(training, "Worker", 2)
    assert (env["COORDINATOR_ADDRESS"], env["NUM_PROCESSES"], env["PROCESS_ID"]) == ("j-worker-0", "3", "2")
    assert env["COORDINATOR_PORT"] == str(kind_api("JAXJob").model.FRAMEWORK.default_port)


def test_paddle_collective_announces_worker_zero_by_its_pod_ip() -> None:
    training = job("PaddleJob", Worker=2)
    first, second = env_of(training, "Worker", 0), env_of(training, "Worker", 1)
    assert first["POD_IP_DUMMY"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert first["PADDLE_MASTER"].startswith("$(POD_IP_DUMMY):")
    assert second["PADDLE_MASTER"].startswith("j-worker-0:") and second["PADDLE_NNODES"] == "2"
    # The downward-API variable is defined before the one that refers to it.
    assert list(first).index("POD_IP_DUMMY") < list(first).index("PADDLE_MASTER")


def test_paddle_parameter_server_mode_counts_servers_and_trainers() -> None:
    training = job("PaddleJob", Master=1, Worker=2)
    assert env_of(training, "Master", 0)["PADDLE_SERVER_NUM"] == "1"
    assert env_of(training, "Worker", 1)["PADDLE_TRAINER_NUM"] == "1"
    assert env_of(training, "Worker", 1)["PADDLE_MASTER"].startswith("j-master-0:")


def test_paddle_elastic_bounds_follow_each_other_and_are_ordered() -> None:
    document = job("PaddleJob", Worker=2).to_dict()
    document["spec"]["elasticPolicy"] = {"maxReplicas": 4}
    defaulted = with_defaults(parse_job(document)).to_dict()
    assert defaulted["spec"]["elasticPolicy"]["minReplicas"] == 4
    document["spec"]["elasticPolicy"] = {"minReplicas": 5, "maxReplicas": 4}
    with pytest.raises(JobValidationError) as caught:
        validate_job(parse_job(document))
    assert "spec.elasticPolicy.minReplicas" in str(caught.value)


def test_mpi_launcher_waits_until_every_worker_has_started() -> None:
    training = job("MPIJob", Launcher=1, Worker=2)
    plugin = controller_for(training.kind)

    def pod(phase: str) -> dict[str, Any]:
        return {"status": {"phase": phase}}

    assert not plugin.may_start(training, "Launcher", {"Worker": [pod("Running"), None]})
    assert not plugin.may_start(training, "Launcher", {"Worker": [pod("Running"), pod("Pending")]})
    assert plugin.may_start(training, "Launcher", {"Worker": [pod("Running"), pod("Running")]})
    # A Worker that already finished must not hold the launcher back for ever.
    assert plugin.may_start(training, "Launcher", {"Worker": [pod("Succeeded"), pod("Running")]})
    assert plugin.may_start(training, "Worker", {"Worker": [None, None]})
