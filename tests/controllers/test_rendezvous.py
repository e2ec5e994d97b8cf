"""Rendezvous settings with concrete values: what each process is told about itself and its peers."""

from __future__ import annotations

import json
from typing import Any

from kubedl_py.api import PyTorchJob, TFJob, parse_job, with_defaults
from kubedl_py.controllers.kinds.pytorch import pytorch_env
from kubedl_py.controllers.kinds.tensorflow import tf_config
from kubedl_py.controllers.pods import addressing_for
from kubedl_py.controllers.rendezvous import rendezvous_env as tf_env


def _template(name: str = "pytorch", port: int | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "img"}
    if port is not None:
        container["ports"] = [{"name": f"{'pytorchjob' if name == 'pytorch' else 'tfjob'}-port", "containerPort": port}]
    return {"spec": {"containers": [container]}}


def tfjob(name: str, namespace: str, **replicas: int) -> TFJob:
    specs = {rtype: {"replicas": n, "template": _template("tensorflow")} for rtype, n in replicas.items()}
    job = parse_job(
        {
            "apiVersion": "training.kubedl.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": name, "namespace": namespace, "uid": "u-1"},
            "spec": {"tfReplicaSpecs": specs},
        }
    )
    assert isinstance(job, TFJob)
    return with_defaults(job)


def pytorchjob(name: str = "ddp", namespace: str = "ml", port: int | None = None, **spec: Any) -> PyTorchJob:
    masters = spec.pop("masters", 1)
    workers = spec.pop("workers", 2)
    specs: dict[str, Any] = {}
    if masters:
        specs["Master"] = {"replicas": masters, "template": _template(port=port)}
    if workers:
        specs["Worker"] = {"replicas": workers, "template": _template(port=port)}
    job = parse_job(
        {
            "apiVersion": "training.kubedl.io/v1alpha1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": namespace, "uid": "uid-7"},
            "spec": {"pytorchReplicaSpecs": specs, **spec},
        }
    )
    assert isinstance(job, PyTorchJob)
    return with_defaults(job)


def test_tf_config_of_the_mnist_example_is_exact() -> None:
    job = tfjob("mnist", "kubedl", PS=1, Worker=2)
    env = tf_env(job, "Worker", 1, addressing_for(job))
    assert env["TF_CONFIG"] == (
        '{"cluster":{"ps":["mnist-ps-0.kubedl.svc:2222"],"worker":["mnist-worker-0.kubedl.svc:2222",'
        '"mnist-worker-1.kubedl.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}'
    )


def test_tf_config_is_absent_for_a_single_replica() -> None:
    job = tfjob("solo", "default", Worker=1)
    assert tf_env(job, "Worker", 0, addressing_for(job)) == {}


def test_evaluator_is_its_own_task_but_not_in_the_cluster() -> None:
    job = tfjob("ev", "default", Chief=1, Worker=2, Evaluator=1)
    config = tf_config(job, "Evaluator", 0, addressing_for(job))
    assert config is not None
    assert set(config["cluster"]) == {"chief", "worker"}
    assert config["task"] == {"type": "evaluator", "index": 0}
    chief = tf_config(job, "Chief", 0, addressing_for(job))
    assert chief is not None
    assert "evaluator" not in chief["cluster"]


def test_custom_cluster_domain() -> None:
    job = tfjob("d", "team", PS=1, Worker=1)
    config = tf_config(job, "PS", 0, addressing_for(job, cluster_domain="corp.local"))
    assert config is not None
    assert config["cluster"]["ps"] == ["d-ps-0.team.svc.corp.local:2222"]


def test_tf_host_mode_own_entry_carries_the_host_port_peers_the_service_port() -> None:
    job = tfjob("h", "ns", PS=2, Worker=1)
    ports = {("PS", 0): 21000, ("PS", 1): 21001, ("Worker", 0): 21002}
    config = tf_config(job, "PS", 1, addressing_for(job, host_ports=ports))
    assert config is not None
    assert config["cluster"] == {
        "ps": ["h-ps-0.ns.svc:2222", "h-ps-1.ns.svc:21001"],
        "worker": ["h-worker-0.ns.svc:2222"],
    }


