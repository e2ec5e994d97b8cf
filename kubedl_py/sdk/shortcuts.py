"""``pytorch_job`` and ``tf_job``: the generic builder (``builders.training_job``) under the names and arguments
PyTorch and TensorFlow users know (``workers=``, ``ps=``, ``chief=``), kept for the code written against them.

The one module of the SDK that names kinds: every other one reads them from the kind registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

from kubedl_py.api.jobs import PyTorchJob, TFJob
from kubedl_py.sdk.builders import JobOptions, training_job


def pytorch_job(
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    workers: int = 0,
    nproc_per_node: int | str | None = None,
    **options: Unpack[JobOptions],
) -> PyTorchJob:
    """A PyTorchJob of one Master and ``workers`` Workers running ``command`` in ``image`` (container
    ``pytorch``); ``options`` as :func:`~kubedl_py.sdk.builders.training_job` takes them."""
    replicas = {"Master": 1, **({"Worker": workers} if workers else {})}
    spec = {"nprocPerNode": nproc_per_node} if nproc_per_node is not None else None
    job = training_job("PyTorchJob", name, image, command, replicas=replicas, spec=spec, **options)
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
    success_policy: str | None = None,
    **options: Unpack[JobOptions],
) -> TFJob:
    """A TFJob of ``workers`` Workers, ``ps`` parameter servers, and optionally a Chief and an Evaluator
    (container ``tensorflow``); ``options`` as :func:`~kubedl_py.sdk.builders.training_job` takes them."""
    counts = {"Chief": int(chief), "PS": ps, "Worker": workers, "Evaluator": int(evaluator)}
    replicas = {replica_type: count for replica_type, count in counts.items() if count}
    spec = {"successPolicy": success_policy} if success_policy is not None else None
    job = training_job("TFJob", name, image, command, replicas=replicas, spec=spec, **options)
    assert isinstance(job, TFJob)
    return job
