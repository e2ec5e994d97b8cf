"""The real Kubernetes control plane, built from its Go modules and run on loopback.

Public names: :class:`KubernetesControlPlane` / :class:`ControlPlaneOptions` (start and stop one),
:func:`ensure_binaries` / :func:`find_binaries` (build or find the pinned binaries), and the pinned versions.
"""

from .binaries import Binaries, BuildError, GoNotFound, ensure_binaries, find_binaries
from .controlplane import NODE_AGENT_USER, ControlPlaneError, ControlPlaneOptions, KubernetesControlPlane
from .release import ETCD_VERSION, KUBERNETES_VERSION

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
