"""Suite-wide guards.

Every async test must clean up after itself: a task still pending after the test's fixtures are torn
down is a leak (a watch nobody stops, a controller left running) and fails the test that left it.

Ctrl-C works in the processes the tests start, however the suite itself was started: a shell starts a
background job (``make test &``, ``nohup``) with SIGINT ignored, an ignored signal stays ignored across
exec, and Python then installs no KeyboardInterrupt handler, so ``kubedl-py get -w`` stopped with SIGINT
(as a user's Ctrl-C) would never end. The suite handles SIGINT as an interactive run does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kubedl_local.faultproxy import FaultProxy
from kubedl_local.kubernetes.cluster import KubernetesCluster, KubernetesClusterOptions
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import Resource
from kubedl_py.templates import ManifestOptions
from tests.tiers import KUBERNETES, LoopThread, require_tier, selected_tiers

# Every job parse a controller serves from its cache is checked against a fresh parse (controllers/job.py,
# VERIFY_PARSE_CACHE), in this process and in every controller process the tests start.
os.environ["KUBEDL_PY_VERIFY_PARSE_CACHE"] = "1"

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: suites that start the real control plane through a fixture of their own (``request.getfixturevalue``, a module
#: fixture), which neither the test's fixture names nor its parameters show
REAL_PLANE_SUITES = (
    "tests/differential/",
    "tests/fidelity/",
    "tests/local/test_kubernetes.py",
    "tests/local/test_gpu_node.py",
    "tests/reliability/test_fuzz.py",
    "tests/test_chart.py",
    "tests/test_helm_install.py",
    "tests/test_image.py",
    "tests/test_install.py",
)
_ROOT = Path(__file__).resolve().parents[1]


def on_real_control_plane(item: pytest.Item) -> bool:
    """Whether a test may run on the real control plane: it uses the session's cluster, its tier is that one,
    or its suite starts one its own way."""
    if "real_cluster" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and KUBERNETES in callspec.params.values():
        return True
    where = Path(str(item.path)).resolve()
    relative = where.relative_to(_ROOT).as_posix() if where.is_relative_to(_ROOT) else ""
    return relative.startswith(REAL_PLANE_SUITES)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real control plane's tests after all the others, each group in its usual order: a cold run builds
    the control plane and the programs beside it in the background meanwhile (``harness/builds.py``), and
    every other test runs while they build instead of after."""
    items.sort(key=on_real_control_plane)


_builds_awaited = False


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Before the first test of the real control plane, every program ``make test`` builds is ready: built
    here, or waited for on its lock while the background build finishes it. Outside any test and its timeout
    (pytest-timeout's timer starts inside this wrapper): a cold build takes minutes, longer than one test may."""
    global _builds_awaited
    if not _builds_awaited and KUBERNETES in selected_tiers() and on_real_control_plane(item):
        _builds_awaited = True
        _await_builds(item.config)
    yield


def _await_builds(config: pytest.Config) -> None:
    from harness.builds import TEST_BUILDS  # the harness is test support: imported only when needed

    capture = config.pluginmanager.get_plugin("capturemanager")
    started = time.monotonic()
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        print(
            f"\nkubedl-py: the real control plane's tests come next; waiting for {', '.join(TEST_BUILDS)}", flush=True
        )
        done = subprocess.run([sys.executable, "-m", "harness.builds", *TEST_BUILDS], check=False)
        state = "ready" if done.returncode == 0 else f"FAILED (exit {done.returncode}): their tests will say why"
        print(f"kubedl-py: builds {state} after {time.monotonic() - started:.0f}s of waiting", flush=True)


@pytest.fixture(autouse=True)
async def no_leftover_tasks() -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield
    current = asyncio.current_task()
    # Closing connections may need one more turn of the loop; give it a few before judging.
    for _ in range(5):
        leftover = [t for t in asyncio.all_tasks() if t is not current and t not in before and not t.done()]
        if not leftover:
            return
        await asyncio.sleep(0.01)
    names = ", ".join(sorted(t.get_name() + ":" + repr(t.get_coro())[:80] for t in leftover))
    for task in leftover:
        task.cancel()
    pytest.fail(f"the test left {len(leftover)} asyncio task(s) running: {names}")


# ------------------------------------------------------------------------------------ the real control plane


class RealCluster:
    """The session's real Kubernetes cluster (tests/tiers.py): control plane, CRDs, the controller's
    identity from deploy/, and a fault proxy in front of the API server for the controller under test."""

    def __init__(self, loop: LoopThread, cluster: KubernetesCluster, controller_kubeconfig: Path) -> None:
        self.loop = loop
        self.cluster = cluster
        self.controller_kubeconfig = controller_kubeconfig

    @property
    def admin_kubeconfig(self) -> Path:
        return self.cluster.admin_kubeconfig

    @property
    def proxy(self) -> FaultProxy:
        assert self.cluster.proxy is not None
        return self.cluster.proxy

    def client(self) -> KubeClient:
        """An administrator's client for the calling test's own event loop, straight to the API server."""
        return KubeClient(kubeconfig=self.admin_kubeconfig)


#: what the session's real cluster is installed with (both API groups, as ``manifests --kubeflow-api``); a test
#: that changes the controller's ClusterRole puts back exactly this
SESSION_MANIFESTS = ManifestOptions(kubeflow_api=True)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    require_tier(KUBERNETES)
    loop = LoopThread("kubernetes-cluster")
    # No nodes of its own (one cordoned spare keeps the agent up): each test brings the nodes it needs.
    cluster = KubernetesCluster(
        # Both API groups, as ``manifests --kubeflow-api`` installs them: a test's controller chooses which it serves.
        KubernetesClusterOptions(fault_proxy=True, nodes=0, manifests=SESSION_MANIFESTS)
    )
    try:
        loop.run(cluster.start(), timeout=1200)  # the first run may build the binaries
        kubeconfig = tmp_path_factory.mktemp("controller") / "kubeconfig"
        loop.run(cluster.controller_kubeconfig(kubeconfig), timeout=60)
        yield RealCluster(loop, cluster, kubeconfig)
    finally:
        loop.run(cluster.stop(), timeout=120)
        loop.close()
