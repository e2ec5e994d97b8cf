"""Controller machinery that knows nothing of training jobs.

A raw-dict API client (:class:`KubeClient`) with one error tree (:mod:`.errors`) and one retry policy
(:mod:`.retry`); list+watch caches (:class:`Informer`); a de-duplicating, rate-limited work queue
(:class:`WorkQueue`); Lease leader election (:class:`LeaderElector`); Events (:class:`EventRecorder`);
Prometheus metrics and health endpoints; and the :class:`Manager` that wires informers to reconcilers.
The names below are the public surface; the modules' other names are internal.

The names are imported on first use (PEP 562): a command that needs the client only (``kubedl-py get``) does
not pay for the manager, the health server or the metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubedl_py._lazy import lazy_exports

if TYPE_CHECKING:
    from kubedl_py.kube import errors
    from kubedl_py.kube.client import (
        ClientSettings,
        KubeClient,
        ObjectList,
        PatchType,
        WatchEvent,
        in_cluster_available,
    )
    from kubedl_py.kube.events import EventRecorder, EventType
    from kubedl_py.kube.health import HealthServer, parse_addr
    from kubedl_py.kube.informer import (
        OWNER_INDEX,
        Handler,
        IndexFunc,
        Informer,
        InformerSettings,
        by_label,
        by_owner_uid,
        drop_managed_fields,
    )
    from kubedl_py.kube.leader import LeaderElectionSettings, LeaderElector, LeadershipLost
    from kubedl_py.kube.manager import (
        Controller,
        Manager,
        ManagerSettings,
        Mapper,
        Reconciler,
        Result,
        label_key,
        own_key,
        owner_key,
    )
    from kubedl_py.kube.metrics import Metrics
    from kubedl_py.kube.resources import (
        CONFIGMAPS,
        EVENTS,
        LEASES,
        NAMESPACES,
        NODES,
        PODS,
        SERVICES,
        Resource,
        object_key,
        split_key,
    )
    from kubedl_py.kube.retry import RetryPolicy, RetrySettings
    from kubedl_py.kube.workqueue import BackoffSettings, ExponentialBackoff, ShutDown, WorkQueue

#: each public name and the module it lives in (a module itself for ``errors``)
_WHERE: dict[str, str] = {
    "BackoffSettings": "kubedl_py.kube.workqueue",
    "CONFIGMAPS": "kubedl_py.kube.resources",
    "ClientSettings": "kubedl_py.kube.client",
    "Controller": "kubedl_py.kube.manager",
    "EVENTS": "kubedl_py.kube.resources",
    "EventRecorder": "kubedl_py.kube.events",
    "EventType": "kubedl_py.kube.events",
    "ExponentialBackoff": "kubedl_py.kube.workqueue",
    "Handler": "kubedl_py.kube.informer",
    "HealthServer": "kubedl_py.kube.health",
    "IndexFunc": "kubedl_py.kube.informer",
    "Informer": "kubedl_py.kube.informer",
    "InformerSettings": "kubedl_py.kube.informer",
    "KubeClient": "kubedl_py.kube.client",
    "LEASES": "kubedl_py.kube.resources",
    "LeaderElectionSettings": "kubedl_py.kube.leader",
    "LeaderElector": "kubedl_py.kube.leader",
    "LeadershipLost": "kubedl_py.kube.leader",
    "Manager": "kubedl_py.kube.manager",
    "ManagerSettings": "kubedl_py.kube.manager",
    "Mapper": "kubedl_py.kube.manager",
    "Metrics": "kubedl_py.kube.metrics",
    "NAMESPACES": "kubedl_py.kube.resources",
    "NODES": "kubedl_py.kube.resources",
    "OWNER_INDEX": "kubedl_py.kube.informer",
    "ObjectList": "kubedl_py.kube.client",
    "PODS": "kubedl_py.kube.resources",
    "PatchType": "kubedl_py.kube.client",
    "Reconciler": "kubedl_py.kube.manager",
    "Resource": "kubedl_py.kube.resources",
    "Result": "kubedl_py.kube.manager",
    "RetryPolicy": "kubedl_py.kube.retry",
    "RetrySettings": "kubedl_py.kube.retry",
    "SERVICES": "kubedl_py.kube.resources",
    "ShutDown": "kubedl_py.kube.workqueue",
    "WatchEvent": "kubedl_py.kube.client",
    "WorkQueue": "kubedl_py.kube.workqueue",
    "by_label": "kubedl_py.kube.informer",
    "by_owner_uid": "kubedl_py.kube.informer",
    "drop_managed_fields": "kubedl_py.kube.informer",
    "errors": "kubedl_py.kube.errors",
    "in_cluster_available": "kubedl_py.kube.client",
    "label_key": "kubedl_py.kube.manager",
    "object_key": "kubedl_py.kube.resources",
    "own_key": "kubedl_py.kube.manager",
    "owner_key": "kubedl_py.kube.manager",
    "parse_addr": "kubedl_py.kube.health",
    "split_key": "kubedl_py.kube.resources",
}

__all__ = [
    "CONFIGMAPS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "OWNER_INDEX",
    "PODS",
    "SERVICES",
    "BackoffSettings",
    "ClientSettings",
    "Controller",
    "EventRecorder",
    "EventType",
    "ExponentialBackoff",
    "Handler",
    "HealthServer",
    "IndexFunc",
    "Informer",
    "InformerSettings",
    "KubeClient",
    "LeaderElectionSettings",
    "LeaderElector",
    "LeadershipLost",
    "Manager",
    "ManagerSettings",
    "Mapper",
    "Metrics",
    "ObjectList",
    "PatchType",
    "Reconciler",
    "Resource",
    "Result",
    "RetryPolicy",
    "RetrySettings",
    "ShutDown",
    "WatchEvent",
    "WorkQueue",
    "by_label",
    "by_owner_uid",
    "drop_managed_fields",
    "errors",
    "in_cluster_available",
    "label_key",
    "object_key",
    "own_key",
    "owner_key",
    "parse_addr",
    "split_key",
]


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
