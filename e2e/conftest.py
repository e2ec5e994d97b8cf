"""Where the e2e scenarios run, and the few target-specific operations they need.

- Default: a local cluster started here as ``kubedl-py local up`` (process runtime, controller beside it) in a
  subprocess, exactly as a user starts it, once per control plane: the embedded one and the real Kubernetes
  components (``--control-plane kubernetes``, where the controller runs under the RBAC rendered in deploy/).
  ``KUBEDL_TEST_TIERS`` narrows that as for the other suites. The job programs run from this checkout.
- ``in-cluster`` (with the real tier): the controller *installed* as an operator installs it. The image is
  built from this checkout (``make image``'s code), ``local up --control-plane kubernetes --runtime
  container --no-controller`` starts a bare cluster whose node runs pods from local images in containers,
  and ``kubectl apply -f deploy/kubedl-py.yaml`` plus ``kubectl rollout status`` install the controller as a
  Deployment. The job pods' images are not in the image store, so they still run as processes from this
  checkout. Needs podman and root (the controller's pod has its own network namespace).
- ``KUBEDL_E2E_KUBECONFIG=path``: any cluster that already runs the controller (kind via ``make e2e-kind``).
  Pods use ``KUBEDL_E2E_IMAGE`` (default ``kubedl-py:e2e``, built from the project's Dockerfile: Python,
  kubedl-py and ``examples/`` under /app). PyTorch scenarios need torch in that image and are skipped unless
  ``KUBEDL_E2E_TORCH=1`` says it is there.

The only target-specific step is killing a container's process with SIGKILL: on the embedded cluster the
process is a host process (its pid is in its log); elsewhere ``kubectl exec`` kills it inside the pod (the
program runs under ``sh`` there, so it is not PID 1, which ignores SIGKILL from inside its namespace).
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.tiers import EMBEDDED, KUBERNETES, TIERS, require_tier

# Every job parse a controller serves from its cache is checked against a fresh parse (controllers/job.py,
# VERIFY_PARSE_CACHE), in this process and in every controller process the tests start.
os.environ["KUBEDL_PY_VERIFY_PARSE_CACHE"] = "1"

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Target:
    """A cluster with the controller, and how to run this repository's example programs on it."""

    name: str
    kubeconfig: Path
    image: str
    local: bool
    torch: bool

    def container(self, name: str, program: str, args: list[str]) -> dict[str, Any]:
        """A container spec running ``examples/<program>`` with ``args``."""
        if self.local:
            command = [sys.executable, str(REPO / "examples" / program), *args]
        else:
            # `; exit $?` keeps sh as PID 1 (no exec of the last command), so the program can be SIGKILLed
            command = ["sh", "-c", f'python /app/examples/{program} "$@"; exit $?', "--", *args]
        return {"name": name, "image": self.image, "command": command}

    def kill(self, namespace: str, pod: str, container: str, pid: int) -> None:
        """SIGKILL the container's program (``pid`` as the program logged it)."""
        if self.local:
            os.kill(pid, signal.SIGKILL)
            return
        kubectl = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
        subprocess.run(
            [
                kubectl,
                "--kubeconfig",
                str(self.kubeconfig),
                "-n",
                namespace,
                "exec",
                pod,
                "-c",
                container,
                "--",
                "kill",
                "-KILL",
                str(pid),
            ],
            check=True,
            timeout=30,
        )

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run ``kubedl-py`` against this cluster."""
        return subprocess.run(
            [sys.executable, "-m", "kubedl_py.cli", *args, "--kubeconfig", str(self.kubeconfig)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


#: the targets started here: each control plane with the controller beside it, and the controller installed
IN_CLUSTER = "in-cluster"
TARGETS = (*TIERS, IN_CLUSTER)


@pytest.fixture(scope="session", params=TARGETS)
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    remote = os.environ.get("KUBEDL_E2E_KUBECONFIG")
    if remote:
        if request.param != TARGETS[0]:
            pytest.skip("a remote cluster is one target")
        yield Target(
            name="kubeconfig " + remote,
            kubeconfig=Path(remote),
            image=os.environ.get("KUBEDL_E2E_IMAGE", "kubedl-py:e2e"),
            local=False,
            torch=os.environ.get("KUBEDL_E2E_TORCH") == "1",
        )
        return
    in_cluster = request.param == IN_CLUSTER
    control_plane: str = KUBERNETES if in_cluster else request.param
    require_tier(control_plane)
    # kubeflow.org too: its MPIJob runs mpirun through kubectl exec (e2e/test_mpi.py)
    extra: list[str] = [] if in_cluster else ["--kubeflow-api"]
    if in_cluster:
        _require_containers()
        extra = ["--runtime", "container", "--no-controller", "--bridge", f"kde{os.getpid() % 100000}"]
        extra += ["--pod-cidr", f"10.{random.randint(200, 250)}.{random.randint(0, 255)}.0/24"]
    with tempfile.TemporaryDirectory(prefix="kubedl-e2e-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        log_path = Path(tmp) / "cluster.log"
        if in_cluster:
            _build_image(Path(tmp) / "image.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kubedl_py.cli",
                    "local",
                    "up",
                    "--control-plane",
                    control_plane,
                    "--kubeconfig",
                    str(kubeconfig),
                    *extra,
                ],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                # the pods are local processes: the launcher's kubectl-delivery copies the kubectl it finds
                env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
            )
        try:
            deadline = time.monotonic() + (60 if control_plane == EMBEDDED else 300)
            while not kubeconfig.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"local up did not start:\n{log_path.read_text()}")
                time.sleep(0.05)
            if in_cluster:
                _install(kubeconfig, log_path)
            has_torch = importlib.util.find_spec("torch") is not None
            name = request.param
            yield Target(name=name, kubeconfig=kubeconfig, image="ignored:latest", local=True, torch=has_torch)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=90)  # a loaded 2-core machine once took over 30 s to stop its podman pods
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode not in (0, -signal.SIGKILL):
                print(log_path.read_text(), file=sys.stderr)
            assert proc.returncode == 0, f"local up exited {proc.returncode}"


def _require_containers() -> None:
    if shutil.which("podman") is None:
        pytest.skip("the in-cluster target runs the controller's image with podman, which is not installed")
    if os.geteuid() != 0:
        pytest.skip("the in-cluster target's controller pod needs its own network namespace (root)")


def _build_image(log: Path) -> None:
    """``kubedl-py:<version>`` from this checkout, as ``make image`` builds it (seconds when cached)."""
    from kubedl_local.image import BASE_IMAGE, build_image, detect_engine, ensure_base_image

    engine = detect_engine("podman")
    with open(log, "w") as out:
        ensure_base_image(engine, out=out)
        build_image(engine, context=REPO, base=BASE_IMAGE, out=out)


def _install(kubeconfig: Path, cluster_log: Path) -> None:
    """What an operator runs: apply the rendered manifests, wait for the rollout."""
    kubectl = [str(Path(sys.executable).parent / "kubectl"), "--kubeconfig", str(kubeconfig)]
    subprocess.run([*kubectl, "apply", "-f", str(REPO / "deploy" / "kubedl-py.yaml")], check=True, timeout=120)
    started = time.monotonic()
    rollout = subprocess.run(
        [*kubectl, "-n", "kubedl-system", "rollout", "status", "deploy/kubedl-py-controller", "--timeout=180s"],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    if rollout.returncode != 0:
        described = subprocess.run(
            [*kubectl, "-n", "kubedl-system", "describe", "pods"], capture_output=True, text=True, check=False
        )
        raise RuntimeError(f"{rollout.stdout}{rollout.stderr}\n{described.stdout}\n{cluster_log.read_text()[-5000:]}")
    print(f"in-cluster controller rolled out {time.monotonic() - started:.1f}s after kubectl apply", file=sys.stderr)


@pytest.fixture
def torch_target(target: Target) -> Target:
    if not target.torch:
        pytest.skip(
            f"PyTorch is not available on {target.name} (embedded: install the demo extra; remote: "
            "KUBEDL_E2E_TORCH=1 with an image that has torch)"
        )
    return target
