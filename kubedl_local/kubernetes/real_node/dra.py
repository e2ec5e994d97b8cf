"""A real DRA kubelet plug-in on the real node: Kubernetes' own DRA test driver.

Why this one: it is the kubelet plug-in the Kubernetes DRA e2e tests run (``test/e2e/dra/test-driver`` of the
pinned module; no other driver's module is served here), so the kubelet's whole DRA path is exercised: the
plug-in registers through the kubelet's ``plugins_registry``, publishes its ResourceSlice (``--num-devices``
devices named ``device-00``...), and when a pod's claim is allocated the kubelet calls its
``NodePrepareResources`` over gRPC; the plug-in writes a CDI spec that containerd applies to the containers
that name the claim: each gets ``claim_<claim>_<request>=true`` (and the claim's opaque parameters) in its
environment. kube-scheduler allocates.

The plug-in runs on the host beside the kubelet (as a DaemonSet's pod would, with the host's plug-in
directories mounted), under a user of its own with a driver's rights: its node's slices, reading claims, and
the claims' device status for its driver name only (``resourceclaims/driver`` with the ``arbitrary-node:``
verbs: it does not run in a pod, so the API server cannot tie its identity to the node).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from kubedl_local.kubernetes.real_node.config import Layout

#: the test driver's default name (``--drivername``), and the DeviceClass a test makes for it
DRIVER: Final = "test-driver.cdi.k8s.io"
USER: Final = "kubedl-py:dra-test-driver"
#: its process's name among the node's programs (and its log's, ``logs/dra-test-driver.log``)
PROCESS: Final = "dra-test-driver"
NUM_DEVICES: Final = 4


def rules() -> list[dict[str, Any]]:
    group = ["resource.k8s.io"]
    return [
        {"apiGroups": group, "resources": ["resourceclaims"], "verbs": ["get"]},
        {"apiGroups": group, "resources": ["resourceclaims/status"], "verbs": ["patch", "update"]},
        {
            "apiGroups": group,
            "resources": ["resourceclaims/driver"],
            "resourceNames": [DRIVER],
            "verbs": ["arbitrary-node:patch", "arbitrary-node:update"],
        },
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {
            "apiGroups": group,
            "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
    ]


def argv(binary: Path, layout: Layout, *, kubeconfig: Path, node: str) -> list[str]:
    """The plug-in's command line: the kubelet's plug-in directories under its ``--root-dir``."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "-v=2",
        "kubelet-plugin",
        f"--node-name={node}",
        f"--plugin-registration-path={layout.kubelet / 'plugins_registry'}",
        f"--datadir={layout.kubelet / 'plugins'}",
        f"--cdi-dir={layout.cdi}",
        f"--num-devices={NUM_DEVICES}",
    ]
