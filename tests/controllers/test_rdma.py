"""What spec.rdma, spec.placement and a gang scheduler turn a replica's pod into, with concrete values.

Each test builds the pod of one replica from a job the way the controller does (``build_pod``) and
asserts on its fields; the user's template always wins, and a job without the new fields gets exactly
the pod it got before they existed (golden pods in data/pods_without_rdma.json).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from kubedl_py.api import PyTorchJob, RdmaSpec, TFJob, load_jobs_file, parse_job, with_defaults
from kubedl_py.api.validation import JobValidationError, parse_rdma
from kubedl_py.controllers import gang, gang_schedulers, rdma
from kubedl_py.controllers.failures.policies import in_place_rule, restarts_in_place
from kubedl_py.controllers.gang import Gang, build_podgroup, min_member
from kubedl_py.controllers.pods import addressing_for, owner_reference
from kubedl_py.controllers.rdma import (
    HOST_NETWORK_EXCLUDED,
    HOST_NETWORK_IFNAME,
    nccl_env,
    resolve_rdma,
)
from tests.controllers.building import built_pod

DATA = Path(__file__).parent / "data"
HCA = "rdma/hca"


def _job(
    *, rdma: dict[str, Any] | None = None, host: bool = False, container: dict[str, Any] | None = None, **spec: Any
) -> PyTorchJob:
    main = {"name": "pytorch", "image": "img", "command": ["torchrun", "train.py"], **(container or {})}
    template: dict[str, Any] = {"spec": {"containers": [main, {"name": "sidecar", "image": "side"}]}}
    template_spec = spec.pop("template_spec", {})
    template["spec"].update(template_spec)
    if "template_metadata" in spec:
        template["metadata"] = spec.pop("template_metadata")
    body: dict[str, Any] = {
        "pytorchReplicaSpecs": {"Master": {"template": template}, "Worker": {"replicas": 3, "template": template}},
        **spec,
    }
    if rdma is not None:
        body["rdma"] = rdma
    metadata: dict[str, Any] = {"name": "llm", "namespace": "ml", "uid": "uid-9"}
    if host:
        metadata["annotations"] = {"kubedl.io/network-mode": "host"}
    job = parse_job(
        {"apiVersion": "training.kubedl.io/v1alpha1", "kind": "PyTorchJob", "metadata": metadata, "spec": body}
    )
    assert isinstance(job, PyTorchJob)
    return with_defaults(job)


def _pod(job: PyTorchJob | TFJob, replica_type: str = "Worker", index: int = 0, **kwargs: Any) -> dict[str, Any]:
    host = {(replica_type, index): 20001} if job.host_network else {}
    return built_pod(job, replica_type, index, addressing_for(job, host_ports=host), **kwargs)


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env") or []}


def _defaulted(job: PyTorchJob | TFJob) -> PyTorchJob | TFJob:
    if isinstance(job, PyTorchJob):
        return with_defaults(job)
    return with_defaults(job)


def test_jobs_without_the_new_fields_get_byte_identical_pods() -> None:
    golden = json.loads((DATA / "pods_without_rdma.json").read_text())
    built = {}
    in_place = 0
    for raw in golden["jobs"]:
        job = _defaulted(parse_job(raw))
        slots = [(t, i) for t, s in job.replica_specs.items() for i in range(s.replicas or 0)]
        host = {slot: 20000 + n for n, slot in enumerate(slots)} if job.host_network else {}
        addressing = addressing_for(job, host_ports=host)
        for t, i in slots:
            # The controller's RDMA defaults apply only to jobs that opt in: these must not change.
            pod = built_pod(job, t, i, addressing, rdma_defaults=RdmaSpec(devices={HCA: 1}, shm_size="1Gi"))
            # What the golden pods predate: an ExitCode replica's restart rule (restartMode Auto, test_pods.py);
            # taken off here, so everything else must still be byte-identical.
            main = pod["spec"]["containers"][0]
            if restarts_in_place(job, t):
                assert (main.pop("restartPolicy"), main.pop("restartPolicyRules")) == ("Never", [in_place_rule()])
                in_place += 1
            built[f"{job.name}:{t}:{i}"] = json.loads(json.dumps(pod))
    assert len(built) == 12
    assert in_place > 0
    assert json.dumps(built, sort_keys=True) == json.dumps(golden["pods"], sort_keys=True)


def test_rdma_opt_in_adds_device_capability_shm_and_nccl_env_in_pod_network_mode() -> None:
    job = _job(rdma={"devices": {HCA: 1}, "shmSize": "16Gi", "nccl": {"NCCL_IB_HCA": "mlx5", "NCCL_IB_GID_INDEX": 3}})
    pod = _pod(job)
    main, sidecar = pod["spec"]["containers"]
    assert main["resources"] == {"limits": {HCA: "1"}, "requests": {HCA: "1"}}
    assert main["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    env = _env(main)
    assert {k: v for k, v in env.items() if k.startswith("NCCL_")} == {
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_TIMEOUT": "22",
        "NCCL_IB_QPS_PER_CONNECTION": "8",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_IB_HCA": "mlx5",
        "NCCL_IB_GID_INDEX": "3",
    }
    assert env["RANK"] == "1"  # the rendezvous environment is still there
    assert pod["spec"]["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
    assert main["volumeMounts"] == sidecar["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    # Only the framework's container gets devices, capability and NCCL variables.
    assert "resources" not in sidecar and "securityContext" not in sidecar
    assert not any(name.startswith("NCCL_") for name in _env(sidecar))
    assert "k8s.v1.cni.cncf.io/networks" not in (pod["metadata"].get("annotations") or {})
    assert "hostNetwork" not in pod["spec"]


def test_what_the_user_set_in_the_template_wins() -> None:
    job = _job(
        rdma={"devices": {HCA: 1, "nvidia.com/gpu": 8}, "shmSize": "16Gi", "nccl": {"NCCL_IB_HCA": "mlx5"}},
        container={
            "env": [{"name": "NCCL_IB_HCA", "value": "mlx5_0,mlx5_1"}, {"name": "NCCL_IB_TIMEOUT", "value": "18"}],
            "resources": {"limits": {HCA: 2, "memory": "64Gi"}},
            "securityContext": {"capabilities": {"add": ["SYS_PTRACE"], "drop": ["NET_RAW"]}},
            "volumeMounts": [{"name": "myshm", "mountPath": "/dev/shm"}],
        },
        template_spec={"volumes": [{"name": "myshm", "emptyDir": {"medium": "Memory"}}]},
    )
    pod = _pod(job)
    main = pod["spec"]["containers"][0]
    assert main["resources"] == {
        "limits": {HCA: 2, "memory": "64Gi", "nvidia.com/gpu": "8"},
        "requests": {"nvidia.com/gpu": "8"},
    }
    assert main["securityContext"]["capabilities"] == {"add": ["SYS_PTRACE", "IPC_LOCK"], "drop": ["NET_RAW"]}
    env = _env(main)
    assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1" and env["NCCL_IB_TIMEOUT"] == "18"
    assert [e["name"] for e in main["env"]].count("NCCL_IB_HCA") == 1
    assert pod["spec"]["volumes"] == [{"name": "myshm", "emptyDir": {"medium": "Memory"}}]
    assert main["volumeMounts"] == [{"name": "myshm", "mountPath": "/dev/shm"}]


def test_host_network_mode_excludes_the_nodes_virtual_interfaces_for_nccl() -> None:
    pod = _pod(_job(rdma={}, host=True))
    main = pod["spec"]["containers"][0]
    assert pod["spec"]["hostNetwork"] is True
    assert _env(main)["NCCL_SOCKET_IFNAME"] == HOST_NETWORK_IFNAME
    assert HOST_NETWORK_IFNAME.startswith("^lo,docker,veth,cni,flannel,cali,tunl,vxlan,")
    assert len(HOST_NETWORK_EXCLUDED) <= 16  # NCCL parses at most MAX_IFS=16 entries
    # An empty block opts in with defaults only: no device, a memory-backed /dev/shm without a size limit.
    assert "resources" not in main
    assert pod["spec"]["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    # A job's own interface choice beats the mode's default.
    pod = _pod(_job(rdma={"nccl": {"NCCL_SOCKET_IFNAME": "=bond0"}}, host=True))
    assert _env(pod["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "=bond0"
    # A template that puts itself on the host network (no annotation) gets the host's default too.
    pod = _pod(_job(rdma={}, template_spec={"hostNetwork": True}))
    assert _env(pod["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == HOST_NETWORK_IFNAME


def test_spiderpool_per_gpu_resources_and_networks() -> None:
    job = _job(
        rdma={
            "perGpu": {
                "count": 8,
                "resource": "spidernet.io/gpu{index}sriov",
                "network": "kube-system/gpu{index}-sriov",
            },
            "networks": ["kube-system/storage"],
            "ipcLock": False,
        }
    )
    pod = _pod(job)
    main = pod["spec"]["containers"][0]
    expected = {f"spidernet.io/gpu{i}sriov": "1" for i in range(1, 9)}
    assert main["resources"] == {"limits": expected, "requests": expected}
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == (
        "kube-system/storage,"
        "kube-system/gpu1-sriov,kube-system/gpu2-sriov,kube-system/gpu3-sriov,kube-system/gpu4-sriov,"
        "kube-system/gpu5-sriov,kube-system/gpu6-sriov,kube-system/gpu7-sriov,kube-system/gpu8-sriov"
    )
    assert "securityContext" not in main  # ipcLock: false
    # The template's own networks annotation wins.
    job = _job(
        rdma={"perGpu": {"count": 2, "network": "gpu{index}"}},
        template_metadata={"annotations": {"k8s.v1.cni.cncf.io/networks": "mine"}},
    )
    assert _pod(job)["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "mine"


def test_precedence_container_then_job_then_controller_defaults_then_builtins() -> None:
    defaults = parse_rdma(
        {
            "devices": {HCA: 1},
            "shmSize": "8Gi",
            "nccl": {"NCCL_IB_HCA": "mlx5", "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TIMEOUT": "20"},
        }
    )
    job_rdma = RdmaSpec.model_validate({"shmSize": "32Gi", "nccl": {"NCCL_IB_GID_INDEX": "5"}})
    merged = resolve_rdma(job_rdma, defaults)
    assert merged is not None
    assert merged.devices == {HCA: 1} and merged.shm_size == "32Gi"
    assert merged.nccl == {"NCCL_IB_HCA": "mlx5", "NCCL_IB_GID_INDEX": "5", "NCCL_IB_TIMEOUT": "20"}
    assert nccl_env(merged, host_network=False) == {
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_TIMEOUT": "20",
        "NCCL_IB_QPS_PER_CONNECTION": "8",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_IB_HCA": "mlx5",
        "NCCL_IB_GID_INDEX": "5",
    }
    assert resolve_rdma(None, defaults) is None
    job = _job(rdma={"nccl": {"NCCL_IB_GID_INDEX": "5"}}, container={"env": [{"name": "NCCL_IB_HCA", "value": "mine"}]})
    main = _pod(job, rdma_defaults=defaults)["spec"]["containers"][0]
    assert main["resources"]["limits"] == {HCA: "1"}
    env = _env(main)
    assert (env["NCCL_IB_HCA"], env["NCCL_IB_GID_INDEX"], env["NCCL_IB_TIMEOUT"]) == ("mine", "5", "20")


def test_rdma_settings_are_validated() -> None:
    with pytest.raises(JobValidationError) as caught:
        _job(rdma={"devices": {"rdma hca": 1}, "nccl": {"1BAD": "x"}, "perGpu": {"count": 2}})
    assert [e.field for e in caught.value.errors] == [
        "spec.rdma.devices.rdma hca",
        "spec.rdma.nccl.1BAD",
        "spec.rdma.perGpu",
    ]
    with pytest.raises(JobValidationError) as caught:
        _job(rdma={"shmSize": "lots", "perGpu": {"count": 2, "resource": "gpu-sriov"}, "networks": ["Bad_Net"]})
    assert {e.field for e in caught.value.errors} == {
        "spec.rdma.shmSize",
        "spec.rdma.perGpu.resource",
        "spec.rdma.networks[0]",
    }
    with pytest.raises(JobValidationError) as caught:
        parse_rdma({"devices": {HCA: 0}, "unknown": 1}, source="defaults.yaml")
    assert str(caught.value).startswith("invalid defaults.yaml:")
    assert {e.field for e in caught.value.errors} == {f"devices.{HCA}", "unknown"}


def test_placement_adds_pod_affinity_to_the_jobs_own_pods_and_keeps_the_users_terms() -> None:
    user_term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}
    user_affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [user_term]},
    }
    job = _job(
        placement={"topologyKey": "network.example.com/leaf", "mode": "Required"},
        template_spec={"affinity": user_affinity},
    )
    own = {
        "labelSelector": {"matchLabels": {"training.kubedl.io/job-name": "llm"}},
        "topologyKey": "network.example.com/leaf",
    }
    affinity = _pod(job)["spec"]["affinity"]
    assert affinity["nodeAffinity"] == user_affinity["nodeAffinity"]
    assert affinity["podAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": [user_term, own]}
    preferred = _pod(_job(placement={"topologyKey": "network.example.com/leaf"}))["spec"]["affinity"]
    assert preferred == {
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": own}]}
    }


def test_gang_pods_point_at_the_podgroup_and_the_template_wins() -> None:
    policy = {"minAvailable": 3, "queue": "training", "priorityClassName": "high"}
    job = _job(schedulingPolicy=policy)
    pod = _pod(job, gang=Gang("volcano"))
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["spec"]["priorityClassName"] == "high"
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "llm"
    pod = _pod(job, gang=Gang("scheduler-plugins"))
    assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "llm"
    assert "annotations" not in pod["metadata"]
    job = _job(template_spec={"schedulerName": "my-volcano", "priorityClassName": "low"}, schedulingPolicy=policy)
    pod = _pod(job, gang=Gang("volcano", "ignored-for-this-template"))
    assert (pod["spec"]["schedulerName"], pod["spec"]["priorityClassName"]) == ("my-volcano", "low")
    assert _pod(_job(), gang=Gang("scheduler-plugins", "default-scheduler"))["spec"]["schedulerName"] == (
        "default-scheduler"
    )


def test_the_native_gang_names_its_group_in_the_pod_and_carries_the_jobs_priority() -> None:
    """kube-scheduler's gang (scheduling.k8s.io/v1beta1): the pod joins by spec.schedulingGroup and keeps its
    scheduler; the PodGroup has minCount and the pods' priority class (the scheduler checks they are equal), and
    names the job's Workload, whose one template says the same."""
    job = _job(schedulingPolicy={"minAvailable": 3, "priorityClassName": "high"})
    native = Gang("kubernetes")
    pod = _pod(job, gang=native)
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "llm"}
    assert "schedulerName" not in pod["spec"] and pod["spec"]["priorityClassName"] == "high"
    owner = owner_reference(job)
    group = build_podgroup(job, native, owner)
    assert (group["apiVersion"], group["kind"]) == ("scheduling.k8s.io/v1beta1", "PodGroup")
    assert group["spec"] == {
        "workloadRef": {"workloadName": "llm", "templateName": "gang"},
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "priorityClassName": "high",
    }
    companion = native.implementation.companion(job, owner)
    assert companion is not None
    resource, workload = companion
    assert (resource.group, resource.plural, workload["kind"]) == ("scheduling.k8s.io", "workloads", "Workload")
    assert workload["metadata"]["ownerReferences"] == [owner]
    assert workload["spec"] == {
        "controllerRef": {"apiGroup": "training.kubedl.io", "kind": "PyTorchJob", "name": "llm"},
        "podGroupTemplates": [
            {"name": "gang", "schedulingPolicy": {"gang": {"minCount": 3}}, "priorityClassName": "high"}
        ],
    }
    # the templates' own priority class when the policy names none; none at all: no field
    templated = _job(template_spec={"priorityClassName": "low"})
    assert build_podgroup(templated, native, owner)["spec"]["priorityClassName"] == "low"
    assert "priorityClassName" not in build_podgroup(_job(), native, owner)["spec"]
    assert native.implementation.min_count(group) == 3
    assert native.implementation.follow(_job()) == {"spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}
    scheduled = {"status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True"}]}}
    assert native.implementation.spent(scheduled)
    assert not native.implementation.spent(
        {
            "status": {
                "conditions": [{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}]
            }
        }
    )
    assert not Gang("volcano").implementation.spent(scheduled)
    # spec.placement Required: the gang kept to one domain of its label (TopologyAwareWorkloadScheduling)
    placed = _job(placement={"topologyKey": "network.example.com/leaf", "mode": "Required"})
    constraint = {"topology": [{"key": "network.example.com/leaf"}]}
    assert build_podgroup(placed, native, owner)["spec"]["schedulingConstraints"] == constraint
    placed_companion = native.implementation.companion(placed, owner)
    assert placed_companion is not None
    assert placed_companion[1]["spec"]["podGroupTemplates"][0]["schedulingConstraints"] == constraint
    preferred = _job(placement={"topologyKey": "network.example.com/leaf"})
    assert "schedulingConstraints" not in build_podgroup(preferred, native, owner)["spec"]


