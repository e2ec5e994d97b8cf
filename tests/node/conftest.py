"""The ``node`` tier: the real control plane with a real node on this machine (``kubedl_local.kubernetes.real_node``).

Opt-in (``KUBEDL_TEST_TIERS=node``, ``make test-node``) and serialized: one real node per machine, so each
module's cluster waits for the machine's node lock (a second run on the machine waits for the first instead
of failing). A selected tier that cannot run here fails with the reason (not root, a tool missing); it is
never skipped silently.

Helpers for what every suite here needs: a cluster on its own event loop (``NodeCluster``), ``kubectl`` against
it, the images the pods run (built here with podman, as ``make image`` does, and copied into the node), and
pods that run this checkout's Python: the Debian base image with the checkout (and so its venv with torch)
and the interpreter's installation mounted read-only from the host. That keeps PyTorch out of every image
(``WITH_TORCH=1 make image`` would add minutes and gigabytes to CI) while the process still runs in a real
container of the node: its own mount, PID and cgroup, the node's DNS, and in host-network mode the host's
network.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kubedl_local.image import BASE_IMAGE, IMAGE, build_image, detect_engine, ensure_base_image
from kubedl_local.kubernetes.cluster import KubernetesCluster, KubernetesClusterOptions
from kubedl_local.kubernetes.controlplane import ControlPlaneOptions
from kubedl_local.kubernetes.real_node import RealNodeOptions, preflight
from kubedl_py.templates import ManifestOptions
from tests.tiers import NODE, LoopThread, require_tier

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
KUBECTL = str(Path(sys.executable).parent / "kubectl")
#: how long a suite waits for another run's real node on this machine to end
LOCK_WAIT = 1800.0
#: the MPIJob's image: the Debian base with Debian's Open MPI, mpi4py and OpenSSH (no registry image has them)
MPI_IMAGE = "localhost/kubedl-py-mpi:bookworm"
MPI_PACKAGES = ("openmpi-bin", "python3-mpi4py", "openssh-server", "openssh-client")
MPI_CONTAINERFILE = f"""\
FROM {BASE_IMAGE}
RUN apt-get update -qq \\
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends {" ".join(MPI_PACKAGES)} \\
    && ssh-keygen -A && rm -rf /var/lib/apt/lists/*
"""
MPI_RECIPE_LABEL = "io.kubedl-py.test.mpi-recipe"


def require_node_tier() -> None:
    require_tier(NODE)
    problems = preflight()
    if problems:
        pytest.fail("the node tier is selected but cannot run here: " + "; ".join(problems))


def build_images(log: Path) -> None:
    """``kubedl-py:<version>`` and its Debian base, from this checkout, as ``make image`` builds them, and the
    MPI image on that base (seconds when cached)."""
    engine = detect_engine("podman")
    with open(log, "w") as out:
        ensure_base_image(engine, out=out)
        build_image(engine, context=REPO, base=BASE_IMAGE, out=out)
    recipe = hashlib.sha256(MPI_CONTAINERFILE.encode()).hexdigest()[:16]
    if engine.label(MPI_IMAGE, MPI_RECIPE_LABEL) == recipe:
        return
    with tempfile.TemporaryDirectory(prefix="kubedl-py-mpi.") as work:
        (Path(work) / "Containerfile").write_text(MPI_CONTAINERFILE)
        build = engine.command(
            "build", *engine.container_flags(), "--network", "host", "--pull=never",
            "--label", f"{MPI_RECIPE_LABEL}={recipe}", "--tag", MPI_IMAGE, work,
        )  # fmt: skip
        with open(log, "a") as out:
            subprocess.run(build, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=1200)


@dataclass
class NodeCluster:
    """A real cluster with a real node, running on its own loop (tests/tiers.py)."""

    loop: LoopThread
    cluster: KubernetesCluster

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.admin_kubeconfig

    @property
    def node(self) -> Any:
        assert self.cluster.real_node is not None
        return self.cluster.real_node

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr}")
        return result

    def get(self, *args: str) -> dict[str, Any]:
        """``kubectl get ... -o json`` as a dict."""
        loaded: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return loaded

    def apply(self, manifest: dict[str, Any]) -> None:
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), "apply", "-f", "-"],
            input=json.dumps(manifest),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr


def start_node_cluster(
    *,
    install: bool,
    images: tuple[str, ...] = (),
    nodes: int = 1,
    control_plane: ControlPlaneOptions | None = None,
    kubelet_config: dict[str, Any] | None = None,
    logs: Path | None = None,
    dra_test_driver: bool = False,
) -> NodeCluster:
    loop = LoopThread("node-cluster")
    options = KubernetesClusterOptions(
        control_plane=control_plane or ControlPlaneOptions(),
        runtime="kubelet",
        nodes=nodes,
        install=install,
        manifests=ManifestOptions(),
        real_node=RealNodeOptions(
            images=images,
            lock_wait=LOCK_WAIT,
            kubelet_config=kubelet_config or {},
            keep_logs=logs,
            dra_test_driver=dra_test_driver,
        ),
    )
    cluster = KubernetesCluster(options)
    try:
        loop.run(cluster.start(), timeout=LOCK_WAIT + 1200)  # the first run may build the node's programs
    except BaseException:
        loop.close()
        raise
    return NodeCluster(loop, cluster)


def stop_node_cluster(handle: NodeCluster) -> None:
    try:
        handle.loop.run(handle.cluster.stop(), timeout=300)
    finally:
        handle.loop.close()


def eventually(probe: Callable[[], T | None], *, within: float, what: str, interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy, with a deadline (never a bare sleep)."""
    deadline = time.monotonic() + within
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {within}s waiting for {what}; last: {last!r}")


# ---------------------------------------------------------------------------------------- pods of this checkout


def host_python() -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """The interpreter of this test run (the venv's, with torch) as seen from a container of the Debian base
    image, and the read-only hostPath volumes and mounts that make it so: the checkout (with the venv) and,
    when the venv's interpreter is not Debian's own, its installation (pyenv, say)."""
    sources = [REPO]
    base = Path(sys.base_prefix).resolve()
    if not str(base).startswith("/usr"):
        sources.append(base)
    volumes, mounts = [], []
    for i, path in enumerate(sources):
        volumes.append({"name": f"host-{i}", "hostPath": {"path": str(path), "type": "Directory"}})
        mounts.append({"name": f"host-{i}", "mountPath": str(path), "readOnly": True})
    return sys.executable, volumes, mounts


def program_container(name: str, program: str, args: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A container running ``examples/<program>`` with this checkout's Python, and the pod volumes it needs.
    ``sh`` stays PID 1 (no exec of the last command), so ``kubectl exec ... kill -KILL <pid>`` can kill the
    program (PID 1 ignores SIGKILL sent from inside its namespace)."""
    python, volumes, mounts = host_python()
    container = {
        "name": name,
        "image": BASE_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", f'{python} {REPO / "examples" / program} "$@"; exit $?', "--", *args],
        "volumeMounts": mounts,
    }
    return container, volumes


@pytest.fixture(scope="session")
def node_images(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    """The images the node's pods run, built here; copied into each suite's node at its start."""
    require_node_tier()
    build_images(tmp_path_factory.mktemp("image") / "build.log")
    return (IMAGE, BASE_IMAGE, MPI_IMAGE)


@pytest.fixture(autouse=True)
def _node_tier_only() -> Iterator[None]:
    require_node_tier()
    yield
