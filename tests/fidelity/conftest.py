"""The fidelity suite: the same requests against the real kube-apiserver and the embedded one.

Whatever the real server answers is right by definition. Each test runs once per tier (``server`` is
parametrized like the other suites) and asserts one expected outcome, observed on the real server; the
embedded tier passes only when it answers the same. ``Server`` gives both tiers one face: raw HTTP (status,
body, headers) for exact Status bodies, and the real ``kubectl`` for what users type.

Isolation: the real tier is the session's cluster (tests/conftest.py), shared by every test, so each test
gets its own namespace there (deleted afterwards); the embedded tier is a fresh cluster per test, with the
same namespace created so paths and messages are identical.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from kubedl_local import LocalCluster
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_py.api.crd import all_crds
from kubedl_py.kube.client import KubeClient
from tests.conftest import CRDS, RealCluster
from tests.tiers import EMBEDDED, KUBERNETES, TIERS, require_tier

KUBECTL = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl")


@dataclass
class Reply:
    status: int
    body: Any
    headers: Any


@dataclass
class Run:
    code: int
    out: str
    err: str


class Server:
    """One API server under test: HTTP requests, kubectl, and the test's namespace ``ns``."""

    def __init__(
        self,
        tier: str,
        *,
        url: str,
        kubeconfig: Path,
        session: aiohttp.ClientSession,
        ssl_context: ssl.SSLContext | None,
        namespace: str,
        cache_dir: Path,
    ) -> None:
        self.tier = tier
        self.url = url
        self.kubeconfig = kubeconfig
        self.session = session
        self.ssl = ssl_context
        self.ns = namespace
        self.cache_dir = cache_dir

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
        sent = {"Content-Type": content_type, "Accept": "application/json", **(headers or {})}
        async with self.session.request(
            method, self.url + path, data=data, headers=sent, ssl=self.ssl if self.ssl is not None else False
        ) as response:
            text = await response.read()
            try:
                parsed: Any = orjson.loads(text) if text else None
            except orjson.JSONDecodeError:
                parsed = text
            return Reply(response.status, parsed, response.headers)

    async def get(self, path: str, **kw: Any) -> Reply:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.request("POST", path, body, **kw)

    async def put(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.request("PUT", path, body, **kw)

    async def delete(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.request("DELETE", path, body, **kw)

    async def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 60.0) -> Run:  # noqa: ASYNC109
        proc = await asyncio.create_subprocess_exec(
            KUBECTL,
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(self.cache_dir),
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else None,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        return Run(proc.returncode or 0, out.decode(), err.decode())


def ssl_context_of(kubeconfig: Path, scratch: Path) -> ssl.SSLContext:
    """A client TLS context with the CA and client certificate of a (data-inline) kubeconfig."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
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


@pytest.fixture(params=TIERS)
def tier(request: pytest.FixtureRequest) -> str:
    chosen: str = request.param
    require_tier(chosen)
    return chosen


@contextlib.asynccontextmanager
async def _embedded(session: aiohttp.ClientSession, tmp_path: Path) -> AsyncIterator[Server]:
    namespace = f"f-{uuid.uuid4().hex[:10]}"
    async with LocalCluster(nodes=0) as local:
        async with KubeClient(configuration=local.configuration) as kube:
            for crd in all_crds(kubeflow=True):  # as on the real cluster of the session
                await kube.create(CRDS, crd)
            await create_namespace(kube, namespace)
        yield Server(
            EMBEDDED,
            url=local.url,
            kubeconfig=local.kubeconfig_path,
            session=session,
            ssl_context=None,
            namespace=namespace,
            cache_dir=tmp_path / "kcache-embedded",
        )


@contextlib.asynccontextmanager
async def _real(session: aiohttp.ClientSession, real: RealCluster, tmp_path: Path) -> AsyncIterator[Server]:
    namespace = f"f-{uuid.uuid4().hex[:10]}"
    async with real.client() as kube:
        await create_namespace(kube, namespace)
    context = ssl_context_of(real.admin_kubeconfig, tmp_path / "tls")
    config = yaml.safe_load(real.admin_kubeconfig.read_text())
    url = config["clusters"][0]["cluster"]["server"]
    try:
        yield Server(
            KUBERNETES,
            url=url,
            kubeconfig=real.admin_kubeconfig,
            session=session,
            ssl_context=context,
            namespace=namespace,
            cache_dir=tmp_path / "kcache-kubernetes",
        )
    finally:
        async with session.delete(f"{url}/api/v1/namespaces/{namespace}", ssl=context) as response:
            await response.read()


@pytest.fixture
async def server(tier: str, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    async with aiohttp.ClientSession() as session:
        if tier == EMBEDDED:
            async with _embedded(session, tmp_path) as embedded:
                yield embedded
            return
        assert tier == KUBERNETES
        async with _real(session, request.getfixturevalue("real_cluster"), tmp_path) as real:
            yield real


@pytest.fixture
async def both(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Server, Server]]:
    """(real, embedded), for what is compared rather than asserted (``kubectl explain`` output)."""
    require_tier(EMBEDDED)
    require_tier(KUBERNETES)
    async with (
        aiohttp.ClientSession() as session,
        _real(session, request.getfixturevalue("real_cluster"), tmp_path) as real,
        _embedded(session, tmp_path) as embedded,
    ):
        yield real, embedded


#: metadata every server makes up for itself
VOLATILE_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def comparable(obj: dict[str, Any], *, drop_spec: tuple[str, ...] = ()) -> dict[str, Any]:
    """``obj`` without what differs between any two servers (uid, resourceVersion, timestamps, managedFields
    and the ``spec`` fields named in ``drop_spec``, such as an allocated clusterIP)."""
    out = dict(obj)
    out["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in VOLATILE_METADATA}
    if drop_spec and isinstance(obj.get("spec"), dict):
        out["spec"] = {k: v for k, v in obj["spec"].items() if k not in drop_spec}
    return out
