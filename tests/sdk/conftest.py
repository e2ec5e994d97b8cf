"""Fixtures of the SDK and CLI tests: the integration fixtures (embedded cluster, CRDs, real controller)
plus a client of the SDK pointed at that cluster through its kubeconfig file, as a user's would be."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kubedl_py.sdk import AsyncTrainingClient
from tests.integration.conftest import Env, cluster, controller, kube, kubeflow_controller, tier

__all__ = ["client", "cluster", "controller", "kube", "kubeflow_controller", "tier"]


@pytest.fixture
async def client(cluster: Env, controller: object) -> AsyncIterator[AsyncTrainingClient]:
    async with AsyncTrainingClient(kubeconfig=cluster.kubeconfig_path) as sdk_client:
        yield sdk_client
