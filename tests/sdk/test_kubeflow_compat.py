"""A Kubeflow training SDK script runs unchanged on kubedl-py: the same script (tests/sdk/kubeflow_script.py)
sees the same things through ``kubedl_py.sdk.kubeflow.TrainingClient`` for jobs in ``kubeflow.org/v1`` and
in ``training.kubedl.io/v1alpha1``, and through the real ``kubeflow.training.TrainingClient`` (1.9) for
``kubeflow.org/v1`` -- the drop-in at the API level. Both control-plane tiers, simulated pods."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from kubedl_local import EXIT_CODE, RUN_SECONDS
from kubedl_py.kube.resources import Resource
from kubedl_py.sdk.kubeflow import TrainingClient as KubedlTrainingClient
from kubedl_py.sdk.kubeflow import objects
from tests.integration.conftest import Env, Kube, RunningController
from tests.sdk.kubeflow_script import import_kubeflow_training, run_script

KUBEFLOW = "kubeflow.org/v1"
KUBEDL = "training.kubedl.io/v1alpha1"


@pytest.fixture(params=["views", "kubeflow-models"])
def returned(request: pytest.FixtureRequest) -> Iterator[str]:
    """What kubedl-py's client returns: its own views, or the Kubeflow SDK's models (when installed)."""
    if request.param == "views":
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(objects, "_SDK", objects._SdkState())
            objects._SDK.tried = True  # as if kubeflow-training were not installed
            yield "views"
        return
    import_kubeflow_training()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(objects, "_SDK", objects._SdkState())
        yield "kubeflow-models"


def ending(code: int, seconds: float) -> dict[str, str]:
    return {EXIT_CODE: str(code), RUN_SECONDS: str(seconds)}


def job_dict(api_version: str, name: str, *, code: int = 0) -> dict[str, Any]:
    """A PyTorchJob (Master and one Worker) whose simulated containers end with ``code``, workers first."""

    def replica(seconds: float) -> dict[str, Any]:
        return {
            "replicas": 1,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"annotations": ending(code, seconds)},
                "spec": {"containers": [{"name": "pytorch", "image": "busybox", "command": ["train"]}]},
            },
        }

    return {
        "apiVersion": api_version,
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"runPolicy": {}, "pytorchReplicaSpecs": {"Master": replica(0.5), "Worker": replica(0.1)}},
    }


def job_model(api_version: str, name: str, *, code: int = 0) -> Any:
    """The same job built as a Kubeflow user builds it, from the Kubeflow SDK's models."""
    kf = import_kubeflow_training()
    from kubernetes.client import V1Container, V1ObjectMeta, V1PodSpec, V1PodTemplateSpec

    def replica(seconds: float) -> Any:
        return kf.KubeflowOrgV1ReplicaSpec(
            replicas=1,
            restart_policy="Never",
            template=V1PodTemplateSpec(
                metadata=V1ObjectMeta(annotations=ending(code, seconds)),
                spec=V1PodSpec(
                    containers=[V1Container(name="pytorch", image="busybox", command=["python", "train.py"])]
                ),
            ),
        )

    return kf.KubeflowOrgV1PyTorchJob(
        api_version=api_version,
        kind="PyTorchJob",
        metadata=V1ObjectMeta(name=name),
        spec=kf.KubeflowOrgV1PyTorchJobSpec(
            run_policy=kf.KubeflowOrgV1RunPolicy(),
            pytorch_replica_specs={"Master": replica(0.5), "Worker": replica(0.1)},
        ),
    )


def train() -> None:
    print("training")


