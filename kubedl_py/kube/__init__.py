"""Controller machinery that knows nothing of training jobs.

A raw-dict API client (:class:`KubeClient`) with one error tree (:mod:`.errors`) and one retry policy
(:mod:`.retry`); list+watch caches (:class:`Informer`); a de-duplicating, rate-limited work queue
(:class:`WorkQueue`); Lease leader election (:class:`LeaderElector`); Events (:class:`EventRecorder`);
Prometheus metrics and health endpoints; and the :class:`Manager` that wires informers to reconcilers.
The names below are the public surface; the modules' other names are internal.
"""

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
