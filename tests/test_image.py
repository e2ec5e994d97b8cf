"""The controller image, built by ``make image``'s code and run for real: with podman here (on the Debian base made
with debootstrap), with docker where its engine answers.

What the rendered Deployment relies on is checked on the image itself: it runs as 65532 on a read-only root
filesystem with every capability dropped, its entrypoint followed by the Deployment's args starts the
controller, and that controller, configured in-cluster (service-account token and CA mounted, the API server
from ``KUBERNETES_SERVICE_HOST``), works against the real kube-apiserver under the RBAC from deploy/.

Skipped only when no engine is installed. The first build is slow (about 1.5 minutes cold: debootstrap, then
pip); later ones reuse the cached base and layers and take seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import socket
import ssl
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

import kubedl_py
from kubedl_local.image import (
    BASE_IMAGE,
    IMAGE,
    INSTALL_HINT,
    RECIPE_LABEL,
    Engine,
    _remove_rootfs,
    base_recipe,
    build_image,
    detect_engine,
    ensure_base_image,
)
from kubedl_local.kubernetes.cluster import CONTROLLER_SERVICE_ACCOUNT, create_namespace
from kubedl_local.kubernetes.install import service_account_token
from kubedl_py.api import constants as c
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import LEASES, NAMESPACES, PODS, SERVICES, Resource
from kubedl_py.templates import render_manifests
from tests.conftest import RealCluster

ROOT = Path(__file__).resolve().parents[1]
PYTORCHJOBS = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# A cold build (debootstrap + pip) is part of the first test that asks for the image.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def engine() -> Engine:
    if shutil.which("podman") is None and shutil.which("docker") is None:
        pytest.skip(f"podman is not installed ({INSTALL_HINT}) and neither is docker: no image can be built")
    return detect_engine()


@pytest.fixture(scope="module")
def image(engine: Engine) -> str:
    """``kubedl-py:<version>``, built as ``make image`` builds it (seconds when nothing changed)."""
    base = BASE_IMAGE if engine.name == "podman" else None
    log = io.StringIO()
    if base is not None:
        ensure_base_image(engine, out=log)
    build_image(engine, context=ROOT, base=base, out=log)
    return IMAGE


def _deployment() -> dict[str, Any]:
    documents = [doc for doc in yaml.safe_load_all(render_manifests()) if doc]
    deployment: dict[str, Any] = next(doc for doc in documents if doc["kind"] == "Deployment")
    return deployment


def _locked_down(engine: Engine) -> list[str]:
    """Container flags for what the Deployment's securityContext asks of the kubelet (asserted, so a change to
    the Deployment cannot leave this test checking something else)."""
    pod = _deployment()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["allowPrivilegeEscalation"] is False
    flags = ["--read-only", "--cap-drop=all", "--security-opt=no-new-privileges"]
    if engine.name == "podman":
        # podman would mount a writable /tmp, /var/tmp and /run on a read-only root; Kubernetes does not
        flags.append("--read-only-tmpfs=false")
    return flags


def _run(engine: Engine, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(engine.run("--rm", *args), capture_output=True, text=True, timeout=timeout, check=False)


# --------------------------------------------------------------------------------------------- building


def test_base_image_is_cached_by_its_recipe(engine: Engine, image: str) -> None:
    if engine.name != "podman":
        pytest.skip("the debootstrapped base is podman's; with docker the Dockerfile's registry base is used")
    assert engine.label(BASE_IMAGE, RECIPE_LABEL) == base_recipe()
    out = io.StringIO()
    started = time.monotonic()
    assert ensure_base_image(engine, out=out) is False, out.getvalue()
    assert time.monotonic() - started < 30
    assert "up to date" in out.getvalue()


def test_build_context_is_only_what_the_dockerfile_copies(engine: Engine, image: str, tmp_path: Path) -> None:
    """The engine's own reading of .dockerignore, on a copy of the checkout salted with what a working checkout
    accumulates: copy the whole context into an image and list it."""
    checkout = tmp_path / "checkout"
    sources = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for tree in ("kubedl_py", "examples"):
        shutil.copytree(ROOT / tree, checkout / tree, ignore=sources)
    for name in ("pyproject.toml", "README.md", "Dockerfile", ".dockerignore"):
        shutil.copy(ROOT / name, checkout / name)
    wanted = {str(path.relative_to(checkout)) for path in checkout.rglob("*")} - {"Dockerfile", ".dockerignore"}
    for junk in (
        ".venv/bin/python",
        ".git/HEAD",
        ".mypy_cache/3.11/x.json",
        "kubedl_py.egg-info/PKG-INFO",
        "kubedl_py/__pycache__/cli.cpython-311.pyc",
        "kubedl_py/api/__pycache__/models.cpython-311.pyc",
        "kubedl_py/api/models.pyc",
        "examples/.pytest_cache/v/x",
        "build/lib/kubedl_py/cli.py",
        "bench/results.json",
    ):
        (checkout / junk).parent.mkdir(parents=True, exist_ok=True)
        (checkout / junk).write_text("junk")
    (tmp_path / "Containerfile").write_text(f"FROM {image}\nCOPY . /context\n")
    iidfile = tmp_path / "iid"
    flags = ["--pull=never"] if engine.name == "podman" else []
    build = engine.command("build", *engine.container_flags(), *flags, "--iidfile", str(iidfile))
    subprocess.run([*build, "--file", str(tmp_path / "Containerfile"), str(checkout)], check=True, timeout=300)
    built = iidfile.read_text().strip()
    try:
        listing = _run(engine, "--entrypoint", "find", built, "/context", "-mindepth", "1")
    finally:
        subprocess.run(engine.command("rmi", built), capture_output=True, check=False)
    assert listing.returncode == 0, listing.stderr
    sent = {line.removeprefix("/context/") for line in listing.stdout.splitlines()}
    assert sent == wanted, f"sent but not wanted: {sorted(sent - wanted)}; wanted but not sent: {sorted(wanted - sent)}"


def test_base_work_dir_is_deleted_without_reaching_through_mounts(tmp_path: Path) -> None:
    """A debootstrap that failed midway leaves /proc, /sys or a bind of /dev mounted in its target: removing its
    work directory must unmount them first, not delete the host's files through them."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("binding a directory needs root and mount(8)")
    host = tmp_path / "host-dev"
    host.mkdir()
    (host / "sentinel").write_text("the host's")
    work = tmp_path / "work"
    (work / "rootfs" / "dev").mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(host), str(work / "rootfs" / "dev")], check=True)
    try:
        _remove_rootfs(work)
    finally:
        subprocess.run(["umount", str(work / "rootfs" / "dev")], capture_output=True, check=False)
    assert (host / "sentinel").read_text() == "the host's"
    assert not work.exists()


