"""The peer controllers of the benchmark (harness/peers.py) on the real control plane.

Each peer is built from its pinned Go module, runs as its own user against a fresh cluster of simulated nodes,
and must do the work the benchmark times: an 8-replica PyTorchJob of its API becomes 8 running pods, its
Services and a Running job. KubeDL also runs a host-network job, and when the Master pod is deleted it
replaces the pod on a new host port and re-points the Master's Service at it (KubeDL v0.5.0 makes a Service
for the Master only).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from harness.peers import (
    TRAINING_OPERATOR_CERT_DIR,
    PeerName,
    PeerProcess,
    _SharedDirectory,
    get_peer,
    install_peer_crds,
    job_condition,
    peer_kubeconfig,
    peer_pytorchjob,
    run_peer,
)
from kubedl_local.kubernetes.cluster import KubernetesCluster, create_namespace
from kubedl_local.kubernetes.controlplane import log_tail
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import NotFound
from kubedl_py.kube.resources import PODS, SERVICES
from tests.integration.conftest import eventually

# The first test may build a peer (minutes cold, one Go build at a time). make test-peers runs these, make test
# does not (docs/testing.md).
pytestmark = [pytest.mark.timeout(1200), pytest.mark.peers]

NAMESPACE = "peers"
REPLICAS = 8


async def until(proc: PeerProcess, probe: Callable[[], Awaitable[Any]], *, what: str, within: float = 60.0) -> Any:
    """``eventually``, failing at once with the peer's log if the peer has exited meanwhile."""

    async def alive_probe() -> Any:
        if not proc.running:
            raise AssertionError(
                f"{proc.name} exited ({proc.process.returncode}) while waiting for {what}:\n{log_tail(proc.log_path)}"
            )
        return await probe()

    return await eventually(alive_probe, within=within, interval=0.2, what=f"{what} ({proc.name}, log {proc.log_path})")


async def prepared(cluster: KubernetesCluster, peer: PeerName) -> KubeClient:
    kube = KubeClient(kubeconfig=cluster.admin_kubeconfig)
    await kube.open()
    await install_peer_crds(kube, peer)
    await create_namespace(kube, NAMESPACE)
    return kube


async def running_pods(kube: KubeClient, peer: PeerName, job: str, count: int) -> list[dict[str, Any]] | None:
    pods = (await kube.list(PODS, namespace=NAMESPACE, label_selector=get_peer(peer).pod_selector(job))).items
    running = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Running"]
    return running if len(pods) == count and len(running) == count else None


@pytest.mark.parametrize(("peer", "services"), [("training-operator", REPLICAS), ("kubedl", 1)])
async def test_a_peer_runs_a_pytorchjob(
    peer_cluster: KubernetesCluster, tmp_path: Path, peer: PeerName, services: int
) -> None:
    chosen = get_peer(peer)
    cert_top = TRAINING_OPERATOR_CERT_DIR.parent
    left_before = cert_top.exists()
    kube = await prepared(peer_cluster, peer)
    try:
        kubeconfig = peer_kubeconfig(peer_cluster.control_plane, peer)
        async with run_peer(peer, kubeconfig, tmp_path, setup_kubeconfig=peer_cluster.admin_kubeconfig) as proc:
            assert proc.workers == 1 and (proc.qps, proc.burst) == (20.0, 30)  # as shipped
            await kube.create(chosen.job, peer_pytorchjob(peer, "train", NAMESPACE, REPLICAS))

            pods = await until(proc, lambda: running_pods(kube, peer, "train", REPLICAS), what="8 running pods")
            types = sorted(pod["metadata"]["labels"][chosen.replica_type_label].lower() for pod in pods)
            assert types == ["master"] + ["worker"] * (REPLICAS - 1)

            async def services_made() -> list[dict[str, Any]] | None:
                found = await kube.list(SERVICES, namespace=NAMESPACE, label_selector=chosen.pod_selector("train"))
                return found.items if len(found.items) == services else None

            await until(proc, services_made, what=f"{services} Services")

            async def job_running() -> bool:
                return job_condition(await kube.get(chosen.job, "train", namespace=NAMESPACE), "Running")

            await until(proc, job_running, what="the job's Running condition")
            assert proc.running
            if peer == "training-operator":
                assert (TRAINING_OPERATOR_CERT_DIR / "tls.crt").is_file()
        # the Training Operator's fixed certificate directory does not outlive it (unless it was there before)
        assert cert_top.exists() == left_before
    finally:
        await kube.close()


