"""The differential suite's control planes, its runner, and the count printed when the session ends.

The real tier is the session's cluster (tests/conftest.py) with one schedulable node added for the run;
the embedded tier is one ``LocalCluster`` for the whole run, with our CRDs installed as on the real one.
Both live on event loops of their own (tests/tiers.py), so cases can run concurrently with pytest's
one-test-at-a-time reporting.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import os
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from kubedl_local import LocalCluster
from kubedl_py.api.crd import all_crds
from kubedl_py.kube.client import KubeClient
from tests.conftest import CRDS, RealCluster
from tests.differential import report
from tests.differential.cases import load_all
from tests.differential.harness import CASES, Plane
from tests.differential.runner import Runner
from tests.tiers import EMBEDDED, KUBERNETES, LoopThread, require_tier

#: cases run at once (each on both control planes)
CONCURRENCY = int(os.environ.get("KUBEDL_DIFFERENTIAL_CONCURRENCY", "4"))


def ssl_context_of(kubeconfig: dict[str, Any], scratch: Path) -> ssl.SSLContext:
    """A client TLS context with the CA and client certificate of a (data-inline) kubeconfig."""
    cluster = kubeconfig["clusters"][0]["cluster"]
    user = kubeconfig["users"][0]["user"]
    scratch.mkdir(parents=True, exist_ok=True)
    files = {
        "ca.crt": cluster["certificate-authority-data"],
        "client.crt": user["client-certificate-data"],
        "client.key": user["client-key-data"],
    }
    for name, data in files.items():
        (scratch / name).write_bytes(base64.b64decode(data))
    context = ssl.create_default_context(cafile=str(scratch / "ca.crt"))
    context.load_cert_chain(str(scratch / "client.crt"), str(scratch / "client.key"))
    return context


async def compact_etcd(url: str) -> None:
    """Compact etcd at its current revision (its gRPC gateway), as kube-apiserver does every 5 minutes."""
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/v3/kv/range", json={"key": base64.b64encode(b"/").decode()}) as response:
            revision = int((await response.json())["header"]["revision"])
        async with session.post(f"{url}/v3/kv/compaction", json={"revision": revision, "physical": True}) as response:
            response.raise_for_status()


def _selected(session: pytest.Session) -> list[str]:
    names: list[str] = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and item.module is not None and item.module.__name__.endswith("test_differential"):
            name = callspec.params.get("case_name")
            if isinstance(name, str) and name not in names:
                names.append(name)
    return names


class _Embedded:
    """The run's embedded cluster, on the runner's loop."""

    def __init__(self) -> None:
        self.cluster = LocalCluster(nodes=1, toleration_seconds=300)

    async def start(self) -> None:
        await self.cluster.start()
        async with KubeClient(configuration=self.cluster.configuration) as kube:
            for crd in all_crds(kubeflow=True):  # as on the real cluster of the session
                await kube.create(CRDS, crd)


@pytest.fixture(scope="session")
def differential(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    require_tier(EMBEDDED)
    require_tier(KUBERNETES)
    load_all()
    real: RealCluster = request.getfixturevalue("real_cluster")
    scratch = tmp_path_factory.mktemp("differential")
    loop = LoopThread("differential")
    embedded = _Embedded()
    real_node = f"differential-{uuid.uuid4().hex[:6]}"
    sessions: list[aiohttp.ClientSession] = []
    retired: concurrent.futures.Future[None] | None = None
    try:
        loop.run(embedded.start(), timeout=120)
        loop.run(real.loop.call(real.cluster.add_node(real_node)), timeout=60)
        real_config = yaml.safe_load(real.admin_kubeconfig.read_text())
        emb_config = yaml.safe_load(embedded.cluster.kubeconfig_path.read_text())

        async def session() -> aiohttp.ClientSession:
            s = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32))
            sessions.append(s)
            return s

        async def add_real_node(name: str) -> str:
            return await real.loop.call(real.cluster.add_node(name))

        async def remove_real_node(name: str) -> None:
            await real.loop.call(real.cluster.remove_node(name))

        async def compact_real() -> None:
            await compact_etcd(real.cluster.control_plane.etcd_url)

        async def compact_embedded() -> None:
            # etcd's compaction has no counterpart here: the embedded store keeps no history beside the one
            # playing the watch cache's part, and compaction leaves the real watch cache alone.
            return

        async def add_embedded_node(name: str) -> str:
            return await embedded.cluster.add_node()  # named local-node-<i>, whatever is asked

        async def remove_embedded_node(name: str) -> None:
            await embedded.cluster.remove_node(name)

        planes = {
            KUBERNETES: Plane(
                KUBERNETES,
                real_config["clusters"][0]["cluster"]["server"],
                ssl_context_of(real_config, scratch / "tls"),
                real_config,
                scratch / "kcache-kubernetes",
                real_node,
                (real_node, "local-node-0"),
                loop.run(session()),
                scratch,
                add_real_node,
                remove_real_node,
                compact_real,
            ),
            EMBEDDED: Plane(
                EMBEDDED,
                embedded.cluster.url,
                None,
                emb_config,
                scratch / "kcache-embedded",
                "local-node-0",
                ("local-node-0",),
                loop.run(session()),
                scratch,
                add_embedded_node,
                remove_embedded_node,
                compact_embedded,
            ),
        }
        runner = Runner(loop, planes, scratch, CONCURRENCY)
        runner.start(_selected(request.session) or list(CASES))
        report.RUN.runner = runner

        async def retire_node() -> None:
            # The node is schedulable in the session's real cluster: once the last case is done it goes, so
            # the pods of the tests after this suite (integration, sdk...) land only on their own nodes.
            await asyncio.gather(*(asyncio.wrap_future(f) for f in runner.futures.values()), return_exceptions=True)
            await real.loop.call(real.cluster.remove_node(real_node))

        retired = asyncio.run_coroutine_threadsafe(retire_node(), loop.loop)
        yield runner
    finally:
        for s in sessions:
            loop.run(s.close(), timeout=30)
        if retired is not None:
            retired.cancel()
        with contextlib.suppress(KeyError):  # KeyError: retire_node removed it already
            loop.run(real.loop.call(real.cluster.remove_node(real_node)), timeout=60)
        loop.run(embedded.cluster.stop(), timeout=60)
        loop.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    line = report.RUN.summary()
    if line:
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    verdict = report.RUN.verdict(len(CASES))
    if verdict and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
