"""Assembles the controller: informers, the two job reconcilers, host-network ports, metrics.

What is cached, and why it is enough:

- the jobs of both kinds (all namespaces, or one with ``--namespace``);
- pods and Services labelled ``training.kubedl.io/controller=kubedl-py`` (only what we own), indexed by
  owner uid, trimmed to the fields the reconcilers read so 10,000 pods stay small;
- every host-network pod in the cluster (``spec.hostNetwork=true``), trimmed to its ports, because a host
  port is taken whoever's pod holds it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from kubedl_py.api import RdmaSpec, all_kinds
from kubedl_py.api import constants as c
from kubedl_py.controllers.gang import Gang, GangSchedulerKind
from kubedl_py.controllers.hostnetwork import HostNetwork
from kubedl_py.controllers.job import JobReconciler, ReconcilerOptions
from kubedl_py.controllers.ports import DEFAULT_RANGE, HostPortAllocator
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.informer import OWNER_INDEX, Handler, InformerSettings, by_owner_uid
from kubedl_py.kube.leader import LeaderElectionSettings
from kubedl_py.kube.manager import Manager, ManagerSettings, owner_key
from kubedl_py.kube.resources import PODS, SERVICES, Resource

logger = logging.getLogger(__name__)

Object = dict[str, Any]
OWNED_SELECTOR = f"{c.LABEL_CONTROLLER}={c.CONTROLLER_NAME}"


@dataclass(frozen=True)
class ControllerOptions:
    #: watch one namespace only (None: all)
    namespace: str | None = None
    workers: int = 4
    metrics_addr: str | None = None
    leader_elect: bool = False
    leader_elect_namespace: str = "kubedl-system"
    leader_elect_name: str = "kubedl-py-controller"
    #: inclusive bounds of host ports handed to host-network pods
    host_port_range: tuple[int, int] = DEFAULT_RANGE
    #: appended to Service names in TF_CONFIG (``<svc>.<ns>.svc.<domain>``); None: ``<svc>.<ns>.svc``
    cluster_domain: str | None = None
    informer: InformerSettings | None = None
    leader_election: LeaderElectionSettings | None = field(default=None)
    #: ``--gang-scheduler``: make a PodGroup per job for this scheduler and point the pods at it
    gang_scheduler: GangSchedulerKind | None = None
    #: ``--gang-scheduler-name``: the pods' schedulerName (None: ``volcano`` / ``scheduler-plugins-scheduler``)
    gang_scheduler_name: str | None = None
    #: ``--rdma-defaults``: defaults under every job's ``spec.rdma`` (jobs without one are untouched)
    rdma_defaults: RdmaSpec | None = None

    @property
    def gang(self) -> Gang | None:
        if self.gang_scheduler is None:
            return None
        return Gang(self.gang_scheduler, self.gang_scheduler_name)


def trim_pod(pod: Object) -> Object:
    """The fields of a pod the reconcilers read; everything else is dropped from the cache."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {
            key: meta[key]
            for key in (
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "labels",
                "annotations",
                "ownerReferences",
                "deletionTimestamp",
            )
            if key in meta
        },
        "spec": {
            "hostNetwork": spec.get("hostNetwork", False),
            "containers": [
                {"name": ctr.get("name"), "ports": ctr.get("ports") or []} for ctr in spec.get("containers") or []
            ],
        },
        "status": {
            "phase": status.get("phase"),
            "reason": status.get("reason"),
            "message": status.get("message"),
            "containerStatuses": [
                {key: cs[key] for key in ("name", "restartCount", "state", "lastState") if key in cs}
                for cs in status.get("containerStatuses") or []
            ],
        },
    }


def trim_host_pod(pod: Object) -> Object:
    """What the port allocator needs of a foreign host-network pod."""
    trimmed = trim_pod(pod)
    trimmed["metadata"] = {
        k: v for k, v in trimmed["metadata"].items() if k in ("name", "namespace", "uid", "deletionTimestamp")
    }
    trimmed["status"] = {"phase": trimmed["status"]["phase"]}
    spec = pod.get("spec") or {}
    trimmed["spec"]["initContainers"] = [{"ports": ctr.get("ports") or []} for ctr in spec.get("initContainers") or []]
    return trimmed


