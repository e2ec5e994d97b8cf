"""What a job command loads before it prints: only the client, the SDK and the models (issue 52, item 10).

``kubedl-py get`` took a second where ``kubectl get`` took 0.07 s, and most of it was imports that command
never used: kubernetes-asyncio's ~1,000 generated classes (half a second with their teardown at exit), the
manager, the health server, Prometheus, tenacity, Jinja. Each job command here runs as a user runs it, a
subprocess, against the tier's cluster (RBAC and a real kubeconfig on the real plane), and reports the modules
it had loaded when it finished; the figures against kubectl are ``python -m bench.cli_latency`` (docs/cli.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from kubedl_py.sdk import AsyncTrainingClient
from tests.integration.conftest import Env
from tests.sdk.helpers import succeeding
from tests.sdk.test_cli import write

#: modules no job command needs: each was loaded by every command before
NOT_NEEDED = (
    "kubernetes_asyncio",
    "prometheus_client",
    "tenacity",
    "jinja2",
    "cryptography",
    "kubedl_py.kube.manager",
    "kubedl_py.kube.health",
    "kubedl_py.controllers",
    "kubedl_py.templates",
    "kubedl_local",
)

#: runs the command line in this process, then prints the exit code and the loaded modules on stderr's last line
PROBE = """
import json, sys
from kubedl_py.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


async def probe(cluster: Env | None, *args: str) -> tuple[int, str, set[str]]:
    where = ["--kubeconfig", str(cluster.kubeconfig_path)] if cluster is not None else []
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PROBE,
        *args,
        *where,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    report = json.loads(err.decode().strip().splitlines()[-1])
    return int(report["code"]), out.decode(), set(report["modules"])


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in NOT_NEEDED))


@pytest.mark.parametrize(
    "command",
    [
        ["get"],
        ["get", "startup-probe", "-o", "json"],
        ["describe", "startup-probe"],
        ["logs", "startup-probe"],
        ["wait", "startup-probe", "--for", "succeeded", "--timeout", "30"],
    ],
    ids=" ".join,
)
async def test_a_job_command_loads_only_what_it_uses(
    cluster: Env, client: AsyncTrainingClient, tmp_path: Path, command: list[str]
) -> None:
    path = write(tmp_path, "job.yaml", succeeding("startup-probe").to_dict())
    code, _, _ = await probe(cluster, "submit", path, "--wait", "--timeout", "30")
    assert code == 0
    code, out, modules = await probe(cluster, *command)
    assert code == 0
    assert "startup-probe" in out
    assert heavy(modules) == []


async def test_the_probe_sees_a_heavy_import() -> None:
    """The probe can fail: ``manifests`` renders the install with Jinja, and the probe reports it."""
    code, out, modules = await probe(None, "manifests", "--crds-only")
    assert code == 0 and "CustomResourceDefinition" in out
    assert "jinja2" in heavy(modules)
