"""The embedded Kubernetes cluster: API server, scheduler and simulated kubelets in one process.

Nothing here can run a real kube-apiserver, so tests, the local default and the fault injector all stand on
this. Public names: :class:`LocalCluster`, :func:`run_local_up` / :class:`LocalUpOptions`, and the
fault-injection types :class:`Faults`, :class:`FaultRule`, :class:`RequestLog`.
"""

from .cluster import CONTEXT, LocalCluster, node_name
from .faults import FaultRule, Faults, RequestLog, RequestRecord
from .node.simulated import EXIT_CODE, RUN_SECONDS, TERMINATION_SECONDS
from .up import CONTROL_PLANES, LocalUpOptions, UpCluster, run_local_up

__all__ = [
    "CONTEXT",
    "CONTROL_PLANES",
    "EXIT_CODE",
    "RUN_SECONDS",
    "TERMINATION_SECONDS",
    "FaultRule",
    "Faults",
    "LocalCluster",
    "LocalUpOptions",
    "RequestLog",
    "RequestRecord",
    "UpCluster",
    "node_name",
    "run_local_up",
]