def test_with_no_flag_only_jobs_asking_for_a_gang_get_one() -> None:
    auto = Gang("kubernetes", every_job=False)
    assert not auto.covers(_job()) and auto.covers(_job(schedulingPolicy={"minAvailable": 2}))
    assert Gang("kubernetes").covers(_job())


def test_the_waiting_reasons_of_a_gang_are_the_reporters() -> None:
    from kubedl_py.controllers import reporting

    assert {gang.GANG_INCOMPLETE, gang.GROUP_TERMINATING} == reporting.GANG_REASONS


def test_podgroups_of_both_schedulers() -> None:
    job = _job(schedulingPolicy={"minAvailable": 3, "queue": "training", "priorityClassName": "high"})
    owner = owner_reference(job)
    volcano = build_podgroup(job, Gang("volcano"), owner)
    assert volcano == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "llm",
            "namespace": "ml",
            "labels": {"training.kubedl.io/controller": "kubedl-py", "training.kubedl.io/job-name": "llm"},
            "ownerReferences": [owner],
        },
        "spec": {"minMember": 3, "queue": "training", "priorityClassName": "high"},
    }
    plugins = build_podgroup(job, Gang("scheduler-plugins"), owner)
    assert plugins["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert plugins["spec"] == {"minMember": 3}
    assert min_member(_job()) == 4  # no minAvailable: the whole job (Master + 3 Workers)


def test_each_gang_scheduler_is_an_implementation_not_a_branch() -> None:
    """What differs between Volcano and coscheduling is each one's class (gang.py): no code compares the
    scheduler's name, so a third scheduler is one more class."""
    names = set(gang.GANG_SCHEDULERS)
    for module in (gang, gang_schedulers):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        compared = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Compare)
            and any(isinstance(side, ast.Constant) and side.value in names for side in [node.left, *node.comparators])
        ]
        assert compared == [], f"{module.__name__} compares the scheduler's name at lines {compared}"
    assert set(gang.SCHEDULERS) == set(gang.GANG_SCHEDULERS)
    assert {type(s) for s in gang.SCHEDULERS.values()} == {gang.Volcano, gang.Coscheduling, gang.Native}
    group: dict[str, Any] = {"status": {"phase": "Pending"}}
    assert not Gang("volcano").implementation.admitted(group)
    assert Gang("scheduler-plugins").implementation.admitted(group)  # its Permit stage holds the pods instead
    timed = _job(schedulingPolicy={"minAvailable": 2, "queue": "q", "scheduleTimeoutSeconds": 30})
    assert build_podgroup(timed, Gang("scheduler-plugins"), owner_reference(timed))["spec"] == {
        "minMember": 2,
        "scheduleTimeoutSeconds": 30,
    }


