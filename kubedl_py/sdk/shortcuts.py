"""``pytorch_job`` and ``tf_job``: the generic builder (``builders.training_job``) under the names and arguments
PyTorch and TensorFlow users know (``workers=``, ``ps=``, ``chief=``), kept for the code written against them.

The one module of the SDK that names kinds: every other one reads them from the kind registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubedl_py.api.jobs import PyTorchJob, TFJob
from kubedl_py.sdk.builders import training_job


def pytorch_job(
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    workers: int = 0,
    nproc_per_node: int | str | None = None,
    resources: Mapping[str, Any] | None = None,
    host_network: bool = False,
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    namespace: str | None = None,
    restart_policy: str | None = None,
    backoff_limit: int | None = None,
    active_deadline_seconds: int | None = None,
    clean_pod_policy: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
) -> PyTorchJob:
    """A PyTorchJob of one Master and ``workers`` Workers running ``command`` in ``image`` (container
    ``pytorch``); the other arguments as :func:`~kubedl_py.sdk.builders.training_job` takes them."""
    replicas = {"Master": 1, **({"Worker": workers} if workers else {})}
    job = training_job(
        "PyTorchJob",
        name,
        image,
        command,
        replicas=replicas,
        spec={"nprocPerNode": nproc_per_node} if nproc_per_node is not None else None,
        resources=resources,
        host_network=host_network,
        args=args,
        env=env,
        namespace=namespace,
        restart_policy=restart_policy,
        backoff_limit=backoff_limit,
        active_deadline_seconds=active_deadline_seconds,
        clean_pod_policy=clean_pod_policy,
        labels=labels,
        annotations=annotations,
        pod_annotations=pod_annotations,
    )
    assert isinstance(job, PyTorchJob)
    return job


def tf_job(
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    workers: int = 1,
    ps: int = 0,
    chief: bool = False,
    evaluator: bool = False,
    resources: Mapping[str, Any] | None = None,
    host_network: bool = False,
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    namespace: str | None = None,
    restart_policy: str | None = None,
    success_policy: str | None = None,
    backoff_limit: int | None = None,
    active_deadline_seconds: int | None = None,
    clean_pod_policy: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
) -> TFJob:
    """A TFJob of ``workers`` Workers, ``ps`` parameter servers, and optionally a Chief and an Evaluator
    (container ``tensorflow``); the other arguments as :func:`~kubedl_py.sdk.builders.training_job` takes them."""
    counts = {"Chief": int(chief), "PS": ps, "Worker": workers, "Evaluator": int(evaluator)}
    job = training_job(
        "TFJob",
        name,
        image,
        command,
        replicas={replica_type: count for replica_type, count in counts.items() if count},
        spec={"successPolicy": success_policy} if success_policy is not None else None,
        resources=resources,
        host_network=host_network,
        args=args,
        env=env,
        namespace=namespace,
        restart_policy=restart_policy,
        backoff_limit=backoff_limit,
        active_deadline_seconds=active_deadline_seconds,
        clean_pod_policy=clean_pod_policy,
        labels=labels,
        annotations=annotations,
        pod_annotations=pod_annotations,
    )
    assert isinstance(job, TFJob)
    return job
