"""A kubeflow.org MPIJob's pods and objects as the Training Operator v1 makes them (kubectl exec, no SSH); a
training.kubedl.io one keeps SSH. Running it for real: e2e/test_mpi.py."""

from __future__ import annotations

from typing import Any

from kubedl_py.api import parse_job, with_defaults
from kubedl_py.controllers.kinds.mpi import CONTROLLER, KUBEXEC
from kubedl_py.controllers.pods import addressing_for, build_pod
from kubedl_py.templates.render import ManifestOptions, render_manifests


def mpijob(api_version: str) -> Any:
    raw = {
        "apiVersion": api_version,
        "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": "team", "uid": "0123456789"},
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "mpi", "image": "h", "command": ["mpirun"]}]}},
                },
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "mpi", "image": "h"}]}}},
            }
        },
    }
    return with_defaults(parse_job(raw))


def test_a_command_less_worker_sleeps_and_the_launcher_execs_into_it() -> None:
    job = mpijob("kubeflow.org/v1")
    addressing = addressing_for(job)
    worker = build_pod(job, "Worker", 0, addressing)
    (container,) = worker["spec"]["containers"]
    assert (container["command"], container["args"]) == (["sleep"], ["365d"])
    assert not any("secret" in v for v in worker["spec"]["volumes"])  # no SSH key
    assert {"name": "mpi-job-config", "mountPath": "/etc/mpi"} in container["volumeMounts"]

    launcher = build_pod(job, "Launcher", 0, addressing)
    spec = launcher["spec"]
    assert spec["serviceAccountName"] == "pi-launcher"
    assert [c["name"] for c in spec["initContainers"]] == ["kubectl-delivery"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["OMPI_MCA_plm_rsh_agent"] == KUBEXEC == "/etc/mpi/kubexec.sh"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert {"/etc/mpi", "/opt/kube"} <= mounts


def test_the_launchers_role_may_exec_into_the_jobs_workers_only() -> None:
    job = mpijob("kubeflow.org/v1")
    objects = {o.resource.kind: o.body for o in CONTROLLER.owned_objects(job, addressing_for(job))}
    assert set(objects) == {"ConfigMap", "ServiceAccount", "Role", "RoleBinding"}
    assert objects["ConfigMap"]["data"]["hostfile"] == "pi-worker-0 slots=1\npi-worker-1 slots=1\n"
    assert 'exec "$kubectl" exec "$pod" -- /bin/sh -c "$*"' in objects["ConfigMap"]["data"]["kubexec.sh"]
    exec_rule = next(r for r in objects["Role"]["rules"] if r["resources"] == ["pods/exec"])
    assert exec_rule["resourceNames"] == ["pi-worker-0", "pi-worker-1"]
    assert sorted(exec_rule["verbs"]) == ["create", "get"]
    assert objects["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "pi-launcher", "namespace": "team"}
    ]


def test_a_training_kubedl_io_mpijob_keeps_ssh() -> None:
    job = mpijob("training.kubedl.io/v1alpha1")
    kinds = {o.resource.kind for o in CONTROLLER.owned_objects(job, addressing_for(job))}
    assert kinds == {"ConfigMap", "Secret"}
    worker = build_pod(job, "Worker", 0, addressing_for(job))
    assert "command" not in worker["spec"]["containers"][0]  # the user's sshd command is the template's business


def test_the_controller_holds_pods_exec_only_when_it_serves_kubeflow_org() -> None:
    assert "pods/exec" not in render_manifests()
    assert "pods/exec" in render_manifests(ManifestOptions(kubeflow_api=True))