def test_tfjob_rdma_goes_to_the_tensorflow_container() -> None:
    template = {"spec": {"containers": [{"name": "side", "image": "s"}, {"name": "tensorflow", "image": "tf"}]}}
    job = parse_job(
        {
            "apiVersion": "training.kubedl.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "tf", "namespace": "ml", "uid": "u"},
            "spec": {
                "tfReplicaSpecs": {"Worker": {"replicas": 2, "template": template}},
                "rdma": {"devices": {HCA: 1}},
            },
        }
    )
    assert isinstance(job, TFJob)
    pod = _pod(with_defaults(job))
    side, tf = pod["spec"]["containers"]
    assert tf["resources"]["limits"] == {HCA: "1"} and "resources" not in side
    assert _env(tf)["NCCL_IB_DISABLE"] == "0"


def test_controller_flags_reach_the_options(tmp_path: Path) -> None:
    from kubedl_py.cli.controller import controller_options as _controller_options
    from kubedl_py.cli.errors import UsageError as _UsageError
    from kubedl_py.cli.parser import build_parser as _build_parser

    defaults = tmp_path / "rdma.yaml"
    defaults.write_text("devices:\n  rdma/hca: 1\nnccl:\n  NCCL_IB_HCA: mlx5\n  NCCL_IB_GID_INDEX: 3\n")
    args = _build_parser().parse_args(
        ["controller", "--gang-scheduler", "volcano", "--gang-scheduler-name", "vc", "--rdma-defaults", str(defaults)]
    )
    options = _controller_options(args)
    assert options.gang == Gang("volcano", "vc")
    assert options.rdma_defaults == RdmaSpec(devices={HCA: 1}, nccl={"NCCL_IB_HCA": "mlx5", "NCCL_IB_GID_INDEX": 3})
    # no flag: kube-scheduler's own gang, for the jobs that ask for one (where it is served: gang.install)
    assert _controller_options(_build_parser().parse_args(["controller"])).gang == Gang("kubernetes", every_job=False)
    assert _controller_options(_build_parser().parse_args(["controller", "--gang-scheduler", "none"])).gang is None
    defaults.write_text("devices:\n  rdma/hca: none\n")
    with pytest.raises(_UsageError, match=r"devices\.rdma/hca: must be an integer"):
        _controller_options(_build_parser().parse_args(["controller", "--rdma-defaults", str(defaults)]))
    with pytest.raises(_UsageError, match="needs --gang-scheduler"):
        _controller_options(_build_parser().parse_args(["controller", "--gang-scheduler-name", "x"]))