#: what the script sees, whichever SDK and API group it drives
EXPECTED: dict[str, Any] = {
    "wait": {
        "kind": "PyTorchJob",
        "name": "<job>",
        "last condition": "Succeeded",
        "callback saw the job": True,
        "callback saw it succeed": "Succeeded",
    },
    "is": {
        "created": True,
        "running": False,
        "restarting": False,
        "succeeded": True,
        "failed": False,
        "succeeded (job given)": True,
    },
    "conditions": [("Created", "True"), ("Running", "False"), ("Succeeded", "True")],
    "job": {
        "kind": "PyTorchJob",
        "run policy present": True,
        "replicas": {"Master": 1, "Worker": 1},
        "container": "pytorch",
        "succeeded per type": {"Master": 1, "Worker": 1},
        "start time is a datetime": True,
        "completion time is a datetime": True,
        "condition time is a datetime": True,
        "to_dict run policy": True,
    },
    "pods": {
        "all": [("<job>-master-0", "Succeeded"), ("<job>-worker-0", "Succeeded")],
        "names": ["<job>-master-0", "<job>-worker-0"],
        "master": ["<job>-master-0"],
        "workers": ["<job>-worker-0"],
        "worker 0": ["<job>-worker-0"],
        "master by type": ["<job>-master-0"],
    },
    "logs": {
        "master only": ["<job>-master-0"],
        "master exited 0": True,
        "events without verbose": {},
        "all pods": ["<job>-master-0", "<job>-worker-0"],
        # the controller records no Event about a job that goes well; the failing one has one
        "event subjects": ["pod/<job>-master-0", "pod/<job>-worker-0"],
        "followed": ["<job>-master-0"],
        "printed": ["[Pod <job>-master-0]"],
    },
    "list": [("PyTorchJob", "<job>")],
    "update": {"label": "vision", "backoff limit": 5},
    "errors": {
        "get missing": "Failed to get PyTorchJob: <ns>/missing",
        "create again": "Failed to create PyTorchJob: <ns>/<job>",
        "job and image": (
            "If `job` is set only `namespace`, `labels`, and `annotations` arguments are allowed. "
            "Argument `base_image` must be None."
        ),
        "unknown condition": "Expected conditions: {'Done'}",
        "unknown replica type": "TFJob replica type must be ",
        "never fails": "Timeout waiting for PyTor",
    },
    "failing": {
        "message": "PyTorchJob <ns>/<failing> is Failed. PyTorchJob",
        "is failed": True,
        "job events": ["pytorchjob/<failing>"],
        "expected failure": "Failed",
    },
    "built": {
        "replicas": {"Master": 1, "Worker": 1},
        "command": ["bash", "-c"],
        "runs the function": True,
        "image": "docker.io/pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime",
        "pods": ["<job>-fn-master-0", "<job>-fn-worker-0"],
    },
    "deleted": [True, True, True],
}


def assert_as_expected(seen: dict[str, Any]) -> None:
    """Section by section, so a failure shows which part of the script saw something else."""
    for section, expected in EXPECTED.items():
        assert seen[section] == expected, section
    assert seen.keys() == EXPECTED.keys()


async def test_one_script_both_api_groups(cluster: Env, kubeflow_controller: RunningController, returned: str) -> None:
    """kubedl-py's drop-in runs the script for a kubeflow.org job and a training.kubedl.io job alike, with
    job objects built as dicts (views returned) or as Kubeflow models (Kubeflow models returned)."""
    build = job_dict if returned == "views" else job_model

    def script(api_version: str, group: str, name: str) -> dict[str, Any]:
        with KubedlTrainingClient(config_file=str(cluster.kubeconfig_path), api_group=group) as client:
            assert client.namespace == cluster.namespace
            job, failing = build(api_version, name), build(api_version, f"{name}-bad", code=3)
            return run_script(client, job, name=name, failing_job=failing, failing_name=f"{name}-bad", train=train)

    kubeflow = await asyncio.to_thread(script, KUBEFLOW, "kubeflow", "kf")
    assert_as_expected(kubeflow)
    kubedl = await asyncio.to_thread(script, KUBEDL, "kubedl", "kd")
    assert_as_expected(kubedl)
    assert kubedl == kubeflow


async def test_the_real_kubeflow_sdk_runs_the_same_script(cluster: Env, kubeflow_controller: RunningController) -> None:
    """``from kubeflow.training import TrainingClient`` against kubedl-py serving kubeflow.org/v1: the script
    sees what it sees through kubedl-py's client, so switching is one import."""
    kf = import_kubeflow_training()

    def script() -> dict[str, Any]:
        client = kf.TrainingClient(config_file=str(cluster.kubeconfig_path), namespace=cluster.namespace)
        job, failing = job_model(KUBEFLOW, "real"), job_model(KUBEFLOW, "real-bad", code=3)
        return run_script(client, job, name="real", failing_job=failing, failing_name="real-bad", train=train)

    assert_as_expected(await asyncio.to_thread(script))


async def test_without_an_api_group_the_client_uses_kubeflow_org_where_served(
    cluster: Env, kube: Kube, kubeflow_controller: RunningController
) -> None:
    """``api_group=None``: discovery finds kubeflow.org/v1 serving pytorchjobs, so a job without an apiVersion
    goes there, and its pods are found by the Training Operator's labels."""

    def script() -> tuple[str, list[str]]:
        with KubedlTrainingClient(config_file=str(cluster.kubeconfig_path)) as client:
            body = job_dict(KUBEFLOW, "auto")
            del body["apiVersion"]
            client.create_job(body)
            done = client.wait_for_job_conditions("auto", wait_timeout=60, polling_interval=0.2)
            return done.api_version, client.get_job_pod_names("auto")

    assert await asyncio.to_thread(script) == (KUBEFLOW, ["auto-master-0", "auto-worker-0"])
    stored = await kube.get(Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"), "auto", namespace=kube.ns)
    assert stored["metadata"]["uid"]
