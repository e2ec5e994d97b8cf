"""``local up`` says which kubectl to use: the one the ``local`` extra installs beside kubedl-py, of the pinned
release's minor (a system kubectl of another minor warns about version skew on every call)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

from kubedl_local.pins import KUBERNETES_VERSION
from tests.sdk.local_up import LocalUpProcess, user_env


async def test_local_up_names_the_matching_kubectl_it_installed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    cluster = LocalUpProcess(
        "--runtime", "simulated", "--kubeconfig", str(home / "local.kubeconfig"), env=user_env(home)
    )  # fmt: skip
    await cluster.start()
    try:
        await cluster.ready(within=60)
        deadline = time.monotonic() + 10
        while not [line for line in cluster.output if line.startswith("kubectl of the pinned release")]:
            assert time.monotonic() < deadline, cluster.output
            await asyncio.sleep(0.05)
    finally:
        assert await cluster.stop() == 0
    line = next(line for line in cluster.output if line.startswith("kubectl of the pinned release"))
    minor = KUBERNETES_VERSION.rsplit(".", 1)[0]
    assert f"(v{minor})" in line, line
    kubectl = line.rsplit(": ", 1)[1]
    version = subprocess.run(  # noqa: ASYNC221 - the cluster is stopped; nothing else runs on this loop
        [kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    )
    client = json.loads(version.stdout)["clientVersion"]
    assert f"{client['major']}.{client['minor']}" == minor, client
