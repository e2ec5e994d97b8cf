"""The pod as the reconcile makes it, for the unit tests: ``pods.build_pod``, then ``shape_pod`` of the features
that shape pods (RDMA and placement, and the gang's with a gang scheduler), in registry order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.api.common import RdmaSpec
from kubedl_py.api.kinds import kind_api
from kubedl_py.controllers.addressing import Addressing
from kubedl_py.controllers.features import Session
from kubedl_py.controllers.gang import Gang, PodGroups
from kubedl_py.controllers.job import JobReconciler, ReconcilerOptions
from kubedl_py.controllers.kinds import controller_for
from kubedl_py.controllers.observation import Observation, Replica
from kubedl_py.controllers.plan import make_plan
from kubedl_py.controllers.pods import build_pod
from kubedl_py.controllers.rdma import RdmaAndPlacement


def built_pod(
    job: TrainingJob,
    replica_type: str,
    index: int,
    addressing: Addressing,
    *,
    rdma_defaults: RdmaSpec | None = None,
    gang: Gang | None = None,
) -> dict[str, Any]:
    pod = build_pod(job, replica_type, index, addressing)
    features: list[object] = [RdmaAndPlacement(rdma_defaults)]
    if gang is not None:
        features.insert(0, PodGroups(cast(Any, None), cast(Any, None), gang))
    seen = Observation(raw={}, job=job, status={}, pods=[], services={}, replicas={}, surplus=[], now=datetime.now(UTC))
    plan = make_plan(seen, controller_for(job.kind))
    Session(tuple(features)).shape_pod(plan, Replica(replica_type, index), pod)
    return pod


def bare_reconciler(options: ReconcilerOptions | None = None) -> JobReconciler:
    """A reconciler with no client, informers or recorder: for tests of its own bookkeeping (write slots, the
    parse cache) that never reach the API."""
    nothing = cast(Any, None)
    return JobReconciler(
        client=nothing,
        framework=kind_api(c.PYTORCH_KIND).framework,
        resource=nothing,
        jobs=nothing,
        pods=nothing,
        services=nothing,
        recorder=nothing,
        options=options,
    )