def build_manager(client: KubeClient, options: ControllerOptions) -> Manager:
    leader = options.leader_election
    if options.leader_elect and leader is None:
        leader = LeaderElectionSettings(name=options.leader_elect_name, namespace=options.leader_elect_namespace)
    manager = Manager(
        client,
        settings=ManagerSettings(
            workers=options.workers,
            metrics_addr=options.metrics_addr,
            leader_election=leader if options.leader_elect else None,
            informer=options.informer,
        ),
    )
    indexers = {OWNER_INDEX: by_owner_uid}
    pods = manager.informer(
        PODS, namespace=options.namespace, label_selector=OWNED_SELECTOR, transform=trim_pod, indexers=indexers
    )
    services = manager.informer(SERVICES, namespace=options.namespace, label_selector=OWNED_SELECTOR, indexers=indexers)
    host_pods = manager.informer(PODS, field_selector="spec.hostNetwork=true", transform=trim_host_pod)
    recorder = manager.recorder(c.CONTROLLER_NAME)
    low, high = options.host_port_range
    hostnetwork = HostNetwork(HostPortAllocator(low, high), recorder, client)
    host_pods.add_handler(
        Handler(
            on_add=hostnetwork.on_pod,
            on_update=lambda _old, new: hostnetwork.on_pod(new),
            on_delete=hostnetwork.on_pod_deleted,
        )
    )
    transitions = manager.metrics.counter(
        "jobs_total", "Job lifecycle transitions, by kind and condition", ["kind", "condition"]
    )

    def on_transition(kind: str, condition: str) -> None:
        transitions.labels(kind, condition).inc()

    for plugin in all_kinds():
        framework = plugin.framework
        resource = Resource(plugin.group, plugin.version, framework.plural, framework.kind)
        jobs = manager.informer(resource, namespace=options.namespace)
        reconciler = JobReconciler(
            client=client,
            framework=framework,
            resource=resource,
            jobs=jobs,
            pods=pods,
            services=services,
            hostnetwork=hostnetwork,
            recorder=recorder,
            options=ReconcilerOptions(
                cluster_domain=options.cluster_domain, gang=options.gang, rdma_defaults=options.rdma_defaults
            ),
            on_transition=on_transition,
        )
        controller = manager.add_controller(framework.plural, reconciler)
        controller.watch(jobs)
        controller.watch(pods, map=owner_key(framework.kind, api_version=resource.api_version))
        controller.watch(services, map=owner_key(framework.kind, api_version=resource.api_version))
        expectations = reconciler.expectations
        pods.add_handler(
            Handler(
                on_add=expectations.observed,
                on_update=lambda _old, new, e=expectations: e.observed(new),  # type: ignore[misc]
                on_delete=expectations.observed_delete,
            )
        )
        hostnetwork.register(framework.kind, controller.enqueue)
        jobs.add_handler(Handler(on_add=lambda obj: transitions_created(obj, on_transition)))
    return manager


def transitions_created(obj: Object, on_transition: Any) -> None:
    """Count a job as created the first time it is seen without a Created condition."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    if not any(cond.get("type") == "Created" for cond in conditions):
        on_transition(obj.get("kind", ""), "Created")


async def run_controller(client: KubeClient, options: ControllerOptions, *, manager: Manager | None = None) -> None:
    """Run until ``manager.stop()`` (the CLI calls it on SIGTERM/SIGINT)."""
    manager = manager or build_manager(client, options)
    scope = f"namespace {options.namespace}" if options.namespace else "all namespaces"
    logger.info(
        "kubedl-py controller: %s, %d workers, host ports %d-%d%s%s%s",
        scope,
        options.workers,
        *options.host_port_range,
        ", leader election" if options.leader_elect else "",
        f", gang scheduler {options.gang_scheduler}" if options.gang_scheduler else "",
        ", RDMA defaults" if options.rdma_defaults else "",
    )
    await manager.run()