# --------------------------------------------------------------------------------------------- running


def test_runs_as_65532_on_a_read_only_root(engine: Engine, image: str) -> None:
    ids = _run(engine, *_locked_down(engine), "--entrypoint", "sh", image, "-c", "id -u; id -g; touch /app/x")
    assert ids.stdout.split() == ["65532", "65532"], ids
    assert "Read-only file system" in ids.stderr
    helped = _run(engine, *_locked_down(engine), image, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "controller" in helped.stdout
    controller = _run(engine, *_locked_down(engine), image, "controller", "--help")
    assert controller.returncode == 0, controller.stderr
    assert "--leader-elect" in controller.stdout


def test_installed_package_is_the_checkout(engine: Engine, image: str) -> None:
    """The image's kubedl-py is this checkout's (same version, same manifests), not something from PyPI."""
    version = _run(
        engine,
        "--entrypoint",
        "python",
        image,
        "-c",
        "import importlib.metadata as m, kubedl_py; print(m.version('kubedl-py'), kubedl_py.__version__)",
    )
    assert version.stdout.split() == [kubedl_py.__version__] * 2, version
    leftovers = _run(
        engine,
        "--entrypoint",
        "python",
        image,
        "-c",
        "import importlib.util as u, os; print([m for m in ('pip', 'setuptools', 'wheel') if u.find_spec(m)],"
        " [p for p in ('/etc/pip.conf', '/run/kubedl-py-build') if os.path.exists(p)])",
    )
    assert leftovers.stdout.split("\n")[0] == "[] []", f"build tools or build mounts left in the image: {leftovers}"
    manifests = _run(engine, *_locked_down(engine), image, "manifests")
    assert manifests.returncode == 0, manifests.stderr
    assert manifests.stdout == render_manifests()


def test_the_image_carries_the_product_only(engine: Engine, image: str) -> None:
    """No local cluster in the controller's image (the ``local`` extra), nor what only it needs; the controller's
    own modules are there, and ``local up`` says how to get the extra instead of failing on an import."""
    found = _run(
        engine,
        "--entrypoint",
        "python",
        image,
        "-c",
        "import importlib.util as u; print([m for m in ('kubedl_local', 'celpy', 'jsonschema') if u.find_spec(m)],"
        " [m for m in ('kubedl_py.controllers.setup', 'kubedl_py.sdk') if u.find_spec(m)])",
    )
    assert found.stdout.strip() == "[] ['kubedl_py.controllers.setup', 'kubedl_py.sdk']", found
    local_up = _run(engine, *_locked_down(engine), image, "local", "up")
    assert local_up.returncode == 2, local_up
    assert "pip install 'kubedl-py[local]'" in local_up.stderr and "Traceback" not in local_up.stderr, local_up


async def test_controller_in_the_image_runs_jobs_on_a_real_api_server(
    engine: Engine, image: str, real_cluster: RealCluster, tmp_path: Path
) -> None:
    """The Deployment's container as a kubelet would start it: the image's entrypoint with the Deployment's args
    (only the metrics and probe ports moved: the container shares the host's network), in-cluster configuration,
    its security context. It becomes ready (leader, caches synced), serves /metrics over HTTPS from its read-only
    root (a self-signed certificate made in memory) and refuses it without a token, turns a PyTorchJob into pods
    and Services, and on SIGTERM releases its Lease and exits 0."""
    control_plane = real_cluster.cluster.control_plane
    namespace = real_cluster.cluster.controller_namespace
    deployment = _deployment()
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == image
    port, metrics_port = _free_port(), _free_port()
    moved = {
        "--health-addr=": f"--health-addr=127.0.0.1:{port}",
        "--metrics-addr=": f"--metrics-addr=127.0.0.1:{metrics_port}",
    }
    args = [next((new for old, new in moved.items() if arg.startswith(old)), arg) for arg in container["args"]]
    assert args != container["args"] and args[0] == "controller" and "--metrics-secure" in args

    name = f"kubedl-py-test-{uuid.uuid4().hex[:8]}"
    jobs_namespace = f"image-{uuid.uuid4().hex[:6]}"
    async with real_cluster.client() as kube:
        token, _ = await service_account_token(kube, namespace, CONTROLLER_SERVICE_ACCOUNT, seconds=3600)
        assert control_plane.pki is not None
        secrets = _service_account_dir(tmp_path, token, control_plane.pki.ca.cert_pem(), namespace)
        host, _, api_port = control_plane.url.removeprefix("https://").rpartition(":")
        run = engine.run(
            "--detach",
            "--name",
            name,
            "--network",
            "host",
            *_locked_down(engine),
            "--user",
            f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}",
            "--env",
            f"KUBERNETES_SERVICE_HOST={host}",
            "--env",
            f"KUBERNETES_SERVICE_PORT={api_port}",
            "--env",
            f"POD_NAME={name}",
            "--volume",
            f"{secrets}:{SERVICE_ACCOUNT_DIR}:ro",
            image,
            *args,
        )
        await asyncio.to_thread(subprocess.run, run, check=True, capture_output=True, timeout=120)
        exit_code: int | None = None
        try:
            await _until(lambda: _ready(port), within=90, what="/readyz 200", alive=lambda: _running(engine, name))
            lease = await kube.get(LEASES, "kubedl-py-controller", namespace=namespace)
            assert lease["spec"]["holderIdentity"].startswith(f"{name}_")
            insecure = ssl.create_default_context()
            insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # self-signed
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"https://127.0.0.1:{metrics_port}/metrics", ssl=insecure) as response,
            ):
                assert response.status == 401, await response.text()

            await create_namespace(kube, jobs_namespace)
            job = _pytorchjob("in-image", jobs_namespace)
            await kube.create(PYTORCHJOBS, job, namespace=jobs_namespace)

            async def made() -> bool:
                pods = await kube.list(PODS, namespace=jobs_namespace)
                services = await kube.list(SERVICES, namespace=jobs_namespace)
                wanted = {"in-image-master-0", "in-image-worker-0"}
                # a Service for the replica its peers dial, the Master (docs/controller.md)
                return {p["metadata"]["name"] for p in pods.items} == wanted and {
                    s["metadata"]["name"] for s in services.items
                } == {"in-image-master-0"}

            await _until(made, within=60, what="the job's pods and Services", alive=lambda: _running(engine, name))
        finally:
            exit_code = await asyncio.to_thread(_stop, engine, name)
            logs = await asyncio.to_thread(_logs_and_remove, engine, name)
            with contextlib.suppress(NotFound):
                await kube.delete(NAMESPACES, jobs_namespace)
        assert exit_code == 0, f"the controller exited {exit_code} on SIGTERM; its log:\n{logs}"
        lease = await kube.get(LEASES, "kubedl-py-controller", namespace=namespace)
        assert not lease["spec"].get("holderIdentity"), "the Lease was not released on SIGTERM"


