"""Pin the public surface the process kubelet builds on, so a rename is a deliberate, visible change."""

from __future__ import annotations

import ast
from pathlib import Path

from kubedl_local.node import process

PACKAGE = Path(process.__file__).parent


def test_public_names() -> None:
    expected = {
        "ProcessNode", "PodSandbox", "ServiceInfo", "NODE_IP",
        "ProcessRuntime", "ContainerProcess", "ContainerSpec", "PodRef", "TerminatedState",
        "ContainerConfigError", "ContainerStartError", "build_argv", "expand_vars",
        "ContainerLog", "LogLine",
        "ServiceProxy", "ServicePort", "Backend", "Resolver", "ProxyStats",
        "HostsFiles", "ServiceRecord", "PodIdentity", "render_hosts", "service_names", "DEFAULT_CLUSTER_DOMAIN",
        "PodNetwork", "PodInterface", "PodNetworkUnavailable", "run_in_netns",
        "Sandbox", "Mount", "SandboxUnavailable", "check_mount_sandbox", "is_root", "wrap_argv",
    }  # fmt: skip
    assert set(process.__all__) == expected
    assert all(hasattr(process, name) for name in expected)


def test_imports_nothing_of_ours_outside_the_package() -> None:
    # The kubelet depends on this package; a reverse import would create a cycle.
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("kubedl_py"), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("kubedl_py") for a in node.names), path.name
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                raise AssertionError(f"{path.name} reaches outside the package with a relative import")
