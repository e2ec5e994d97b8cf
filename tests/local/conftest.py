"""Fixtures for the embedded-cluster tests: a running LocalCluster, a raw HTTP client, and kubectl."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from kubedl_local import LocalCluster

KUBECTL = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl")


@dataclass
class Reply:
    status: int
    body: Any
    headers: Any


class Http:
    """A thin JSON client: tests assert on exact HTTP status codes and Status bodies."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url

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
        hdrs = {"Content-Type": content_type, **(headers or {})}
        async with self.session.request(method, self.url + path, data=data, headers=hdrs) as r:
            text = await r.read()
            try:
                parsed: Any = orjson.loads(text) if text else None
            except orjson.JSONDecodeError:
                parsed = text.decode()
            return Reply(r.status, parsed, r.headers)

    async def get(self, path: str, **kw: Any) -> Reply:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.request("POST", path, body, **kw)

    async def put(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.request("PUT", path, body, **kw)

    async def patch(self, path: str, body: Any, content_type: str = "application/merge-patch+json") -> Reply:
        return await self.request("PATCH", path, body, content_type=content_type)

    async def delete(self, path: str, body: Any = None) -> Reply:
        return await self.request("DELETE", path, body)


@pytest.fixture
async def cluster() -> AsyncIterator[LocalCluster]:
    # No kube-root-ca.crt: these tests count the ConfigMaps of a namespace.
    async with LocalCluster(nodes=1, bookmark_interval=0.2, toleration_seconds=1, publish_root_ca=False) as c:
        yield c


@pytest.fixture
async def http(cluster: LocalCluster) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession() as s:
        yield Http(s, cluster.url)


def pod(
    name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if labels:
        md["labels"] = labels
    if annotations:
        md["annotations"] = annotations
    body = {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": body}


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 5.0, interval: float = 0.02) -> Any:  # noqa: ASYNC109
    """Poll ``check`` until it returns a truthy value (returned) or the deadline passes (AssertionError)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def kubectl(cluster: LocalCluster, tmp_path: Path) -> Callable[..., Awaitable[Run]]:
    async def run(*args: str, stdin: str | None = None, timeout: float = 30.0) -> Run:  # noqa: ASYNC109
        proc = await asyncio.create_subprocess_exec(
            KUBECTL,
            "--kubeconfig",
            str(cluster.kubeconfig_path),
            "--cache-dir",
            str(tmp_path / "kcache"),
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

    return run
