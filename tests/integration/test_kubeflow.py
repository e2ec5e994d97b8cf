"""Drop-in for Training Operator and KubeDL users, on both control planes: kubeflow.org/v1 jobs served by the
same controller, their pods' labels and variables, suspend, lower-case replica keys, KubeDL-only fields
refused by name, and the running pods of a job taken over from another controller adopted, not replaced."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubedl_py.api import constants as c
from kubedl_py.api.groups import KUBEFLOW
from kubedl_py.kube import errors
from kubedl_py.kube.resources import PODS, SERVICES, Resource
from tests.integration.conftest import (
    PYTORCHJOBS,
    Env,
    Kube,
    RunningController,
    condition,
    container,
    env_of,
    eventually,
    fast_options,
    job_state,
    replica,
    wait_condition,
)

ROOT = Path(__file__).resolve().parents[2]
KF_PYTORCHJOBS = Resource(KUBEFLOW.group, KUBEFLOW.version, "pytorchjobs", "PyTorchJob")
KF_TFJOBS = Resource(KUBEFLOW.group, KUBEFLOW.version, "tfjobs", "TFJob")
TO = "training.kubeflow.org"


def any_condition(job: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    """The condition of ``kind`` whatever its status (``condition`` finds only True ones)."""
    found = [cond for cond in ((job or {}).get("status") or {}).get("conditions") or [] if cond["type"] == kind]
    assert found, f"no {kind} condition in {job}"
    return dict(found[0])


def kf_pytorchjob(name: str, *, run_policy: dict[str, Any] | None = None, **replicas: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": run_policy or {},
            "pytorchReplicaSpecs": replicas or {"Master": replica(1), "Worker": replica(2)},
        },
    }


async def kf_pods(kube: Kube, job: str) -> list[dict[str, Any]]:
    listed = await kube.list(PODS, namespace=kube.ns, label_selector=f"{TO}/job-name={job}")
    return sorted(listed.items, key=lambda pod: pod["metadata"]["name"])


@pytest.mark.nodes(1)
async def test_a_training_operator_job_file_applies_unchanged(
    kube: Kube, kubeflow_controller: RunningController
) -> None:
    document = yaml.safe_load((ROOT / "examples" / "kubeflow" / "pytorchjob-nccl-rdma.yaml").read_text())
    await kube.create(KF_PYTORCHJOBS, copy.deepcopy(document), namespace=kube.ns)
    name = document["metadata"]["name"]

    async def three_pods() -> list[dict[str, Any]] | None:
        pods = await kf_pods(kube, name)
        return pods if len(pods) == 3 else None

    pods = await eventually(three_pods, what="the job's three pods")
    assert [p["metadata"]["name"] for p in pods] == [f"{name}-master-0", f"{name}-worker-0", f"{name}-worker-1"]
    master = pods[0]
    labels = master["metadata"]["labels"]
    # The Training Operator's labels, as its selectors, PodMonitors and dashboards expect them.
    assert labels[f"{TO}/job-name"] == name
    assert labels[f"{TO}/operator-name"] == "pytorchjob-controller"
    assert labels[f"{TO}/replica-type"] == "master"
    assert labels[f"{TO}/replica-index"] == "0"
    assert labels[f"{TO}/job-role"] == "master"
    assert f"{TO}/job-role" not in pods[1]["metadata"]["labels"]
    assert pods[2]["metadata"]["labels"][f"{TO}/replica-type"] == "worker"
    # The template reaches the pod unchanged: scheduler, limits, capabilities, volumes, the user's variables.
    spec = master["spec"]
    assert spec["schedulerName"] == "volcano"
    main = spec["containers"][0]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "1", "rdma/hca": "1"}
    assert main["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert {"dshm", "data"} <= {v["name"] for v in spec["volumes"]}
    env = env_of(master)
    assert (env["NCCL_DEBUG"], env["NCCL_IB_HCA"], env["NCCL_SOCKET_IFNAME"]) == ("INFO", "mlx5", "eth0")
    # The Training Operator's rendezvous variables.
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"], env["RANK"]) == (
        f"{name}-master-0",
        "23456",
        "3",
        "0",
    )
    assert env["PET_NPROC_PER_NODE"] == "auto"  # nprocPerNode unset: torchrun decides, as there
    assert (env_of(pods[2])["RANK"], env_of(pods[2])["PET_NODE_RANK"]) == ("2", "2")
    services = await kube.list(SERVICES, namespace=kube.ns, label_selector=f"{TO}/job-name={name}")
    assert sorted(s["metadata"]["name"] for s in services.items) == [p["metadata"]["name"] for p in pods]

    async def created() -> dict[str, Any] | None:
        job = await job_state(kube, KF_PYTORCHJOBS, name)
        return job if condition(job, "Created") else None

    job = await eventually(created, what="the Created condition")
    assert condition(job, "Created")["reason"] == "PyTorchJobCreated"  # type: ignore[index]
    # The stored object is what the user wrote: runPolicy stays where the Training Operator has it.
    assert job["spec"]["runPolicy"]["backoffLimit"] == 3
    assert "backoffLimit" not in job["spec"]


async def test_kubeflow_job_runs_to_success_with_the_training_operator_names(
    kube: Kube, kubeflow_controller: RunningController
) -> None:
    job = kf_pytorchjob(
        "kf-ok",
        Master=replica(1, run_seconds=0.3, exit_code=0),
        worker=replica(2, run_seconds=0.3, exit_code=0),  # lower case, as both peers accept
    )
    await kube.create(KF_PYTORCHJOBS, job, namespace=kube.ns)
    done = await wait_condition(kube, KF_PYTORCHJOBS, "kf-ok", "Succeeded", within=30)
    assert condition(done, "Succeeded")["reason"] == "PyTorchJobSucceeded"  # type: ignore[index]
    statuses = done["status"]["replicaStatuses"]
    assert set(statuses) == {"Master", "Worker"}  # the lower-case key is normalised
    assert statuses["Worker"]["selector"] == (
        f"{TO}/job-name=kf-ok,{TO}/operator-name=pytorchjob-controller,{TO}/replica-type=worker"
    )
    pods = await kf_pods(kube, "kf-ok")
    assert [p["metadata"]["name"] for p in pods] == ["kf-ok-master-0", "kf-ok-worker-0", "kf-ok-worker-1"]
    assert kubeflow_controller.manager is not None
    metrics = kubeflow_controller.manager.metrics
    labels = {"job_namespace": kube.ns, "framework": "pytorch"}
    assert metrics.value("training_operator_jobs_created_total", labels) == 1
    assert metrics.value("training_operator_jobs_successful_total", labels) == 1


async def test_suspend_removes_the_pods_and_resume_starts_afresh(
    kube: Kube, kubeflow_controller: RunningController
) -> None:
    job = kf_pytorchjob("sus", run_policy={"suspend": True, "activeDeadlineSeconds": 600})
    await kube.create(KF_PYTORCHJOBS, job, namespace=kube.ns)
    suspended = await wait_condition(kube, KF_PYTORCHJOBS, "sus", "Suspended")
    assert condition(suspended, "Suspended")["reason"] == "PyTorchJobSuspended"  # type: ignore[index]
    assert await kf_pods(kube, "sus") == []
    assert "startTime" not in (suspended.get("status") or {})

    await kube.patch(KF_PYTORCHJOBS, "sus", {"spec": {"runPolicy": {"suspend": False}}}, namespace=kube.ns)
    running = await wait_condition(kube, KF_PYTORCHJOBS, "sus", "Running", within=30)
    resumed = any_condition(running, "Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "PyTorchJobResumed")
    first_start = running["status"]["startTime"]
    old_uids = {p["metadata"]["uid"] for p in await kf_pods(kube, "sus")}
    assert len(old_uids) == 3

    # Suspending a running job deletes its pods and Services, and turns Running off.
    await kube.patch(KF_PYTORCHJOBS, "sus", {"spec": {"runPolicy": {"suspend": True}}}, namespace=kube.ns)
    again = await wait_condition(kube, KF_PYTORCHJOBS, "sus", "Suspended")
    assert (any_condition(again, "Running")["status"], any_condition(again, "Running")["reason"]) == (
        "False",
        "PyTorchJobSuspended",
    )

    async def no_pods() -> bool:
        live = [p for p in await kf_pods(kube, "sus") if not p["metadata"].get("deletionTimestamp")]
        services = await kube.list(SERVICES, namespace=kube.ns, label_selector=f"{TO}/job-name=sus")
        return not live and not services.items

    await eventually(no_pods, what="no pods and no Services while suspended")
    assert not (await kube.get(KF_PYTORCHJOBS, "sus", namespace=kube.ns))["status"]["replicaStatuses"]["Worker"][
        "active"
    ]

    resumed_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # startTime has second precision
    await kube.patch(KF_PYTORCHJOBS, "sus", {"spec": {"runPolicy": {"suspend": False}}}, namespace=kube.ns)

    async def restarted() -> dict[str, Any] | None:
        job = await job_state(kube, KF_PYTORCHJOBS, "sus")
        status = (job or {}).get("status") or {}
        fresh = status.get("startTime", "") >= resumed_at and condition(job, "Running")
        return job if fresh else None

    # Resumed with a fresh startTime (activeDeadlineSeconds counts from it), Running again with new pods.
    back = await eventually(restarted, within=30, what="a fresh startTime and Running after the second resume")
    assert back["status"]["startTime"] >= first_start
    new_pods = await kf_pods(kube, "sus")
    assert len(new_pods) == 3 and not {p["metadata"]["uid"] for p in new_pods} & old_uids
    assert condition(back, "Running")["status"] == "True"  # type: ignore[index]


async def test_suspend_works_in_kubedls_group_too(kube: Kube, kubeflow_controller: RunningController) -> None:
    job = {
        "apiVersion": c.API_VERSION,
        "kind": "PyTorchJob",
        "metadata": {"name": "native-sus"},
        "spec": {"suspend": True, "pytorchReplicaSpecs": {"Worker": replica(2)}},
    }
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    suspended = await wait_condition(kube, PYTORCHJOBS, "native-sus", "Suspended")
    assert condition(suspended, "Suspended")["reason"] == "JobSuspended"  # type: ignore[index]
    await kube.patch(PYTORCHJOBS, "native-sus", {"spec": {"suspend": False}}, namespace=kube.ns)
    running = await wait_condition(kube, PYTORCHJOBS, "native-sus", "Running", within=30)
    assert (any_condition(running, "Suspended")["status"], any_condition(running, "Suspended")["reason"]) == (
        "False",
        "JobResumed",
    )


async def test_jobs_managed_by_another_controller_are_left_alone(
    kube: Kube, kubeflow_controller: RunningController
) -> None:
    other = kf_pytorchjob("elsewhere", run_policy={"managedBy": "kueue.x-k8s.io/multikueue"})
    ours = kf_pytorchjob("here", run_policy={"managedBy": "kubeflow.org/training-operator"})
    await kube.create(KF_PYTORCHJOBS, other, namespace=kube.ns)
    await kube.create(KF_PYTORCHJOBS, ours, namespace=kube.ns)
    # "elsewhere" was queued first; by the time "here" runs (pods made, scheduled, started) it has long been
    # reconciled, and nothing was done for it.
    await wait_condition(kube, KF_PYTORCHJOBS, "here", "Running", within=30)
    job = await job_state(kube, KF_PYTORCHJOBS, "elsewhere")
    assert not (job or {}).get("status")
    assert await kf_pods(kube, "elsewhere") == []
    # It cannot be handed over afterwards: managedBy is immutable, as in the Training Operator.
    patch = {"spec": {"runPolicy": {"managedBy": "kubeflow.org/training-operator"}}}
    with pytest.raises(errors.Invalid, match="managedBy is immutable"):
        await kube.patch(KF_PYTORCHJOBS, "elsewhere", patch, namespace=kube.ns)


@pytest.mark.parametrize(
    ("field", "where"),
    [("cronPolicy", "spec"), ("modelVersion", "spec"), ("cacheBackend", "spec"), ("spotReplicaSpec", "replica")],
)
async def test_kubedl_only_fields_are_refused_by_name(kube: Kube, field: str, where: str) -> None:
    job = {
        "apiVersion": c.API_VERSION,
        "kind": "PyTorchJob",
        "metadata": {"name": "kubedl-only"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1)}},
    }
    if where == "spec":
        job["spec"][field] = {"schedule": "*/5 * * * *"}
    else:
        job["spec"]["pytorchReplicaSpecs"]["Master"][field] = {"spotReplicaNumber": 1}
    with pytest.raises(errors.Invalid) as refused:
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    assert f"{field} is a KubeDL feature kubedl-py does not support" in str(refused.value)


async def test_a_kubeflow_tfjob_with_lower_case_types_gets_its_tf_config(
    kube: Kube, kubeflow_controller: RunningController
) -> None:
    body = {
        "metadata": {"name": "tf"},
        "kind": "TFJob",
        "spec": {"tfReplicaSpecs": {"ps": replica(1, name="tensorflow"), "worker": replica(1, name="tensorflow")}},
    }
    await kube.create(KF_TFJOBS, {**body, "apiVersion": "kubeflow.org/v1"}, namespace=kube.ns)

    async def two_pods() -> list[dict[str, Any]] | None:
        pods = await kf_pods(kube, "tf")
        return pods if len(pods) == 2 else None

    pods = await eventually(two_pods, what="the TFJob's pods")
    assert [p["metadata"]["name"] for p in pods] == ["tf-ps-0", "tf-worker-0"]
    tf_config = yaml.safe_load(env_of(pods[1])["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": 0}
    assert tf_config["cluster"] == {
        "ps": [f"tf-ps-0.{kube.ns}.svc:2222"],
        "worker": [f"tf-worker-0.{kube.ns}.svc:2222"],
    }


@pytest.mark.nodes(1)
async def test_pods_of_a_job_taken_over_from_kubedl_are_adopted(cluster: Env, kube: Kube) -> None:
    """KubeDL ran this job and was stopped; its pods (KubeDL's labels, the job as controlling owner) keep
    running. kubedl-py takes over: it adopts them (our labels added, the same pods), counts them and reports
    the job Running, instead of failing to create pods of the same names and staying at Created."""
    job = {
        "apiVersion": c.API_VERSION,
        "kind": "PyTorchJob",
        "metadata": {"name": "moved"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(1)}},
    }
    created = await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    owner = {
        "apiVersion": c.API_VERSION,
        "kind": "PyTorchJob",
        "name": "moved",
        "uid": created["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    uids = {}
    for replica_type in ("master", "worker"):
        name = f"moved-{replica_type}-0"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {
                    "group-name": "training.kubedl.io",
                    "job-name": "moved",
                    "replica-type": replica_type,
                    "replica-index": "0",
                },
                "ownerReferences": [owner],
            },
            "spec": {"nodeName": cluster.node_names[0], "containers": [container()]},
        }
        made = await kube.create(PODS, pod, namespace=kube.ns)
        uids[name] = made["metadata"]["uid"]

    async def both_running() -> bool:
        listed = await kube.list(PODS, namespace=kube.ns, label_selector="job-name=moved")
        return len(listed.items) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in listed.items)

    await eventually(both_running, what="KubeDL's pods running")

    running = RunningController(cluster, fast_options(namespace=cluster.namespace))
    await running.start()
    try:
        state = await wait_condition(kube, PYTORCHJOBS, "moved", "Running", within=30)
    finally:
        await running.stop()
    assert state["status"]["replicaStatuses"]["Master"]["active"] == 1
    assert state["status"]["replicaStatuses"]["Worker"]["active"] == 1
    for name, uid in uids.items():
        pod = await kube.get(PODS, name, namespace=kube.ns)
        assert pod["metadata"]["uid"] == uid  # the same pod, adopted, not replaced
        assert pod["metadata"]["labels"][c.LABEL_CONTROLLER] == c.CONTROLLER_NAME
        assert pod["metadata"]["labels"]["job-name"] == "moved"  # KubeDL's labels stay


def _kf_job(kind: str, field: str, replicas: dict[str, tuple[int, str]], **spec: Any) -> dict[str, Any]:
    """A job as the Training Operator's examples write it: ``replicas`` maps type -> (count, container)."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": kind.lower().removesuffix("job") + "-kf"},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            field: {
                rtype: {
                    "replicas": count,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [container(name)]}},
                }
                for rtype, (count, name) in replicas.items()
            },
            **spec,
        },
    }


