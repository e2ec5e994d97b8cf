"""The integration fixtures (a cluster per tier, its client) for the reconcile-step tests."""

from tests.integration.conftest import cluster, kube, tier

__all__ = ["cluster", "kube", "tier"]
