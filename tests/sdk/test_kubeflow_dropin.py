"""What the Training Operator v1 does and scripts written for it rely on, driven with the real Kubeflow
training SDK (``kubeflow.training``) on both control planes (issue 36):

- ``runPolicy.managedBy`` takes only the Training Operator's values (``kubeflow.org/training-operator``,
  ``kueue.x-k8s.io/multikueue``; kubedl-py also ``kubedl.io/kubedl-py``), refused at create otherwise
  (``Unsupported value``), and cannot change once the job exists;
- ``status.conditions`` are in time order (``Created``, ``Running``, ``Succeeded``), the last one the state.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kubedl_py.kube import errors
from kubedl_py.kube.resources import Resource
from tests.integration.conftest import Env, Kube, RunningController
from tests.sdk.kubeflow_script import import_kubeflow_training
from tests.sdk.test_kubeflow_compat import KUBEFLOW, job_model

KF_PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")


def with_manager(name: str, manager: str | None) -> Any:
    job = job_model(KUBEFLOW, name)
    job.spec.run_policy.managed_by = manager
    return job


async def test_managed_by_takes_the_training_operators_values_and_cannot_change(
    cluster: Env, kube: Kube, kubeflow_controller: RunningController
) -> None:
    kf = import_kubeflow_training()
    client = kf.TrainingClient(config_file=str(cluster.kubeconfig_path), namespace=cluster.namespace)

    def create(name: str, manager: str | None) -> str:
        try:
            client.create_job(with_manager(name, manager))
        except Exception as exc:  # the SDK wraps the API server's answer in its own exception
            return str(exc)
        return ""

    refused = await asyncio.to_thread(create, "other", "example.com/other")
    assert "managedBy" in refused and "Unsupported value" in refused, refused
    with pytest.raises(errors.NotFound):
        await kube.get(KF_PYTORCHJOBS, "other", namespace=kube.ns)

    assert await asyncio.to_thread(create, "mk", "kueue.x-k8s.io/multikueue") == ""
    assert await asyncio.to_thread(create, "to", "kubeflow.org/training-operator") == ""
    for patch in (
        {"spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}},
        {"spec": {"runPolicy": {"managedBy": None}}},
    ):
        with pytest.raises(errors.Invalid, match="managedBy is immutable"):
            await kube.patch(KF_PYTORCHJOBS, "to", patch, namespace=kube.ns)
    # unset at create stays unset: setting it later is a change too
    assert await asyncio.to_thread(create, "unset", None) == ""
    with pytest.raises(errors.Invalid, match="managedBy is immutable"):
        patch = {"spec": {"runPolicy": {"managedBy": "kubeflow.org/training-operator"}}}
        await kube.patch(KF_PYTORCHJOBS, "unset", patch, namespace=kube.ns)


async def test_the_real_sdk_reads_the_conditions_in_time_order(
    cluster: Env, kubeflow_controller: RunningController
) -> None:
    kf = import_kubeflow_training()
    client = kf.TrainingClient(config_file=str(cluster.kubeconfig_path), namespace=cluster.namespace)

    def run() -> list[tuple[str, str]]:
        client.create_job(job_model(KUBEFLOW, "ordered"))
        client.wait_for_job_conditions("ordered", job_kind="PyTorchJob", timeout=60, polling_interval=0.2)
        return [(c.type, c.status) for c in client.get_job_conditions("ordered", job_kind="PyTorchJob")]

    conditions = await asyncio.to_thread(run)
    assert conditions == [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]
