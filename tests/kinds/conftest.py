"""The integration fixtures (a cluster per tier, its client) for the kind plug-in tests."""

from tests.integration.conftest import cluster, kube, tier

__all__ = ["cluster", "kube", "tier"]
