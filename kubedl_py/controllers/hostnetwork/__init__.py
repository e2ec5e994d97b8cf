"""Host-network mode as one feature of the reconcile: the host-port allocator (``ports.py``) and the feature that
reserves ports, re-points Services and fails over (``feature.py``; docs/host-network.md)."""

from kubedl_py.controllers.hostnetwork.feature import (
    NODE_PORTS_REASON,
    PORT_RETRY_AFTER,
    HostNetwork,
    HostNetworkSettings,
    install,
    pod_port,
)

__all__ = ["NODE_PORTS_REASON", "PORT_RETRY_AFTER", "HostNetwork", "HostNetworkSettings", "install", "pod_port"]
