"""The install path of a release, proven locally: ``kubectl apply -f deploy/kubedl-py.yaml`` on the real control
plane with a node that runs containers, then ``kubectl rollout status``.

What an operator relies on is asserted on the running pod: it runs from the image built from this checkout
(its imageID is that build's), as uid/gid 65532 on a read-only root filesystem with no capabilities, with
the ServiceAccount token a kubelet projects (the ``kube-api-access-*`` volume the API server's admission
added, its token from the TokenRequest API, bound to the pod, accepted by the API server as the rendered
ServiceAccount); both probes passed; it holds the leader Lease; ``kubectl logs`` reads it through the API
server; it turns a PyTorchJob into pods and Services under the shipped RBAC; and deleting the Deployment
stops it gracefully (Lease released, container gone). The e2e scenarios run against this same kind of
in-cluster controller (``e2e/conftest.py``, target ``in-cluster``).

Skipped only when podman is not installed (or the real tier is not selected).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import random
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from kubedl_local.image import BASE_IMAGE, IMAGE, INSTALL_HINT, Engine, build_image, ensure_base_image
from kubedl_local.kubernetes.cluster import KubernetesCluster, KubernetesClusterOptions, create_namespace
from kubedl_local.node.process_kubelet import LocalProcessRuntime
from kubedl_py.api import constants as c
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import EVENTS, LEASES, PODS, SERVICES, Resource
from tests.tiers import KUBERNETES, require_tier

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
KUBECTL = str(Path(sys.executable).parent / "kubectl")
NAMESPACE = "kubedl-system"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
PYTORCHJOBS = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")

pytestmark = [
    pytest.mark.skipif(shutil.which("podman") is None, reason=f"podman is not installed ({INSTALL_HINT})"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the controller's pod needs a pod network namespace (root)"),
    pytest.mark.timeout(900),  # a cold image build is part of it
]
ENGINE = Engine("podman")


@pytest.fixture(scope="module")
def image_id() -> str:
    """``kubedl-py:<version>`` built from this checkout as ``make image`` builds it; its id."""
    require_tier(KUBERNETES)
    log = io.StringIO()
    ensure_base_image(ENGINE, out=log)
    build_image(ENGINE, context=ROOT, base=BASE_IMAGE, out=log)
    inspected = subprocess.run(
        ENGINE.command("image", "inspect", "--format", "{{.Id}}", IMAGE), capture_output=True, text=True, check=True
    )
    return inspected.stdout.strip()


async def kubectl(kubeconfig: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:  # noqa: ASYNC109
    """The real kubectl, without blocking the loop the cluster's node agent runs on."""
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(kubeconfig), *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


