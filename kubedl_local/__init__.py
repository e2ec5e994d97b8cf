"""Local clusters: the embedded one (API server, scheduler, controllers and node agents in one process) and
the launcher of the real control plane built from its Go modules (``local/kubernetes/``).

The embedded cluster is the fast tier, the zero-toolchain default of ``local up`` and the fault injector;
the real control plane is the judge (docs/local-cluster.md). Public names: :class:`LocalCluster`,
:func:`run_local_up` / :class:`LocalUpOptions` (with :func:`parse_node_resources` and
:func:`parse_node_devices`, the checks of ``--node-resources`` and ``--node-devices``), the fault-injection
types :class:`Faults`, :class:`FaultRule`, :class:`RequestLog`,
and the Node label and annotation by which ``kubedl-py local node`` talks to the node agents
(:data:`POWER_LABEL`, :data:`POWER_STATE`).
"""

from kubedl_local.cluster import CONTEXT, LocalCluster, node_name
from kubedl_local.faults import FaultRule, Faults, RequestLog, RequestRecord
from kubedl_local.node.agent import POWER_LABEL, POWER_STATE
from kubedl_local.node.devices import parse_node_resources
from kubedl_local.node.dra import parse_node_devices
from kubedl_local.node.simulated import EXIT_CODE, RUN_SECONDS, TERMINATION_SECONDS
from kubedl_local.up import CONTROL_PLANES, ClusterStartError, LocalUpOptions, UpCluster, run_local_up

__all__ = [
    "CONTEXT",
    "CONTROL_PLANES",
    "EXIT_CODE",
    "POWER_LABEL",
    "POWER_STATE",
    "RUN_SECONDS",
    "TERMINATION_SECONDS",
    "ClusterStartError",
    "FaultRule",
    "Faults",
    "LocalCluster",
    "LocalUpOptions",
    "RequestLog",
    "RequestRecord",
    "UpCluster",
    "node_name",
    "parse_node_devices",
    "parse_node_resources",
    "run_local_up",
]