def test_urgent_write_hold_flag_reaches_the_manager_and_a_bad_value_names_the_flag() -> None:
    from kubedl_py.cli.controller import controller_options
    from kubedl_py.cli.errors import UsageError
    from kubedl_py.cli.parser import build_parser
    from kubedl_py.controllers.setup import ControllerOptions, build_manager
    from kubedl_py.kube.client import KubeClient

    def options(*flags: str) -> ControllerOptions:
        return controller_options(build_parser().parse_args(["controller", *flags]))

    assert options().urgent_write_hold == 1.0
    manager = build_manager(KubeClient(), options("--urgent-write-hold", "0.25"))
    assert manager.write_gate.max_hold == 0.25 and manager.client.write_gate is manager.write_gate
    assert options("--urgent-write-hold", "0").urgent_write_hold == 0
    for bad in ("-1", "nan"):
        with pytest.raises(UsageError, match=r"--urgent-write-hold must be 0 \(never hold\) or more seconds"):
            options("--urgent-write-hold", bad)


def test_repair_flags_reach_the_controllers_and_a_bad_value_names_the_flag() -> None:
    from kubedl_py.cli.controller import controller_options
    from kubedl_py.cli.errors import UsageError
    from kubedl_py.cli.parser import build_parser
    from kubedl_py.controllers.setup import ControllerOptions, build_manager
    from kubedl_py.kube.client import KubeClient

    def options(*flags: str) -> ControllerOptions:
        return controller_options(build_parser().parse_args(["controller", *flags]))

    manager = build_manager(KubeClient(), options())
    assert manager.write_gate.repair_window == 5.0
    assert manager.controllers and all(
        c.ordinary is not None and c.ordinary.repairing == 2 and c.ordinary.normal == 16 for c in manager.controllers
    )
    manager = build_manager(KubeClient(), options("--repair-window", "2.5", "--repair-workers", "6"))
    assert manager.write_gate.repair_window == 2.5
    assert all(c.ordinary is not None and c.ordinary.repairing == 6 for c in manager.controllers)
    # as many repair workers as workers: nothing to limit
    manager = build_manager(KubeClient(), options("--workers", "4", "--repair-workers", "4"))
    assert all(c.ordinary is None for c in manager.controllers)
    for bad in ("-1", "nan"):
        with pytest.raises(UsageError, match=r"--repair-window must be 0 \(never\) or more seconds"):
            options("--repair-window", bad)
    with pytest.raises(UsageError, match="--repair-workers must be at least 1, not 0"):
        options("--repair-workers", "0")


