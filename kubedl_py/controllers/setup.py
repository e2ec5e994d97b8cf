"""Assembles the controller: informers, a job reconciler per kind and API group, their features, metrics.

What is cached, and why it is enough:

- the jobs of every kind (all namespaces, or those given with ``--namespace``: a namespaced install, one
  list/watch per namespace, see kube/informer.py);
- pods and Services labelled ``training.kubedl.io/controller=kubedl-py`` (only what we own), indexed by
  owner uid, trimmed to the fields the reconcilers read so 10,000 pods stay small;
- every host-network pod in the cluster (``spec.hostNetwork=true``), trimmed to its ports, because a host
  port is taken whoever's pod holds it. A namespaced install sees only those of its namespaces (it may not
  list pods elsewhere): a port held by another namespace's host-network pod can then be handed out again,
  and the scheduler's host-port check keeps the two pods off one node (the pod waits for another node
  instead of colliding; docs/install.md);
- what the features watch: the PodGroups we made, with a gang scheduler; the Workloads we made, with Kueue.

The host-network pods are watched by the host-network feature, the others by theirs. ``FEATURES`` is the one list
of the reconcile's cross-cutting features (``features.py``): a new feature is its module and one line there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from kubedl_py.api import RdmaSpec, all_kinds
from kubedl_py.api import constants as c
from kubedl_py.api.groups import GROUPS, KUBEDL, ApiGroup
from kubedl_py.api.plain import Object
from kubedl_py.controllers import gang, hostnetwork, kueue, rdma
from kubedl_py.controllers.failures.recovery import DEFAULT_INFRASTRUCTURE_BACKOFF_LIMIT, DEFAULT_NODE_LOST_TIMEOUT
from kubedl_py.controllers.features import OWNED_SELECTOR, FeatureFactory, Features, Wiring
from kubedl_py.controllers.gang import Gang, GangSchedulerKind
from kubedl_py.controllers.hostnetwork import PORT_RETRY_AFTER
from kubedl_py.controllers.hostnetwork.ports import DEFAULT_RANGE
from kubedl_py.controllers.job import JobReconciler
from kubedl_py.controllers.kueue import DEFAULT_KUEUE_MODE, WORKLOADS, KueueMode
from kubedl_py.controllers.restart_agent import DEFAULT_AGENT_IMAGE
from kubedl_py.controllers.telemetry import JobTelemetry
from kubedl_py.controllers.trimming import trim_pod
from kubedl_py.controllers.writes import WRITE_CONCURRENCY
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.informer import OWNER_INDEX, Handler, InformerSettings, by_owner_uid
from kubedl_py.kube.leader import LeaderElectionSettings
from kubedl_py.kube.manager import Manager, ManagerSettings, owner_key
from kubedl_py.kube.resources import PODS, SERVICES, Resource

logger = logging.getLogger(__name__)

SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", namespaced=False
)


@dataclass(frozen=True)
class ControllerOptions:
    #: watch one namespace only (None: all)
    namespace: str | None = None
    #: watch these namespaces only (a namespaced install); with ``namespace`` too, both are watched
    namespaces: tuple[str, ...] = ()
    #: concurrent reconciles per job kind; their pod/Service writes share a cap of ``write_concurrency`` (32) in
    #: flight per kind, and 16 fill it (4 left the N = 200 burst 20% slower on the real control plane,
    #: docs/benchmarks.md)
    workers: int = 16
    #: while a job that lost a pod is reconciled, the controller's other writes wait this long at most (0: never;
    #: kubedl_py.kube.priority)
    urgent_write_hold: float = 1.0
    #: for this many seconds after a running job is repaired, at most ``repair_workers`` reconciles of new and
    #: changed jobs run at once per kind (0: never; kubedl_py.kube.priority)
    repair_window: float = 5.0
    repair_workers: int = 2
    #: ``--pod-event-batch``: a pod added or changed (not failed, stopping or deleted: those go at once, urgent)
    #: reconciles its job within this many seconds, so that the events of a job's pods meanwhile are one
    #: reconcile (0: each at once)
    pod_event_batch: float = 0.05
    #: pod/Service writes in flight per job kind for new and changed jobs (the urgent lane has 8 of its own)
    write_concurrency: int = WRITE_CONCURRENCY
    metrics_addr: str | None = None
    #: /metrics over HTTPS behind the API server's authorization (``--metrics-secure``; kube/health.py)
    metrics_secure: bool = False
    metrics_cert_dir: str | None = None
    #: /healthz and /readyz alone, plain HTTP (``--health-addr``)
    health_addr: str | None = None
    leader_elect: bool = False
    leader_elect_namespace: str = "kubedl-system"
    leader_elect_name: str = "kubedl-py-controller"
    #: inclusive bounds of host ports handed to host-network pods
    host_port_range: tuple[int, int] = DEFAULT_RANGE
    #: seconds a host-network pod may wait for a node with its host port free before it gets another port
    host_port_retry_after: float = PORT_RETRY_AFTER
    #: host ports one pod may declare (``--max-host-ports-per-pod``: the framework's and its template's)
    max_host_ports_per_pod: int = c.DEFAULT_MAX_HOST_PORTS_PER_POD
    #: requeue delay while a job waits for something that sends no event (a name taken by an object not the job's)
    wait_requeue: float = 5.0
    #: appended to Service names in TF_CONFIG (``<svc>.<ns>.svc.<domain>``); None: ``<svc>.<ns>.svc``
    cluster_domain: str | None = None
    informer: InformerSettings | None = None
    leader_election: LeaderElectionSettings | None = field(default=None)
    #: ``--gang-scheduler``: make a PodGroup per job for this scheduler and point the pods at it; "none": no gang;
    #: None (no flag): the native gang for jobs with ``schedulingPolicy.minAvailable`` where it is served (gang.py)
    gang_scheduler: GangSchedulerKind | Literal["none"] | None = None
    #: ``--gang-scheduler-name``: the pods' schedulerName (None: ``volcano`` / ``scheduler-plugins-scheduler``)
    gang_scheduler_name: str | None = None
    #: ``--rdma-defaults``: defaults under every job's ``spec.rdma`` (jobs without one are untouched)
    rdma_defaults: RdmaSpec | None = None
    #: ``--node-lost-timeout``: default of failurePolicy.nodeLostTimeoutSeconds (controllers/failures/recovery.py)
    node_lost_timeout: int = DEFAULT_NODE_LOST_TIMEOUT
    #: ``--infrastructure-backoff-limit``: default of failurePolicy.infrastructureBackoffLimit
    infrastructure_backoff_limit: int = DEFAULT_INFRASTRUCTURE_BACKOFF_LIMIT
    #: ``--kubeflow-api``: also reconcile the kinds in kubeflow.org/v1 (those whose CRDs are installed)
    kubeflow_api: bool = False
    #: ``--kueue-workloads``: which API groups' queued jobs get a Kueue Workload made by kubedl-py (kueue.py)
    kueue_workloads: KueueMode = DEFAULT_KUEUE_MODE
    #: ``--agent-image``: the in-place restart agent's image (restart_agent.py)
    agent_image: str = DEFAULT_AGENT_IMAGE
    #: the (group, plural) pairs served by the API server, from :func:`served_resources`; None: assume all.
    #: Only kubeflow.org kinds missing here are skipped; the gang scheduler's PodGroups are watched when
    #: served (else found with requests: see gang.py), Kueue's Workloads only when listed here (kueue.py).
    served: frozenset[tuple[str, str]] | None = None
    #: may the controller list and watch pods in every namespace (:func:`may_list_pods_everywhere`)? Then the
    #: host-network pods of all namespaces hold ports; False (a namespaced install): those of ``watched`` only.
    #: None: assume it may.
    host_pods_everywhere: bool | None = None

    @property
    def watched(self) -> tuple[str, ...] | None:
        """The namespaces whose jobs are reconciled; None: all."""
        names = tuple(dict.fromkeys([*([self.namespace] if self.namespace else []), *self.namespaces]))
        return names or None

    @property
    def groups(self) -> tuple[ApiGroup, ...]:
        """The API groups whose kinds the controller reconciles."""
        return GROUPS if self.kubeflow_api else (KUBEDL,)

    @property
    def gang(self) -> Gang | None:
        if self.gang_scheduler == "none":
            return None
        if self.gang_scheduler is None:
            return Gang("kubernetes", every_job=False)
        return Gang(self.gang_scheduler, self.gang_scheduler_name)


#: The reconcile's cross-cutting features (``features.py``), each its module's factory; every contract calls them
#: in this order. Host network first: its ports are what the others' pods and objects are built with.
FEATURES: tuple[FeatureFactory[ControllerOptions], ...] = (
    hostnetwork.install,
    gang.install,
    kueue.install,
    rdma.install,
)


def pod_in_trouble(pod: Object) -> bool:
    """A pod being deleted or failed: its job needs a replacement or a decision, before new work."""
    return (
        bool((pod.get("metadata") or {}).get("deletionTimestamp")) or (pod.get("status") or {}).get("phase") == "Failed"
    )


def build_manager(client: KubeClient, options: ControllerOptions) -> Manager:
    leader = options.leader_election
    if options.leader_elect and leader is None:
        leader = LeaderElectionSettings(name=options.leader_elect_name, namespace=options.leader_elect_namespace)
    manager = Manager(
        client,
        settings=ManagerSettings(
            workers=options.workers,
            urgent_write_hold=options.urgent_write_hold,
            repair_window=options.repair_window,
            repair_workers=options.repair_workers,
            metrics_addr=options.metrics_addr,
            metrics_secure=options.metrics_secure,
            metrics_cert_dir=options.metrics_cert_dir,
            health_addr=options.health_addr,
            leader_election=leader if options.leader_elect else None,
            informer=options.informer,
        ),
    )
    indexers = {OWNER_INDEX: by_owner_uid}
    watched = options.watched
    pods = manager.informer(
        PODS, namespaces=watched, label_selector=OWNED_SELECTOR, transform=trim_pod, indexers=indexers
    )
    services = manager.informer(SERVICES, namespaces=watched, label_selector=OWNED_SELECTOR, indexers=indexers)
    recorder = manager.recorder(c.CONTROLLER_NAME)
    #: what the features share across reconcilers (the host-port allocator, informers)
    shared: dict[str, Any] = {}
    wiring = Wiring(client, recorder, manager, options, watched, options.served, shared)
    transitions = manager.metrics.counter(
        "jobs_total", "Job lifecycle transitions, by kind and condition", ["kind", "condition"]
    )

    def on_transition(kind: str, condition: str) -> None:
        transitions.labels(kind, condition).inc()

    telemetry = JobTelemetry(manager.metrics)
    telemetry.watch_pods(pods)
    telemetry.watch_services(services)
    peer_counters = _peer_counters(manager)
    groups = options.groups
    for plugin in all_kinds():
        framework = plugin.framework
        for group in groups:
            if group not in plugin.groups:
                continue
            resource = Resource(group.group, group.version, framework.plural, framework.kind)
            # Only kubeflow.org is filtered by what is installed: it is optional, in part or whole. Our own
            # kinds are always watched, so a controller started before its CRDs are served waits for them.
            installed = options.served is None or (group.group, framework.plural) in options.served
            if group is not KUBEDL and not installed:
                logger.info("%s is not installed; its jobs are not reconciled", resource)
                continue
            count = _transition_counter(on_transition, peer_counters if group.kind_reasons else None)
            jobs = manager.informer(resource, namespaces=watched)
            telemetry.watch_jobs(framework.kind, jobs)
            features = Features(tuple(made for install in FEATURES if (made := install(wiring)) is not None))
            reconciler = JobReconciler(
                client=client,
                framework=framework,
                resource=resource,
                jobs=jobs,
                pods=pods,
                services=services,
                recorder=recorder,
                features=features,
                options=options,
                on_transition=count,
            )
            # ``pytorchjobs`` as before (the metrics' controller label), ``pytorchjobs.kubeflow.org`` beside it
            name = framework.plural if group is KUBEDL else f"{framework.plural}.{group.group}"
            controller = manager.add_controller(name, reconciler)
            reconciler.status_yield.wake = controller.queue.add
            controller.watch(jobs)
            # A pod or Service of a job deleted, a pod stopping or failed: that job goes to the front of the
            # queue (its peers are stalled until it is replaced), ahead of jobs merely being created.
            to_owner = owner_key(framework.kind, api_version=resource.api_version)
            controller.watch(
                pods, map=to_owner, urgent=pod_in_trouble, urgent_delete=True, batch=options.pod_event_batch
            )
            controller.watch(services, map=to_owner, urgent_delete=True)
            for informer in features.watches():
                controller.watch(informer, map=to_owner)
            expectations = reconciler.expectations
            pods.add_handler(
                Handler(
                    on_add=expectations.observed,
                    on_update=lambda _old, new, e=expectations: e.observed(new),  # type: ignore[misc]
                    on_delete=expectations.observed_delete,
                )
            )
            jobs.add_handler(Handler(on_add=lambda obj, f=count: transitions_created(obj, f)))  # type: ignore[misc]
    return manager


def transitions_created(obj: Object, on_transition: Any) -> None:
    """Count a job as created the first time it is seen without a Created condition."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    if not any(cond.get("type") == "Created" for cond in conditions):
        namespace = (obj.get("metadata") or {}).get("namespace") or ""
        on_transition(obj.get("kind", ""), "Created", namespace)


