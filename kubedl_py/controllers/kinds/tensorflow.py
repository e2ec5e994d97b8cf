"""TFJob's controller half: TF_CONFIG for the framework's container, and success by the chief.

- TF_CONFIG lists every replica type but Evaluator (TensorFlow's own convention: it only reads
  checkpoints, so it appears only as its own ``task``); it is set only for jobs with more than one replica.
- A replica's own entry carries the port it listens on (its host port in host-network mode); peers' entries
  carry their Service and the framework's port.
- Dialed by name: every member of the cluster spec (every replica but the Evaluators); nobody in a
  single-replica job, which has no TF_CONFIG.
- Success: the Chief (or Master) succeeded when there is one; otherwise worker 0 (``successPolicy: ""``,
  TensorFlow's convention: worker 0 is the chief) or every worker (``successPolicy: AllWorkers``). A job of
  only PS/Evaluator replicas succeeds when all its pods did.
"""

from __future__ import annotations

import json
from typing import Any

from kubedl_py.api.kinds.tensorflow import TFJob
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.kinds.base import (
    Env,
    Kind,
    Pods,
    Slot,
    all_succeeded,
    every_replica,
    pod_succeeded,
    replicas,
)

# TensorFlow's task types are the lower-cased replica types; Evaluator never joins the cluster spec.
_NOT_IN_CLUSTER = frozenset({"Evaluator"})


def tf_config(job: TFJob, replica_type: str, index: int, addressing: Addressing) -> dict[str, Any] | None:
    """TF_CONFIG of one replica, or None for a single-replica job (TensorFlow then runs locally)."""
    total = sum(replicas(job, t) for t in job.spec.tf_replica_specs)
    if total <= 1:
        return None
    cluster: dict[str, list[str]] = {}
    for rtype in job.spec.tf_replica_specs:
        if rtype in _NOT_IN_CLUSTER or replicas(job, rtype) == 0:
            continue
        entries = []
        for i in range(replicas(job, rtype)):
            own = (rtype, i) == (replica_type, index)
            port = addressing.listen_port(rtype, i) if own else addressing.service_port(rtype)
            entries.append(f"{addressing.service_host(job.name, rtype, i)}:{port}")
        cluster[rtype.lower()] = entries
    return {
        "cluster": cluster,
        "task": {"type": replica_type.lower(), "index": index},
        "environment": "cloud",
    }


class TensorFlowController(Kind[TFJob]):
    def rendezvous_env(self, job: TFJob, replica_type: str, index: int, addressing: Addressing) -> Env:
        config = tf_config(job, replica_type, index, addressing)
        return {} if config is None else {"TF_CONFIG": json.dumps(config, separators=(",", ":"))}

    def dialed(self, job: TFJob) -> set[Slot]:
        if sum(replicas(job, t) for t in job.spec.tf_replica_specs) <= 1:
            return set()
        return every_replica(job, *(t for t in job.spec.tf_replica_specs if t not in _NOT_IN_CLUSTER))

    def succeeded(self, job: TFJob, pods: Pods) -> bool:
        for chief in ("Chief", "Master"):
            if pods.get(chief):
                return pod_succeeded(pods[chief][0])
        workers = list(pods.get("Worker", []))
        if workers:
            return all_succeeded(workers) if job.spec.success_policy == "AllWorkers" else pod_succeeded(workers[0])
        return all_succeeded([pod for group in pods.values() for pod in group])


CONTROLLER = TensorFlowController()
