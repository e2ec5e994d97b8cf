"""Fixtures for running kubedl-py under Kueue: the real control plane, Kueue built from its Go module beside
it, kubedl-py's controller serving kubeflow.org, and per-test queues.

Why a directory of its own: Kueue is a peer under test with a cost (its build, its start, webhooks that fail
closed), so it starts once for these tests only (package scope) and is gone before other suites run on the
shared session cluster. It runs on the session cluster's loop thread, as the cluster's processes do.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.kueue import DEFAULT_INTEGRATIONS, Kueue, KueueOptions
from tests.conftest import RealCluster
from tests.integration.conftest import cluster, kube, kubeflow_controller  # noqa: F401 - shared fixtures
from tests.tiers import EMBEDDED, TIERS, require_tier


@pytest.fixture(params=TIERS)
def tier(request: pytest.FixtureRequest) -> str:
    chosen: str = request.param
    require_tier(chosen)
    if chosen == EMBEDDED:
        pytest.skip(
            "Kueue is a peer built from its Go module: it runs against the real control plane only (the embedded "
            "API server calls no admission webhooks, and Kueue's mutating webhook is what suspends queued jobs)"
        )
    return chosen


@pytest.fixture(scope="package")
def kueue(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kueue]:
    # "pod" too: the training.kubedl.io tests queue a job's pods as a pod group (Kueue has no integration for
    # that API group); the kubeflow.org tests need only the defaults. Its log stays in pytest's temporary
    # directory, for a failure to be read after the run.
    options = KueueOptions(integrations=(*DEFAULT_INTEGRATIONS, "pod"), data_dir=tmp_path_factory.mktemp("kueue"))
    running = Kueue(real_cluster.admin_kubeconfig, options)
    real_cluster.loop.run(running.start(), timeout=1800)  # the first run may build Kueue
    try:
        yield running
    finally:
        real_cluster.loop.run(running.stop(), timeout=120)


@pytest.fixture
def kueue_running(tier: str, request: pytest.FixtureRequest) -> Kueue:
    """Kueue (started once for this directory), asked for only once the tier is known to be the real one."""
    running: Kueue = request.getfixturevalue("kueue")
    return running
