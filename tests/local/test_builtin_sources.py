"""What the embedded server publishes about built-in kinds does not depend on the machine's Go module cache.

Its OpenAPI documents and protobuf table come from one download for the pinned release, kept in the
kubedl-py cache; the Go module cache (which holds ``k8s.io/kubernetes`` when the real control plane was
built here) is never read. Each server runs in a process of its own with an empty kubedl-py cache and an
unreachable module proxy, once with the machine's Go module cache and once with an empty one, and their
discovery and OpenAPI output must be the same bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DUMP = """
import asyncio, json, sys
import aiohttp
from kubedl_local import LocalCluster

async def main() -> None:
    out = {}
    async with LocalCluster(nodes=0) as c, aiohttp.ClientSession() as s:
        async def get(path: str, accept: str = "application/json") -> str:
            async with s.get(c.url + path, headers={"Accept": accept}) as r:
                # the address differs from run to run (/api names it)
                return f"{r.status} " + (await r.text()).replace(c.url.split("//", 1)[1], "HOST")
        aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        for path in ("/api", "/apis"):
            out[path] = await get(path)
            out[path + " aggregated"] = await get(path, aggregated)
        for path in ("/api/v1", "/apis/apiextensions.k8s.io/v1", "/version"):
            out[path] = await get(path)
        root = json.loads((await get("/openapi/v3")).split(" ", 1)[1])
        out["/openapi/v3"] = root
        for key in sorted(root["paths"]):
            out[key] = await get("/openapi/v3/" + key)
    json.dump(out, sys.stdout)

asyncio.run(main())
"""


def gomodcache() -> Path:
    found = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=False).stdout.strip()
    return Path(found) if found else Path.home() / "go" / "pkg" / "mod"


def published(tmp: Path, modcache: Path) -> dict[str, object]:
    tmp.mkdir()
    env = {
        **os.environ,
        "HOME": str(tmp / "home"),
        "KUBEDL_PY_CACHE": str(tmp / "cache"),
        "GOMODCACHE": str(modcache),
        "GOPATH": str(modcache.parent.parent) if modcache.name == "mod" else "",
        "GOPROXY": "http://127.0.0.1:9",  # nothing listens: downloads fail at once
    }
    run = subprocess.run(
        [sys.executable, "-c", DUMP], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, object] = json.loads(run.stdout)
    return result


@pytest.mark.skipif(
    not (gomodcache() / "cache" / "download" / "k8s.io" / "kubernetes").is_dir(),
    reason="no k8s.io/kubernetes in the Go module cache: nothing that could leak in",
)
def test_discovery_and_openapi_are_the_same_with_and_without_the_go_module_cache(tmp_path: Path) -> None:
    with_cache = published(tmp_path / "with", gomodcache())
    without = published(tmp_path / "without", tmp_path / "empty" / "pkg" / "mod")
    assert with_cache.keys() == without.keys()
    differing = [key for key in with_cache if with_cache[key] != without[key]]
    assert differing == []
