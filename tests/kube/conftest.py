"""Fixtures for the kube integration tests: an embedded cluster and a KubeClient talking to it over HTTP."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubedl_py.kube.client import NAMESPACES, ClientSettings, KubeClient
from kubedl_py.kube.metrics import Metrics
from kubedl_py.kube.retry import RetrySettings

#: retries fast enough for tests, same rules as production
TEST_RETRY = RetrySettings(attempts=4, initial_delay=0.01, max_delay=0.1, jitter=0.01, deadline=10)


@pytest.fixture
async def cluster() -> AsyncIterator[Any]:
    local = importlib.import_module("kubedl_local")
    local_cluster = getattr(local, "LocalCluster", None)
    if local_cluster is None:
        pytest.skip("the embedded cluster (kubedl_local.LocalCluster) is not available yet")
    # No kube-root-ca.crt: these tests count the ConfigMaps of a namespace.
    async with local_cluster(nodes=1, runtime="simulated", publish_root_ca=False) as running:
        yield running


@pytest.fixture
async def kube(cluster: Any) -> AsyncIterator[KubeClient]:
    settings = ClientSettings(retry=TEST_RETRY, list_page_size=3)
    async with KubeClient(configuration=cluster.configuration, settings=settings, metrics=Metrics()) as client:
        yield client


@pytest.fixture
async def namespace(kube: KubeClient) -> str:
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kt"}})
    return "kt"
