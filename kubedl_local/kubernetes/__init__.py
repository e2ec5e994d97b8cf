"""The real Kubernetes control plane, built from its Go modules and run on loopback.

Public names: :class:`KubernetesControlPlane` / :class:`ControlPlaneOptions` (start and stop one),
:func:`ensure_binaries` / :func:`find_binaries` (build or find the pinned binaries), and the pinned versions.
"""

from kubedl_local.kubernetes.binaries import Binaries, BuildError, GoNotFound, ensure_binaries, find_binaries
from kubedl_local.kubernetes.controlplane import (
    NODE_AGENT_USER,
    ControlPlaneError,
    ControlPlaneOptions,
    KubernetesControlPlane,
)
from kubedl_local.pins import ETCD_VERSION, KUBERNETES_VERSION

__all__ = [
    "ETCD_VERSION",
    "KUBERNETES_VERSION",
    "NODE_AGENT_USER",
    "Binaries",
    "BuildError",
    "ControlPlaneError",
    "ControlPlaneOptions",
    "GoNotFound",
    "KubernetesControlPlane",
    "ensure_binaries",
    "find_binaries",
]
