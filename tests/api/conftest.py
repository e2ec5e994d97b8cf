"""``api``: a client of an API server with the CRDs installed, once per control-plane tier."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kubedl_local import LocalCluster
from kubedl_py.api.crd import all_crds
from kubedl_py.kube.client import KubeClient
from tests.conftest import CRDS
from tests.tiers import EMBEDDED, KUBERNETES, TIERS, require_tier


@pytest.fixture(params=TIERS)
def api_tier(request: pytest.FixtureRequest) -> str:
    tier: str = request.param
    require_tier(tier)
    return tier


@pytest.fixture
async def api(api_tier: str, request: pytest.FixtureRequest) -> AsyncIterator[KubeClient]:
    if api_tier == KUBERNETES:
        real = request.getfixturevalue("real_cluster")
        async with real.client() as kube:
            yield kube
        return
    assert api_tier == EMBEDDED
    async with LocalCluster(nodes=0) as cluster, KubeClient(configuration=cluster.configuration) as kube:
        for crd in all_crds(kubeflow=True):
            await kube.create(CRDS, crd)
        yield kube