async def podman(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *ENGINE.command(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    return out.decode()


async def until(probe: Callable[[], Awaitable[T | None]], *, within: float, what: str) -> T:
    deadline = time.monotonic() + within
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {within}s waiting for {what}; last: {last!r}")


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


async def test_kubectl_apply_installs_the_controller_in_cluster(image_id: str) -> None:
    options = KubernetesClusterOptions(
        runtime="container",
        nodes=1,
        install=False,  # a bare cluster: the manifests install everything
        bridge=f"kdi{uuid.uuid4().hex[:6]}",
        pod_cidr=f"10.{random.randint(200, 250)}.{random.randint(0, 255)}.0/24",
    )
    async with KubernetesCluster(options) as cluster:
        admin = cluster.admin_kubeconfig
        applied = await kubectl(admin, "apply", "-f", str(ROOT / "deploy" / "kubedl-py.yaml"))
        assert applied.returncode == 0, applied.stderr
        started = time.monotonic()
        rollout = await kubectl(
            admin, "-n", NAMESPACE, "rollout", "status", "deploy/kubedl-py-controller", "--timeout=180s", timeout=200
        )
        assert rollout.returncode == 0, rollout.stdout + rollout.stderr + await diagnose(admin)
        assert 'deployment "kubedl-py-controller" successfully rolled out' in rollout.stdout
        print(f"rollout status succeeded {time.monotonic() - started:.1f}s after kubectl apply")

        async with KubeClient(kubeconfig=admin) as kube:
            pods = (await kube.list(PODS, namespace=NAMESPACE)).items
            (pod,) = pods
            name = pod["metadata"]["name"]
            (status,) = pod["status"]["containerStatuses"]
            assert status["ready"] is True and status["restartCount"] == 0
            assert status["imageID"] == f"sha256:{image_id}", "the pod does not run the image built from this checkout"
            assert status["containerID"].startswith("podman://")
            assert pod["status"]["podIP"] != pod["status"]["hostIP"]  # its own network namespace
            engine_id = status["containerID"].removeprefix("podman://")

            # who it runs as, on what
            inspected = json.loads(await podman("container", "inspect", engine_id))[0]
            assert inspected["Config"]["User"] == "65532:65532"
            assert inspected["HostConfig"]["ReadonlyRootfs"] is True
            proc_status = (await podman("exec", engine_id, "cat", "/proc/1/status")).splitlines()
            fields = {line.split(":", 1)[0]: line.split(":", 1)[1].split() for line in proc_status if ":" in line}
            assert fields["Uid"] == ["65532"] * 4 and fields["Gid"] == ["65532"] * 4
            assert fields["CapEff"] == ["0000000000000000"] and fields["NoNewPrivs"] == ["1"]
            touched = await podman("exec", engine_id, "touch", "/app/x")
            assert "Read-only file system" in touched

            # its ServiceAccount token, as a kubelet provides it
            (volume,) = [v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
            assert volume["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] == 3607
            token = (await podman("exec", engine_id, "cat", f"{SERVICE_ACCOUNT_DIR}/token")).strip()
            claims = jwt_claims(token)
            assert claims["sub"] == f"system:serviceaccount:{NAMESPACE}:kubedl-py-controller"
            assert claims["kubernetes.io"]["pod"] == {"name": name, "uid": pod["metadata"]["uid"]}
            # The projection's 3607 s is the kube-api-access marker: the API server extends such a TokenRequest to a
            # year (--service-account-extend-token-expiration) and says when its real lifetime ends (warnafter).
            assert claims["kubernetes.io"]["warnafter"] - claims["iat"] == 3607, claims
            review = await kube.create(
                TOKEN_REVIEWS,
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
            )
            assert review["status"]["authenticated"] is True
            assert review["status"]["user"]["username"] == f"system:serviceaccount:{NAMESPACE}:kubedl-py-controller"
            owner = (
                await podman("exec", engine_id, "stat", "-L", "-c", "%u %a", f"{SERVICE_ACCOUNT_DIR}/token")
            ).split()
            assert owner == ["65532", "600"]

            # its probes passed (liveness runs 5 s after start, then every 10 s)
            runtime = cluster.agent.runtime if cluster.agent is not None else None
            assert isinstance(runtime, LocalProcessRuntime)

            async def probed() -> dict[str, list[int]] | None:
                attempts = runtime.probe_attempts(NAMESPACE, name, "controller")
                return attempts if attempts.get("liveness", [0])[0] >= 1 and attempts["readiness"][0] >= 1 else None

            attempts = await until(probed, within=30, what="a passing liveness probe")
            assert attempts["liveness"][1] == 0, attempts
            events = (await kube.list(EVENTS, namespace=NAMESPACE)).items
            assert not [e for e in events if e["reason"] == "Killing"], "the controller was killed by a probe"

            # readiness is what the EndpointSlice controller and the Service proxy go by
            slices = await kube.list(
                ENDPOINT_SLICES,
                namespace=NAMESPACE,
                label_selector="kubernetes.io/service-name=kubedl-py-controller-metrics",
            )
            endpoints = [e for s in slices.items for e in s.get("endpoints") or []]
            assert [(e["addresses"], e["conditions"]["ready"]) for e in endpoints] == [([pod["status"]["podIP"]], True)]
            # /metrics over HTTPS: refused without a token; the controller's own token is not a reader's either
            service = await kube.get(SERVICES, "kubedl-py-controller-metrics", namespace=NAMESPACE)
            metrics_url = f"https://{service['spec']['clusterIP']}:8443/metrics"
            assert (await http_get(metrics_url))[0] == 401
            assert (await http_get(metrics_url, token))[0] == 403

            # leader, logs through the API server, and at work under the shipped RBAC
            lease = await kube.get(LEASES, "kubedl-py-controller", namespace=NAMESPACE)
            assert lease["spec"]["holderIdentity"].startswith(f"{name}_")
            logs = await kubectl(admin, "-n", NAMESPACE, "logs", name)
            assert "is now the leader" in logs.stdout, logs.stderr
            jobs = f"install-{uuid.uuid4().hex[:6]}"
            await create_namespace(kube, jobs)
            await kube.create(PYTORCHJOBS, _pytorchjob("in-cluster", jobs), namespace=jobs)

            async def made() -> bool:
                wanted = {"in-cluster-master-0", "in-cluster-worker-0"}
                pods = {p["metadata"]["name"] for p in (await kube.list(PODS, namespace=jobs)).items}
                services = {s["metadata"]["name"] for s in (await kube.list(SERVICES, namespace=jobs)).items}
                # a Service for the replica its peers dial, the Master (docs/controller.md, which Services)
                return pods == wanted and services == {"in-cluster-master-0"}

            await until(made, within=60, what="the job's pods and Services")

            # uninstalling the Deployment stops it gracefully
            await kube.delete(DEPLOYMENTS, "kubedl-py-controller", namespace=NAMESPACE)

            async def released() -> bool:
                lease = await kube.get(LEASES, "kubedl-py-controller", namespace=NAMESPACE)
                return not lease["spec"].get("holderIdentity")

            await until(released, within=60, what="the Lease to be released")
            await until(lambda: _gone(kube, name), within=60, what="the controller pod to be gone")
            assert (await podman("ps", "--all", "--quiet", "--filter", f"id={engine_id}")).strip() == ""


async def http_get(url: str, token: str | None = None) -> tuple[int, str]:
    """Through the node's Service proxy, from the host (the metrics' certificate is self-signed)."""
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.get(url, headers=headers, ssl=insecure) as r,
    ):
        return r.status, await r.text()


async def _gone(kube: KubeClient, name: str) -> bool:
    try:
        await kube.get(PODS, name, namespace=NAMESPACE)
    except NotFound:
        return True
    return False


def _pytorchjob(name: str, namespace: str) -> dict[str, Any]:
    def replica() -> dict[str, Any]:
        container = {"name": "pytorch", "image": "kubedl-py-test/job:1", "command": ["sleep", "60"]}
        return {"replicas": 1, "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


async def diagnose(kubeconfig: Path) -> str:
    """What helps when the rollout fails: the pod as kubectl describes it, and its container's last log."""
    described = await kubectl(kubeconfig, "-n", NAMESPACE, "describe", "pods")
    previous = await kubectl(kubeconfig, "-n", NAMESPACE, "logs", "deploy/kubedl-py-controller", "--previous")
    return f"\n{described.stdout}\n{previous.stdout[-3000:]}"