@pytest.mark.parametrize(
    ("peer", "evidence"),
    [
        # its own flags (one token bucket for the process)
        ("training-operator", "--kube-api-qps=500 --kube-api-burst=1000 --controller-threads=4"),
        # the build-time patch reads the variables and says what it set
        ("kubedl", "kubedl-py: client rate limit set to QPS 500, burst 1000"),
    ],
)
async def test_a_peer_runs_with_raised_rate_limits_and_workers(
    peer_cluster: KubernetesCluster, tmp_path: Path, peer: PeerName, evidence: str
) -> None:
    kube = await prepared(peer_cluster, peer)
    try:
        kubeconfig = peer_kubeconfig(peer_cluster.control_plane, peer)
        options: dict[str, Any] = {"qps": 500, "burst": 1000, "workers": 4}
        async with run_peer(
            peer, kubeconfig, tmp_path, setup_kubeconfig=peer_cluster.admin_kubeconfig, **options
        ) as proc:
            assert (proc.qps, proc.burst, proc.workers) == (500.0, 1000, 4)
            assert evidence in proc.log_path.read_text()
            await kube.create(get_peer(peer).job, peer_pytorchjob(peer, "fast", NAMESPACE, 2))
            await until(proc, lambda: running_pods(kube, peer, "fast", 2), what="2 running pods")
    finally:
        await kube.close()


async def test_kubedl_host_network_job_and_its_master_failover(peer_cluster: KubernetesCluster, tmp_path: Path) -> None:
    peer = get_peer("kubedl")
    kube = await prepared(peer_cluster, "kubedl")
    try:
        kubeconfig = peer_kubeconfig(peer_cluster.control_plane, "kubedl")
        async with run_peer("kubedl", kubeconfig, tmp_path, setup_kubeconfig=peer_cluster.admin_kubeconfig) as proc:
            await kube.create(peer.job, peer_pytorchjob("kubedl", "hostnet", NAMESPACE, 3, host_network=True))
            pods = await until(proc, lambda: running_pods(kube, "kubedl", "hostnet", 3), what="3 running pods")
            for pod in pods:
                assert pod["spec"]["hostNetwork"] is True
                (port,) = pod["spec"]["containers"][0]["ports"]
                assert port["hostPort"] == port["containerPort"] and 20000 <= port["hostPort"] <= 30000

            master = next(pod for pod in pods if pod["metadata"]["name"] == "hostnet-master-0")
            first_port = master["spec"]["containers"][0]["ports"][0]["hostPort"]

            async def service_target() -> int | None:
                try:
                    service = await kube.get(SERVICES, "hostnet-master-0", namespace=NAMESPACE)
                except NotFound:
                    return None
                assert service["spec"]["clusterIP"] != "None"  # a ClusterIP Service: it maps port to targetPort
                return int(service["spec"]["ports"][0]["targetPort"])

            assert await until(proc, service_target, what="the Master's Service") == first_port

            # The Master fails over: deleted, it ends Failed (143) and KubeDL's default ExitCode policy for the
            # Master recreates it on a new random host port, then re-points the Service.
            await kube.delete(PODS, "hostnet-master-0", namespace=NAMESPACE)

            async def replacement() -> dict[str, Any] | None:
                pods = await running_pods(kube, "kubedl", "hostnet", 3) or []
                new = [p for p in pods if p["metadata"]["name"] == "hostnet-master-0"]
                return new[0] if new and new[0]["metadata"]["uid"] != master["metadata"]["uid"] else None

            new_master = await until(proc, replacement, what="the replacement Master pod")
            new_port = new_master["spec"]["containers"][0]["ports"][0]["hostPort"]
            assert new_port != first_port  # drawn again from 20000-30000; equal only by a 1-in-10000 chance

            async def repointed() -> bool:
                return await service_target() == new_port

            await until(proc, repointed, what="the Master's Service re-pointed at the new host port")
    finally:
        await kube.close()


def test_peer_jobs_follow_each_api() -> None:
    operator = peer_pytorchjob("training-operator", "j", "ns", 3)
    assert (operator["apiVersion"], operator["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert {t: s["replicas"] for t, s in operator["spec"]["pytorchReplicaSpecs"].items()} == {"Master": 1, "Worker": 2}
    single = peer_pytorchjob("kubedl", "j", "ns", 1, host_network=True, restart_policy="ExitCode")
    assert single["apiVersion"] == "training.kubedl.io/v1alpha1"
    assert single["metadata"]["annotations"] == {"kubedl.io/network-mode": "host"}
    (master,) = single["spec"]["pytorchReplicaSpecs"].values()
    assert master["restartPolicy"] == "ExitCode"
    (container,) = master["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]  # KubeDL needs it for Services
    with pytest.raises(ValueError, match="no host-network mode"):
        peer_pytorchjob("training-operator", "j", "ns", 2, host_network=True)


def test_the_shared_certificate_directory_goes_with_its_last_user(tmp_path: Path) -> None:
    top = tmp_path / "k8s-webhook-server"
    shared = _SharedDirectory(top)
    shared.claim()
    shared.claim()
    (top / "serving-certs").mkdir(parents=True)
    shared.release()
    assert top.is_dir()  # one user left
    shared.release()
    assert not top.exists()
    # one that was there before this process is not its to remove
    (top / "serving-certs").mkdir(parents=True)
    shared.claim()
    shared.release()
    assert top.is_dir()
