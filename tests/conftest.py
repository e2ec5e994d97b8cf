"""Suite-wide guards.

Every async test must clean up after itself: a task still pending after the test's fixtures are torn
down is a leak (a watch nobody stops, a controller left running) and fails the test that left it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import Resource
from kubedl_py.local.kubernetes import KubernetesControlPlane
from tests.tiers import KUBERNETES, LoopThread, require_tier

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)


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


class RealControlPlane:
    """The session's real Kubernetes control plane (see tests/tiers.py), with the CRDs installed."""

    def __init__(self, loop: LoopThread, control_plane: KubernetesControlPlane) -> None:
        self.loop = loop
        self.control_plane = control_plane

    @property
    def admin_kubeconfig(self) -> Path:
        return self.control_plane.admin_kubeconfig

    def client(self) -> KubeClient:
        """An administrator's client for the calling test's own event loop."""
        return KubeClient(kubeconfig=self.admin_kubeconfig)


async def _install_crds(kubeconfig: Path) -> None:
    from kubedl_py.api.crd import all_crds

    async with KubeClient(kubeconfig=kubeconfig) as kube:
        for crd in all_crds():
            await kube.create(CRDS, crd)
        deadline = time.monotonic() + 60
        for crd in all_crds():
            names, version = crd["spec"]["names"], crd["spec"]["versions"][0]["name"]
            resource = Resource(crd["spec"]["group"], version, names["plural"], "")
            while True:
                try:
                    await kube.list(resource, namespace="default")
                    break
                except NotFound:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.05)


@pytest.fixture(scope="session")
def real_control_plane() -> Iterator[RealControlPlane]:
    require_tier(KUBERNETES)
    loop = LoopThread("kubernetes-control-plane")
    control_plane = KubernetesControlPlane()
    try:
        loop.run(control_plane.start(), timeout=900)  # the first run may build the binaries
        loop.run(_install_crds(control_plane.admin_kubeconfig), timeout=120)
        yield RealControlPlane(loop, control_plane)
    finally:
        loop.run(control_plane.stop(), timeout=120)
        loop.close()
