"""TF-style wiring without TensorFlow: TF_CONFIG peers reach a restarted replica through its Service.

``examples/tf_ps_worker.py`` listens on its own TF_CONFIG entry (its host port) and opens a new connection to
every peer's Service address each round. Killing the PS with SIGKILL (137, retryable under ExitCode) restarts
it: in its own pod on the same host port, its Service untouched (``restartMode: Auto``, the default), or with
``restartMode: Recreate`` in a new pod on a new host port with its Service re-pointed. Either way the workers,
whose TF_CONFIG never changes, reach the new instance through the same address.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.conftest import Target
from e2e.test_pytorch import PID, eventually, log_of
from kubedl_py import TrainingClient
from kubedl_py.sdk import job_state


def tf_job(target: Target, name: str, mode: str = "Auto") -> dict[str, Any]:
    def replica(n: int, args: list[str]) -> dict[str, Any]:
        return {
            "replicas": n,
            "restartPolicy": "ExitCode",
            "template": {"spec": {"containers": [target.container("tensorflow", "tf_ps_worker.py", args)]}},
        }

    return {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": "default", "annotations": {"kubedl.io/network-mode": "host"}},
        "spec": {
            "backoffLimit": 5,
            "failurePolicy": {"restartMode": mode},
            "cleanPodPolicy": "None",  # keep the PS and its Service to inspect after success
            "tfReplicaSpecs": {
                "PS": replica(1, []),
                "Worker": replica(
                    2, ["--rounds", "10", "--interval", "0.2", "--linger", "2", "--until-ps-instances", "2"]
                ),
            },
        },
    }


@pytest.fixture
def client(target: Target) -> Iterator[TrainingClient]:
    with TrainingClient(kubeconfig=target.kubeconfig) as c:
        yield c


@pytest.mark.parametrize("mode", ["Auto", "Recreate"])
def test_tf_peers_reconnect_to_a_killed_ps_through_its_service(
    target: Target, client: TrainingClient, mode: str
) -> None:
    name = f"e2e-tf-{uuid.uuid4().hex[:6]}"
    ps_addr = f"{name}-ps-0.default.svc:2222"
    client.submit(tf_job(target, name, mode))
    try:
        for i in (0, 1):

            def reached(i: int = i) -> bool:
                return f"reached ps-0 at {ps_addr}" in log_of(client, name, "worker", i)

            eventually(reached, within=60, what=f"worker {i} to reach the PS")
        before = {p.name: p for p in client.describe(name).pods}
        ps_pod = f"{name}-ps-0"
        ps_pid = int(PID.findall(log_of(client, name, "ps"))[0])
        target.kill("default", ps_pod, "tensorflow", ps_pid)

        job = client.wait(name, timeout=120)
        assert job_state(job) == "Succeeded"
        after = {p.name: p for p in client.describe(name).pods}
        old_port, new_port = before[ps_pod].host_port, after[ps_pod].host_port
        if mode == "Recreate":
            assert new_port is not None and new_port != old_port, "the replaced PS must get a new host port"
            assert after[ps_pod].restarts == 0
        else:
            assert new_port == old_port, "restarted in its pod, the PS keeps its host port"
            assert after[ps_pod].restarts == 1, "the PS container restarted once, in place"
        assert after[ps_pod].target_port == new_port, "the PS Service must point at the PS's host port"
        for i in (0, 1):
            log = client.logs(name, "worker", i)
            # Same Service address all along; behind it first the old instance, then the new one.
            assert f"reached ps-0 at {ps_addr}: pid={ps_pid} port={old_port}" in log, log
            assert re.search(rf"reconnected to ps-0 at {re.escape(ps_addr)}: pid=\d+ port={new_port}", log), log
            assert "done:" in log
            assert f"'ps-0': '{ps_addr}'" in log.splitlines()[0]  # TF_CONFIG: the Service address
    finally:
        client.delete(name)
