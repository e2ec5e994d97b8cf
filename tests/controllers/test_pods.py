"""Pods and Services built from a job: contract names and labels, the user's template kept, host mode."""

from __future__ import annotations

from kubedl_py import agent
from kubedl_py.api import constants as c
from kubedl_py.api import parse_job, with_defaults
from kubedl_py.api.common import EnvVar, FailurePolicy
from kubedl_py.controllers.pods import addressing_for, build_pod, build_service
from tests.controllers.test_rendezvous import pytorchjob, tfjob


def test_pod_has_contract_name_labels_owner_and_env() -> None:
    job = pytorchjob()
    pod = build_pod(job, "Master", 0, addressing_for(job))
    meta = pod["metadata"]
    assert meta["name"] == "ddp-master-0"
    assert meta["namespace"] == "ml"
    assert meta["labels"][c.LABEL_JOB_NAME] == "ddp"
    assert meta["labels"][c.LABEL_REPLICA_TYPE] == "master"
    assert meta["labels"][c.LABEL_REPLICA_INDEX] == "0"
    assert meta["labels"][c.LABEL_JOB_ROLE] == "master"
    (owner,) = meta["ownerReferences"]
    assert owner == {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "name": "ddp",
        "uid": "uid-7",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    (container,) = pod["spec"]["containers"]
    assert {e["name"]: e["value"] for e in container["env"]}["RANK"] == "0"
    assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}]
    assert pod["spec"]["restartPolicy"] == "OnFailure"
    worker = build_pod(job, "Worker", 1, addressing_for(job))
    assert c.LABEL_JOB_ROLE not in worker["metadata"]["labels"]


def test_user_env_is_never_overwritten_and_template_is_kept() -> None:
    job = pytorchjob()
    template = job.spec.pytorch_replica_specs["Worker"].template
    container = template.spec.containers[0]
    container.env = [EnvVar(name="MASTER_PORT", value="1")]
    setattr(template.spec, "nodeSelector", {"gpu": "a100"})  # noqa: B010 - an extra (untyped) field
    pod = build_pod(job, "Worker", 0, addressing_for(job))
    env = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "MASTER_PORT"]
    assert env == [{"name": "MASTER_PORT", "value": "1"}]
    assert pod["spec"]["nodeSelector"] == {"gpu": "a100"}


def test_exit_code_policy_runs_the_pod_with_never() -> None:
    job = tfjob("t", "ns", PS=1, Worker=2)
    pod = build_pod(job, "Worker", 0, addressing_for(job))
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    assert [e["name"] for e in container["env"]] == ["TF_CONFIG"]


def test_exit_code_replicas_restart_retryable_exits_in_place_unless_recreated_or_whole() -> None:
    """restartMode Auto (default): a retryable exit (128-255) restarts the main container in its pod by the
    kubelet's restart rules, any other exit ends it (Never); Recreate and restartScope Job keep today's pod."""
    job = tfjob("t", "ns", PS=1, Worker=2)
    main = build_pod(job, "Worker", 0, addressing_for(job))["spec"]["containers"][0]
    assert main["restartPolicy"] == "Never"
    (rule,) = main["restartPolicyRules"]
    assert rule == {"action": "Restart", "exitCodes": {"operator": "In", "values": list(range(128, 256))}}
    for policy in (
        {"restartMode": "Recreate"},
        {"restartScope": "Job"},
        {"restartScope": "Job", "restartMode": "Auto"},
    ):
        other = tfjob("t", "ns", PS=1, Worker=2)
        other.run_policy.failure_policy = FailurePolicy.model_validate(policy)
        container = build_pod(other, "Worker", 0, addressing_for(other))["spec"]["containers"][0]
        assert "restartPolicyRules" not in container and "restartPolicy" not in container, policy
    on_failure = pytorchjob()  # restartPolicy OnFailure: the pod's own policy restarts it, no rule needed
    container = build_pod(on_failure, "Worker", 0, addressing_for(on_failure))["spec"]["containers"][0]
    assert "restartPolicyRules" not in container


def test_in_place_with_a_whole_job_restart_is_accepted() -> None:
    """restartMode InPlace with restartScope Job was refused while the whole job could not restart in place."""
    document = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "runPolicy": {"failurePolicy": {"restartScope": "Job", "restartMode": "InPlace"}},
            "pytorchReplicaSpecs": {
                "Master": {"template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}}}
            },
        },
    }
    policy = parse_job(document).run_policy.failure_policy
    assert policy is not None and (policy.restart_scope, policy.restart_mode) == ("Job", "InPlace")


