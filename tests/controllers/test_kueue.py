"""The pure parts of kubedl-py's Kueue step (controllers/kueue.py): the Workload made for a job, and what an
admission adds to the pods. The behaviour against a real Kueue is in tests/kueue_workloads."""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_py.api import constants as c
from kubedl_py.api import parse_job, with_defaults
from kubedl_py.api.groups import KUBEDL, KUBEFLOW
from kubedl_py.cli.parser import KUEUE_MODES as CLI_KUEUE_MODES
from kubedl_py.controllers.kueue import (
    KUEUE_MODES,
    TOPOLOGY_GATE,
    PlacementConflict,
    apply,
    build_workload,
    group_managed,
    pod_set_infos,
)


def job(**labels: str) -> Any:
    container = {"name": "pytorch", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    template: dict[str, Any] = {"spec": {"containers": [container]}}
    raw = {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": {"name": "mnist", "namespace": "team", "uid": "0123456789", "labels": labels},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {
                    "replicas": 3,
                    "template": {
                        **template,
                        "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"}},
                    },
                },
            }
        },
    }
    return with_defaults(parse_job(raw))


def test_the_cli_offers_the_modes_the_controller_knows() -> None:
    assert tuple(CLI_KUEUE_MODES) == tuple(KUEUE_MODES)


@pytest.mark.parametrize(
    ("mode", "kubedl", "kubeflow"), [("off", False, False), ("kubedl", True, False), ("all", True, True)]
)
def test_which_groups_each_mode_queues(mode: Any, kubedl: bool, kubeflow: bool) -> None:
    assert (group_managed(mode, KUBEDL), group_managed(mode, KUBEFLOW)) == (kubedl, kubeflow)


def test_the_workload_has_a_pod_set_per_replica_type_and_is_owned_by_the_job() -> None:
    workload = build_workload(
        job(**{"kueue.x-k8s.io/queue-name": "q"}),
        priority=7,
        priority_ref={"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "p"},
    )
    assert workload["metadata"]["name"] == "pytorchjob-mnist-01234"
    assert workload["metadata"]["ownerReferences"][0]["uid"] == "0123456789"
    assert workload["metadata"]["ownerReferences"][0]["controller"] is True
    spec = workload["spec"]
    assert (spec["queueName"], spec["priority"], spec["priorityClassRef"]["name"]) == ("q", 7, "p")
    assert [(s["name"], s["count"]) for s in spec["podSets"]] == [("master", 1), ("worker", 3)]
    assert spec["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1"}
    assert "topologyRequest" not in spec["podSets"][0]
    assert spec["podSets"][1]["topologyRequest"] == {"required": "rack", "podIndexLabel": c.LABEL_REPLICA_INDEX}


def admitted(topology: bool = False) -> dict[str, Any]:
    assignment: dict[str, Any] = {"name": "worker", "flavors": {"cpu": "spot", "memory": "spot"}, "count": 3}
    if topology:
        assignment["topologyAssignment"] = {"levels": ["rack"], "slices": []}
    return {
        "metadata": {"name": "pytorchjob-mnist-01234"},
        "spec": {"queueName": "q", "podSets": [{"name": "worker", "count": 3}]},
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": [assignment]},
            "admissionChecks": [{"name": "prov", "podSetUpdates": [{"name": "worker", "labels": {"from": "check"}}]}],
        },
    }


FLAVORS = {
    "spot": {
        "spec": {
            "nodeLabels": {"pool": "spot"},
            "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
        }
    }
}


def test_an_admission_puts_the_pods_on_the_flavors_nodes() -> None:
    info = pod_set_infos(admitted(), FLAVORS)["worker"]
    pod: dict[str, Any] = {"metadata": {"labels": {"a": "b"}}, "spec": {"nodeSelector": {"zone": "z1"}}}
    apply(pod, info)
    assert pod["spec"]["nodeSelector"] == {"zone": "z1", "pool": "spot"}
    assert pod["spec"]["tolerations"] == [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    labels = pod["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/podset"] == "worker"
    assert labels["kueue.x-k8s.io/local-queue-name"] == "q"
    assert labels["kueue.x-k8s.io/cluster-queue-name"] == "cq"
    assert labels["from"] == "check"  # an admission check's pod-set update
    assert "schedulingGates" not in pod["spec"]
    apply(pod, info)  # applied twice: nothing doubled
    assert len(pod["spec"]["tolerations"]) == 1


def test_a_topology_assignment_gates_the_pods_for_kueues_ungater() -> None:
    info = pod_set_infos(admitted(topology=True), FLAVORS)["worker"]
    pod: dict[str, Any] = {"metadata": {}, "spec": {}}
    apply(pod, info)
    assert pod["spec"]["schedulingGates"] == [{"name": TOPOLOGY_GATE}]
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == "pytorchjob-mnist-01234"
    # the pod set asked for no topology: Kueue's implicit one is unconstrained
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-unconstrained-topology"] == "true"


def test_a_template_selector_that_contradicts_the_flavor_is_refused() -> None:
    info = pod_set_infos(admitted(), FLAVORS)["worker"]
    pod: dict[str, Any] = {"metadata": {}, "spec": {"nodeSelector": {"pool": "on-demand"}}}
    with pytest.raises(PlacementConflict, match="pool=on-demand"):
        apply(pod, info)