def test_pod_event_batch_flag_and_a_bad_value_names_the_flag() -> None:
    from kubedl_py.cli.controller import controller_options
    from kubedl_py.cli.errors import UsageError
    from kubedl_py.cli.parser import build_parser

    def batch(*flags: str) -> float:
        return controller_options(build_parser().parse_args(["controller", *flags])).pod_event_batch

    assert batch() == 0.05
    assert batch("--pod-event-batch", "0") == 0.0
    assert batch("--pod-event-batch", "0.2") == 0.2
    for bad in ("-1", "nan"):
        with pytest.raises(UsageError, match=r"--pod-event-batch must be 0 \(at once\) or more seconds"):
            batch("--pod-event-batch", bad)


def test_write_concurrency_flag_reaches_the_reconcilers_and_a_bad_value_names_the_flag() -> None:
    from kubedl_py.cli.controller import controller_options
    from kubedl_py.cli.errors import UsageError
    from kubedl_py.cli.parser import build_parser
    from kubedl_py.controllers.job import WRITE_CONCURRENCY, JobReconciler
    from kubedl_py.controllers.setup import build_manager
    from kubedl_py.kube.client import KubeClient

    def reconcilers(*flags: str) -> list[JobReconciler]:
        manager = build_manager(KubeClient(), controller_options(build_parser().parse_args(["controller", *flags])))
        found = [c.reconciler for c in manager.controllers if isinstance(c.reconciler, JobReconciler)]
        assert found
        return found

    assert {r.options.write_concurrency for r in reconcilers()} == {WRITE_CONCURRENCY}
    assert {r.options.write_concurrency for r in reconcilers("--write-concurrency", "8")} == {8}
    for bad in ("0", "-3"):
        with pytest.raises(UsageError, match=r"--write-concurrency must be at least 1, not"):
            reconcilers("--write-concurrency", bad)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    "name", ["pytorch-rdma-optin.yaml", "pytorch-rdma-spiderpool.yaml", "pytorch-gang-topology.yaml"]
)
def test_examples_validate_and_round_trip(name: str) -> None:
    raw = yaml.safe_load((EXAMPLES / name).read_text())
    (job,) = load_jobs_file(EXAMPLES / name)
    assert job.to_dict() == raw
    assert job.run_policy.rdma is not None