KF_KINDS = [
    ("tfjobs", _kf_job("TFJob", "tfReplicaSpecs", {"PS": (1, "tensorflow"), "Worker": (2, "tensorflow")})),
    ("mpijobs", _kf_job("MPIJob", "mpiReplicaSpecs", {"Launcher": (1, "mpi"), "Worker": (2, "mpi")}, slotsPerWorker=1)),
    ("xgboostjobs", _kf_job("XGBoostJob", "xgbReplicaSpecs", {"Master": (1, "xgboost"), "Worker": (2, "xgboost")})),
    ("paddlejobs", _kf_job("PaddleJob", "paddleReplicaSpecs", {"Master": (1, "paddle"), "Worker": (2, "paddle")})),
    ("jaxjobs", _kf_job("JAXJob", "jaxReplicaSpecs", {"Worker": (3, "jax")})),
]


@pytest.mark.parametrize(("plural", "job"), KF_KINDS, ids=[plural for plural, _ in KF_KINDS])
async def test_every_training_operator_kind_is_served_in_its_group(
    kube: Kube, kubeflow_controller: RunningController, plural: str, job: dict[str, Any]
) -> None:
    resource = Resource(KUBEFLOW.group, KUBEFLOW.version, plural, job["kind"])
    await kube.create(resource, copy.deepcopy(job), namespace=kube.ns)
    name = job["metadata"]["name"]

    async def all_pods() -> list[dict[str, Any]] | None:
        pods = await kf_pods(kube, name)
        return pods if len(pods) == 3 else None

    pods = await eventually(all_pods, within=30, what=f"the three pods of {job['kind']} {name}")
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert labels[f"{TO}/operator-name"] == f"{job['kind'].lower()}-controller"
        rtype, index = labels[f"{TO}/replica-type"], labels[f"{TO}/replica-index"]
        assert pod["metadata"]["name"] == f"{name}-{rtype}-{index}"
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["apiVersion"], owner["kind"]) == ("kubeflow.org/v1", job["kind"])
    created = await wait_condition(kube, resource, name, "Created")
    assert condition(created, "Created")["reason"] == f"{job['kind']}Created"  # type: ignore[index]