def test_a_pod_of_a_job_restarted_whole_in_place_carries_the_agent() -> None:
    """With an agent image (restartScope Job, in place): the main container's exits its replica retries restart
    the pod whole (RestartAllContainers); the barrier (last init container) and the watcher (a native sidecar
    whose exit 86 restarts the pod whole) read the downward API volume and keep the pod's attempt in an
    emptyDir; both run unprivileged from the agent image; the template's own init containers come first."""

    def replica(policy: str, **spec: object) -> dict[str, object]:
        return {
            "restartPolicy": policy,
            "template": {"spec": {"containers": [{"name": "tensorflow", "image": "i"}], **spec}},
        }

    document = {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "t", "namespace": "ns", "uid": "u"},
        "spec": {
            "failurePolicy": {"restartScope": "Job"},
            "tfReplicaSpecs": {
                "PS": replica("Never"),
                "Worker": replica("ExitCode", initContainers=[{"name": "fetch", "image": "busybox"}]),
            },
        },
    }
    job = with_defaults(parse_job(document))
    pod = build_pod(job, "Worker", 0, addressing_for(job), agent_image="registry/kubedl-py:1")
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    main = spec["containers"][0]
    assert main["restartPolicy"] == "Never"
    assert main["restartPolicyRules"] == [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": list(range(128, 256))}}
    ]
    fetch, barrier, watcher = spec["initContainers"]
    assert fetch["name"] == "fetch"
    assert (barrier["name"], barrier["command"]) == (agent.BARRIER, ["kubedl-py-agent", "barrier"])
    assert "restartPolicy" not in barrier  # a plain init container: it runs again on every restart whole
    assert (watcher["name"], watcher["command"]) == (agent.WATCHER, ["kubedl-py-agent", "watcher"])
    assert watcher["restartPolicy"] == "Always"
    assert watcher["restartPolicyRules"] == [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [agent.RESTART_EXIT_CODE]}}
    ]
    for container in (barrier, watcher):
        assert container["image"] == "registry/kubedl-py:1"
        security = container["securityContext"]
        assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"]
        assert security["capabilities"] == {"drop": ["ALL"]} and security["allowPrivilegeEscalation"] is False
        assert {m["mountPath"] for m in container["volumeMounts"]} == {agent.SIGNALS_DIR, agent.STATE_DIR}
    volumes = {v["name"]: v for v in spec["volumes"]}
    paths = {
        item["path"]: item["fieldRef"]["fieldPath"] for item in volumes[agent.SIGNALS_VOLUME]["downwardAPI"]["items"]
    }
    assert paths == {
        agent.ATTEMPT_FILE: f"metadata.annotations['{agent.ANNOTATION_ATTEMPT}']",
        agent.RELEASED_FILE: f"metadata.annotations['{agent.ANNOTATION_RELEASED}']",
        agent.CREATED_FILE: f"metadata.annotations['{agent.ANNOTATION_CREATED}']",
    }
    assert volumes[agent.STATE_VOLUME]["emptyDir"]["medium"] == "Memory"
    # OnFailure replicas restart the job on any non-zero exit; Never replicas' exits end their pod (no rule).
    ps = build_pod(job, "PS", 0, addressing_for(job), agent_image="registry/kubedl-py:1")["spec"]["containers"][0]
    assert "restartPolicyRules" not in ps and ps["restartPolicy"] == "Never"
    job.replica_specs["PS"].restart_policy = "OnFailure"
    ps = build_pod(job, "PS", 0, addressing_for(job), agent_image="registry/kubedl-py:1")["spec"]["containers"][0]
    assert ps["restartPolicyRules"] == [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}
    ]


def test_normal_mode_service_is_headless_with_the_container_ports() -> None:
    job = tfjob("t", "ns", PS=1, Worker=2)
    service = build_service(job, "PS", 0, addressing_for(job))
    assert service["metadata"]["name"] == "t-ps-0"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [{"name": "tfjob-port", "port": 2222, "targetPort": 2222, "protocol": "TCP"}]
    assert service["spec"]["selector"] == {
        c.LABEL_CONTROLLER: "kubedl-py",
        c.LABEL_JOB_NAME: "t",
        c.LABEL_REPLICA_TYPE: "ps",
        c.LABEL_REPLICA_INDEX: "0",
        c.LABEL_JOB_UID: job.metadata.uid,  # only the job's own pods, never another job's of this name
    }


def test_host_mode_pod_and_service() -> None:
    job = tfjob("h", "ns", PS=1, Worker=1)
    addressing = addressing_for(job, host_ports={("PS", 0): 24001, ("Worker", 0): 24002})
    pod = build_pod(job, "PS", 0, addressing)
    assert pod["spec"]["hostNetwork"] is True
    assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    port = pod["spec"]["containers"][0]["ports"][0]
    assert (port["name"], port["containerPort"], port["hostPort"]) == ("tfjob-port", 24001, 24001)
    assert pod["metadata"]["annotations"][c.ANNOTATION_HOST_PORT] == "24001"
    service = build_service(job, "PS", 0, addressing)
    assert "clusterIP" not in service["spec"]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "tfjob-port", "port": 2222, "targetPort": 24001, "protocol": "TCP"}]