def test_pytorch_env_master_and_workers() -> None:
    job = pytorchjob()
    addressing = addressing_for(job)
    master = pytorch_env(job, "Master", 0, addressing)
    worker = pytorch_env(job, "Worker", 1, addressing)
    assert master == {
        "MASTER_ADDR": "ddp-master-0",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": "3",
        "RANK": "0",
        "PYTHONUNBUFFERED": "1",
        "PET_MASTER_ADDR": "ddp-master-0",
        "PET_MASTER_PORT": "23456",
        "PET_NPROC_PER_NODE": "auto",  # unset nprocPerNode: torchrun decides, as with the Training Operator
        "PET_NNODES": "3",
        "PET_NODE_RANK": "0",
    }
    assert (worker["RANK"], worker["PET_NODE_RANK"], worker["MASTER_ADDR"]) == ("2", "2", "ddp-master-0")


def test_world_size_multiplies_integer_nproc_only() -> None:
    assert pytorch_env(pytorchjob(nprocPerNode=4), "Worker", 0, addressing_for(pytorchjob()))["WORLD_SIZE"] == "12"
    env = pytorch_env(pytorchjob(nprocPerNode="auto"), "Worker", 0, addressing_for(pytorchjob()))
    assert (env["WORLD_SIZE"], env["PET_NPROC_PER_NODE"]) == ("3", "auto")


def test_custom_master_port_from_the_template() -> None:
    job = pytorchjob(port=29500)
    assert pytorch_env(job, "Worker", 0, addressing_for(job))["MASTER_PORT"] == "29500"


def test_workers_only_job_rendezvous_on_worker_zero() -> None:
    job = pytorchjob(masters=0, workers=3)
    addressing = addressing_for(job)
    envs = [pytorch_env(job, "Worker", i, addressing) for i in range(3)]
    assert {env["MASTER_ADDR"] for env in envs} == {"ddp-worker-0"}
    assert [env["RANK"] for env in envs] == ["0", "1", "2"]
    assert envs[0]["WORLD_SIZE"] == "3"


def test_elastic_policy_env() -> None:
    job = pytorchjob(
        masters=0,
        workers=2,
        elasticPolicy={"minReplicas": 1, "maxReplicas": 4, "maxRestarts": 3, "rdzvConf": [{"key": "a", "value": "1"}]},
    )
    env = pytorch_env(job, "Worker", 1, addressing_for(job))
    assert env["PET_NNODES"] == "1:4"
    assert env["PET_RDZV_ENDPOINT"] == "ddp-worker-0:23456"
    assert env["PET_RDZV_BACKEND"] == "c10d"
    assert env["PET_RDZV_ID"] == "uid-7"
    assert env["PET_MAX_RESTARTS"] == "3"
    assert env["PET_RDZV_CONF"] == "a=1"
    assert "PET_NODE_RANK" not in env


def test_pytorch_host_mode_master_reaches_itself_workers_use_the_service() -> None:
    job = pytorchjob(workers=1)
    ports = {("Master", 0): 25001, ("Worker", 0): 25002}
    addressing = addressing_for(job, host_ports=ports)
    master = pytorch_env(job, "Master", 0, addressing)
    worker = pytorch_env(job, "Worker", 0, addressing)
    assert (master["MASTER_ADDR"], master["MASTER_PORT"]) == ("localhost", "25001")
    assert (master["PET_MASTER_ADDR"], master["PET_MASTER_PORT"]) == ("localhost", "25001")
    assert (worker["MASTER_ADDR"], worker["MASTER_PORT"]) == ("ddp-master-0", "23456")
    assert (worker["PET_MASTER_ADDR"], worker["PET_MASTER_PORT"]) == ("ddp-master-0", "23456")


def test_tf_config_json_is_valid_for_every_replica() -> None:
    job = tfjob("all", "x", PS=2, Worker=3, Chief=1)
    addressing = addressing_for(job)
    for rtype, count in (("PS", 2), ("Worker", 3), ("Chief", 1)):
        for index in range(count):
            config = json.loads(tf_env(job, rtype, index, addressing)["TF_CONFIG"])
            assert config["task"] == {"type": rtype.lower(), "index": index}
            assert len(config["cluster"]["worker"]) == 3
