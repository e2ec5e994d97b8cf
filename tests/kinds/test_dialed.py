"""Which replicas each kind says its peers dial, and that no address a pod is told names a Service not made.

The second test is the contract between a kind's ``dialed`` and everything else it writes: every replica name
in any replica's settings (``MASTER_ADDR``, ``TF_CONFIG``, ``WORKER_ADDRS``...) or in an object the job owns
(MPI's hostfile) must be one that gets a Service, in both network modes.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kubedl_py.api import JobValidationError, parse_job, validate_job, with_defaults
from kubedl_py.api import constants as c
from kubedl_py.api.kinds import kind_api
from kubedl_py.api.kinds.base import TrainingJob
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds import controller_for
from kubedl_py.controllers.pods import addressing_for
from kubedl_py.controllers.rendezvous import service_slots


def job(
    kind: str,
    replicas: dict[str, int],
    *,
    group: str = c.API_VERSION,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> TrainingJob:
    framework = kind_api(kind).framework
    specs = {
        rtype: {"replicas": n, "template": {"spec": {"containers": [{"name": framework.container_name, "image": "i"}]}}}
        for rtype, n in replicas.items()
    }
    metadata: dict[str, Any] = {"name": "j", "namespace": "ml", "uid": "0123456789"}
    if annotations:
        metadata["annotations"] = annotations
    document = {"apiVersion": group, "kind": kind, "metadata": metadata, "spec": {framework.replica_specs_field: specs}}
    document["spec"].update(spec)
    return with_defaults(parse_job(document))


CASES: list[tuple[str, dict[str, int], dict[str, Any], set[tuple[str, int]]]] = [
    ("PyTorchJob", {"Master": 1, "Worker": 3}, {}, {("Master", 0)}),
    ("PyTorchJob", {"Worker": 3}, {}, {("Worker", 0)}),
    (
        "PyTorchJob",
        {"Worker": 3},
        {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 3}},
        {("Worker", 0), ("Worker", 1), ("Worker", 2)},
    ),
    ("TFJob", {"PS": 1, "Worker": 2, "Evaluator": 1}, {}, {("PS", 0), ("Worker", 0), ("Worker", 1)}),
    ("TFJob", {"Chief": 1, "Worker": 1}, {}, {("Chief", 0), ("Worker", 0)}),
    ("TFJob", {"Worker": 1}, {}, set()),
    ("MPIJob", {"Launcher": 1, "Worker": 2}, {}, {("Worker", 0), ("Worker", 1)}),
    (
        "MPIJob",
        {"Launcher": 1, "Worker": 2},
        {"mpiImplementation": "Intel"},
        {("Launcher", 0), ("Worker", 0), ("Worker", 1)},
    ),
    (
        "MPIJob",
        {"Launcher": 1, "Worker": 2},
        {"runLauncherAsWorker": True},
        {("Launcher", 0), ("Worker", 0), ("Worker", 1)},
    ),
    ("XGBoostJob", {"Master": 1, "Worker": 2}, {}, {("Master", 0), ("Worker", 0), ("Worker", 1)}),
    ("XGBoostJob", {"Master": 1}, {}, {("Master", 0)}),
    ("JAXJob", {"Worker": 3}, {}, {("Worker", 0)}),
    ("PaddleJob", {"Worker": 3}, {}, {("Worker", 0)}),
    ("PaddleJob", {"Master": 1, "Worker": 2}, {}, {("Master", 0)}),
]


def _ids(case: tuple[str, dict[str, int], dict[str, Any], set[tuple[str, int]]]) -> str:
    kind, replicas, spec, _ = case
    return "-".join([kind, *(f"{t}{n}" for t, n in replicas.items()), *spec])


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_each_kind_names_the_replicas_its_peers_dial(
    case: tuple[str, dict[str, int], dict[str, Any], set[tuple[str, int]]],
) -> None:
    kind, replicas, spec, expected = case
    training = job(kind, replicas, **spec)
    assert validate_job(training) == []
    assert service_slots(training) == expected


def _host_addressing(training: TrainingJob) -> Addressing:
    base = addressing_for(training)
    ports = {
        (t, i): 31000 + 10 * n + i
        for n, (t, spec) in enumerate(training.replica_specs.items())
        for i in range(spec.replicas or 0)
    }
    return Addressing(namespace=base.namespace, port=base.port, type_ports=base.type_ports, host_ports=ports)


def _texts(training: TrainingJob, addressing: Addressing) -> list[str]:
    """Every value a replica is told (its settings) and every owned object's data."""
    plugin = controller_for(training.kind)
    texts: list[str] = []
    for rtype, spec in training.replica_specs.items():
        for index in range(spec.replicas or 0):
            texts += [json.dumps(v) for v in plugin.rendezvous_env(training, rtype, index, addressing).values()]
    for owned in plugin.owned_objects(training, addressing):
        texts.append(json.dumps(owned.body.get("data") or {}))
    return texts


@pytest.mark.parametrize("host", [False, True], ids=["pod-network", "host-network"])
@pytest.mark.parametrize("group", [c.API_VERSION, "kubeflow.org/v1"], ids=["kubedl", "kubeflow"])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_no_address_names_a_replica_that_gets_no_service(
    case: tuple[str, dict[str, int], dict[str, Any], set[tuple[str, int]]], host: bool, group: str
) -> None:
    kind, replicas, spec, _ = case
    training = job(kind, replicas, group=group, annotations={c.ANNOTATION_REPLICA_SERVICES: "dialed"}, **spec)
    addressing = _host_addressing(training) if host else addressing_for(training)
    made = {f"j-{t.lower()}-{i}" for t, i in service_slots(training)}
    named = {m for text in _texts(training, addressing) for m in re.findall(r"\bj-[a-z]+-\d+\b", text)}
    launcher_pod = {"j-launcher-0"} if kind == "MPIJob" and group != c.API_VERSION else set()
    # kubectl exec's hostfile names the launcher pod (runLauncherAsWorker) through the API, not through DNS
    assert named - made - launcher_pod == set(), f"named without a Service: {sorted(named - made)}"


def test_kubeflow_keeps_a_service_per_replica_unless_the_job_opts_out() -> None:
    replicas = {"Master": 1, "Worker": 2}
    every = {("Master", 0), ("Worker", 0), ("Worker", 1)}
    assert service_slots(job("PyTorchJob", replicas, group="kubeflow.org/v1")) == every
    opted_out = job(
        "PyTorchJob", replicas, group="kubeflow.org/v1", annotations={c.ANNOTATION_REPLICA_SERVICES: "dialed"}
    )
    assert service_slots(opted_out) == {("Master", 0)}
    opted_in = job("PyTorchJob", replicas, annotations={c.ANNOTATION_REPLICA_SERVICES: "all"})
    assert service_slots(opted_in) == every


@pytest.mark.parametrize("value", ["All", "none", ""])
def test_a_misspelt_choice_of_services_is_refused_naming_the_annotation(value: str) -> None:
    with pytest.raises(JobValidationError) as refused:
        job("PyTorchJob", {"Master": 1}, annotations={c.ANNOTATION_REPLICA_SERVICES: value})
    (error,) = refused.value.errors
    assert error.field == f"metadata.annotations[{c.ANNOTATION_REPLICA_SERVICES}]"
    assert f"{value!r} is not a choice of Services" in error.message and "'dialed'" in error.message
