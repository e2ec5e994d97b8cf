"""Per-test Kueue objects: a ResourceFlavor, a ClusterQueue with a quota, a LocalQueue, priority classes.

Why per test: ClusterQueues and priority classes are cluster-scoped and the session cluster is shared, so each
test names its own after its namespace and admits only that namespace's workloads.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

from harness.kueue import (
    CLUSTER_QUEUES,
    GROUP,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    VERSION,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
)
from kubedl_py.api import constants as c
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import PODS, Resource
from tests.integration.conftest import Kube, eventually

#: every job kind the tests of this directory create
JOB_RESOURCES = (
    Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    Resource("kubeflow.org", "v1", "tfjobs", "TFJob"),
    Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND),
)

API_VERSION = f"{GROUP}/{VERSION}"


@dataclass(frozen=True)
class Queues:
    """One test's ResourceFlavor, ClusterQueue (its namespace only) and LocalQueue, and its priority classes."""

    flavor: str
    cluster_queue: str
    local_queue: str
    #: WorkloadPriorityClass names: "low" -> its cluster-wide name
    priorities: dict[str, str]


async def make_queues(
    kube: Kube,
    *,
    cpu: str,
    preemption: dict[str, Any] | None = None,
    priorities: dict[str, int] | None = None,
    node_labels: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    topology: str | None = None,
) -> Queues:
    """A flavor (with ``node_labels`` and ``tolerations``, the nodes it stands for), a ClusterQueue with a
    ``cpu`` quota (admitting workloads of the test's namespace only) and a LocalQueue ``queue`` in the test's
    namespace; WorkloadPriorityClasses named after the test."""
    suffix = f"{kube.ns}-{uuid.uuid4().hex[:4]}"
    flavor = f"flavor-{suffix}"
    flavor_body: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": flavor}}
    if node_labels:
        flavor_body.setdefault("spec", {})["nodeLabels"] = node_labels
    if tolerations:
        flavor_body.setdefault("spec", {})["tolerations"] = tolerations
    if topology:
        flavor_body.setdefault("spec", {})["topologyName"] = topology  # topology-aware scheduling
    await kube.create(RESOURCE_FLAVORS, flavor_body)
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": kube.ns}},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "64Gi"}],
                    }
                ],
            }
        ],
    }
    if preemption is not None:
        spec["preemption"] = preemption
    cluster_queue = f"cq-{suffix}"
    await kube.create(
        CLUSTER_QUEUES,
        {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": cluster_queue}, "spec": spec},
    )
    await kube.create(
        LOCAL_QUEUES,
        {
            "apiVersion": API_VERSION,
            "kind": "LocalQueue",
            "metadata": {"name": "queue", "namespace": kube.ns},
            "spec": {"clusterQueue": cluster_queue},
        },
        namespace=kube.ns,
    )
    names = {}
    for label, value in (priorities or {}).items():
        name = f"{label}-{suffix}"
        await kube.create(
            WORKLOAD_PRIORITY_CLASSES,
            {"apiVersion": API_VERSION, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value},
        )
        names[label] = name
    return Queues(flavor, cluster_queue, "queue", names)


async def delete_queues(kube: Kube, queues: Queues) -> None:
    """Delete the test's jobs and wait until their pods and Workloads are gone, Kueue's finalizers released
    (while Kueue still runs: a pod or Workload it holds would stay Terminating on the shared cluster), then
    what :func:`make_queues` made."""
    for resource in JOB_RESOURCES:
        await kube.delete_collection(resource, namespace=kube.ns, propagation_policy="Background")
    # A pod group's Workload is owned by its pods, not the job, and Kueue keeps its finalizer on deleted
    # group pods until the group finishes or its Workload goes: deleting the job alone leaves them Terminating.
    await kube.delete_collection(WORKLOADS, namespace=kube.ns)

    left: list[str] = []

    async def drained() -> bool:
        pods = await kube.list(PODS, namespace=kube.ns)
        workloads = await kube.list(WORKLOADS, namespace=kube.ns)
        left[:] = [
            f"{what} {o['metadata']['name']} finalizers={o['metadata'].get('finalizers')}"
            for what, listed in (("pod", pods), ("workload", workloads))
            for o in listed.items
        ]
        return not left

    try:
        await eventually(drained, within=60, what="the test's pods and Workloads gone")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; left: {left}") from None
    with contextlib.suppress(NotFound):
        await kube.delete(LOCAL_QUEUES, queues.local_queue, namespace=kube.ns)
    for resource, name in (
        (CLUSTER_QUEUES, queues.cluster_queue),
        (RESOURCE_FLAVORS, queues.flavor),
        *((WORKLOAD_PRIORITY_CLASSES, name) for name in queues.priorities.values()),
    ):
        with contextlib.suppress(NotFound):
            await kube.delete(resource, name)
