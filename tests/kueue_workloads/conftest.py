"""Fixtures for Kueue with its ``kubeflow.org`` integrations disabled: kubedl-py makes and obeys the Workloads.

Why a directory of its own: Kueue runs here with another configuration than in ``tests/kueue`` (only
``batch/job`` built in, kubedl-py's kinds declared as external frameworks), and two Kueue managers cannot
share a cluster (one set of CRDs, webhook configurations and certificate Secret). A package-scoped Kueue
starts once for these tests and is stopped before the next directory's tests run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from harness.kueue import Kueue, KueueOptions
from kubedl_py.api import all_kinds
from kubedl_py.api.groups import GROUPS
from kubedl_py.controllers.setup import served_resources
from tests.conftest import RealCluster
from tests.integration.conftest import Env, RunningController, cluster, fast_options, kube  # noqa: F401
from tests.kueue.conftest import tier  # noqa: F401 - the real tier only, with the reason

#: Kueue's built-in integrations here: none of kubeflow.org (``batch/job`` is Kueue's default and harmless)
INTEGRATIONS = ("batch/job",)


def external_frameworks() -> tuple[str, ...]:
    """Every kind kubedl-py serves, in both groups, as Kueue names an external framework (``Kind.version.group``)."""
    return tuple(
        f"{plugin.framework.kind}.{group.version}.{group.group}"
        for plugin in all_kinds()
        for group in GROUPS
        if group in plugin.groups
    )


@pytest.fixture(scope="package")
def kueue(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kueue]:
    options = KueueOptions(
        integrations=INTEGRATIONS,
        external_frameworks=external_frameworks(),
        data_dir=tmp_path_factory.mktemp("kueue-external"),
    )
    running = Kueue(real_cluster.admin_kubeconfig, options)
    real_cluster.loop.run(running.start(), timeout=1800)  # the first run may build Kueue
    try:
        yield running
    finally:
        real_cluster.loop.run(running.stop(), timeout=120)


@pytest.fixture
def kueue_running(request: pytest.FixtureRequest) -> Kueue:
    request.getfixturevalue("tier")  # skips the embedded tier, saying why
    running: Kueue = request.getfixturevalue("kueue")
    return running


@pytest.fixture
async def workload_controller(kueue_running: Kueue, request: pytest.FixtureRequest) -> AsyncIterator[RunningController]:
    """kubedl-py serving both groups with ``--kueue-workloads=all``, under its rendered RBAC, watching Workloads
    (discovered as served, as the command does)."""
    env: Env = request.getfixturevalue("cluster")
    async with env.controller_client() as client:
        served = await served_resources(client, GROUPS)
    options = fast_options(namespace=env.namespace, kubeflow_api=True, kueue_workloads="all", served=served)
    running = RunningController(env, options)
    await running.start()
    try:
        yield running
    finally:
        await running.stop()