#: the Training Operator's metric per transition (pkg/common/metrics.go): what its users' dashboards chart
_PEER_METRICS = {
    "Created": ("training_operator_jobs_created_total", "Counts number of jobs created"),
    "Succeeded": ("training_operator_jobs_successful_total", "Counts number of jobs successfully finished"),
    "Failed": ("training_operator_jobs_failed_total", "Counts number of jobs failed"),
    "Restarting": ("training_operator_jobs_restarted_total", "Counts number of jobs restarted"),
}


def _peer_counters(manager: Manager) -> dict[str, Any]:
    return {
        condition: manager.metrics.counter(name, text, ["job_namespace", "framework"], prefixed=False)
        for condition, (name, text) in _PEER_METRICS.items()
    }


def _transition_counter(
    ours: Callable[[str, str], None], peer: dict[str, Any] | None
) -> Callable[[str, str, str], None]:
    """Count a transition in our metric and, for kubeflow.org jobs, in the Training Operator's too."""

    def count(kind: str, condition: str, namespace: str = "") -> None:
        ours(kind, condition)
        if peer is not None and condition in peer:
            framework = kind.removesuffix("Job").lower()
            peer[condition].labels(namespace, framework).inc()

    return count


async def served_resources(
    client: KubeClient, groups: tuple[ApiGroup, ...], *, gang: Gang | None = None, kueue: bool = True
) -> frozenset[tuple[str, str]]:
    """The (group, plural) pairs the API server serves in ``groups``, the gang scheduler's group and Kueue's
    (discovery), so the controller watches only what is installed: a cluster may have kubedl-py's kubeflow.org
    kinds only in part, and a gang scheduler's or Kueue's CRDs may come after the controller."""
    served: set[tuple[str, str]] = set()
    versions = [(group.group, group.api_version) for group in groups]
    if gang is not None:
        versions.append((gang.resource.group, gang.resource.api_version))
    if kueue:
        versions.append((WORKLOADS.group, WORKLOADS.api_version))
    for group_name, api_version in versions:
        try:
            listing = await client.request("GET", f"/apis/{api_version}")
        except errors.NotFound:
            continue
        for entry in listing.get("resources") or []:
            name = str(entry.get("name") or "")
            if "/" not in name:
                served.add((group_name, name))
    return frozenset(served)


