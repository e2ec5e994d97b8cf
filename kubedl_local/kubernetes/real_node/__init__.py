"""A real Kubernetes node on this machine: containerd, kubelet, kube-proxy, CNI and CoreDNS, built from their
Go modules, joined to the real control plane (``local up --control-plane kubernetes --runtime kubelet``).

Public names: :class:`RealNode` / :class:`RealNodeOptions` (start, stop, crash one), :func:`ensure_node_binaries`
(build or find its programs), :class:`HostState` (what it may change on the machine), :class:`NodeBusy` (one
real node per machine).
"""

from kubedl_local.kubernetes.real_node.binaries import NodeBinaries, ensure_node_binaries, find_node_binaries
from kubedl_local.kubernetes.real_node.host import HostState
from kubedl_local.kubernetes.real_node.journal import NodeBusy
from kubedl_local.kubernetes.real_node.node import NodeError, RealNode, RealNodeOptions, node_address, preflight

__all__ = [
    "HostState",
    "NodeBinaries",
    "NodeBusy",
    "NodeError",
    "RealNode",
    "RealNodeOptions",
    "ensure_node_binaries",
    "find_node_binaries",
    "node_address",
    "preflight",
]