def test_spiderpool_example_pods() -> None:
    (job,) = load_jobs_file(EXAMPLES / "pytorch-rdma-spiderpool.yaml")
    pod = _pod(_defaulted(job), "Worker", 3)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": 8, **{f"spidernet.io/gpu{i}sriov": "1" for i in range(1, 9)}}
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"].count("-sriov") == 8


def test_rdma_defaults_example_parses() -> None:
    defaults = parse_rdma(yaml.safe_load((EXAMPLES / "rdma-defaults.yaml").read_text()))
    assert defaults.devices == {HCA: 1} and defaults.shm_size == "16Gi"


@dataclass
class _Plan:
    """What the feature reads of a reconcile's plan."""

    job: PyTorchJob


def test_dra_claims_each_gpu_with_its_nics_on_one_pcie_root() -> None:
    """spec.rdma.dra: one ResourceClaimTemplate per replica type (per GPU a request, per GPU's NICs a request,
    each pair constrained to one resource.kubernetes.io/pcieRoot), named by every pod and its framework
    container; the other containers claim nothing."""
    job = _job(rdma={"dra": {"gpus": 2, "nicsPerGpu": 1}})
    pod = _pod(job)
    assert pod["spec"]["resourceClaims"] == [{"name": "devices", "resourceClaimTemplateName": "llm-worker-devices"}]
    main, sidecar = pod["spec"]["containers"]
    assert main["resources"]["claims"] == [{"name": "devices"}]
    assert "claims" not in (sidecar.get("resources") or {})
    feature = rdma.RdmaAndPlacement()
    owned = feature.owned_objects(cast(Any, _Plan(job)), cast(Any, None))
    assert [item.body["metadata"]["name"] for item in owned] == ["llm-master-devices", "llm-worker-devices"]
    assert owned[0].resource.plural == "resourceclaimtemplates" and owned[0].resource.group == "resource.k8s.io"
    exact = {"allocationMode": "ExactCount", "count": 1}
    assert owned[1].body["spec"]["spec"] == {
        "devices": {
            "requests": [
                {"name": "gpu-0", "exactly": {"deviceClassName": "gpu.nvidia.com", **exact}},
                {"name": "nic-0", "exactly": {"deviceClassName": "dranet", **exact}},
                {"name": "gpu-1", "exactly": {"deviceClassName": "gpu.nvidia.com", **exact}},
                {"name": "nic-1", "exactly": {"deviceClassName": "dranet", **exact}},
            ],
            "constraints": [
                {"requests": ["gpu-0", "nic-0"], "matchAttribute": "resource.kubernetes.io/pcieRoot"},
                {"requests": ["gpu-1", "nic-1"], "matchAttribute": "resource.kubernetes.io/pcieRoot"},
            ],
        }
    }
    only_workers = _job(rdma={"dra": {"gpus": 1, "nicsPerGpu": 0, "replicaTypes": ["Worker"], "gpuDeviceClass": "g"}})
    owned = feature.owned_objects(cast(Any, _Plan(only_workers)), cast(Any, None))
    assert [item.body["metadata"]["name"] for item in owned] == ["llm-worker-devices"]
    assert owned[0].body["spec"]["spec"] == {
        "devices": {"requests": [{"name": "gpu-0", "exactly": {"deviceClassName": "g", **exact}}]}
    }
    assert "resourceClaims" not in _pod(only_workers, "Master")["spec"]
    assert feature.owned_objects(cast(Any, _Plan(_job())), cast(Any, None)) == []