async def may_list_pods_everywhere(client: KubeClient) -> bool:
    """Whether RBAC lets this client list and watch pods in all namespaces (a SelfSubjectAccessReview each,
    which every authenticated user may send): a cluster-wide install may, a namespaced one may not."""
    for verb in ("list", "watch"):
        review = await client.create(
            SELF_SUBJECT_ACCESS_REVIEWS,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": verb, "resource": "pods", "version": "v1"}},
            },
        )
        if not (review.get("status") or {}).get("allowed"):
            return False
    return True


async def discovered(client: KubeClient, options: ControllerOptions) -> ControllerOptions:
    """``options`` with what only the API server can say filled in: the kinds served, the pods it may list."""
    if options.served is None:
        served = await served_resources(
            client, options.groups, gang=options.gang, kueue=options.kueue_workloads != "off"
        )
        options = replace(options, served=served)
    if options.host_pods_everywhere is None:
        everywhere = await may_list_pods_everywhere(client)
        if not everywhere:
            logger.info(
                "may not list pods in all namespaces: host ports are chosen against the host-network pods of %s only",
                ", ".join(options.watched or ()),
            )
        options = replace(options, host_pods_everywhere=everywhere)
    return options


def _gang_said(options: ControllerOptions) -> str:
    gang = options.gang
    if gang is None:
        return ""
    if gang.every_job:
        return f", gang scheduler {gang.scheduler}"
    if options.served is not None and (gang.resource.group, gang.resource.plural) in options.served:
        return ", kube-scheduler's gang for jobs with schedulingPolicy.minAvailable"
    return ""


async def run_controller(client: KubeClient, options: ControllerOptions, *, manager: Manager | None = None) -> None:
    """Run until ``manager.stop()`` (the CLI calls it on SIGTERM/SIGINT)."""
    if manager is None:
        options = await discovered(client, options)
        manager = build_manager(client, options)
    watched = options.watched
    scope = f"namespace{'s' if len(watched) > 1 else ''} {', '.join(watched)}" if watched else "all namespaces"
    logger.info(
        "kubedl-py controller: %s, %d workers, host ports %d-%d%s%s%s",
        scope,
        options.workers,
        *options.host_port_range,
        ", leader election" if options.leader_elect else "",
        _gang_said(options),
        ", RDMA defaults" if options.rdma_defaults else "",
    )
    await manager.run()
