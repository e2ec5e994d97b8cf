"""JAXJob: multi-process JAX (``jax.distributed.initialize``), Workers only; worker 0 hosts the coordinator.

The API half of the kind (see ``base.py``), with the Training Operator v1's names and defaults: container
``jax``, port ``jaxjob-port`` 6666, restart policy ``Never``, cleanPodPolicy ``None``.
"""

from __future__ import annotations

from typing import Literal

from kubedl_py.api.common import ReplicaSpec, RunPolicy
from kubedl_py.api.kinds.base import Framework, KindAPI, ServedIn, TrainingJob

JAX = Framework(
    kind="JAXJob",
    plural="jaxjobs",
    replica_specs_field="jaxReplicaSpecs",
    replica_types=("Worker",),
    container_name="jax",
    port_name="jaxjob-port",
    default_port=6666,
    default_restart_policy="Never",
    default_clean_pod_policy="None",
    worker_type="Worker",
    short_names=("jaxj",),
)


class JAXJobSpec(RunPolicy):
    """What to run (the replica specs) and how (run policies)."""

    jax_replica_specs: dict[str, ReplicaSpec]
    """The replica type Worker (process 0 is the coordinator) with its replicas, restartPolicy and pod
    template."""


class JAXJob(TrainingJob):
    FRAMEWORK = JAX

    api_version: ServedIn = "training.kubedl.io/v1alpha1"
    kind: Literal["JAXJob"] = "JAXJob"
    spec: JAXJobSpec


KIND = KindAPI(kubeflow=True, name="jax", model=JAXJob)
