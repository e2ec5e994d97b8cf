"""The SDK against the embedded cluster with the real controller: what an ML engineer's script sees."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
import yaml

from kubedl_py import AsyncTrainingClient, JobFailedError, JobTimeoutError, PyTorchJob, TFJob, TrainingClient
from kubedl_py.api import constants as c
from kubedl_py.kube import transport as kube_transport
from kubedl_py.sdk import (
    ConfigurationError,
    JobAlreadyExistsError,
    JobNotFoundError,
    JobProgress,
    JobValidationError,
    ResolvedConfig,
    job_state,
    pytorch_job,
    replica_counts,
    resolve_config,
    tf_job,
)
from tests.integration.conftest import Env, RunningController
from tests.sdk.helpers import ending, failing, running_forever, succeeding


async def test_success_submit_wait_logs_describe_delete(cluster: Env, client: AsyncTrainingClient) -> None:
    created = await client.submit(succeeding("ok", host_network=True))
    assert isinstance(created, PyTorchJob)
    assert created.metadata.uid and created.namespace == cluster.namespace

    seen: list[JobProgress] = []
    done = await client.wait("ok", timeout=20, on_progress=seen.append)
    assert job_state(done) == "Succeeded"
    assert seen and seen[-1].state == "Succeeded"
    assert replica_counts(done)[1] == 2  # master and worker succeeded

    master_log = await client.logs("ok")
    assert "[simulated] container pytorch started" in master_log
    assert "exiting with code 0" in master_log
    assert not master_log.startswith("[ok-")
    every = (await client.logs("ok", replica=None)).splitlines()
    assert {line.split("]")[0] + "]" for line in every} == {"[ok-master-0]", "[ok-worker-0]"}
    assert "exiting with code 0" in await client.logs("ok", replica="worker", index=0)

    described = await client.describe("ok")
    assert [p.name for p in described.pods] == ["ok-master-0", "ok-worker-0"]
    for pod in described.pods:
        assert pod.node in cluster.node_names
        assert pod.phase == "Succeeded"
        assert pod.host_port is not None
    master, worker = described.pods
    # only the Master, the rendezvous host, is dialed by name: it alone has a Service, forwarding to its port
    assert master.service == master.name and master.target_port == master.host_port
    assert worker.service is None and worker.target_port is None
    assert described.events, "the controller records events on the job and pods"

    listed = await client.list()
    assert [j.name for j in listed] == ["ok"]
    assert (await client.get("ok", "pytorchjob")).metadata.uid == created.metadata.uid

    await client.delete("ok", wait=True, timeout=10)
    with pytest.raises(JobNotFoundError, match='"ok" not found'):
        await client.get("ok")


async def test_describe_and_logs_show_a_job_only_its_own_pods_beside_a_namesake_of_another_kind(
    client: AsyncTrainingClient,
) -> None:
    """A PyTorchJob and a TFJob both named "pair" in one namespace: their pods carry the same job-name label.
    Each job is described with, and its logs read from, its own pods (found by owner), not the other's."""
    await client.submit(pytorch_job("pair", "busybox", ["python", "train.py"], workers=0))
    await client.submit(tf_job("pair", "busybox", ["python", "t.py"], workers=0, ps=1, chief=True))
    for kind in ("PyTorchJob", "TFJob"):
        await client.wait("pair", until=("Running",), kind=kind, timeout=30)
    torch = await client.describe("pair", kind="PyTorchJob")
    tf = await client.describe("pair", kind="TFJob")
    assert [p.name for p in torch.pods] == ["pair-master-0"]
    assert sorted(p.name for p in tf.pods) == ["pair-chief-0", "pair-ps-0"]
    assert torch.pods[0].service == "pair-master-0"
    lines = (await client.logs("pair", replica=None, kind="PyTorchJob")).splitlines()
    assert lines and {line.split("]")[0] + "]" for line in lines} == {"[pair-master-0]"}, lines
    # Followed: the first lines of each pod come at once (the simulated containers print as they start).
    followed: set[str] = set()

    async def follow() -> None:
        stream = client.stream_logs("pair", kind="PyTorchJob", follow=True)
        async with contextlib.aclosing(stream) as lines:
            async for line in lines:
                followed.add(line.pod)

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(follow(), 5)
    assert followed == {"pair-master-0"}, followed


async def test_failed_job_raises_with_reason_and_message(client: AsyncTrainingClient) -> None:
    await client.submit(failing("crash"))
    with pytest.raises(JobFailedError) as info:
        await client.wait("crash", timeout=20)
    assert info.value.reason == "ReplicaFailed"
    assert "exited with code 3" in info.value.message
    assert job_state(info.value.job) == "Failed"
    # Waiting for Failed itself is no error.
    assert job_state(await client.wait("crash", until={"Failed"}, timeout=5)) == "Failed"


async def test_wait_times_out_with_last_state(client: AsyncTrainingClient) -> None:
    await client.submit(running_forever("forever"))
    await client.wait("forever", until={"Running"}, timeout=20)
    with pytest.raises(TimeoutError) as info:
        await client.wait("forever", timeout=0.5)
    assert isinstance(info.value, JobTimeoutError)
    assert info.value.state == "Running"
    assert info.value.job is not None and replica_counts(info.value.job)[0] == 2
    assert "last state Running" in str(info.value)