# --------------------------------------------------------------------------------------------- helpers


def _pytorchjob(name: str, namespace: str) -> dict[str, Any]:
    def replica() -> dict[str, Any]:
        return {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}}}

    return {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


def _service_account_dir(tmp_path: Path, token: str, ca_pem: bytes, namespace: str) -> Path:
    """What the kubelet mounts for a pod's ServiceAccount, readable by the container's non-root user."""
    secrets = tmp_path / "serviceaccount"
    secrets.mkdir()
    (secrets / "token").write_text(token)
    (secrets / "ca.crt").write_bytes(ca_pem)
    (secrets / "namespace").write_text(namespace)
    for path in (secrets, *secrets.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return secrets


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _ready(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(f"http://127.0.0.1:{port}/readyz") as response,
        ):
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def _until(probe: Any, *, within: float, what: str, alive: Any) -> None:
    """Poll ``probe`` with a deadline; give up at once, with the reason, when the container is gone."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await probe():
            return
        if not await asyncio.to_thread(alive):
            raise AssertionError(f"the container stopped while waiting for {what}")
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


def _running(engine: Engine, name: str) -> bool:
    state = subprocess.run(
        engine.command("inspect", "--format", "{{.State.Running}}", name), capture_output=True, text=True, check=False
    )
    return state.stdout.strip() == "true"


def _stop(engine: Engine, name: str) -> int | None:
    """SIGTERM (the kubelet's stop), SIGKILL after 20 s; the exit code."""
    subprocess.run(engine.command("stop", "--time", "20", name), capture_output=True, timeout=60, check=False)
    state = subprocess.run(
        engine.command("inspect", "--format", "{{.State.ExitCode}}", name), capture_output=True, text=True, check=False
    )
    return int(state.stdout.strip()) if state.stdout.strip().lstrip("-").isdigit() else None


def _logs_and_remove(engine: Engine, name: str) -> str:
    logs = subprocess.run(engine.command("logs", name), capture_output=True, text=True, check=False)
    subprocess.run(engine.command("rm", "--force", name), capture_output=True, check=False)
    return logs.stdout + logs.stderr
