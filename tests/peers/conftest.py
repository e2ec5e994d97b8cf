"""Fixtures of the peer tests: a fresh real control plane per test, with simulated nodes and no kubedl-py CRDs.

Why not the session's real cluster: KubeDL's CRDs are in ``training.kubedl.io``, kubedl-py's own group, and the
Training Operator's in ``kubeflow.org``, which the session cluster serves for kubedl-py's Kubeflow API; a peer
needs a cluster where its CRDs are the only ones, as the benchmark gives each contender.

The peers are built from their Go modules on first use (minutes cold, then cached in ~/.cache/kubedl-py), so
these tests skip only when they are not built and no Go toolchain can build them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from harness.peers import PEERS
from kubedl_local.kubernetes.binaries import GoNotFound, find_go
from kubedl_local.kubernetes.cluster import KubernetesCluster, KubernetesClusterOptions
from kubedl_local.kubernetes.programs import find_program
from tests.tiers import KUBERNETES, require_tier

#: simulated nodes of each test's cluster
NODES = 4


def go_missing() -> str | None:
    """Why the peers cannot be run here, or None: they are built, or Go is there to build them."""
    if all(find_program(peer.program) is not None for peer in PEERS.values()):
        return None
    try:
        find_go()
    except GoNotFound:
        return "the peer controllers are built from their Go modules, and no Go toolchain is available"
    return None


@pytest.fixture
async def peer_cluster() -> AsyncIterator[KubernetesCluster]:
    require_tier(KUBERNETES)
    reason = go_missing()
    if reason is not None:
        pytest.skip(reason)
    async with KubernetesCluster(KubernetesClusterOptions(nodes=NODES, runtime="simulated", install=False)) as cluster:
        yield cluster