async def test_invalid_input_is_refused_before_sending(client: AsyncTrainingClient, tmp_path: Path) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {}}
    with pytest.raises(JobValidationError) as info:
        await client.submit(deployment)
    assert [e.field for e in info.value.errors] == ["kind"]

    bad = succeeding("bad").to_dict()
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "many"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all([succeeding("good").to_dict(), bad]))
    with pytest.raises(JobValidationError) as info:
        await client.submit(path)
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in [e.field for e in info.value.errors]
    assert "document 2" in str(info.value)
    assert await client.list() == [], "no document is sent when one is invalid"

    with pytest.raises(JobValidationError, match=r"Master.replicas"):
        await client.submit(
            bad
            | {"spec": {**bad["spec"], "pytorchReplicaSpecs": {"Master": bad["spec"]["pytorchReplicaSpecs"]["Master"]}}}
        )


async def test_api_errors_keep_the_server_message(client: AsyncTrainingClient) -> None:
    await client.submit(running_forever("twice"))
    with pytest.raises(JobAlreadyExistsError, match='"twice" already exists') as info:
        await client.submit(running_forever("twice"))
    assert info.value.status == 409
    with pytest.raises(JobNotFoundError):
        await client.wait("nobody", timeout=5)


async def test_yaml_file_with_two_kinds_and_follow_logs(client: AsyncTrainingClient, tmp_path: Path) -> None:
    tf = tf_job("tf", "busybox", ["python", "t.py"], workers=2, ps=1, pod_annotations=ending(0, 0.5))
    assert isinstance(tf, TFJob)
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all([succeeding("pt").to_dict(), tf.to_dict()]))
    created = await client.submit(path)
    assert [(j.kind, j.name) for j in created] == [("PyTorchJob", "pt"), ("TFJob", "tf")]

    lines = [str(line) async for line in client.stream_logs("tf", follow=True)]
    pods = {line.split("]")[0][1:] for line in lines}
    assert {"tf-worker-0", "tf-worker-1"} <= pods
    assert any(line.startswith("[tf-worker-0]") and "exiting with code 0" in line for line in lines)
    assert job_state(await client.get("tf")) == "Succeeded", "follow ends once the job has finished"

    one = [line.text async for line in client.stream_logs("pt", "master", 0, follow=True)]
    assert one[-1].endswith("exiting with code 0")


async def test_sync_client_in_its_own_thread(cluster: Env, controller: RunningController) -> None:
    # The sync client blocks its caller, so drive it from a worker thread: this loop serves the cluster.
    def script() -> tuple[str, str, set[str]]:
        with TrainingClient(kubeconfig=cluster.kubeconfig_path) as client:
            job = client.submit(succeeding("sync"))
            done = client.wait(job.name, timeout=20)
            follow = list(client.stream_logs("sync", follow=True))
            return client.namespace, job_state(done), {line.pod for line in follow}

    namespace, state, pods = await asyncio.to_thread(script)
    assert (namespace, state, pods) == (cluster.namespace, "Succeeded", {"sync-master-0", "sync-worker-0"})


def test_configuration_is_found_like_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "k", "user": {}}],
        "contexts": [
            {"name": "k", "context": {"cluster": "k", "user": "k", "namespace": "team-a"}},
            {"name": "plain", "context": {"cluster": "k", "user": "k"}},
        ],
        "current-context": "k",
    }
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing.yaml'}:{other}")
    assert AsyncTrainingClient().namespace == "team-a"
    assert AsyncTrainingClient(namespace="ns2").namespace == "ns2"
    assert AsyncTrainingClient(context="plain").namespace == "default"
    with pytest.raises(ConfigurationError, match="context 'nope' not found"):
        AsyncTrainingClient(context="nope")
    with pytest.raises(ConfigurationError, match="does not exist"):
        AsyncTrainingClient(kubeconfig=tmp_path / "missing.yaml")

    monkeypatch.delenv("KUBECONFIG")
    with pytest.raises(ConfigurationError, match="kubedl-py local up") as info:
        AsyncTrainingClient()
    assert "export KUBECONFIG" not in str(info.value)
    local = Path(c.LOCAL_KUBECONFIG.replace("~", str(tmp_path)))
    local.parent.mkdir(parents=True)
    local.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigurationError, match=f"export KUBECONFIG={local}"):
        AsyncTrainingClient()


def test_resolve_config_falls_back_to_the_service_account(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    monkeypatch.setattr(kube_transport, "SERVICE_ACCOUNT_TOKEN", str(token))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.setenv("HOME", str(tmp_path))  # a real ~/.kubedl-py/local.kubeconfig would change the advice
    resolved = resolve_config(namespace="team-a")
    assert resolved == ResolvedConfig(None, None, "team-a", in_cluster=True)
    token.unlink()
    with pytest.raises(ConfigurationError, match="not in a pod"):
        resolve_config()