@pytest.mark.nodes(1)
async def test_a_kubedl_job_file_applies_unchanged(kube: Kube, kubeflow_controller: RunningController) -> None:
    document = yaml.safe_load((ROOT / "examples" / "kubedl" / "tfjob-ps-worker.yaml").read_text())
    stored = await kube.create(Resource(c.GROUP, c.VERSION, "tfjobs", "TFJob"), document, namespace=kube.ns)
    assert stored["spec"]["backoffLimit"] == 3  # inline, as KubeDL keeps it
    listed = await eventually(
        lambda: _pods_with(kube, "mnist", 3), within=30, what="the KubeDL TFJob's three pods (host network)"
    )
    for pod in listed:
        assert pod["spec"]["hostNetwork"] is True
        tf_config = yaml.safe_load(env_of(pod)["TF_CONFIG"])
        assert sorted(tf_config["cluster"]) == ["ps", "worker"]


async def _pods_with(kube: Kube, job: str, count: int) -> list[dict[str, Any]] | None:
    listed = await kube.list(PODS, namespace=kube.ns, label_selector=f"{c.LABEL_JOB_NAME}={job}")
    return listed.items if len(listed.items) == count else None


async def test_only_installed_kubeflow_kinds_are_watched(cluster: Env, kube: Kube) -> None:
    """Discovery decides which kubeflow.org kinds the controller watches (a cluster may have them in part);
    its own group is always watched, so a controller that starts before its CRDs waits for them."""
    from kubedl_py.api.groups import GROUPS
    from kubedl_py.controllers.setup import build_manager, served_resources

    async with cluster.controller_client() as client:
        served = await served_resources(client, GROUPS)
        assert {("kubeflow.org", "pytorchjobs"), ("training.kubedl.io", "tfjobs")} <= served
        partial = frozenset(pair for pair in served if pair != ("kubeflow.org", "tfjobs"))
        manager = build_manager(client, fast_options(kubeflow_api=True, served=partial))
        names = {controller.name for controller in manager.controllers}
        assert "pytorchjobs.kubeflow.org" in names and "tfjobs.kubeflow.org" not in names
        native_only = build_manager(client, fast_options(kubeflow_api=True, served=frozenset()))
        assert {controller.name for controller in native_only.controllers} == {
            "pytorchjobs",
            "tfjobs",
            "mpijobs",
            "xgboostjobs",
            "paddlejobs",
            "jaxjobs",
        }


async def test_the_native_sdk_submits_a_kubeflow_job_file_to_its_group(cluster: Env, kube: Kube) -> None:
    from kubedl_py.sdk import AsyncTrainingClient

    path = ROOT / "examples" / "kubeflow" / "pytorchjob-nccl-rdma.yaml"
    async with AsyncTrainingClient(kubeconfig=cluster.kubeconfig_path) as sdk:
        [job] = await sdk.submit(path)
    assert job.api_group is KUBEFLOW and job.run_policy.backoff_limit == 3
    stored = await kube.get(KF_PYTORCHJOBS, job.name, namespace=kube.ns)
    assert stored["spec"]["runPolicy"]["backoffLimit"] == 3
